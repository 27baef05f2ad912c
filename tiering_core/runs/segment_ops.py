"""Deleting a remote segment the one way Kafka does it, for copy cleanup, retention and removal.

DELETE_SEGMENT_STARTED is written before any object is touched and DELETE_SEGMENT_FINISHED
only after every object is gone, so a crash anywhere leaves a state the next run finishes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tiering_core.metadata.errors import FencedError
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.storage.errors import RemoteStorageError
from tiering_core.storage.layout import RemoteSegmentRef
from tiering_core.storage.manifest import CopyRecord

if TYPE_CHECKING:
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
