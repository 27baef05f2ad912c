"""Orphaned remote data: objects of segments the store deleted, and what killed uploads left behind.

The metadata store is the only judge of what may go. An object is an orphan, and deleted once
older than a positive grace period, only when the store recorded its segment's deletion
(DELETE_SEGMENT_FINISHED while an object survived: a delete that failed part-way), or when it is
part of an unfinished upload (an S3 multipart upload never completed nor aborted, a filesystem
temp file) of no live segment. An object of a segment the store has no record of at all is listed
as ``unrecorded`` and never deleted: its manifest may vouch for a finished segment the store lost
(a store restored from an older backup, a store rebuilt for one topic only), which ``tiering
recover`` adds back; a store that has lost a segment's record cannot tell its data from garbage.
Anything under a partition's prefix that is not this platform's layout is listed, never removed
(it is not ours to judge). The sweep covers every partition found in remote storage under the
configured prefix, besides those the metadata store knows.

An object is live while any segment of its partition in a state other than
DELETE_SEGMENT_FINISHED names it: a copy in flight writes COPY_SEGMENT_STARTED before its first
object, so its objects are never orphans. Deleting is guarded twice more: the store must be the
one bound to the prefix (``engine.binding``), and each partition's segment states are read again
just before its orphans are deleted, so a copy that began after the listing started is not touched.
The partition's own ``partition-state.json`` (``storage.partition_state``) is no orphan: it
is not even listed (a partition's removal deletes it, last).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tiering_core.errors import TieringError
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.storage.layout import ObjectKind, parse_segment_key
from tiering_core.storage.objects import MULTIPART_UPLOAD, TEMP_FILE, IncompleteUpload, RemoteObject
from tiering_core.storage.partition_state import partition_state_key

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.metadata.store import RemoteLogMetadataStore
    from tiering_core.storage.remote import RemoteStorage

log = logging.getLogger(__name__)

#: OrphanObject kinds; a filesystem temp file keeps its ``IncompleteUpload`` kind, ``TEMP_FILE``.
#: Only ``OBJECT`` (of a segment the store deleted, or outside the layout: listed, never deleted)
#: and unfinished uploads are ever deleted; ``UNRECORDED`` objects are listed only.
OBJECT = "object"
INCOMPLETE_UPLOAD = "incomplete-upload"
UNRECORDED = "unrecorded"


@dataclass(frozen=True)
class OrphanObject:
    """Remote data no live segment references. ``key`` is the object, the key of the
    unfinished multipart upload, or the temp file; ``age_ms`` counts from its last change;
    ``kind`` says which (an ``UNRECORDED`` object is never deleted)."""

    key: str
    size: int
    age_ms: int
    deleted: bool
    kind: str = OBJECT

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "size": self.size, "age_ms": self.age_ms, "deleted": self.deleted, "kind": self.kind}


@dataclass(frozen=True)
class _Candidate:
    orphan: OrphanObject
    segment_id: uuid.UUID | None  # the segment its key names, if it follows the layout
    upload: IncompleteUpload | None = None


def find_orphans(
    ctx: TieringContext,
    topic: str | None = None,
    partition: int | None = None,
    *,
    grace_ms: int,
    delete: bool = False,
) -> list[OrphanObject]:
    """Orphaned objects, unfinished multipart uploads and stale temp files of every partition
    in remote storage or in the metadata store (or of ``topic`` / ``partition``), sorted by
    partition and key. With ``delete``, those older than ``grace_ms`` are deleted (and say so).

    ``grace_ms`` must be a positive int: with none, a copy in flight whose metadata is not yet
    visible here, or a part being sent right now, could be deleted under it.
    """
    if isinstance(grace_ms, bool) or not isinstance(grace_ms, int) or grace_ms <= 0:
        raise TieringError(
            f"grace_ms must be a positive number of milliseconds, got {grace_ms!r}: "
            "without a grace period a copy in flight could be deleted"
        )
    store, storage = ctx.metadata, ctx.storage
    if delete:
        storage.require_writable()
    found: list[OrphanObject] = []
    for tip in _partitions(store, storage, topic, partition):
        candidates = _candidates(store, storage, tip)
        if delete:
            candidates = _delete_old(store, storage, tip, candidates, grace_ms)
        found.extend(c.orphan for c in candidates)
    return found


def _partitions(
    store: RemoteLogMetadataStore, storage: RemoteStorage, topic: str | None, partition: int | None
) -> list[TopicIdPartition]:
    known = {TopicIdPartition(r.topic_id, r.topic_partition) for r in store.list_partitions()}
    every = known | set(storage.remote_partitions())
    chosen = [
        tip
        for tip in every
        if (topic is None or tip.topic == topic) and (partition is None or tip.partition == partition)
    ]
    return sorted(chosen, key=lambda t: (t.topic, t.partition, t.topic_id))


def _live_segment_ids(store: RemoteLogMetadataStore, tip: TopicIdPartition) -> set[uuid.UUID]:
    """Segments in any state but DELETE_SEGMENT_FINISHED: their objects are not orphans."""
    return {s.segment_id for s in store.list_segments(tip, custom_metadata=False)}


def _segment_id(key: str, prefix: str, tip: TopicIdPartition) -> uuid.UUID | None:
    parsed = parse_segment_key(key, prefix)
    if parsed is None or parsed[0].topic_id_partition != tip:
        return None
    return parsed[0].segment_id


def _unreferenced_objects(
    storage: RemoteStorage, tip: TopicIdPartition, live: set[uuid.UUID]
) -> list[tuple[RemoteObject, uuid.UUID | None]]:
    """Objects under the partition's prefix that no live segment names, with the segment their
    key names (None: not a layout key); never the partition's state object."""
    found = []
    state_key = partition_state_key(tip, storage.prefix)
    for obj in storage.list_objects(tip):
        if obj.key == state_key:
            continue
        segment_id = _segment_id(obj.key, storage.prefix, tip)
        if segment_id is None or segment_id not in live:
            found.append((obj, segment_id))
    return found


