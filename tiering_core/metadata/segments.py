"""Remote log segment metadata and its state machine (docs/kafka-rules.md sections 4, 5 and 6).

A copy attempt is added as COPY_SEGMENT_STARTED, before anything is uploaded; every later state
change goes through ``check_segment_transition`` (``states.py``) inside a fenced write. At
COPY_SEGMENT_FINISHED a segment takes the partition's next finish sequence number and indexes its
per-epoch offset ranges, which ``segment_for`` and the epochs' highest offsets are answered from;
at DELETE_SEGMENT_STARTED it stops serving reads. Figures over a partition's segments (sizes,
counts, the highest copied offset) are asked of the database, not summed over a listing.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, select
from sqlalchemy.exc import IntegrityError

from tiering_core.kafka.epoch import EpochEntry
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.errors import (
    DuplicateSegmentError,
    FencedError,
    InvalidSegmentMetadataError,
    InvalidStateTransitionError,
    PartitionDeletedError,
    SegmentNotFoundError,
)
from tiering_core.metadata.lineage import LineageStore
from tiering_core.metadata.listing import FINISHED, SegmentListing, segment_from_row
from tiering_core.metadata.partitions import PartitionStore
from tiering_core.metadata.queries import S
from tiering_core.metadata.states import RemoteLogSegmentState, check_segment_transition
from tiering_core.metadata.transactions import LockedPartition, tip_of, tip_params
from tiering_core.metadata.values import Lease, RecoveredSegment, RemoteLogSegmentMetadata

EPOCHS_PER_QUERY = 64
#: The most segment ids one query asks about (bound parameters stay well below every driver's limit).
IDS_PER_QUERY = 500


def _epochs_json(leader_epochs: dict[int, int]) -> dict[str, int]:
    return {str(e): int(o) for e, o in sorted(leader_epochs.items())}


def validate_segment_metadata(meta: RemoteLogSegmentMetadata) -> None:
    """Offsets and leader epochs that can describe a Kafka segment, else InvalidSegmentMetadataError."""
    what = f"segment {meta.segment_id} of {meta.topic_id_partition}"
    if not isinstance(meta.segment_id, uuid.UUID):
        raise InvalidSegmentMetadataError(f"{what}: segment id must be a UUID")
    if meta.start_offset < 0 or meta.end_offset < meta.start_offset:
        raise InvalidSegmentMetadataError(
            f"{what}: offsets {meta.start_offset}..{meta.end_offset} are not a range (end offset is inclusive)"
        )
    if meta.size_bytes < 0:
        raise InvalidSegmentMetadataError(f"{what}: negative size {meta.size_bytes}")
    if not meta.leader_epochs:
        raise InvalidSegmentMetadataError(f"{what}: no leader epochs (every segment has at least one)")
    previous = None
    for epoch, start in sorted(meta.leader_epochs.items()):
        if epoch < 0 or not meta.start_offset <= start <= meta.end_offset:
            raise InvalidSegmentMetadataError(
                f"{what}: leader epoch {epoch} at {start} is outside the segment {meta.start_offset}..{meta.end_offset}"
            )
        if previous is not None and start < previous:
            raise InvalidSegmentMetadataError(f"{what}: leader epoch {epoch} starts at {start}, before {previous}")
        previous = start


class SegmentStore(SegmentListing, LineageStore, PartitionStore):
    """Segment writes (fenced, validated transitions) and point reads of segments."""

    def add_segment(self, meta: RemoteLogSegmentMetadata, lease: Lease) -> None:
        """Record a copy attempt before anything is uploaded; only COPY_SEGMENT_STARTED may be added.

        The stored writer token is the lease's. A duplicate id raises DuplicateSegmentError.
        """
        if meta.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise InvalidStateTransitionError(
                f"new segment {meta.segment_id} of {meta.topic_id_partition}", "NONE", meta.state.value
            )
        validate_segment_metadata(meta)
        if meta.topic_id_partition != lease.topic_id_partition:
            raise FencedError(
                f"the lease of {lease.topic_id_partition} cannot add a segment of {meta.topic_id_partition}"
            )
        sid = str(meta.segment_id)
        with self._fenced_write(lease) as (conn, row):
            if row.removal is not None:
                raise PartitionDeletedError(
                    f"{meta.topic_id_partition}: partition is {row.removal}; nothing more is copied to it"
                )
            try:
                conn.execute(
                    self._q.insert_segment,
                    {
                        "segment_id": sid,
                        "partition_id": row.id,
                        "start_offset": meta.start_offset,
                        "end_offset": meta.end_offset,
                        "max_timestamp": meta.max_timestamp,
                        "size_bytes": meta.size_bytes,
                        "state": meta.state.value,
                        "leader_epochs": _epochs_json(meta.leader_epochs),
                        "writer_token": lease.token,
                        "event_time": meta.event_time,
                        "finish_seq": None,
                        "custom_metadata": dict(meta.custom_metadata or {}),
                    },
                )
            except IntegrityError as exc:  # the transaction is rolled back: nothing lands
                raise DuplicateSegmentError(
                    f"segment {sid} already exists (every copy attempt needs a fresh UUID)"
                ) from exc
            self._history(conn, row, lease, meta.state.value, segment_id=sid)

    def update_segment_state(
        self,
        segment_id: uuid.UUID,
        new_state: RemoteLogSegmentState,
        lease: Lease,
        *,
        event_time_ms: int | None = None,
        custom_metadata: dict[str, Any] | None = None,
    ) -> RemoteLogSegmentMetadata:
        """Validated transition of a segment of the lease's partition.

        A same-state update is a no-op (returns the stored value unchanged); a forbidden one raises
        InvalidStateTransitionError and writes nothing. ``custom_metadata`` is merged into the
        stored one. COPY_SEGMENT_FINISHED takes the partition's next finish sequence number and
        raises the per-epoch highest offsets (refused with PartitionDeletedError once the partition
        is marked for deletion); DELETE_SEGMENT_STARTED stops the segment serving reads.
        A copy finishes with ``finish_copied_segment`` instead, which also records what it teaches.
        """
        with self._fenced_write(lease) as (conn, prow):
            return self._transition(conn, prow, lease, segment_id, new_state, event_time_ms, custom_metadata)

    def finish_copied_segment(
        self,
        segment_id: uuid.UUID,
        lease: Lease,
        *,
        custom_metadata: dict[str, Any],
        lineage: Sequence[EpochEntry],
    ) -> RemoteLogSegmentMetadata:
        """COPY_SEGMENT_FINISHED with everything the copy teaches, in one fenced transaction.

        The segment moves to COPY_SEGMENT_FINISHED with ``custom_metadata`` merged in (as
        ``update_segment_state``; an already finished segment is not finished twice),
        ``lineage`` (the leader-epoch cache seen at copy time) is merged into the recorded lineage
        (as ``record_lineage``), and an unset remote log start offset becomes the first offset the
        segment's leader epochs cover (its start offset, unless a log start inside it had truncated
        the broker's epoch cache). Either all of it lands or none: done as separate steps, a crash in between left a
        finished segment outside the recorded lineage and the remote log start, which a later run
        then moved past it, so retention deleted it.
        """
        with self._fenced_write(lease) as (conn, prow):
            meta = self._transition(conn, prow, lease, segment_id, FINISHED, None, custom_metadata)
            self._merge_lineage(conn, prow, lineage)
            if prow.remote_log_start_offset is None:
                self._advance_remote_log_start(conn, prow, meta.first_epoch_offset)
        return meta

    def supersede_segment(
        self,
        old_id: uuid.UUID,
        new_id: uuid.UUID,
        lease: Lease,
        *,
        custom_metadata: dict[str, Any],
    ) -> RemoteLogSegmentMetadata:
        """A copy of a finished segment takes its place: the new attempt COPY_SEGMENT_FINISHED and
        the old one DELETE_SEGMENT_STARTED in one fenced transaction, so exactly one of them serves
        the range at every instant (the old one's objects are deleted after, as any deletion)."""
        with self._fenced_write(lease) as (conn, prow):
            meta = self._transition(conn, prow, lease, new_id, FINISHED, None, custom_metadata)
            self._transition(conn, prow, lease, old_id, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, None, None)
        return meta

    def recover_segments(self, segments: Sequence[RecoveredSegment], lease: Lease) -> int:
        """Record segments ``tiering recover`` read from the bucket, in one fenced transaction, as
        their copies would have: each added, then finished with its leader-epoch index merged into
        the lineage (the first one setting an unset remote log start), in the order given (the
        order they were copied); a superseded one then goes to DELETE_SEGMENT_STARTED. A segment
        the store already records is left as it is (a rerun after a kill picks up where it stopped).
        Returns how many were added."""
        added = 0
        with self._fenced_write(lease) as (conn, prow):
            known = self._segment_states(conn, [s.metadata.segment_id for s in segments])
            for recovered in segments:
                meta = recovered.metadata
                if meta.segment_id in known:
                    continue
                if meta.topic_id_partition != lease.topic_id_partition:
                    raise FencedError(
                        f"the lease of {lease.topic_id_partition} cannot add a segment of {meta.topic_id_partition}"
                    )
                validate_segment_metadata(meta)
                sid = str(meta.segment_id)
                conn.execute(
                    self._q.insert_segment,
                    {
                        "segment_id": sid,
                        "partition_id": prow.id,
                        "start_offset": meta.start_offset,
                        "end_offset": meta.end_offset,
                        "max_timestamp": meta.max_timestamp,
                        "size_bytes": meta.size_bytes,
                        "state": RemoteLogSegmentState.COPY_SEGMENT_STARTED.value,
                        "leader_epochs": _epochs_json(meta.leader_epochs),
                        "writer_token": lease.token,
                        "event_time": meta.event_time,
                        "finish_seq": None,
                        "custom_metadata": {},
                    },
                )
                self._history(conn, prow, lease, RemoteLogSegmentState.COPY_SEGMENT_STARTED.value, segment_id=sid)
                finished = self._transition(
                    conn, prow, lease, meta.segment_id, FINISHED, meta.event_time, dict(meta.custom_metadata or {})
                )
                self._merge_lineage(conn, prow, recovered.lineage)
                if prow.remote_log_start_offset is None:
                    self._advance_remote_log_start(conn, prow, finished.first_epoch_offset)
                if recovered.superseded:
                    self._transition(
                        conn, prow, lease, meta.segment_id, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, None, None
                    )
                added += 1
        return added

    def _transition(
        self,
        conn: Connection,
        prow: LockedPartition,
        lease: Lease,
        segment_id: uuid.UUID,
        new_state: RemoteLogSegmentState,
        event_time_ms: int | None,
        custom_metadata: dict[str, Any] | None,
    ) -> RemoteLogSegmentMetadata:
        """A segment's state change inside a fenced write; the resulting value."""
        tip = lease.topic_id_partition
        sid = str(segment_id)
        if new_state == FINISHED and prow.removal is not None:
            raise PartitionDeletedError(
                f"segment {segment_id} of {tip}: cannot become {FINISHED.value}, the partition is "
                f"{prow.removal}; nothing more is copied to it"
            )
        seg = conn.execute(self._q.segment_by_id, {"sid": sid}).first()
        if seg is None or seg.partition_id != prow.id:
            raise SegmentNotFoundError(f"segment {segment_id} not found in {tip}")
        current = segment_from_row(seg, tip)  # its custom metadata as this transaction sees it
        if not check_segment_transition(current.state, new_state, f"segment {segment_id} of {tip}"):
            return current
        event_time = prow.db_now if event_time_ms is None else event_time_ms
        merged = current.custom_metadata
        values: dict[str, Any] = {"sid": sid, "state": new_state.value, "event_time": event_time}
        values["writer_token"] = lease.token
        if custom_metadata is not None:
            merged = {**(current.custom_metadata or {}), **custom_metadata}
            values["custom_metadata"] = merged
        if new_state == FINISHED:
            finish_seq = prow.finish_counter + 1
            values["finish_seq"] = finish_seq
            self._update_partition(conn, prow, finish_counter=finish_seq)
            self._index_finished(conn, prow.id, sid, current, finish_seq)
        elif new_state == RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
            conn.execute(self._q.delete_epoch_ranges, {"sid": sid})
        conn.execute(self._q.update_segment, values)
        self._history(conn, prow, lease, new_state.value, segment_id=sid, from_state=current.state.value)
        return replace(
            current.with_state(new_state, event_time=event_time, writer_token=lease.token), custom_metadata=merged
        )

    def _index_finished(
        self, conn: Connection, partition_id: int, sid: str, meta: RemoteLogSegmentMetadata, finish_seq: int
    ) -> None:
        """A finished segment's per-epoch ranges (segment_for) and the epochs' highest offsets."""
        ranges = meta.epoch_ranges()
        conn.execute(
            self._q.insert_epoch_ranges,
            [
                {
                    "segment_id": sid,
                    "epoch": epoch,
                    "partition_id": partition_id,
                    "start_offset": start,
                    "end_offset": end,
                    "finish_seq": finish_seq,
                }
                for epoch, (start, end) in ranges.items()
            ],
        )
        conn.execute(
            self._q.raise_epoch_highest,
            [
                {"partition_id": partition_id, "epoch": epoch, "highest_offset": end, "max_span": max(0, end - start)}
                for epoch, (start, end) in ranges.items()
            ],
        )

    # --- point reads and figures ---------------------------------------------------------

    def segment_states(self, segment_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, RemoteLogSegmentState]:
        """The recorded state of each of ``segment_ids`` the store knows (unknown ids are absent)."""
        with self._read() as conn:
            return self._segment_states(conn, segment_ids)

    def _segment_states(
        self, conn: Connection, segment_ids: Collection[uuid.UUID]
    ) -> dict[uuid.UUID, RemoteLogSegmentState]:
        wanted = sorted({str(i) for i in segment_ids})
        found: dict[uuid.UUID, RemoteLogSegmentState] = {}
        for i in range(0, len(wanted), IDS_PER_QUERY):
            query = select(S.c.segment_id, S.c.state).where(S.c.segment_id.in_(wanted[i : i + IDS_PER_QUERY]))
            for row in conn.execute(query):
                found[uuid.UUID(row.segment_id)] = RemoteLogSegmentState(row.state)
        return found

    def get_segment(self, segment_id: uuid.UUID) -> RemoteLogSegmentMetadata | None:
        with self._read() as conn:
            row = conn.execute(self._q.segment_with_partition, {"sid": str(segment_id)}).first()
        return segment_from_row(row, tip_of(row)) if row is not None else None

    def segment_for(self, tip: TopicIdPartition, epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment whose range for ``epoch`` contains ``offset``.

        Where finished ranges overlap, the later finished one (higher finish sequence) wins;
        offsets only an earlier segment covers (a shorter re-upload over a longer one) still
        resolve to it.
        """
        with self._read() as conn:
            row = conn.execute(self._q.segment_for, {**tip_params(tip), "epoch": epoch, "offset": offset}).first()
        return segment_from_row(row, tip) if row is not None else None

    def highest_offset_for_epoch(self, tip: TopicIdPartition, epoch: int) -> int | None:
        """Highest offset ever finished in ``epoch`` (docs/kafka-rules.md section 4); never decreases on deletion."""
        with self._read() as conn:
            return conn.execute(self._q.highest_offset, {**tip_params(tip), "epoch": epoch}).scalar()

    def latest_copied_epoch(self, tip: TopicIdPartition, epochs: Sequence[int]) -> tuple[int, int] | None:
        """Of ``epochs`` (a lineage's, ascending), the latest with finished data, and the highest
        offset ever finished in it (as ``highest_offset_for_epoch``); None if none has any.

        The epochs with finished data are read newest first from the index, a page at a time;
        the first page nearly always holds the answer, however long the lineage.
        """
        if not epochs:
            return None
        wanted = set(epochs)
        upto = epochs[-1]
        with self._read() as conn:
            while True:
                rows = conn.execute(
                    self._q.epochs_highest_down_from,
                    {**tip_params(tip), "upto": upto, "lowest": epochs[0], "n": EPOCHS_PER_QUERY},
                ).all()
                for epoch, highest in rows:
                    if epoch in wanted:
                        return int(epoch), int(highest)
                if len(rows) < EPOCHS_PER_QUERY:
                    return None
                upto = rows[-1][0] - 1

    def segment_totals(self, tip: TopicIdPartition, states: Collection[RemoteLogSegmentState]) -> tuple[int, int]:
        """(number, bytes) of the partition's segments in ``states`` (DELETE_SEGMENT_FINISHED ones
        are not counted): one aggregate query."""
        if not states:
            return 0, 0
        with self._read() as conn:
            count, size = conn.execute(
                self._q.segment_totals, {**tip_params(tip), "states": sorted(s.value for s in states)}
            ).one()
        return int(count), int(size)

    def remote_log_size(self, tip: TopicIdPartition) -> int:
        """Bytes of COPY_SEGMENT_FINISHED segments."""
        return self.segment_totals(tip, (FINISHED,))[1]

    def remote_segment_count(self, tip: TopicIdPartition) -> int:
        """Number of COPY_SEGMENT_FINISHED segments."""
        return self.segment_totals(tip, (FINISHED,))[0]
