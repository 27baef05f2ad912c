"""What a replay reads: the source topic id and partitions the metadata store holds, a reader over
each (``tiering_core.read.reader``, the one read path), and the offset range asked for, bounded by
what the remote tier serves, with the parts of it the tier cannot replay (docs/replay.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tiering_core.errors import TieringError
from tiering_core.kafka.isolation import IsolationLevel
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.read.reader import RemoteLogReader, open_reader, open_remote_reader
from tiering_core.tier.offsets import OffsetRange, merge_offset_ranges

if TYPE_CHECKING:
    from tiering_core.context import TieringContext


@dataclass(frozen=True)
class RangeRequest:
    """The range a replay was asked for: a first offset or timestamp (exactly one), and optionally
    a last offset (inclusive) or a last timestamp (records before the first one after it)."""

    from_offset: int | None = None
    from_timestamp: int | None = None
    to_offset: int | None = None
    to_timestamp: int | None = None

    def __post_init__(self) -> None:
        if (self.from_offset is None) == (self.from_timestamp is None):
            raise TieringError("a replay needs exactly one of a first offset and a first timestamp")
        if self.to_offset is not None and self.to_timestamp is not None:
            raise TieringError("a replay takes a last offset or a last timestamp, not both")
        for name, value in vars(self).items():
            if value is not None and value < 0:
                raise TieringError(f"{name.replace('_', ' ')} must not be negative, got {value}")
        if self.from_offset is not None and self.to_offset is not None and self.to_offset < self.from_offset:
            raise TieringError(f"the last offset {self.to_offset} is below the first offset {self.from_offset}")
        if (
            self.from_timestamp is not None
            and self.to_timestamp is not None
            and self.to_timestamp < self.from_timestamp
        ):
            raise TieringError(f"the last timestamp {self.to_timestamp} is before the first one {self.from_timestamp}")


@dataclass(frozen=True)
class SourceRange:
    """A source partition's offsets to replay, ``first``..``last`` inclusive (empty when last <
    first), and the offsets asked for that the remote tier cannot replay."""

    first: int
    last: int
    gaps: tuple[tuple[OffsetRange, str], ...] = ()

    @property
    def empty(self) -> bool:
        return self.last < self.first


#: Why a part of the range is not replayed.
GAP_TIERING = "tiering gap: the broker deleted these offsets before they were tiered"
GAP_BELOW_START = "below the remote log start: retention or a DeleteRecords removed them"
GAP_UNDECIDED = (
    "a transaction open at the end of the tier: its marker was never tiered and the broker's log is gone, "
    "so read_committed cannot tell its records from committed ones"
)


def source_topic_id(ctx: TieringContext, topic: str, topic_id: str | None = None) -> str:
    """The topic id to replay: ``topic_id`` if the store holds live remote data of it for
    ``topic``, else the newest such topic id (a topic deleted and made again has a new one)."""
    live = [r for r in ctx.metadata.list_partitions() if r.topic == topic and r.live]
    if not live:
        raise TieringError(f"topic {topic} has no remote data in the metadata store")
    ids = {r.topic_id for r in live}
    if topic_id is not None:
        if topic_id not in ids:
            raise TieringError(
                f"topic {topic} has no remote data of topic id {topic_id} (it has: {', '.join(sorted(ids))})"
            )
        return topic_id
    return max(live, key=lambda r: (r.created_ms, r.topic_id)).topic_id


def source_partitions(
    ctx: TieringContext, topic: str, topic_id: str, partitions: Sequence[int] | None = None
) -> list[TopicIdPartition]:
    """The partitions of ``topic_id`` the store holds live data of (``partitions`` only, each of
    which must be one), in partition order."""
    held = {
        r.partition: r.topic_id_partition
        for r in ctx.metadata.list_partitions()
        if r.topic_id == topic_id and r.topic == topic and r.live
    }
    if not partitions:
        return [held[p] for p in sorted(held)]
    missing = sorted(set(partitions) - set(held))
    if missing:
        raise TieringError(
            f"topic {topic} (topic id {topic_id}) has no remote data of partition(s) "
            f"{', '.join(map(str, missing))}; it has {', '.join(map(str, sorted(held))) or 'none'}"
        )
    return [held[p] for p in sorted(set(partitions))]


def open_source(ctx: TieringContext, tip: TopicIdPartition) -> RemoteLogReader:
    """A reader of ``tip``'s remote tier: joined with the broker's replica while this process
    serves a broker that holds that very partition (same topic id), else the remote tier alone
    (a deleted topic, a process serving no broker)."""
    if ctx.config.serves_no_broker:
        return open_remote_reader(ctx, tip)
    try:
        log = ctx.partition_log(tip.topic_partition)
    except TieringError:  # no directory (a deleted topic), or an unreadable one: the tier alone serves it
        return open_remote_reader(ctx, tip)
    if log.topic_id != tip.topic_id:  # a recreated topic's replica: not this topic id's data
        return open_remote_reader(ctx, tip)
    return open_reader(ctx, tip.topic_partition)


def resolve_range(
    reader: RemoteLogReader,
    request: RangeRequest,
    recorded_gaps: Sequence[OffsetRange],
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
) -> SourceRange:
    """The offsets of ``request`` the remote tier serves, and the parts of it that it cannot
    replay: below its log start, in a recorded tiering gap, or (read_committed, the tier read
    alone) from a transaction whose outcome the tier cannot tell on."""
    start = reader.log_start_offset
    if start is None:
        raise TieringError(f"{reader.tp}: the remote tier holds no data to replay")
    highest = reader.highest_offset
    if request.from_offset is not None:
        asked_first = request.from_offset
    else:
        assert request.from_timestamp is not None
        found = reader.offset_for_timestamp(request.from_timestamp)
        asked_first = found.offset if found is not None else highest + 1
    first = max(asked_first, start)
    if request.to_offset is not None:
        last = min(request.to_offset, highest)
    elif request.to_timestamp is not None and first <= highest:
        after = reader.offset_for_timestamp(request.to_timestamp + 1, first)
        last = after.offset - 1 if after is not None else highest
    else:
        last = highest
    gaps: list[tuple[OffsetRange, str]] = []
    if asked_first < start:
        below_end = start - 1 if request.to_offset is None else min(start - 1, request.to_offset)
        gaps.append((OffsetRange(asked_first, below_end), GAP_BELOW_START))
    undecided = reader.first_undecided_offset() if isolation is IsolationLevel.READ_COMMITTED else None
    if undecided is not None and max(undecided, first) <= last:
        gaps.append((OffsetRange(max(undecided, first), last), GAP_UNDECIDED))
        last = max(undecided, first) - 1
    for gap in merge_offset_ranges((g.start, g.end) for g in recorded_gaps):
        lo, hi = max(gap.start, first), min(gap.end, last)
        if lo <= hi:
            gaps.append((OffsetRange(lo, hi), GAP_TIERING))
    return SourceRange(first, last, tuple(gaps))
