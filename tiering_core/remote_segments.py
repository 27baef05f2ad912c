"""Deleting a remote segment the one way Kafka does it, for copy cleanup, retention and removal.

DELETE_SEGMENT_STARTED is written before any object is touched and DELETE_SEGMENT_FINISHED
only after every object is gone, so a crash anywhere leaves a state the next run finishes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.storage.layout import RemoteSegmentRef

if TYPE_CHECKING:
    from tiering_core.metadata.store import Lease, RemoteLogMetadataStore, RemoteLogSegmentMetadata
    from tiering_core.storage.base import RemoteStorage

log = logging.getLogger(__name__)


def segment_ref(segment: RemoteLogSegmentMetadata) -> RemoteSegmentRef:
    """The object-key identity of a segment: partition, base (start) offset, attempt UUID."""
    return RemoteSegmentRef(segment.topic_id_partition, segment.start_offset, segment.segment_id)


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
