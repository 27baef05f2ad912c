"""Which remote segments an export writes: COPY_SEGMENT_FINISHED segments inside the
partition's lineage (``finished_in_lineage``, the segments reads serve), in offset order, but
those whose offsets the table already holds of the partition's topic id
(``ExportedRanges.holds``: a topic deleted and made again under its name is another topic id, whose
offsets are its own). Of segments with the same offsets (an index-repair copy beside the segment
it replaces), only the newest is taken, so the offsets are exported once. Segments of the lineage
may also overlap in part: a copy that resumed inside a segment of a new leader tiers that segment
whole (its first offsets are the old leader's last segment's last ones, the same records). Each
segment is then written from its first offset that neither the table nor an earlier segment of the
plan holds (``ExportSegment.first_offset``), so every offset is exported once. Nothing below the
partition's log start offset is written (``RemoteLogReader.log_start_offset``: the global log start
of docs/kafka-rules.md section 10, a DeleteRecords' offset included): a consumer can no longer read
those records, and neither does a replay, so the table does not gain them either.

At read_committed each planned segment carries the aborted transactions overlapping it, as a
remote fetch gathers them (``RemoteLogReader.aborted_transactions``: the remote txn indexes of
this and later segments, then the broker's local ones when this process has the partition's
directory): the data files can then be written anywhere (a Spark executor) from the segment and
the storage alone.

A transaction's outcome must be in the remote tier before its records are exported at
read_committed: a transaction still open at the end of the last tiered segment (its producer
snapshot, uploaded with it, says so) may yet be aborted by a marker the remote tier does not hold,
so no segment holding offsets from its first offset on is exported until a later copy tiers the
marker. This is the same whether or not the process has the partition's directory, so the CLI and
the Spark app export the same rows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tiering_core.engine.segment_ops import segment_ref
from tiering_core.errors import TieringError
from tiering_core.export.table import ExportedRanges
from tiering_core.kafka.index import AbortedTxn
from tiering_core.kafka.isolation import IsolationLevel
from tiering_core.kafka.producer_snapshot import open_transactions, parse_producer_snapshot
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.read.index_cache import RemoteIndexCache, cache_directory
from tiering_core.read.reader import RemoteLogReader
from tiering_core.storage.errors import RemoteObjectNotFoundError
from tiering_core.storage.layout import ObjectKind
from tiering_core.tier.offsets import first_uncovered, merge_offset_ranges
from tiering_core.tier.view import TierView, finished_in_lineage, load_remote_tier_view, load_tier_view

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.metadata.store import RemoteLogMetadataStore, RemoteLogSegmentMetadata


@dataclass(frozen=True)
class ExportSegment:
    """One remote segment to export, with what writing its data files needs (picklable)."""

    segment: RemoteLogSegmentMetadata
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED
    aborted: tuple[AbortedTxn, ...] = field(default=())
    #: The first offset written, when above the segment's start (the offsets below are exported
    #: from another segment: module docstring).
    from_offset: int | None = None

    @property
    def topic_partition(self) -> TopicPartition:
        return self.segment.topic_id_partition.topic_partition

    @property
    def partition(self) -> int:
        return self.topic_partition.partition

    @property
    def topic_id(self) -> str:
        return self.segment.topic_id_partition.topic_id

    @property
    def segment_id(self) -> str:
        return str(self.segment.segment_id)

    @property
    def start_offset(self) -> int:
        return self.segment.start_offset

    @property
    def end_offset(self) -> int:
        return self.segment.end_offset

    @property
    def first_offset(self) -> int:
        """The first offset this export writes of the segment."""
        return self.start_offset if self.from_offset is None else self.from_offset

    def to_dict(self) -> dict[str, object]:
        return {
            "topic": self.topic_partition.topic,
            "topic_id": self.topic_id,
            "partition": self.partition,
            "segment_id": self.segment_id,
            "start_offset": self.start_offset,
            "first_offset": self.first_offset,
            "end_offset": self.end_offset,
            "size_bytes": self.segment.size_bytes,
        }


def newest_topic_ids(
    store: RemoteLogMetadataStore, topic: str, partition: int | None = None
) -> dict[TopicPartition, str]:
    """Per partition of ``topic`` (or of one), the newest live topic id the metadata store knows
    (a removed or dropped incarnation is never the one exported)."""
    newest: dict[TopicPartition, tuple[int, str]] = {}
    for record in store.list_partitions():
        tp = record.topic_partition
        if tp.topic != topic or (partition is not None and tp.partition != partition):
            continue
        if record.dropped or record.delete_state is not None:
            continue
        if tp not in newest or (record.created_ms, record.topic_id) > newest[tp]:
            newest[tp] = (record.created_ms, record.topic_id)
    return {tp: topic_id for tp, (_created, topic_id) in newest.items()}


def _views(ctx: TieringContext, topic: str, partition: int | None) -> list[TierView]:
    """The partitions' tier views: joined with the broker's replica when this process has the
    partition's directory, else the remote tier alone (the newest live topic id)."""
    views: dict[TopicPartition, TierView] = {}
    if ctx.config.log_dirs:
        try:
            logs = ctx.partitions(topic, partition)
        except TieringError:  # not in this broker's log dirs: its remote tier alone
            logs = []
        for partition_log in logs:
            views[partition_log.topic_partition] = load_tier_view(partition_log, ctx.metadata)
    for tp, topic_id in newest_topic_ids(ctx.metadata, topic, partition).items():
        if tp not in views:
            views[tp] = load_remote_tier_view(ctx.metadata, TopicIdPartition(topic_id, tp))
    if not views:
        raise TieringError(
            f"topic {topic}" + (f" partition {partition}" if partition is not None else "") + " has no remote data"
        )
    return [views[tp] for tp in sorted(views, key=lambda tp: tp.partition)]


