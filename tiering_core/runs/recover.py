"""``tiering recover``: rebuild the metadata store from the bucket (docs/operations.md, "Backup and
recovery").

Every finished segment's manifest holds what the store recorded of it (``SegmentFacts``: offsets,
max timestamp, leader epochs and the leader-epoch index its copy uploaded) beside its objects'
sizes, checksums, format and key id; each partition's ``partition-state.json`` holds its remote
log start, the DeleteRecords applied through the platform and its tiering gaps. Recovery lists
each partition once and reads one object per segment, its manifest, whose SHA-256 becomes the
digest the store vouches for from then on. A segment copied before manifests held its facts is
recovered from its objects (the log's batches give its offsets, epochs and max timestamp; its
leader-epoch checkpoint, the index) and named.

Segments are recorded in the order they were copied, as their copies recorded them (the lineage
merged segment by segment), so the store rebuilt is the one lost; of two copies of the same offsets
(a rewrite cut short) the later one serves and the earlier is recorded as being deleted. Each
partition's segments land under its lease in transactions of ``SEGMENTS_PER_TRANSACTION``; a
segment already recorded is skipped, so a rerun after a kill picks up where the first stopped.
While a recovery is unfinished the store writes nothing remote (``engine.binding``); at its end the
prefix is bound to the store.
"""

from __future__ import annotations

import logging
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiering_core.config.metadata import safe_url
from tiering_core.engine.binding import bind
from tiering_core.engine.executor import InProcessExecutor
from tiering_core.engine.lease import held_partition
from tiering_core.errors import CorruptLogError, StoreBindingError, TieringError
from tiering_core.kafka.batch import scan_log
from tiering_core.kafka.checkpoints import parse_leader_epoch_checkpoint
from tiering_core.kafka.epoch import EpochEntry
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.metadata.values import RecoveredSegment, RemoteLogSegmentMetadata
from tiering_core.storage.errors import RemoteStorageError
from tiering_core.storage.identity import read_identity
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef, parse_segment_key
from tiering_core.storage.manifest import CopyRecord, SegmentManifest

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.storage.partition_state import PartitionState
    from tiering_core.storage.remote import RemoteStorage

log = logging.getLogger(__name__)

#: Segments recorded per store transaction (a kill loses at most one transaction's work).
SEGMENTS_PER_TRANSACTION = 1000
#: Manifests read at a time.
READ_THREADS = 16
#: The largest leader-epoch checkpoint object read for a segment recovered from its objects.
MAX_CHECKPOINT_BYTES = 1 << 20


@dataclass
class PartitionRecovery:
    """What recovery found of one partition, and what it recorded (or would, in a dry run)."""

    topic: str
    partition: int
    topic_id: str
    segments: int = 0
    recorded: int = 0
    already_recorded: int = 0
    superseded: int = 0
    start_offset: int | None = None
    end_offset: int | None = None
    #: Segments whose manifest predates the facts: recovered from their objects.
    from_objects: list[str] = field(default_factory=list)
    #: Manifests that could not be read or recovered, each with why (their segments are not recorded).
    unreadable: list[str] = field(default_factory=list)
    remote_log_start_offset: int | None = None
    delete_records_offset: int | None = None
    gaps: list[list[int]] = field(default_factory=list)
    #: Whether the partition's ``partition-state.json`` was found (else the log start and gaps are
    #: what its segments show).
    state_object: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "topic_id": self.topic_id,
            "segments": self.segments,
            "recorded": self.recorded,
            "already_recorded": self.already_recorded,
            "superseded": self.superseded,
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "from_objects": list(self.from_objects),
            "unreadable": list(self.unreadable),
            "remote_log_start_offset": self.remote_log_start_offset,
            "delete_records_offset": self.delete_records_offset,
            "gaps": [list(g) for g in self.gaps],
            "state_object": self.state_object,
        }


