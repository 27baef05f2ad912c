"""The broker's local segments still holding erased keys (``tiering erase``, docs/commands.md
"Erasure").

An erasure rewrites the remote tier; the broker's own log is the broker's, and the platform never
writes into it. What it can do is say what is left there: on the host where the erasure runs,
each partition's directory in the log dirs the platform config names is read whole (read-only,
one batch in memory at a time, each segment bounded by its size when opened, the active one up
to its valid prefix: a local segment has no key filter, and one the tier holds may differ from
the tier's copy, which an earlier erasure cleaned) and every segment holding a record of the
keys is named, with when Kafka's local retention removes it: its largest record timestamp plus
the topic's effective ``local.retention.ms`` (as Kafka's ``UnifiedLog`` measures a segment's
age), never while it is the active segment (a tiered topic's local segment goes only once
copied, and the active one is never copied). ``local.retention.bytes`` may remove it sooner, at
no time that can be known.

A partition with no directory here (the erasure runs on another host, or the partition's
replicas are on other brokers) is named as not checked: never a failure.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from tiering_core.config.topics import TopicConfig
from tiering_core.context import find_partition
from tiering_core.errors import PartitionNotInLogDirsError, TieringError
from tiering_core.kafka.cleaner import offsets_of_keys
from tiering_core.kafka.partition_log import LogSegment, PartitionLog
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.erasures import LocalSegment, LocalSegments
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.tier.view import segment_largest_timestamp

if TYPE_CHECKING:
    from tiering_core.config import PlatformConfig
    from tiering_core.context import TieringContext

log = logging.getLogger(__name__)


def local_partition_log(config: PlatformConfig, tip: TopicIdPartition) -> PartitionLog | str:
    """``tip``'s directory in this host's log dirs, or why there is none to read (a log dir
    configured but absent here, several brokers configured and none chosen, another incarnation
    of the topic)."""
    present = tuple(d for d in config.log_dirs if d.is_dir())
    missing = f"no log dir of {tip.topic_partition} on this host"
    if not present:
        return missing
    try:
        partition = find_partition(replace(config, log_dirs=present), tip.topic_partition)
        topic_id = partition.topic_id
    except PartitionNotInLogDirsError:
        return missing
    except (TieringError, OSError) as exc:
        return f"{missing} that can be read ({exc})"
    if topic_id != tip.topic_id:
        return f"{missing}: {partition.path} holds topic id {topic_id}, another incarnation of {tip.topic}"
    return partition


def local_segments_holding(ctx: TieringContext, tip: TopicIdPartition, keys: frozenset[bytes]) -> LocalSegments:
    """What ``tip``'s local log on this host still holds of ``keys`` (module docstring); reading
    it never fails the erasure: a log that cannot be read is named as not checked, with why."""
    now = int(time.time() * 1000)
    retention_ms, retention_bytes = _local_retention(ctx, tip.topic)
    found = local_partition_log(ctx.config, tip)
    if isinstance(found, str):
        return LocalSegments(None, (), 0, retention_ms, retention_bytes, found, now)
    highest_copied = max(
        (
            s.end_offset
            for s in ctx.metadata.list_segments(tip)
            if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ),
        default=-1,
    )
    try:
        holding, read = _holding(found, keys, highest_copied, retention_ms)
    except (TieringError, OSError) as exc:
        reason = f"{found.path} could not be read ({exc})"
        return LocalSegments(str(found.log_dir), (), 0, retention_ms, retention_bytes, reason, now)
    return LocalSegments(str(found.log_dir), tuple(holding), read, retention_ms, retention_bytes, None, now)


def _local_retention(ctx: TieringContext, topic: str) -> tuple[int | None, int | None]:
    """The topic's effective ``local.retention.ms`` and ``local.retention.bytes`` (None: unknown)."""
    try:
        config: TopicConfig = ctx.topic_config(topic)
    except TieringError as exc:
        log.warning("topic %s: its local retention is not known here (%s)", topic, exc)
        return None, None
    return config.effective_local_retention_ms(), config.effective_local_retention_bytes()


def _holding(
    partition: PartitionLog, keys: frozenset[bytes], highest_copied: int, retention_ms: int | None
) -> tuple[list[LocalSegment], int]:
    """Each segment of ``partition`` holding a record of ``keys``, and how many were read (one
    the broker deleted since the listing is not)."""
    holding: list[LocalSegment] = []
    read = 0
    active = partition.active_segment
    for segment in partition.segments:
        is_active = segment is active
        try:
            offsets = offsets_of_keys(segment.log_path, keys, valid_prefix=is_active)
            named = None
            if offsets:
                named = _named(partition, segment, len(offsets), is_active, highest_copied, retention_ms)
        except FileNotFoundError:
            continue  # deleted by the broker's retention meanwhile: it holds nothing any more
        read += 1
        if named is not None:
            holding.append(named)
    return holding, read


def _named(
    partition: PartitionLog,
    segment: LogSegment,
    records: int,
    active: bool,
    highest_copied: int,
    retention_ms: int | None,
) -> LocalSegment:
    largest = segment_largest_timestamp(segment)
    next_base = partition.next_base_offset(segment)
    copied = next_base is not None and next_base - 1 <= highest_copied
    by_time = None if active or retention_ms is None or retention_ms < 0 else largest + retention_ms
    return LocalSegment(segment.base_offset, segment.log_path.name, records, largest, active, copied, by_time)
