"""Erasure by record key across the tiered log (``tiering erase``, docs/kafka-rules.md section 12).

Kafka cannot remove single records, and the tier keeps segments for years: an erasure copies
each remote segment holding a record of the keys again without those records, as Kafka's log
cleaner rewrites a segment (``kafka/cleaner.py``: offsets never move). Under each partition's
lease, like every writer: first what killed runs left is finished (as rewrite and copy do), then
each finished segment's log is read through the storage's checked reader and cleaned; a segment
with no record of the keys is left alone (same id, same objects); one with records of them is
copied again under a fresh segment id with the cleaned log, its rebuilt offset and time indexes
and its other objects as they were, and put in the old one's place in one fenced transaction by
``rewrite.replace_segment`` (same offsets and leader epochs: the lineage and the remote log start
are untouched); the old objects are deleted after. A run killed anywhere leaves a started copy or
a started deletion, which the next run finishes before it erases again.

The audit trail (``metadata/erasures.py``) records each partition's erasure as it goes: the
SHA-256 of each key, never a key, and no key appears in a log line or message either. It ends
with the broker's local segments on this host that still hold the keys (``erase_local.py``): the
platform cannot change them, so the trail names them and when local retention removes them.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiering_core.engine.download import download_object
from tiering_core.engine.lease import held_partition
from tiering_core.engine.segment_ops import recover_failed_copies, segment_ref
from tiering_core.errors import CorruptLogError, TieringError
from tiering_core.kafka.cleaner import CleanerResult, clean_segment
from tiering_core.kafka.files import read_regular
from tiering_core.kafka.index_rebuild import rebuild_indexes
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.erasures import FINISHED, ErasureRecord, LocalSegments, SegmentErasure
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.runs.erase_local import local_segments_holding
from tiering_core.runs.errors import ErasureRefusedError
from tiering_core.runs.rewrite import replace_segment
from tiering_core.storage.key_filter import HEADER, MAX_BITS, KeyFilter, KeyFilterError
from tiering_core.storage.layout import ObjectKind

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.metadata.store import RemoteLogSegmentMetadata, TaskAttempt

log = logging.getLogger(__name__)

#: The objects an erasure makes anew: the log without the records, and its position indexes.
REBUILT_KINDS = frozenset(
    {ObjectKind.LOG, ObjectKind.OFFSET_INDEX, ObjectKind.TIME_INDEX, ObjectKind.KEY_FILTER, ObjectKind.MANIFEST}
)

#: The largest key filter read: its header and the most bits a filter may have.
MAX_KEY_FILTER_BYTES = HEADER.size + MAX_BITS // 8


def key_sha256(key: bytes) -> str:
    """What the audit trail holds of an erased key."""
    return hashlib.sha256(key).hexdigest()


@dataclass(frozen=True)
class ErasureRequest:
    """Erase the records of ``keys`` (bytes as Kafka sees them) from ``topic``'s remote tier
    (``partitions``: only those; empty: every partition the store holds of the topic).
    ``requested_by`` names who asked (the command, or a DAG run id)."""

    topic: str
    keys: frozenset[bytes]
    partitions: tuple[int, ...] = ()
    requested_by: str = "tiering erase"
    erasure_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def __post_init__(self) -> None:
        if not self.keys:
            raise TieringError("an erasure needs at least one key")

    def __repr__(self) -> str:  # never print a key
        return f"ErasureRequest({self.topic!r}, {len(self.keys)} key(s), {self.partitions}, {self.erasure_id})"

    @property
    def key_sha256(self) -> tuple[str, ...]:
        return tuple(sorted({key_sha256(k) for k in self.keys}))


@dataclass(frozen=True)
class SegmentHit:
    """A segment holding records of the keys: what was (or, in a dry run, would be) removed."""

    segment_id: str
    start_offset: int
    end_offset: int
    records_removed: int
    new_segment_id: str | None = None


@dataclass
class PartitionErasure:
    """One partition's erasure: segments read, those whose key filter ruled every key out (never
    read), those holding the keys, the cleanup of killed runs, and the broker's local segments
    on this host still holding the keys."""

    topic: str
    partition: int
    topic_id: str
    segments_read: int = 0
    segments_filtered_out: int = 0
    segments_unchanged: int = 0
    segments_cleaned_up: int = 0
    hits: list[SegmentHit] = field(default_factory=list)
    dry_run: bool = False
    local_segments: LocalSegments | None = None

    @property
    def records_removed(self) -> int:
        return sum(h.records_removed for h in self.hits)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe, for ``--json`` and XCom."""
        local = None if self.local_segments is None else self.local_segments.to_dict()
        return {**asdict(self), "records_removed": self.records_removed, "local_segments": local}


