"""Deleting a remote segment the one way Kafka does it, for copy cleanup, retention and removal;
the clean-up of what killed runs left (``recover_failed_copies``, which every driver holding a
partition does first); and what every copy of a segment writes into its manifest of the
segment's metadata.

DELETE_SEGMENT_STARTED is written before any object is touched and DELETE_SEGMENT_FINISHED
only after every object is gone, so a crash anywhere leaves a state the next run finishes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.checkpoints import parse_leader_epoch_checkpoint
from tiering_core.kafka.epoch import EpochEntry
from tiering_core.kafka.files import CHECKPOINT_READ_LIMIT, read_regular
from tiering_core.metadata.errors import FencedError
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.storage.errors import RemoteStorageError
from tiering_core.storage.layout import RemoteSegmentRef
from tiering_core.storage.manifest import CopyRecord
from tiering_core.storage.segment_facts import SegmentFacts

if TYPE_CHECKING:
    from tiering_core.kafka.topic import TopicIdPartition
    from tiering_core.metadata.store import Lease, RemoteLogMetadataStore, RemoteLogSegmentMetadata
    from tiering_core.storage.remote import RemoteStorage

log = logging.getLogger(__name__)


def segment_ref(segment: RemoteLogSegmentMetadata) -> RemoteSegmentRef:
    """The object-key identity of a segment: partition, base (start) offset, attempt UUID; with the
    manifest format and digest its copy recorded, when the segment was listed with its custom
    metadata (what every reader needs: the digest is what the manifest is checked against)."""
    meta = segment.custom_metadata
    if meta is None:
        return RemoteSegmentRef(segment.topic_id_partition, segment.start_offset, segment.segment_id, None)
    record = CopyRecord.decode(meta)
    return RemoteSegmentRef(
        segment.topic_id_partition,
        segment.start_offset,
        segment.segment_id,
        record.format_version,
        record.manifest_sha256,
    )


def segment_facts(segment: RemoteLogSegmentMetadata, epoch_index: Sequence[EpochEntry]) -> SegmentFacts:
    """What a copy of ``segment`` writes into its manifest: the end offset, max timestamp and
    leader epochs of its metadata, and ``epoch_index``, the leader-epoch index the copy uploads
    as its ``leader-epoch-checkpoint`` object. Every copy (copy, rewrite, the index repair) makes
    them here."""
    return SegmentFacts(
        end_offset=segment.end_offset,
        max_timestamp=segment.max_timestamp,
        leader_epochs=tuple(EpochEntry(e, o) for e, o in sorted(segment.leader_epochs.items())),
        epoch_index=tuple(epoch_index),
    )


def stored_epoch_index(source: Path | bytes, key: str) -> tuple[EpochEntry, ...]:
    """The entries of a stored segment's ``leader-epoch-checkpoint`` object ``key`` (``source``:
    its bytes, or the file they were downloaded to): the epoch index a new copy of the segment
    uploads again. A CorruptLogError naming ``key`` when they do not parse."""
    if isinstance(source, bytes):
        data = source
    else:
        data = read_regular(source, CHECKPOINT_READ_LIMIT, "leader-epoch-checkpoint")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as exc:
        raise CorruptLogError(key, exc.start, "leader-epoch-checkpoint is not ASCII text") from None
    return tuple(parse_leader_epoch_checkpoint(text, Path(key)))


def delete_remote_segment(
    store: RemoteLogMetadataStore, storage: RemoteStorage, segment: RemoteLogSegmentMetadata, lease: Lease
) -> None:
    """DELETE_SEGMENT_STARTED -> delete objects (idempotent) -> DELETE_SEGMENT_FINISHED."""
    if segment.state != RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
        store.update_segment_state(segment.segment_id, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, lease)
    storage.delete_segment(segment_ref(segment))
    store.update_segment_state(segment.segment_id, RemoteLogSegmentState.DELETE_SEGMENT_FINISHED, lease)
    log.info(
        "%s: deleted remote segment %s [%d..%d] (%d bytes)",
        segment.topic_id_partition.topic_partition,
        segment.segment_id,
        segment.start_offset,
        segment.end_offset,
        segment.size_bytes,
    )


def abandon_attempt(
    store: RemoteLogMetadataStore,
    storage: RemoteStorage,
    attempt: RemoteLogSegmentMetadata,
    lease: Lease | None,
    what: str = "copy",
) -> None:
    """Clean up a copy attempt that did not complete (an upload or an index repair).

    Under the lease: DELETE_SEGMENT_STARTED, delete objects, DELETE_SEGMENT_FINISHED. Without it
    (``None``, or lost meanwhile) only the objects are deleted: the metadata belongs to the new
    lease holder, whose recovery finishes it. Never raises for storage or fencing trouble, since
    the caller is already failing for a better reason; a segment left in a STARTED state is
    finished by the next copy, retention or rebuild run.
    """
    tp = attempt.topic_id_partition.topic_partition
    if lease is not None:
        try:
            current = store.get_segment(attempt.segment_id)
            if current is not None:
                delete_remote_segment(store, storage, current, lease)
                return
        except FencedError:
            pass
        except RemoteStorageError as exc:
            sid = attempt.segment_id
            log.error("%s: could not delete the objects of %s %s (left for the next run): %s", tp, what, sid, exc)
            return
    try:
        storage.delete_segment(segment_ref(attempt))
    except RemoteStorageError as exc:
        log.error("%s: could not delete the objects of %s %s: %s", tp, what, attempt.segment_id, exc)


def recover_failed_copies(
    store: RemoteLogMetadataStore, storage: RemoteStorage, tip: TopicIdPartition, lease: Lease
) -> int:
    """Finish what killed or failed runs left behind (we hold the lease, so nobody is copying):
    COPY_SEGMENT_STARTED segments are deleted, DELETE_SEGMENT_STARTED ones deleted again."""
    cleaned = 0
    for segment in store.list_segments(tip, custom_metadata=False):
        if segment.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            what = "copy"
        elif segment.state == RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
            what = "deletion"
        else:
            continue
        log.warning(
            "%s: cleaning up %s of segment %s [%d..%d] left unfinished by an earlier run",
            tip.topic_partition,
            what,
            segment.segment_id,
            segment.start_offset,
            segment.end_offset,
        )
        delete_remote_segment(store, storage, segment, lease)
        cleaned += 1
    return cleaned
