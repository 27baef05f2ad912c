"""A partition's tier state: the broker's local log joined with what the remote tier holds.

Copy, retention, status and reads derive their offsets here (and from the plain values of
``offsets.py``) and nowhere else:
the lineage and global log start offset of docs/kafka-rules.md section 10, the highest copied
offset of section 5 step 1, the copy candidates of step 3 and which of them the delayed upload
(KIP-1241, section 5 "Delayed upload") lets go now, copy lag, tiering gaps and local-retention
risk.

The broker's log start (its ``log-start-offset-checkpoint`` entry, or the cluster's log start) is
only the *local* log start: the global log start moves by the platform's own retention and by
DeleteRecords applied through the platform, never by what a replica's files or the cluster's log
start show (section 10 item 1).

With the live cluster as a source (``live``, from ``tiering_core.live``), the high watermark, LSO
and local log start come from the cluster by the rules of ``tiering_core.live.partition``; the
partition directory stays the source of everything else (segments, epochs, the log end offset).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from tiering_core.errors import TieringError
from tiering_core.kafka.batch import iter_batch_headers
from tiering_core.kafka.epoch import LeaderEpochCache, current_lineage, is_cache_behind, is_segment_in_lineage
from tiering_core.kafka.partition_log import HighWatermarkUnavailableError, LogSegment, PartitionLog
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.tier.offsets import OffsetRange, global_log_start

if TYPE_CHECKING:
    from tiering_core.config import TopicConfig
    from tiering_core.context import TieringContext
    from tiering_core.live.partition import LivePartition
    from tiering_core.metadata.store import RemoteLogMetadataStore, RemoteLogSegmentMetadata
    from tiering_core.metadata.values import StoredTier

#: Warn when the oldest uncopied segment has used this share of the local retention.
LOCAL_RETENTION_WARN_RATIO = 0.8


@dataclass(frozen=True)
class CopyCandidate:
    """A closed local segment eligible for copy: [base_offset, next_base_offset - 1]."""

    segment: LogSegment
    next_base_offset: int

    @property
    def base_offset(self) -> int:
        return self.segment.base_offset

    @property
    def end_offset(self) -> int:
        return self.next_base_offset - 1


@dataclass(frozen=True)
class CopyDelay:
    """Why the copy candidates from ``base_offset`` on wait: KIP-1241's delayed upload
    (docs/kafka-rules.md section 5, "Delayed upload"). ``copy_lag_ms`` and ``copy_lag_bytes`` are
    the effective ``remote.copy.lag.*`` (-1: that check is not applied); ``segment_age_ms`` (by
    the segment's largest timestamp) and ``newer_bytes`` (the local log after the segment, the
    active segment included) are what they measure. ``waiting_*``: the candidates held back."""

    base_offset: int
    waiting_segments: int
    waiting_bytes: int
    copy_lag_ms: int
    copy_lag_bytes: int
    segment_age_ms: int
    newer_bytes: int

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class UploadEligibility:
    """The copy candidates a copy may upload now, and why the rest wait (None: none waits)."""

    candidates: tuple[CopyCandidate, ...]
    delay: CopyDelay | None = None


def segment_max_timestamp(segment: LogSegment) -> int:
    """The largest record timestamp of a segment's batches (-1 when none has one)."""
    return max((h.max_timestamp for h in iter_batch_headers(segment.log_path, strict=False)), default=-1)


def segment_largest_timestamp(segment: LogSegment, max_timestamp: int | None = None) -> int:
    """Kafka's ``LogSegment.largestTimestamp``: the largest record timestamp (``max_timestamp``, when
    already read), else the ``.log``'s modification time (what a delayed upload measures a
    segment's age by)."""
    largest = segment_max_timestamp(segment) if max_timestamp is None else max_timestamp
    return largest if largest >= 0 else int(segment.last_modified * 1000)


