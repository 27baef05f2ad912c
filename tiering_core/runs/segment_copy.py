"""One segment's copy, in the steps a run and the Spark parallel upload share (docs/kafka-rules.md
sections 5 and 10): ``prepare_segment_upload`` (driver: verify and gather the files),
``upload_segment`` (anywhere, e.g. a Spark executor: objects, manifest last), ``finish_segment``
or ``abandon_upload`` (driver, under the lease); and the remote log start a partition's first
copies left unset (``repair_remote_log_start``).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tiering_core.engine.partition_state import publish_partition_state
from tiering_core.engine.segment_ops import abandon_attempt, segment_facts
from tiering_core.errors import CorruptLogError, TieringError
from tiering_core.kafka.batch import scan_log
from tiering_core.kafka.checkpoints import encode_leader_epoch_checkpoint
from tiering_core.kafka.epoch import EpochEntry
from tiering_core.kafka.files import INDEX_READ_LIMIT, read_regular
from tiering_core.kafka.index import (
    OFFSET_ENTRY,
    TIME_ENTRY,
    TXN_ENTRY,
    encode_offset_index,
    encode_time_index,
    encode_txn_index,
    parse_offset_index,
    parse_time_index,
    parse_txn_index,
)
from tiering_core.kafka.index_rebuild import rebuild_indexes
from tiering_core.kafka.producer_snapshot import encode_producer_snapshot, read_producer_snapshot
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.metadata.store import Lease, RemoteLogSegmentMetadata
from tiering_core.storage.key_filter import with_key_filter
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef
from tiering_core.storage.manifest import CopyRecord
from tiering_core.tier.view import CopyCandidate, TierView

if TYPE_CHECKING:
    from tiering_core.metadata.store import RemoteLogMetadataStore
    from tiering_core.storage.manifest import SegmentManifest
    from tiering_core.storage.remote import RemoteStorage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SegmentUpload:
    """One segment ready to upload: its STARTED metadata and the files of every object kind.

    Files are paths on the broker's disk (streamed, never loaded whole) or small generated
    bytes (rebuilt indexes, the leader-epoch index). Plain data, so it pickles to executors.
    """

    metadata: RemoteLogSegmentMetadata
    files: dict[ObjectKind, Path | bytes]
    leader_epoch_index: tuple[EpochEntry, ...] = ()

    @property
    def ref(self) -> RemoteSegmentRef:
        return RemoteSegmentRef(self.metadata.topic_id_partition, self.metadata.start_offset, self.metadata.segment_id)


# --- preparing one segment -------------------------------------------------------------------


def validated_index(kind: ObjectKind, path: Path, base_offset: int, end_offset: int, log_size: int) -> bytes:
    """A closed segment's index file as uploaded: its entries, validated and encoded again.

    Never the file's bytes as such: only what parses as an index of this segment (entries
    inside its offsets and its ``.log``) is uploaded, so whatever else a file holds (after a
    zero entry, say) stays local. The file is read as every broker file is (regular, not through
    a symbolic link, bounded). Anything else is a ``CorruptLogError`` naming the file and byte.
    """
    data = read_regular(path, INDEX_READ_LIMIT, kind.value)
    if kind == ObjectKind.OFFSET_INDEX:
        offsets = parse_offset_index(data, base_offset, path)
        for i, o in enumerate(offsets):
            if o.offset > end_offset or o.position >= log_size:
                raise CorruptLogError(path, i * OFFSET_ENTRY.size, f"entry {o} lies outside the segment")
        return encode_offset_index(offsets, base_offset)
    if kind == ObjectKind.TIME_INDEX:
        times = parse_time_index(data, base_offset, path)
        for i, t in enumerate(times):
            if t.offset > end_offset:
                raise CorruptLogError(path, i * TIME_ENTRY.size, f"entry {t} lies outside the segment")
        return encode_time_index(times, base_offset)
    aborted = parse_txn_index(data, path)
    for i, a in enumerate(aborted):
        if not base_offset <= a.last_offset <= end_offset:
            raise CorruptLogError(path, i * TXN_ENTRY.size, f"entry {a} has its marker outside the segment")
    return encode_txn_index(aborted)


def verified_log(view: TierView, candidate: CopyCandidate) -> int:
    """The candidate's ``.log`` checked before anything of it is copied: still eligible, every
    batch passing its CRC, none beyond the next segment's base; returns its largest timestamp."""
    segment = candidate.segment
    lso = view.require_lso()
    if candidate.end_offset >= lso or segment.base_offset == view.log.active_segment.base_offset:
        raise TieringError(f"{view.log.topic_partition}: segment {segment.base_offset} is not eligible for copy")
    scan = scan_log(segment.log_path, verify_crc=True)
    if scan.error is not None:
        raise CorruptLogError(
            scan.error.path, scan.error.position, f"segment {segment.base_offset} not copied: {scan.error.reason}"
        )
    if not scan.headers:
        raise CorruptLogError(segment.log_path, 0, f"segment {segment.base_offset} has no record batches")
    last = scan.headers[-1]
    if last.last_offset > candidate.end_offset:
        raise CorruptLogError(
            segment.log_path,
            last.position,
            f"batch ends at offset {last.last_offset}, beyond the next segment's base {candidate.next_base_offset}",
        )
    return max(h.max_timestamp for h in scan.headers)