def unreferenced_object_keys(store: RemoteLogMetadataStore, storage: RemoteStorage, tip: TopicIdPartition) -> list[str]:
    """Layout keys under the partition's prefix that no live segment names, whatever their age:
    what a partition removal, holding the lease after deleting every segment, sweeps."""
    live = _live_segment_ids(store, tip)
    return [obj.key for obj, segment_id in _unreferenced_objects(storage, tip, live) if segment_id is not None]


def delete_unreferenced_keys(storage: RemoteStorage, keys: list[str]) -> None:
    """Delete orphaned objects, manifests first: a manifest never outlives the objects it
    lists, even an orphaned one."""
    manifests = [k for k in keys if k.endswith(f".{ObjectKind.MANIFEST.value}")]
    if manifests:
        storage.delete_keys(manifests)
    rest = [k for k in keys if not k.endswith(f".{ObjectKind.MANIFEST.value}")]
    if rest:
        storage.delete_keys(rest)


def _candidates(store: RemoteLogMetadataStore, storage: RemoteStorage, tip: TopicIdPartition) -> list[_Candidate]:
    """What no live segment named when read, with ages as of the end of the listing; objects of
    segments the store has no record of are ``UNRECORDED``."""
    live = _live_segment_ids(store, tip)
    objects = _unreferenced_objects(storage, tip, live)
    uploads = storage.incomplete_uploads(tip)
    recorded = store.segment_states([i for _, i in objects if i is not None])
    now = datetime.now(UTC)
    found = []
    for obj, segment_id in objects:
        age = int((now - obj.last_modified).total_seconds() * 1000)
        kind = UNRECORDED if segment_id is not None and segment_id not in recorded else OBJECT
        found.append(_Candidate(OrphanObject(obj.key, obj.size, age, False, kind), segment_id))
    for upload in uploads:
        segment_id = _segment_id(upload.target, storage.prefix, tip)
        if segment_id is None or segment_id not in live:
            kind = INCOMPLETE_UPLOAD if upload.kind == MULTIPART_UPLOAD else TEMP_FILE
            orphan = OrphanObject(upload.key, upload.size, upload.age_ms(now), False, kind)
            found.append(_Candidate(orphan, segment_id, upload))
    return sorted(found, key=lambda c: (c.orphan.key, c.orphan.kind))


def _delete_old(
    store: RemoteLogMetadataStore,
    storage: RemoteStorage,
    tip: TopicIdPartition,
    candidates: list[_Candidate],
    grace_ms: int,
) -> list[_Candidate]:
    """Delete the candidates older than the grace period that are still orphans by a fresh
    read of the partition's live segments; returns the orphans, those deleted marked so."""
    if not any(c.orphan.age_ms >= grace_ms for c in candidates):
        return candidates
    live = _live_segment_ids(store, tip)  # read again: a copy may have started since the listing
    orphans = [c for c in candidates if c.segment_id is None or c.segment_id not in live]
    states = store.segment_states([c.segment_id for c in orphans if c.segment_id is not None and c.upload is None])
    doomed = [
        c
        for c in orphans
        if c.orphan.age_ms >= grace_ms
        and c.segment_id is not None
        and (c.upload is not None or states.get(c.segment_id) == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED)
    ]
    delete_unreferenced_keys(storage, [c.orphan.key for c in doomed if c.upload is None])
    for c in doomed:
        if c.upload is not None:
            storage.remove_incomplete_upload(c.upload)
    if doomed:
        log.info("%s: deleted %d orphaned object(s) and unfinished upload(s)", tip, len(doomed))
    gone = {id(c) for c in doomed}
    return [replace(c, orphan=replace(c.orphan, deleted=True)) if id(c) in gone else c for c in orphans]