@dataclass(frozen=True)
class LocalRetentionRisk:
    """How close the broker's own retention is to deleting data not yet tiered."""

    oldest_uncopied_base_offset: int | None
    oldest_uncopied_age_ms: int | None
    local_retention_ms: int | None
    uncopied_bytes: int
    local_bytes: int
    local_retention_bytes: int | None
    at_risk: bool
    reason: str | None

    def to_dict(self) -> dict[str, object]:
        return {
            "oldest_uncopied_base_offset": self.oldest_uncopied_base_offset,
            "oldest_uncopied_age_ms": self.oldest_uncopied_age_ms,
            "local_retention_ms": self.local_retention_ms,
            "uncopied_bytes": self.uncopied_bytes,
            "local_bytes": self.local_bytes,
            "local_retention_bytes": self.local_retention_bytes,
            "at_risk": self.at_risk,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class TierView:
    """Read-only snapshot of one partition's local and remote offsets.

    ``local_log`` is None for a view of the remote tier alone (``load_remote_tier_view``: the
    broker holds no directory of the partition); only reads use such a view.
    """

    local_log: PartitionLog | None
    tip: TopicIdPartition
    broker_cache: LeaderEpochCache
    full_lineage: LeaderEpochCache
    lineage: LeaderEpochCache
    log_end_offset: int
    high_watermark: int | None
    last_stable_offset: int | None
    offsets_error: str | None
    remote_log_start_offset: int | None
    delete_records_offset: int | None  # the highest DeleteRecords applied through the platform
    global_log_start_offset: int | None
    highest_copied_offset: int
    offsets_source: str = "files"  # "broker": HW, LSO and log start from the cluster's admin API
    live_problem: str | None = None  # why the cluster's view does not apply to this directory
    live_log_start_offset: int | None = None  # the cluster's log start, when it applies to this directory
    #: Why the offsets are not known *yet*: the broker has not checkpointed the partition's high
    #: watermark since it was created (a few seconds). Not a failure: a copy skips the partition
    #: and a later run copies it. ``offsets_error`` says the same.
    offsets_pending: str | None = None
    #: Closed segments' largest record timestamps by base offset, each read once per view (the
    #: delayed upload, the local-retention risk and the urgency all ask of the oldest uncopied one).
    _max_timestamps: dict[int, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def log(self) -> PartitionLog:
        """The broker's partition directory (TieringError for a view of the remote tier alone)."""
        if self.local_log is None:
            raise TieringError(f"{self.tip}: the broker's log dirs hold no directory of this partition")
        return self.local_log

    @property
    def local_log_start_offset(self) -> int:
        """The broker's log start (first segment base, or its ``log-start-offset-checkpoint`` entry),
        which is this platform's *local* log start (section 10 item 1), never a DeleteRecords.

        The cluster's log start counts before the checkpoint file shows it: the broker deletes
        the segments wholly below it a little later, and until then they are not copied (their
        epochs are already cut from the broker's epoch cache).
        """
        files, live = self.log.log_start_offset, self.live_log_start_offset
        return files if live is None else max(files, live)

    @property
    def behind_lineage(self) -> str | None:
        """Why this broker's files are not the ones to copy from, when its epoch cache is behind
        the recorded lineage (``is_cache_behind``): a replica that has not seen the later
        leaders holds records of no later epoch, and maybe records an unclean election has
        since cut from the lineage. None when they may be copied."""
        if not is_cache_behind(self.full_lineage.entries, self.broker_cache.entries):
            return None
        return (
            f"the broker's leader epoch cache ends at epoch {self.broker_cache.latest_epoch}, behind the "
            f"recorded lineage's epoch {self.full_lineage.latest_epoch}: not the leader's log"
        )

    def require_lso(self) -> int:
        if self.last_stable_offset is None:
            raise TieringError(f"{self.log.topic_partition}: last stable offset unknown: {self.offsets_error}")
        return self.last_stable_offset

    # --- section 5 step 2-3 ------------------------------------------------------------------

    def copy_from_offset(self) -> int:
        """``max(copied + 1, local log start)`` (section 10 item 3), and never below the global log
        start: a DeleteRecords applied through the platform while the broker's files still hold the
        records below it (no cluster connection to send it on) leaves nothing there to tier."""
        start = max(self.highest_copied_offset + 1, self.local_log_start_offset)
        return start if self.global_log_start_offset is None else max(start, self.global_log_start_offset)

    def copy_candidates(self) -> list[CopyCandidate]:
        """Closed segments from the one containing the resume point whose next base <= LSO."""
        lso = self.last_stable_offset
        if lso is None or lso <= 0 or self.highest_copied_offset >= lso or self.behind_lineage:
            return []
        start = self.copy_from_offset()
        segments = self.log.segments
        candidates: list[CopyCandidate] = []
        for current, following in itertools.pairwise(segments):
            next_base = following.base_offset
            if next_base - 1 < start:
                continue  # wholly copied (or below the log start)
            if next_base > lso:
                break  # straddles the LSO (or beyond): waits
            candidates.append(CopyCandidate(current, next_base))
        return candidates

    def upload_eligibility(self, topic: TopicConfig, now_ms: int | None = None) -> UploadEligibility:
        """The copy candidates a copy may upload now, by KIP-1241's delayed upload (Kafka's
        ``RLMCopyTask.candidateLogSegments``): a candidate goes once its age (``now`` minus its
        largest timestamp; a timestamp in the future counts as old enough) reaches
        ``remote.copy.lag.ms`` or the local log after it reaches ``remote.copy.lag.bytes``; either
        lag 0 lets every candidate go. The first candidate that waits holds back every later one:
        segments are copied in offset order."""
        candidates = self.copy_candidates()
        lag_ms, lag_bytes = topic.effective_remote_copy_lag_ms(), topic.effective_remote_copy_lag_bytes()
        if not candidates or lag_ms == 0 or lag_bytes == 0:
            return UploadEligibility(tuple(candidates))
        now = int(time.time() * 1000) if now_ms is None else now_ms
        first = candidates[0].base_offset
        total = sum(s.size_bytes for s in self.log.segments if s.base_offset >= first)
        cumulative = 0
        for i, candidate in enumerate(candidates):
            cumulative += candidate.segment.size_bytes
            newer = total - cumulative
            if lag_bytes > 0 and newer >= lag_bytes:
                continue
            segment = candidate.segment
            age = now - segment_largest_timestamp(segment, self.max_timestamp_of(segment))
            if lag_ms > 0 and (age < 0 or age >= lag_ms):
                continue
            waiting = candidates[i:]
            delay = CopyDelay(
                base_offset=candidate.base_offset,
                waiting_segments=len(waiting),
                waiting_bytes=sum(c.segment.size_bytes for c in waiting),
                copy_lag_ms=lag_ms,
                copy_lag_bytes=lag_bytes,
                segment_age_ms=age,
                newer_bytes=newer,
            )
            return UploadEligibility(tuple(candidates[:i]), delay)
        return UploadEligibility(tuple(candidates))

    # --- section 5 step 5 and section 10 items 3-4 ---------------------------------------------

    def max_timestamp_of(self, segment: LogSegment) -> int:
        """``segment_max_timestamp`` of one of this view's segments, read once."""
        found = self._max_timestamps.get(segment.base_offset)
        if found is None:
            found = self._max_timestamps[segment.base_offset] = segment_max_timestamp(segment)
        return found

    def uncopied_closed_segments(self) -> list[CopyCandidate]:
        segments = self.log.segments
        return [
            CopyCandidate(current, following.base_offset)
            for current, following in itertools.pairwise(segments)
            if following.base_offset - 1 > self.highest_copied_offset
        ]

    def copy_lag(self) -> tuple[int, int]:
        """(segments, bytes) of local closed segments above the highest copied offset."""
        lagging = self.uncopied_closed_segments()
        return len(lagging), sum(c.segment.size_bytes for c in lagging)

    def tiering_gap(self) -> OffsetRange | None:
        """Data the broker deleted before it was tiered, above the global log start."""
        copied = self.highest_copied_offset
        if copied < 0:
            return None  # never tiered: what the broker dropped before is history, not a gap
        if self.behind_lineage:
            return None  # a replica behind the lineage: its log start says nothing of the leader's
        start = copied + 1
        if self.global_log_start_offset is not None:
            start = max(start, self.global_log_start_offset)
        if start < self.local_log_start_offset:
            return OffsetRange(start, self.local_log_start_offset - 1)
        return None

    def local_retention_risk(self, topic: TopicConfig, now_ms: int | None = None) -> LocalRetentionRisk:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        lagging = self.uncopied_closed_segments()
        uncopied_bytes = sum(c.segment.size_bytes for c in lagging)
        local_bytes = sum(s.size_bytes for s in self.log.segments)
        retention_ms = topic.effective_local_retention_ms()
        retention_bytes = topic.effective_local_retention_bytes()
        oldest_base: int | None = None
        age: int | None = None
        if lagging:
            oldest = lagging[0].segment
            oldest_base = oldest.base_offset
            max_ts = self.max_timestamp_of(oldest)
            if max_ts >= 0:
                age = max(0, now - max_ts)
        reasons: list[str] = []
        if age is not None and retention_ms is not None and retention_ms >= 0:
            if age >= retention_ms * LOCAL_RETENTION_WARN_RATIO:
                reasons.append(
                    f"oldest uncopied segment {oldest_base} is {age} ms old, local retention is {retention_ms} ms"
                )
        if lagging and retention_bytes is not None and retention_bytes >= 0:
            if local_bytes >= retention_bytes * LOCAL_RETENTION_WARN_RATIO:
                reasons.append(
                    f"local log is {local_bytes} bytes with {uncopied_bytes} uncopied, "
                    f"local retention is {retention_bytes} bytes"
                )
        return LocalRetentionRisk(
            oldest_uncopied_base_offset=oldest_base,
            oldest_uncopied_age_ms=age,
            local_retention_ms=retention_ms,
            uncopied_bytes=uncopied_bytes,
            local_bytes=local_bytes,
            local_retention_bytes=retention_bytes,
            at_risk=bool(reasons),
            reason="; ".join(reasons) or None,
        )


def highest_copied_offset(
    store: RemoteLogMetadataStore, tip: TopicIdPartition, lineage: LeaderEpochCache, log_end_offset: int
) -> int:
    """docs/kafka-rules.md section 5 step 1: walk the lineage's epochs from the latest backwards.

    For the first epoch with finished remote data up to ``h``: if the lineage ends that epoch
    at or before ``h`` (remote holds more of it than this lineage: an unclean election), the
    copied offset is the epoch's end - 1, else ``h``. Nothing copied: -1.
    """
    return copied_offset_in(store.latest_copied_epoch(tip, lineage.epochs()), lineage, log_end_offset)


def copied_offset_in(latest: tuple[int, int] | None, lineage: LeaderEpochCache, log_end_offset: int) -> int:
    """``highest_copied_offset`` from the latest epoch with finished data and its highest offset."""
    if latest is None:
        return -1
    epoch, highest = latest
    _, end = lineage.end_offset_for(epoch, log_end_offset)
    return end - 1 if end <= highest else highest


def load_tier_view(
    log: PartitionLog,
    store: RemoteLogMetadataStore,
    live: LivePartition | None = None,
    stored: StoredTier | None = None,
) -> TierView:
    """Join the broker's partition directory with the metadata store (no writes).

    ``live``: the cluster's view of the partition (a ``kafka:`` section); when it does not apply
    to this directory (another topic id, unknown to the cluster) the offsets are unknown and
    ``live_problem`` says why, never the files' values instead. Its log start is the broker's
    local log start, never a DeleteRecords. ``stored``: what the store holds of the partition,
    read beforehand with many others' (``tier_views``); None: read now.
    """
    tip = TopicIdPartition(log.topic_id, log.topic_partition)
    broker_cache = LeaderEpochCache(log.leader_epoch_entries)
    recorded = list(stored.recorded_lineage) if stored is not None else store.get_recorded_lineage(tip)
    full_lineage = current_lineage(recorded, list(broker_cache.entries))
    leo = log.log_end_offset
    offsets_error: str | None = None
    hw: int | None
    lso: int | None
    live_problem: str | None = None
    live_start: int | None = None
    pending: str | None = None
    if live is not None:
        from tiering_core.live.partition import bounded_offsets

        live = live.for_directory(log.topic_id)
        if live.offsets is None:
            hw = lso = None
            live_problem = offsets_error = live.problem or f"{log.topic_partition}: no offsets from the cluster"
        else:
            hw, lso = bounded_offsets(live.offsets, leo)
            live_start = live.offsets.log_start_offset
    else:
        try:
            hw = log.high_watermark
            lso = log.last_stable_offset
        except HighWatermarkUnavailableError as exc:
            hw = lso = None
            offsets_error = str(exc)
            pending = f"waiting for the broker's first high watermark checkpoint of {log.topic_partition}: {exc}"
        except TieringError as exc:
            hw = lso = None
            offsets_error = str(exc)
    if stored is None:
        remote_start = store.get_remote_log_start_offset(tip)
        delete_records = store.get_delete_records_offset(tip)
        copied = highest_copied_offset(store, tip, full_lineage, leo)
    else:
        remote_start, delete_records = stored.remote_log_start_offset, stored.delete_records_offset
        copied = copied_offset_in(stored.latest_copied_epoch(full_lineage.epochs()), full_lineage, leo)
    global_start = global_log_start(remote_start, delete_records)
    lineage = full_lineage.truncate_from_start(global_start) if global_start is not None else full_lineage
    return TierView(
        local_log=log,
        tip=tip,
        broker_cache=broker_cache,
        full_lineage=full_lineage,
        lineage=lineage,
        log_end_offset=leo,
        high_watermark=hw,
        last_stable_offset=lso,
        offsets_error=offsets_error,
        remote_log_start_offset=remote_start,
        delete_records_offset=delete_records,
        global_log_start_offset=global_start,
        highest_copied_offset=copied,
        offsets_source="files" if live is None else "broker",
        live_problem=live_problem,
        live_log_start_offset=live_start,
        offsets_pending=pending,
    )


def tier_view(ctx: TieringContext, log: PartitionLog) -> TierView:
    """The partition's tier view as a run of ``ctx`` sees it: with the cluster's offsets when the
    context has a ``kafka:`` section (``load_tier_view``)."""
    return load_tier_view(log, ctx.metadata, ctx.live_partition(log))


def tier_views(ctx: TieringContext, logs: Sequence[PartitionLog]) -> list[TierView]:
    """``tier_view`` of many partitions, what the store holds of them read at once (a few queries
    in all, not a few per partition: a broker's thousands of partitions planned in one pass)."""
    tips = [TopicIdPartition(log.topic_id, log.topic_partition) for log in logs]
    stored = ctx.metadata.stored_tiers(tips)
    return [
        load_tier_view(log, ctx.metadata, ctx.live_partition(log), stored[tip])
        for log, tip in zip(logs, tips, strict=True)
    ]


def is_in_lineage(view: TierView, segment: RemoteLogSegmentMetadata) -> bool:
    """Whether a remote segment lies within the partition's current lineage (section 6)."""
    return is_segment_in_lineage(segment.leader_epochs, segment.end_offset, view.lineage, view.log_end_offset)


def finished_in_lineage(
    view: TierView, store: RemoteLogMetadataStore, *, custom_metadata: bool = True
) -> list[RemoteLogSegmentMetadata]:
    """COPY_SEGMENT_FINISHED segments inside the lineage: what is served and counted as remote size
    (``custom_metadata=False``: without their object keys, sizes and checksums)."""
    return [
        s
        for s in store.list_segments(view.tip, custom_metadata=custom_metadata)
        if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED and is_in_lineage(view, s)
    ]


def load_remote_tier_view(store: RemoteLogMetadataStore, tip: TopicIdPartition) -> TierView:
    """The remote tier of ``tip`` alone, for reading it when the broker holds no directory of the
    partition (a lost disk being restored): the lineage is the recorded one, and the log end is
    taken as one past the highest finished offset (nothing local can say more)."""
    full_lineage = LeaderEpochCache(store.get_recorded_lineage(tip))
    latest = store.latest_copied_epoch(tip, full_lineage.epochs())
    leo = latest[1] + 1 if latest is not None else 0
    remote_start = store.get_remote_log_start_offset(tip)
    delete_records = store.get_delete_records_offset(tip)
    global_start = global_log_start(remote_start, delete_records)
    lineage = full_lineage.truncate_from_start(global_start) if global_start is not None else full_lineage
    return TierView(
        local_log=None,
        tip=tip,
        broker_cache=LeaderEpochCache([]),
        full_lineage=full_lineage,
        lineage=lineage,
        log_end_offset=leo,
        high_watermark=None,
        last_stable_offset=None,
        offsets_error=f"{tip}: the broker's log dirs hold no directory of this partition",
        remote_log_start_offset=remote_start,
        delete_records_offset=delete_records,
        global_log_start_offset=global_start,
        highest_copied_offset=highest_copied_offset(store, tip, full_lineage, leo),
    )