def require_remote_data(ctx: TieringContext, topic: str, partition: int | None = None) -> None:
    """A ``TieringError`` naming ``topic`` (or its ``partition``) when neither the broker's log
    dirs nor the remote tier hold any of it: checked before an export creates its table."""
    _views(ctx, topic, partition)


def newest_copies(segments: list[RemoteLogSegmentMetadata]) -> list[RemoteLogSegmentMetadata]:
    """One segment per offset range (the newest by event time: an index repair's copy), in
    offset order."""
    chosen: dict[tuple[int, int], RemoteLogSegmentMetadata] = {}
    for segment in segments:
        key = (segment.start_offset, segment.end_offset)
        if key not in chosen or segment.event_time > chosen[key].event_time:
            chosen[key] = segment
    return [chosen[key] for key in sorted(chosen)]


def undecided_from(ctx: TieringContext, segments: list[RemoteLogSegmentMetadata]) -> int | None:
    """The first offset of the earliest transaction still open at the end of the last tiered
    segment (module docstring), None when none is; its producer snapshot missing: its base offset
    (nothing of it is known decided)."""
    if not segments:
        return None
    last = max(segments, key=lambda s: s.end_offset)
    where = f"producer snapshot of segment {last.segment_id}"
    try:
        data = ctx.storage.fetch(segment_ref(last), ObjectKind.PRODUCER_SNAPSHOT)
    except RemoteObjectNotFoundError:
        log.warning("%s is missing: segments from offset %d wait for the next copy", where, last.start_offset)
        return last.start_offset
    first_offsets = open_transactions(parse_producer_snapshot(data, where)).values()
    return min(first_offsets, default=None)


def plan_export(
    ctx: TieringContext,
    topic: str,
    partition: int | None = None,
    *,
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
    done: ExportedRanges,
) -> list[ExportSegment]:
    """The segments of ``topic`` (or of one partition) the table does not hold yet (``done``: what
    it holds, as ``export.session`` reads it), in partition and offset order."""
    planned: list[ExportSegment] = []
    cache = RemoteIndexCache(ctx.storage, ctx.config.index_cache_bytes, cache_directory(ctx.config.index_cache_dir))
    for view in _views(ctx, topic, partition):
        reader = RemoteLogReader(view, ctx.metadata, cache)
        tp = view.tip.topic_partition
        segments = newest_copies(finished_in_lineage(view, ctx.metadata))
        undecided = undecided_from(ctx, segments) if isolation == IsolationLevel.READ_COMMITTED else None
        held = list(done.of(view.tip.topic_id, view.tip.partition))
        log_start = reader.log_start_offset
        for segment in segments:
            start = segment.start_offset if log_start is None else max(segment.start_offset, log_start)
            first = first_uncovered(start, held)
            if first > segment.end_offset:
                continue
            held = merge_offset_ranges([*((r.start, r.end) for r in held), (first, segment.end_offset)])
            if undecided is not None and segment.end_offset >= undecided:
                log.info(
                    "%s: segments from offset %d wait: a transaction open since offset %d has no outcome "
                    "in the remote tier yet",
                    tp,
                    segment.start_offset,
                    undecided,
                )
                break
            aborted: tuple[AbortedTxn, ...] = ()
            if isolation == IsolationLevel.READ_COMMITTED:
                found = reader.aborted_transactions(segment.start_offset, segment.end_offset + 1)
                aborted = tuple(sorted(found, key=lambda t: (t.first_offset, t.producer_id)))
            from_offset = None if first == segment.start_offset else first
            planned.append(ExportSegment(segment, isolation, aborted, from_offset))
    return planned