def index_files(view: TierView, candidate: CopyCandidate, index_interval_bytes: int) -> dict[ObjectKind, Path | bytes]:
    """The segment's offset, time and transaction indexes: the broker's files where they are
    valid, else rebuilt from the ``.log`` (once for all of them); no transaction index when the
    segment has no aborted transaction."""
    segment = candidate.segment
    files: dict[ObjectKind, Path | bytes] = {}
    rebuilt = None
    for kind, path in (
        (ObjectKind.OFFSET_INDEX, segment.index_path),
        (ObjectKind.TIME_INDEX, segment.time_index_path),
        (ObjectKind.TRANSACTION_INDEX, segment.txn_index_path),
    ):
        if path is None:  # no .txnindex: no aborted transaction in this segment
            continue
        try:
            files[kind] = validated_index(kind, path, segment.base_offset, candidate.end_offset, segment.size_bytes)
            continue
        except FileNotFoundError:
            if kind == ObjectKind.TRANSACTION_INDEX:
                continue
            problem = f"lacks its {kind.value}"
        except CorruptLogError as exc:
            problem = f"has an unusable {kind.value} ({exc})"
        if rebuilt is None:
            log.warning(
                "%s: segment %d %s; rebuilding from the log", view.log.topic_partition, segment.base_offset, problem
            )
            rebuilt = rebuild_indexes(
                segment.log_path, segment.base_offset, index_interval_bytes=index_interval_bytes, is_active=False
            )
        files[kind] = {
            ObjectKind.OFFSET_INDEX: rebuilt.offset_index,
            ObjectKind.TIME_INDEX: rebuilt.time_index,
            ObjectKind.TRANSACTION_INDEX: rebuilt.txn_index,
        }[kind]
    if files.get(ObjectKind.TRANSACTION_INDEX) == b"":
        del files[ObjectKind.TRANSACTION_INDEX]
    return files


def producer_snapshot_bytes(view: TierView, candidate: CopyCandidate) -> bytes:
    """The producer snapshot at the next segment's base, re-encoded; rebuilt from the log when the
    broker's is missing or unusable."""
    snapshot = view.log.producer_snapshot_path(candidate.next_base_offset)
    if snapshot is not None:
        try:
            return encode_producer_snapshot(read_producer_snapshot(snapshot))
        except (CorruptLogError, FileNotFoundError) as exc:
            log.warning("%s: unusable producer snapshot (%s)", view.log.topic_partition, exc)
    # The broker writes one at every roll, but may have lost it (an unclean shutdown, a
    # log dir copied by hand). An empty one would silently drop producer and transaction
    # state for restores and replicas: rebuild it by replaying the batches instead.
    log.warning(
        "%s: no producer snapshot at %d for segment %d; rebuilding it from the log",
        view.log.topic_partition,
        candidate.next_base_offset,
        candidate.segment.base_offset,
    )
    return encode_producer_snapshot(view.log.producer_state_at(candidate.next_base_offset))