@dataclass
class TableErasure:
    """One export table's part of an erasure (``export/erase.py``): rows deleted from its current
    snapshot, data files holding the keys deleted, snapshots expired (in a dry run: what would
    be), the snapshots a tag or a branch holds (``held``: failure lines), or why the table was
    left alone (``skipped``)."""

    table: str
    table_uuid: str | None = None
    rows_deleted: int = 0
    data_files_deleted: int = 0
    snapshots_expired: int = 0
    held: list[str] = field(default_factory=list)
    skipped: str | None = None
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe, for ``--json`` and XCom."""
        return asdict(self)


@dataclass
class ErasureResult:
    """An erasure over its partitions and the topic's export tables, with the partitions and
    tables that failed (one line each)."""

    erasure_id: str
    key_sha256: tuple[str, ...]
    partitions: list[PartitionErasure] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    dry_run: bool = False
    tables: list[TableErasure] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "erasure_id": self.erasure_id,
            "key_sha256": list(self.key_sha256),
            "dry_run": self.dry_run,
            "partitions": [p.to_dict() for p in self.partitions],
            "records_removed": sum(p.records_removed for p in self.partitions),
            "tables": [t.to_dict() for t in self.tables],
            "failures": list(self.failures),
        }


def erasure_targets(ctx: TieringContext, request: ErasureRequest) -> list[TopicIdPartition]:
    """The partitions of the request the store holds (every topic id of the name: a topic deleted
    and recreated keeps its older tier until retention), live ones only (not being removed)."""
    held = [
        TopicIdPartition(p.topic_id, p.topic_partition)
        for p in ctx.metadata.list_partitions()
        if p.topic == request.topic and not p.dropped and p.delete_state is None
    ]
    if not held:
        raise ErasureRefusedError(f"topic {request.topic} has nothing in the remote tier to erase from")
    wanted = set(request.partitions) or {t.partition for t in held}
    missing = wanted - {t.partition for t in held}
    if missing:
        raise ErasureRefusedError(
            f"partition(s) {sorted(missing)} of topic {request.topic} have nothing in the remote tier"
        )
    return [t for t in held if t.partition in wanted]


def run_erase(
    ctx: TieringContext,
    request: ErasureRequest,
    *,
    dry_run: bool = False,
    attempt: TaskAttempt | None = None,
) -> ErasureResult:
    """Erase ``request``'s keys from every partition it names; a partition that fails is one line
    in ``failures`` and the others go on."""
    result = ErasureResult(request.erasure_id, request.key_sha256, dry_run=dry_run)
    for tip in erasure_targets(ctx, request):
        try:
            result.partitions.append(erase_target(ctx, tip, request, dry_run=dry_run, attempt=attempt))
        except TieringError as exc:
            result.failures.append(partition_failure(tip, exc))
    return result


def erase_target(
    ctx: TieringContext,
    tip: TopicIdPartition,
    request: ErasureRequest,
    *,
    dry_run: bool = False,
    attempt: TaskAttempt | None = None,
) -> PartitionErasure:
    """One partition's part of ``run_erase``: its plan in a dry run, else its erasure under its
    lease; one function, so a run that hands partitions out elsewhere (a Spark task) does the same."""
    if dry_run:
        return plan_partition_erasure(ctx, tip, request)
    return erase_partition(ctx, tip, request, attempt=attempt)


def partition_failure(tip: TopicIdPartition, reason: BaseException | str) -> str:
    """A partition's failure line in ``ErasureResult.failures``."""
    return f"{tip.topic_partition}: {reason}"


