"""Partitions, their deletion state machine and their removal (docs/kafka-rules.md section 7),
the remote log start offset (section 10) and the state history.

A partition's removal walks DELETE_PARTITION_MARKED -> STARTED -> FINISHED (``states.py`` judges
each step); FINISHED and dropping the metadata both need every segment DELETE_SEGMENT_FINISHED.
A removed partition stays as a tombstone so its topic id is never copied to again.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Connection, select

from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.errors import PartitionDeletedError, PartitionNotEmptyError, check_topic_name
from tiering_core.metadata.lineage import trim_gaps
from tiering_core.metadata.queries import HI, D, E, G, H, L, P, S
from tiering_core.metadata.states import RemoteLogSegmentState, RemotePartitionDeleteState, check_partition_transition
from tiering_core.metadata.transactions import LockedPartition, StoreCore, tip_of
from tiering_core.metadata.values import Lease, PartitionRecord, StateChange

METADATA_DROPPED = "METADATA_DROPPED"  # history marker of drop_partition_metadata
TOMBSTONE_LIFTED = "TOMBSTONE_LIFTED"  # history marker of lift_tombstone


def _record(row: Any) -> PartitionRecord:
    return PartitionRecord(
        topic_id=row.topic_id,
        topic_partition=TopicPartition(row.topic, row.partition),
        delete_state=RemotePartitionDeleteState(row.delete_state) if row.delete_state else None,
        remote_log_start_offset=row.remote_log_start_offset,
        dropped=bool(row.dropped),
        lease_holder=row.lease_holder,
        lease_token=row.lease_token,
        lease_expires_ms=row.lease_expires_ms,
        fencing_token=row.fencing_counter,
        created_ms=row.created_ms,
        updated_ms=row.updated_ms,
    )


class PartitionStore(StoreCore):
    """Registering partitions, their deletion states, the remote log start offset, the history."""

    def register_partition(self, tip: TopicIdPartition) -> None:
        """Idempotent. A partition being removed, or removed (a tombstone), raises PartitionDeletedError:
        a recreated topic has a new topic id and is a new partition."""
        with self._write() as conn:
            row = self._ensure(conn, tip)
        if row.removal is not None:
            raise PartitionDeletedError(
                f"{tip}: partition is {row.removal} in the remote tier; a recreated topic gets a new topic id"
            )

    def get_partition(self, tp: TopicIdPartition | TopicPartition) -> PartitionRecord | None:
        """By topic id + partition; by name alone, the live partition (else the latest tombstone)."""
        if isinstance(tp, TopicIdPartition):
            query = select(P).where(P.c.topic_id == tp.topic_id, P.c.partition == tp.partition)
        else:
            query = (
                select(P)
                .where(P.c.topic == tp.topic, P.c.partition == tp.partition)
                .order_by(P.c.dropped, P.c.id.desc())
                .limit(1)
            )
        with self._read() as conn:
            row = conn.execute(query).first()
        if row is not None:
            check_topic_name(row.topic_id, row.topic, tp.topic)
        return _record(row) if row is not None else None

    def list_partitions(self) -> list[PartitionRecord]:
        """Every partition the store knows, tombstones included, by topic, partition, age."""
        with self._read() as conn:
            rows = conn.execute(select(P).order_by(P.c.topic, P.c.partition, P.c.id)).all()
        return [_record(r) for r in rows]

    # --- partition deletion (docs/kafka-rules.md section 7) -------------------------------

    def mark_partition_for_deletion(self, tip: TopicIdPartition, lease: Lease) -> None:
        self.update_partition_delete_state(tip, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, lease)

    def update_partition_delete_state(
        self, tip: TopicIdPartition, state: RemotePartitionDeleteState, lease: Lease
    ) -> None:
        """Validated partition-deletion transition; same state is a no-op."""
        with self._fenced_write(lease, tip) as (conn, row):
            current = RemotePartitionDeleteState(row.delete_state) if row.delete_state else None
            if check_partition_transition(current, state, f"partition {tip}"):
                if state == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
                    self._check_no_live_segments(conn, row, tip, f"cannot become {state.value}")
                self._update_partition(conn, row, delete_state=state.value)
                self._history(conn, row, lease, state.value, from_state=current.value if current else None)

    def _check_no_live_segments(self, conn: Connection, row: LockedPartition, tip: TopicIdPartition, what: str) -> None:
        """PartitionNotEmptyError unless every segment of the partition is DELETE_SEGMENT_FINISHED:
        a segment in any other state may still have objects in the remote tier."""
        live = int(conn.execute(self._q.live_segment_count, {"pid": row.id}).scalar_one())
        if live:
            raise PartitionNotEmptyError(
                f"partition {tip}: {what} while {live} segment(s) are not "
                f"{RemoteLogSegmentState.DELETE_SEGMENT_FINISHED.value}; delete them first"
            )

    def drop_partition_metadata(self, tip: TopicIdPartition, lease: Lease) -> None:
        """After DELETE_PARTITION_FINISHED: drop segments, epochs, lineage, gaps and DeleteRecords
        observations, keeping the partition row as a tombstone (its topic id is never copied to
        again) and the state history. Idempotent."""
        with self._fenced_write(lease, tip) as (conn, row):
            if row.delete_state != RemotePartitionDeleteState.DELETE_PARTITION_FINISHED.value:
                raise PartitionDeletedError(
                    f"{tip}: metadata can be dropped only after DELETE_PARTITION_FINISHED, not {row.delete_state}"
                )
            if row.dropped:
                return
            self._check_no_live_segments(conn, row, tip, "metadata cannot be dropped")
            for table in (E, H, L, G, D, S):
                conn.execute(table.delete().where(table.c.partition_id == row.id))
            self._update_partition(conn, row, dropped=True, remote_log_start_offset=None)
            self._history(conn, row, lease, METADATA_DROPPED, from_state=row.delete_state)

    def lift_tombstone(self, tip: TopicIdPartition, lease: Lease) -> None:
        """Make a removed partition (a tombstone) live and empty again, for a removal made in
        error: its topic id may be copied to again. The fencing counter and the history stay.
        PartitionDeletedError unless it is a tombstone (a removal in progress finishes first)."""
        with self._fenced_write(lease, tip) as (conn, row):
            if not row.dropped:
                state = row.delete_state or "live"
                raise PartitionDeletedError(f"{tip}: not a tombstone ({state}); only a finished removal is lifted")
            self._check_no_live_segments(conn, row, tip, "the tombstone cannot be lifted")
            before = row.delete_state
            self._update_partition(conn, row, delete_state=None, dropped=False, remote_log_start_offset=None)
            self._history(conn, row, lease, TOMBSTONE_LIFTED, from_state=before)

    # --- the remote log start offset (docs/kafka-rules.md section 10) ---------------------

    def get_remote_log_start_offset(self, tip: TopicIdPartition) -> int | None:
        query = select(P.c.remote_log_start_offset).where(P.c.topic_id == tip.topic_id, P.c.partition == tip.partition)
        with self._read() as conn:
            return conn.execute(query).scalar()

    def set_remote_log_start_offset(self, tip: TopicIdPartition, offset: int, lease: Lease) -> int:
        """Advance the platform's remote log start offset; it never moves back (a lower value is
        ignored). Returns the stored value. The tiering gaps below it are history from the same
        transaction on (``lineage.trim_gaps``)."""
        with self._fenced_write(lease, tip) as (conn, row):
            return self._advance_remote_log_start(conn, row, offset)

    def _advance_remote_log_start(self, conn: Connection, row: LockedPartition, offset: int) -> int:
        if row.remote_log_start_offset is not None and offset <= row.remote_log_start_offset:
            return int(row.remote_log_start_offset)
        self._update_partition(conn, row, remote_log_start_offset=offset)
        trim_gaps(conn, self._q, row.id, offset)
        return offset

    # --- history -------------------------------------------------------------------------

    def state_history(
        self,
        target: uuid.UUID | TopicIdPartition | None = None,
        *,
        segment_id: uuid.UUID | None = None,
        tip: TopicIdPartition | None = None,
    ) -> list[StateChange]:
        """Every state change of a segment (by id) or of a partition (its own and its segments'), oldest first."""
        if isinstance(target, uuid.UUID):
            segment_id = target
        elif isinstance(target, TopicIdPartition):
            tip = target
        elif target is not None:
            raise TypeError(f"state_history takes a segment id or a TopicIdPartition, not {type(target).__name__}")
        if segment_id is None and tip is None:
            raise TypeError("state_history needs a segment id or a TopicIdPartition")
        query = (
            select(HI, P.c.topic_id, P.c.topic, P.c.partition).join(P, P.c.id == HI.c.partition_id).order_by(HI.c.id)
        )
        if segment_id is not None:
            query = query.where(HI.c.segment_id == str(segment_id))
        if tip is not None:
            query = query.where(P.c.topic_id == tip.topic_id, P.c.partition == tip.partition)
        with self._read() as conn:
            rows = conn.execute(query).all()
        return [
            StateChange(
                topic_id_partition=tip_of(r),
                segment_id=uuid.UUID(r.segment_id) if r.segment_id else None,
                from_state=r.from_state,
                to_state=r.to_state,
                at_ms=r.at_ms,
                token=r.token,
                run_id=r.run_id,
            )
            for r in rows
        ]