@dataclass
class RecoveryResult:
    dry_run: bool
    store_id: str
    #: The store the prefix was bound to before (None: unbound); after a recovery, this store.
    previous_store_id: str | None
    partitions: list[PartitionRecovery] = field(default_factory=list)
    bound: bool = False
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return any(p.unreadable for p in self.partitions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "store_id": self.store_id,
            "previous_store_id": self.previous_store_id,
            "bound": self.bound,
            "seconds": round(self.seconds, 3),
            "partitions": [p.to_dict() for p in self.partitions],
        }


@dataclass(frozen=True)
class _Read:
    """One manifest read: the segment it describes, or why it could not be recovered."""

    ref: RemoteSegmentRef
    segment: RecoveredSegment | None
    created_at_ms: int = 0
    from_objects: bool = False
    problem: str | None = None


def recover_store(
    ctx: TieringContext,
    *,
    topic: str | None = None,
    dry_run: bool = False,
    progress: Callable[[str], None] | None = None,
) -> RecoveryResult:
    """Rebuild the store from the bucket (module docstring): into an empty store, one whose
    recovery was cut short, or the store bound to the prefix (which gains the segments it has no
    record of: after restoring an older backup). ``topic`` limits it to one topic's partitions."""
    started = time.monotonic()
    store, storage = ctx.metadata, ctx.storage
    me = store.store_identity()
    found = read_identity(storage)
    previous = found.store_id if found is not None else None
    if not me.recovering and store.holds_segments() and previous != me.store_id:
        raise StoreBindingError(
            f"metadata store {safe_url(store.url)} already records segments and is not the store "
            f"{storage.describe(storage.prefix)} is bound to ({previous or 'none'}): recover into an empty store "
            "(a new metadata.url), or into the store bound to the prefix"
        )
    result = RecoveryResult(dry_run, me.store_id, previous)
    if not dry_run:
        store.begin_recovery()
    tips = [t for t in storage.remote_partitions() if topic is None or t.topic == topic]
    run = uuid.uuid4().hex
    segments_done = 0
    for n, tip in enumerate(tips, 1):
        part = _recover_partition(ctx, tip, run, dry_run)
        result.partitions.append(part)
        segments_done += part.segments
        if progress is not None:
            progress(f"recover: {n}/{len(tips)} partition(s), {segments_done} segment(s) read")
    if not dry_run:
        if not result.failed:
            bind(store, storage)
            result.bound = True
        store.end_recovery()
    result.seconds = time.monotonic() - started
    return result


def _recover_partition(ctx: TieringContext, tip: TopicIdPartition, run: str, dry_run: bool) -> PartitionRecovery:
    store, storage = ctx.metadata, ctx.storage
    part = PartitionRecovery(tip.topic, tip.partition, tip.topic_id)
    refs = _finished_refs(storage, tip)
    part.segments = len(refs)
    known = store.segment_states([r.segment_id for r in refs])
    part.already_recorded = len(known)
    wanted = [r for r in refs if r.segment_id not in known]
    outcomes = InProcessExecutor(storage, READ_THREADS).run(wanted, _read_segment, describe=str)
    reads = [o.result for o in outcomes if o.result is not None]  # in this process a task's error propagates
    part.unreadable = [f"{r.ref}: {r.problem}" for r in reads if r.problem is not None]
    part.from_objects = [str(r.ref) for r in reads if r.from_objects and r.segment is not None]
    state = storage.read_partition_state(tip)
    part.state_object = state is not None
    ordered = _in_copy_order([r for r in reads if r.segment is not None], state)
    part.superseded = sum(1 for s in ordered if s.superseded)
    if ordered:
        part.start_offset = min(s.metadata.start_offset for s in ordered)
        part.end_offset = max(s.metadata.end_offset for s in ordered)
    _partition_figures(part, ordered, state)
    if dry_run:
        part.recorded = len(ordered)
        return part
    store.register_partition(tip)
    with held_partition(store, tip, holder=f"recover:{run}", run_id=run) as held:
        if part.remote_log_start_offset is not None:  # first: the first segment recorded sets an unset one
            store.set_remote_log_start_offset(tip, part.remote_log_start_offset, held.require())
        for i in range(0, len(ordered), SEGMENTS_PER_TRANSACTION):
            part.recorded += store.recover_segments(ordered[i : i + SEGMENTS_PER_TRANSACTION], held.require())
        if part.delete_records_offset is not None:
            store.record_delete_records(tip, part.delete_records_offset, held.require())
        for start, end in part.gaps:
            store.record_gap(tip, start, end, held.require())
    if part.unreadable:
        log.error("%s: %d segment(s) not recovered: %s", tip, len(part.unreadable), "; ".join(part.unreadable))
    return part