def prepare_segment_upload(
    view: TierView, candidate: CopyCandidate, *, run_token: int, index_interval_bytes: int = 4096
) -> SegmentUpload:
    """Verify a candidate segment and gather its objects; reads only the broker's files.

    Batches failing their CRC stop the copy (the segment is named); missing index files are
    rebuilt from the ``.log``; the segment's leader epochs are the broker's epoch cache's in its
    range (section 3), the leader-epoch index is the recorded lineage truncated at nextBase (so the
    lineage keeps the epochs the broker's cache has dropped).
    """
    segment = candidate.segment
    max_timestamp = verified_log(view, candidate)
    files: dict[ObjectKind, Path | bytes] = {ObjectKind.LOG: segment.log_path}
    files.update(index_files(view, candidate, index_interval_bytes))
    files[ObjectKind.PRODUCER_SNAPSHOT] = producer_snapshot_bytes(view, candidate)
    epoch_index = view.full_lineage.leader_epoch_index_for_segment(candidate.next_base_offset)
    files[ObjectKind.LEADER_EPOCH_CHECKPOINT] = encode_leader_epoch_checkpoint(list(epoch_index.entries))
    # Kafka's epochEntriesInRange of the broker's cache as it is: truncated from the start at its
    # log start, so a segment holding that log start has its epochs from there on.
    leader_epochs = view.broker_cache.segment_leader_epochs(segment.base_offset, candidate.next_base_offset)
    if not leader_epochs:
        raise TieringError(
            f"{view.log.topic_partition}: no leader epoch covers segment {segment.base_offset} "
            "(leader-epoch-checkpoint is empty or starts after it)"
        )
    metadata = RemoteLogSegmentMetadata(
        segment_id=uuid.uuid4(),
        topic_id_partition=view.tip,
        start_offset=segment.base_offset,
        end_offset=candidate.end_offset,
        max_timestamp=max_timestamp,
        leader_epochs=dict(leader_epochs),
        size_bytes=segment.size_bytes,
        state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
        writer_token=run_token,
        event_time=int(time.time() * 1000),
        custom_metadata={},
    )
    return SegmentUpload(metadata=metadata, files=files, leader_epoch_index=tuple(epoch_index.entries))


def upload_segment(storage: RemoteStorage, upload: SegmentUpload) -> SegmentManifest:
    """Upload one segment's objects, manifest last, the manifest with the segment's metadata and
    its leader-epoch index, and the key filter of its log beside them. Safe to run on any worker."""
    facts = segment_facts(upload.metadata, upload.leader_epoch_index)
    return storage.copy_segment(upload.ref, with_key_filter(upload.files), facts=facts)


def finish_segment(
    store: RemoteLogMetadataStore, upload: SegmentUpload, manifest: SegmentManifest, lease: Lease
) -> RemoteLogSegmentMetadata:
    """COPY_SEGMENT_FINISHED (only after the manifest), in one transaction with what the copy
    teaches the platform: the segment's leader-epoch index joins the recorded lineage, and the
    first copy of a partition sets its remote log start offset. Done apart, a crash between the
    steps would leave a finished segment outside the lineage, which retention would delete."""
    return store.finish_copied_segment(
        upload.metadata.segment_id,
        lease,
        custom_metadata=CopyRecord.of_manifest(manifest).to_custom_metadata(),
        lineage=list(upload.leader_epoch_index),
    )


def abandon_upload(
    store: RemoteLogMetadataStore, storage: RemoteStorage, upload: SegmentUpload, lease: Lease | None
) -> None:
    """Clean up a failed copy (``remote_segments.abandon_attempt``); never raises."""
    abandon_attempt(store, storage, upload.metadata, lease, "failed copy")


def repair_remote_log_start(
    store: RemoteLogMetadataStore, storage: RemoteStorage, tip: TopicIdPartition, lease: Lease
) -> None:
    """A partition with finished segments but no remote log start offset (written by a release
    that recorded them apart) gets the lowest offset a finished segment's epochs cover, never a
    later one; its state object is published then (``engine.partition_state``)."""
    if store.get_remote_log_start_offset(tip) is not None:
        return
    finished = store.finished_segments(tip, custom_metadata=False)
    if finished:
        start = min(s.first_epoch_offset for s in finished)
        store.set_remote_log_start_offset(tip, start, lease)
        log.warning("%s: remote log start offset was unset; set to %d, the first finished segment", tip, start)
        publish_partition_state(store, storage, tip)
