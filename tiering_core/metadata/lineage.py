"""What a partition's history teaches the store (docs/kafka-rules.md section 10): the
leader-epoch lineage recorded from copied segments, the DeleteRecords applied through the
platform, and tiering gaps.

Each only grows in what it tells: the lineage is merged (``merge_lineage``), a DeleteRecords
offset is kept only above every earlier one, and a gap recorded twice is recorded once. Rows older
versions recorded as DeleteRecords from the broker's files or the cluster's log start stay (nothing
stored is deleted) but never count: a replica's log start is no evidence of a DeleteRecords
(docs/kafka-rules.md section 10 item 1).

A tiering gap is offsets lost above the global log start. What lies below it was deleted on
purpose (by the platform's retention or a DeleteRecords applied through it) and is history, not
a loss: the transaction that moves the global log start also trims the gaps it passes
(``trim_gaps``), and a gap is recorded only from the global log start on. So the gaps stored are
always the ones to report, and every reader (``status``, the metrics, the page, replays) reads
them as they are.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import Connection, Select, Table, bindparam, func, select

from tiering_core.kafka.epoch import EpochEntry, current_lineage
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.queries import IS_APPLIED, D, G, H, L, P, Statements
from tiering_core.metadata.transactions import LockedPartition, StoreCore
from tiering_core.metadata.values import DELETE_RECORDS_APPLIED, DeleteRecordsObservation, Lease, StoredTier, TieringGap


def _of_partition(query: Select[Any], table: Table, tip: TopicIdPartition) -> Select[Any]:
    """``query`` over ``table`` restricted to the rows of one partition, by topic id and partition."""
    return query.join(P, P.c.id == table.c.partition_id).where(
        P.c.topic_id == tip.topic_id, P.c.partition == tip.partition
    )


def trim_gaps(conn: Connection, q: Statements, partition_id: int, log_start: int) -> None:
    """Inside the transaction that moves a partition's global log start to ``log_start``: a gap
    wholly below it is removed, one it cuts through starts at it from now on (detected when it
    was). Gaps at or above it stay as they are."""
    params = {"pid": partition_id, "start": log_start}
    across = conn.execute(q.gaps_across, params).all()
    conn.execute(q.delete_gaps_below, params)
    if across:
        conn.execute(
            q.insert_gap,
            [
                {
                    "partition_id": partition_id,
                    "start_offset": log_start,
                    "end_offset": r.end_offset,
                    "detected_ms": r.detected_ms,
                }
                for r in across
            ],
        )


class LineageStore(StoreCore):
    """The recorded lineage, applied DeleteRecords and tiering gaps of partitions."""

    def record_lineage(self, tip: TopicIdPartition, entries: Sequence[EpochEntry], lease: Lease) -> None:
        """Merge a leader-epoch cache seen at copy time into the recorded lineage.

        The result is ``merge_lineage(recorded, entries)`` (docs/kafka-rules.md section 10,
        item 2): from the new entries' first start offset on they replace what was recorded (they
        may reflect a truncation after an unclean election); earlier recorded epochs are kept, and
        the first new epoch keeps an earlier recorded start. A cache behind the recorded lineage
        (its latest epoch below the recorded latest: a replica that has not seen the later leaders)
        changes nothing (``current_lineage``).
        """
        with self._fenced_write(lease, tip) as (conn, row):
            self._merge_lineage(conn, row, entries)

    def _merge_lineage(self, conn: Connection, row: LockedPartition, entries: Sequence[EpochEntry]) -> None:
        stored = [EpochEntry(r.epoch, r.start_offset) for r in conn.execute(self._q.lineage_of, {"pid": row.id})]
        merged = list(current_lineage(stored, list(entries)))
        if merged == stored:
            return
        conn.execute(self._q.delete_lineage, {"pid": row.id})
        if merged:
            conn.execute(
                self._q.insert_lineage,
                [{"partition_id": row.id, "epoch": e.epoch, "start_offset": e.start_offset} for e in merged],
            )

    def get_recorded_lineage(self, tip: TopicIdPartition) -> list[EpochEntry]:
        query = _of_partition(select(L.c.epoch, L.c.start_offset), L, tip).order_by(L.c.epoch)
        with self._read() as conn:
            return [EpochEntry(r.epoch, r.start_offset) for r in conn.execute(query)]

    def stored_tiers(self, tips: Collection[TopicIdPartition]) -> dict[TopicIdPartition, StoredTier]:
        """What the store holds of each of ``tips`` for its tier view (``StoredTier``), in four
        queries over their topic ids, whatever their number: a run planning a broker's thousands
        of partitions reads them at once, not four queries per partition. A partition the store
        has never seen gets an empty ``StoredTier``."""
        wanted = {(t.topic_id, t.partition): t for t in tips}
        if not wanted:
            return {}
        ids = {"ids": sorted({t.topic_id for t in tips})}
        of_topics = P.c.topic_id.in_(bindparam("ids", expanding=True))
        key = (P.c.topic_id, P.c.partition)
        lineage: dict[tuple[str, int], list[EpochEntry]] = {}
        highest: dict[tuple[str, int], dict[int, int]] = {}
        with self._read() as conn:
            starts = {
                (tid, part): start
                for tid, part, start in conn.execute(select(*key, P.c.remote_log_start_offset).where(of_topics), ids)
            }
            lines = select(*key, L.c.epoch, L.c.start_offset).join(P, P.c.id == L.c.partition_id).where(of_topics)
            for tid, part, epoch, start in conn.execute(lines.order_by(L.c.epoch), ids):
                lineage.setdefault((tid, part), []).append(EpochEntry(epoch, start))
            applied = (
                select(*key, func.max(D.c.before_offset))
                .join(P, P.c.id == D.c.partition_id)
                .where(of_topics, IS_APPLIED)
                .group_by(P.c.id, *key)
            )
            deleted = {(tid, part): offset for tid, part, offset in conn.execute(applied, ids)}
            epochs = select(*key, H.c.epoch, H.c.highest_offset).join(P, P.c.id == H.c.partition_id).where(of_topics)
            for tid, part, epoch, offset in conn.execute(epochs, ids):
                highest.setdefault((tid, part), {})[int(epoch)] = int(offset)
        return {
            tip: StoredTier(
                tuple(lineage.get(k, ())),
                starts.get(k),
                deleted.get(k),
                highest.get(k, {}),
            )
            for k, tip in wanted.items()
        }

    # --- DeleteRecords (docs/kafka-rules.md section 10 item 1) ----------------------------

    def record_delete_records(self, tip: TopicIdPartition, offset: int, lease: Lease) -> int:
        """Record a DeleteRecords applied through the platform (kept only if above every earlier
        applied one: applying it again changes nothing). Returns the highest applied. The tiering
        gaps below it are history from the same transaction on (``trim_gaps``)."""
        with self._fenced_write(lease, tip) as (conn, row):
            highest = conn.execute(self._q.highest_delete_records, {"pid": row.id}).scalar()
            if highest is not None and offset <= highest:
                return int(highest)
            trim_gaps(conn, self._q, row.id, offset)
            conn.execute(
                D.insert(),
                {
                    "partition_id": row.id,
                    "before_offset": offset,
                    "source": DELETE_RECORDS_APPLIED,
                    "observed_ms": row.db_now,
                    "token": lease.token,
                    "run_id": lease.run_id,
                },
            )
            return offset

    def get_delete_records_offset(self, tip: TopicIdPartition) -> int | None:
        """The highest DeleteRecords offset applied through the platform to the partition."""
        query = _of_partition(select(func.max(D.c.before_offset)), D, tip).where(IS_APPLIED)
        with self._read() as conn:
            return conn.execute(query).scalar()

    def delete_records_observations(self, tip: TopicIdPartition) -> list[DeleteRecordsObservation]:
        """Every DeleteRecords row of the partition, applied or older history (``applied`` tells)."""
        query = _of_partition(select(D), D, tip).order_by(D.c.before_offset)
        with self._read() as conn:
            return [
                DeleteRecordsObservation(r.before_offset, r.source, r.observed_ms, r.token, r.run_id)
                for r in conn.execute(query)
            ]

    # --- tiering gaps (docs/kafka-rules.md section 10 item 3) -----------------------------

    def record_gap(self, tip: TopicIdPartition, start: int, end: int, lease: Lease) -> bool:
        """Record a tiering gap [start, end]; recording the same range again changes nothing.
        Only what lies at or above the global log start is recorded (below it is history).
        Whether a gap was added (False: nothing to record, or recorded before)."""
        if end < start:
            raise ValueError(f"{tip}: gap {start}..{end} is not a range")
        with self._fenced_write(lease, tip) as (conn, row):
            applied = conn.execute(self._q.highest_delete_records, {"pid": row.id}).scalar()
            start = max(o for o in (start, row.remote_log_start_offset, applied) if o is not None)
            if end < start:
                return False
            added = conn.execute(
                self._q.add_gap,
                {"partition_id": row.id, "start_offset": start, "end_offset": end, "detected_ms": row.db_now},
            ).first()
            return added is not None

    def list_gaps(self, tip: TopicIdPartition) -> list[TieringGap]:
        query = _of_partition(select(G.c.start_offset, G.c.end_offset, G.c.detected_ms), G, tip).order_by(
            G.c.start_offset, G.c.end_offset
        )
        with self._read() as conn:
            return [TieringGap(r.start_offset, r.end_offset, r.detected_ms) for r in conn.execute(query)]