def _finished_refs(storage: RemoteStorage, tip: TopicIdPartition) -> list[RemoteSegmentRef]:
    """The segments of the partition that have a manifest (a finished copy), from one listing."""
    refs = []
    for obj in storage.list_objects(tip):
        parsed = parse_segment_key(obj.key, storage.prefix)
        if parsed is not None and parsed[1] is ObjectKind.MANIFEST and parsed[0].topic_id_partition == tip:
            refs.append(parsed[0])
    return refs


def _read_segment(storage: RemoteStorage, ref: RemoteSegmentRef) -> _Read:
    """The segment a manifest describes: one GET, or, for a manifest without the facts, what its
    objects say. Never raises for what the bucket holds: a problem is named instead."""
    try:
        read = storage.read_manifest_digested(ref)
        if read is None:
            return _Read(ref, None, problem="its manifest is gone (deleted since the listing)")
        manifest, digest = read
        log_entry = manifest.objects.get(ObjectKind.LOG)
        if log_entry is None:
            return _Read(ref, None, problem="its manifest lists no log object")
        record = CopyRecord.of_manifest(manifest)
        custom = {**record.to_custom_metadata(), "manifest_sha256": digest}
        trusted = RemoteSegmentRef(
            ref.topic_id_partition, ref.base_offset, ref.segment_id, manifest.format_version, digest
        )
        facts = manifest.segment
        from_objects = facts is None
        if facts is not None:
            end, max_ts = facts.end_offset, facts.max_timestamp
            epochs = {e.epoch: e.start_offset for e in facts.leader_epochs}
            lineage = tuple(facts.epoch_index)
        else:
            end, max_ts, epochs, lineage = _facts_from_objects(storage, trusted, manifest)
        metadata = RemoteLogSegmentMetadata(
            segment_id=ref.segment_id,
            topic_id_partition=ref.topic_id_partition,
            start_offset=ref.base_offset,
            end_offset=end,
            max_timestamp=max_ts,
            leader_epochs=epochs,
            size_bytes=log_entry.size,
            state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
            writer_token=0,
            event_time=manifest.created_at_ms,
            custom_metadata=custom,
        )
        return _Read(ref, RecoveredSegment(metadata, lineage), manifest.created_at_ms, from_objects)
    except (RemoteStorageError, CorruptLogError, TieringError) as exc:
        return _Read(ref, None, problem=str(exc))