def _finished(ctx: TieringContext, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
    segments = ctx.metadata.list_segments(tip)
    return sorted(
        (s for s in segments if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED),
        key=lambda s: (s.start_offset, s.event_time),
    )


@dataclass(frozen=True)
class CleanedSegment:
    """A segment's log without the keys' records, in a scratch directory, and what was removed."""

    log: Path
    result: CleanerResult


def clean_remote_segment(
    ctx: TieringContext, segment: RemoteLogSegmentMetadata, keys: frozenset[bytes], work: Path
) -> CleanedSegment:
    """Read ``segment``'s log through the storage's checked reader into ``work`` and clean it."""
    source, target = work / "source.log", work / "cleaned.log"
    download_object(ctx.storage, segment, ObjectKind.LOG, source)  # checked against the record
    result = clean_segment(source, target, keys)
    source.unlink()
    return CleanedSegment(target, result)


def may_hold_keys(ctx: TieringContext, segment: RemoteLogSegmentMetadata, keys: frozenset[bytes], work: Path) -> bool:
    """False only when the segment's key filter, read through the checked reader, holds none of
    ``keys``; True for a segment copied before filters (it has none: its log is read)."""
    target = work / ObjectKind.KEY_FILTER.value
    if download_object(ctx.storage, segment, ObjectKind.KEY_FILTER, target) < 0:
        return True
    try:
        key_filter = KeyFilter.from_bytes(read_regular(target, MAX_KEY_FILTER_BYTES, "key filter"))
    except (KeyFilterError, CorruptLogError) as exc:
        raise TieringError(f"segment {segment.segment_id}: its key filter is unusable: {exc}") from None
    finally:
        target.unlink()
    return any(key_filter.may_contain(k) for k in keys)


def plan_partition_erasure(ctx: TieringContext, tip: TopicIdPartition, request: ErasureRequest) -> PartitionErasure:
    """What ``erase_partition`` would remove, read without the lease: writes nothing."""
    out = PartitionErasure(tip.topic, tip.partition, tip.topic_id, dry_run=True)
    for segment, cleaned in _cleaned_segments(ctx, tip, request, out):
        if cleaned.result.changed:
            out.hits.append(_hit(segment, cleaned.result))
        else:
            out.segments_unchanged += 1
    out.local_segments = local_segments_holding(ctx, tip, request.keys)
    return out


def _cleaned_segments(
    ctx: TieringContext, tip: TopicIdPartition, request: ErasureRequest, out: PartitionErasure
) -> Iterator[tuple[RemoteLogSegmentMetadata, CleanedSegment]]:
    """Each finished segment of ``tip`` that may hold a key with its cleaned log, in a scratch
    directory alive until the next; a segment whose key filter rules every key out is not read."""
    for segment in _finished(ctx, tip):
        with tempfile.TemporaryDirectory(prefix="tiering-erase-") as work:
            if not may_hold_keys(ctx, segment, request.keys, Path(work)):
                out.segments_filtered_out += 1
                continue
            cleaned = clean_remote_segment(ctx, segment, request.keys, Path(work))
            out.segments_read += 1
            yield segment, cleaned


def _hit(segment: RemoteLogSegmentMetadata, result: CleanerResult, new_id: str | None = None) -> SegmentHit:
    return SegmentHit(str(segment.segment_id), segment.start_offset, segment.end_offset, result.records_removed, new_id)


def erase_partition(
    ctx: TieringContext, tip: TopicIdPartition, request: ErasureRequest, *, attempt: TaskAttempt | None = None
) -> PartitionErasure:
    """Erase the keys from ``tip``'s finished segments under its lease (module docstring)."""
    ctx.storage.require_writable()
    out = PartitionErasure(tip.topic, tip.partition, tip.topic_id)
    run = request.erasure_id
    with held_partition(ctx.metadata, tip, holder=f"erase:{run}", run_id=run, attempt=attempt) as held:
        out.segments_cleaned_up = recover_failed_copies(ctx.metadata, ctx.storage, tip, held.require())
        record = ErasureRecord(
            run, tip.topic, tip.topic_id, tip.partition, request.key_sha256, request.requested_by, _now_ms()
        )
        ctx.metadata.record_erasure(record)
        for segment, cleaned in _cleaned_segments(ctx, tip, request, out):
            if not cleaned.result.changed:
                out.segments_unchanged += 1
                continue
            pending = SegmentErasure(str(segment.segment_id), None, cleaned.result.records_removed)
            done = record.segments
            record = replace(record, segments=(*done, pending), segments_read=out.segments_read)
            ctx.metadata.record_erasure(record)  # before the switch: a kill after it leaves it named
            new_id = _copy_cleaned(ctx, segment, cleaned, held)
            out.hits.append(_hit(segment, cleaned.result, new_id))
            record = replace(record, segments=(*done, replace(pending, new_segment_id=new_id)))
            ctx.metadata.record_erasure(record)
        out.local_segments = local_segments_holding(ctx, tip, request.keys)
        ctx.metadata.record_erasure(
            replace(
                record,
                segments_read=out.segments_read,
                outcome=FINISHED,
                finished_ms=_now_ms(),
                local_segments=out.local_segments,
            )
        )
    log.info(
        "%s: erasure %s read %d segment(s), copied %d again, removed %d record(s)",
        tip.topic_partition,
        run,
        out.segments_read,
        len(out.hits),
        out.records_removed,
    )
    return out


def _copy_cleaned(ctx: TieringContext, segment: RemoteLogSegmentMetadata, cleaned: CleanedSegment, held: Any) -> str:
    """Copy ``segment`` again with its cleaned log, that log's rebuilt indexes and its other
    objects as they were; the new segment id."""
    manifest = ctx.storage.read_manifest(segment_ref(segment))
    if manifest is None:
        raise TieringError(f"segment {segment.segment_id} has no manifest (run tiering verify)")
    indexes = rebuild_indexes(cleaned.log, segment.start_offset)
    files: dict[ObjectKind, Path | bytes] = {
        ObjectKind.LOG: cleaned.log,
        ObjectKind.OFFSET_INDEX: indexes.offset_index,
        ObjectKind.TIME_INDEX: indexes.time_index,
    }
    work = cleaned.log.parent
    for kind in ObjectKind:
        if kind in manifest.objects and kind not in REBUILT_KINDS:
            files[kind] = work / kind.value
            download_object(ctx.storage, segment, kind, work / kind.value)  # as it was, checked
    copied = replace_segment(ctx, segment, files, held, size_bytes=cleaned.log.stat().st_size, what="erase")
    return copied.segment_id


def _now_ms() -> int:
    return int(time.time() * 1000)