def _facts_from_objects(
    storage: RemoteStorage, ref: RemoteSegmentRef, manifest: SegmentManifest
) -> tuple[int, int, dict[int, int], tuple[EpochEntry, ...]]:
    """End offset, max timestamp, leader epochs and epoch index of a segment whose manifest
    predates the facts: its log's batches (streamed to a scratch file, CRCs checked) and its
    leader-epoch checkpoint (absent: the epochs of its batches)."""
    with tempfile.TemporaryDirectory(prefix="tiering-recover-") as scratch:
        path = Path(scratch) / "segment.log"
        with storage.open_stream(ref, ObjectKind.LOG) as source, path.open("wb") as out:
            while chunk := source.read(1 << 20):
                out.write(chunk)
        scan = scan_log(path, verify_crc=True)
    if scan.error is not None:
        raise CorruptLogError(scan.error.path, scan.error.position, f"{ref}: {scan.error.reason}")
    if not scan.headers:
        raise TieringError(f"{ref}: its log holds no record batch")
    epochs: dict[int, int] = {}
    for header in scan.headers:
        if header.partition_leader_epoch >= 0 and header.partition_leader_epoch not in epochs:
            if not epochs or header.partition_leader_epoch > max(epochs):
                epochs[header.partition_leader_epoch] = header.base_offset
    if not epochs:
        raise TieringError(f"{ref}: no batch of its log carries a leader epoch")
    lineage: tuple[EpochEntry, ...] = tuple(EpochEntry(e, o) for e, o in sorted(epochs.items()))
    if ObjectKind.LEADER_EPOCH_CHECKPOINT in manifest.objects:
        data = storage.fetch(ref, ObjectKind.LEADER_EPOCH_CHECKPOINT, 0, MAX_CHECKPOINT_BYTES - 1)
        lineage = tuple(parse_leader_epoch_checkpoint(data.decode(), Path(str(ref))))
    end = scan.headers[-1].last_offset
    return end, max(h.max_timestamp for h in scan.headers), epochs, lineage


def _same_copy(meta: RemoteLogSegmentMetadata) -> tuple[int, int, tuple[tuple[int, int], ...]]:
    """What two copies of one segment share: its offsets and leader epochs. Two histories of the
    same offsets (a divergent leader's segment and the new leader's after an unclean election)
    never share their epochs, so each is recovered as the store had it."""
    return meta.start_offset, meta.end_offset, tuple(sorted(meta.leader_epochs.items()))


def _in_copy_order(reads: list[_Read], state: PartitionState | None) -> list[RecoveredSegment]:
    """The segments in the order they were copied (their manifests' creation, then id); of copies
    of the same segment (a rewrite cut short) all but the latest are superseded, and so is a
    segment wholly below the partition's global log start (retention or a DeleteRecords had begun
    deleting it)."""
    reads = sorted(reads, key=lambda r: (r.created_at_ms, str(r.ref.segment_id)))
    latest: dict[tuple[int, int, tuple[tuple[int, int], ...]], uuid.UUID] = {}
    for r in reads:
        assert r.segment is not None
        latest[_same_copy(r.segment.metadata)] = r.segment.metadata.segment_id
    log_start = None
    if state is not None:
        starts = [o for o in (state.remote_log_start_offset, state.delete_records_offset) if o is not None]
        log_start = max(starts, default=None)
    ordered = []
    for r in reads:
        assert r.segment is not None
        meta = r.segment.metadata
        superseded = latest[_same_copy(meta)] != meta.segment_id or (
            log_start is not None and meta.end_offset < log_start
        )
        ordered.append(RecoveredSegment(meta, r.segment.lineage, superseded))
    return ordered


def _partition_figures(part: PartitionRecovery, ordered: list[RecoveredSegment], state: PartitionState | None) -> None:
    """The remote log start, DeleteRecords and gaps to record: the state object's, else the gaps
    its serving segments leave between them (what a copy records when the broker deleted offsets
    before they were tiered)."""
    if state is not None:
        part.remote_log_start_offset = state.remote_log_start_offset
        part.delete_records_offset = state.delete_records_offset
        part.gaps = [[start, end] for start, end in state.gaps]
        return
    serving = sorted((s.metadata for s in ordered if not s.superseded), key=lambda m: m.start_offset)
    reached: int | None = None
    for meta in serving:
        if reached is not None and meta.start_offset > reached + 1:
            part.gaps.append([reached + 1, meta.start_offset - 1])
        reached = meta.end_offset if reached is None else max(reached, meta.end_offset)
