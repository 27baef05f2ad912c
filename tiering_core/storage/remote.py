"""Segments over remote objects (KIP-405's remote storage manager).

Copying a segment (objects first, ``manifest.json`` last, cleanup on failure), ranged fetches,
verification and idempotent deletes are implemented once here, over the object primitives of
``objects.ObjectStore`` that each backend provides.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.storage.checksum import crc32c, crc_hex
from tiering_core.storage.errors import (
    InvalidRangeError,
    ManifestError,
    RemoteObjectNotFoundError,
    RemoteStorageError,
)
from tiering_core.storage.layout import (
    ObjectKind,
    RemoteSegmentRef,
    parse_partition_prefix,
    partition_prefix,
)
from tiering_core.storage.manifest import ObjectEntry, SegmentManifest
from tiering_core.storage.objects import IncompleteUpload, ObjectStore, Progress, RemoteObject
from tiering_core.storage.quota import throttled

log = logging.getLogger(__name__)
#: Upload order: the log first, the manifest (not listed here) always last.
UPLOAD_ORDER = [k for k in ObjectKind if k != ObjectKind.MANIFEST]
VERIFY_CHUNK = 1 << 20


class RemoteStorage(ObjectStore):
    """Copy, fetch and delete segments' objects; idempotent and checksummed."""

    def copy_segment(
        self, ref: RemoteSegmentRef, files: Mapping[ObjectKind, Path | bytes], *, progress: Progress | None = None
    ) -> SegmentManifest:
        """Upload every object of a segment, then its manifest; on failure nothing stays behind.

        If an earlier upload of the same segment finished, its manifest is deleted first (then
        the kinds this upload does not carry), so a crash part-way through never leaves a
        manifest that describes objects this upload overwrote. The check is a HEAD, not a
        blind delete, so a fresh segment leaves no delete markers in a versioned bucket.
        """
        if ObjectKind.LOG not in files:
            raise RemoteStorageError(f"{ref}: a segment needs its log object")
        if ObjectKind.MANIFEST in files:
            raise RemoteStorageError(f"{ref}: the manifest is written by copy_segment, not given")
        for kind, source in files.items():
            if not isinstance(source, bytes) and not Path(source).is_file():
                raise RemoteStorageError(f"{ref}: {kind.value} source {source} is not a readable file")
        manifest_key = ref.key(ObjectKind.MANIFEST, self.prefix)
        if self.object_size(manifest_key) is not None:
            self.delete_keys([manifest_key])  # first, and alone: no manifest outlives its objects
            self.delete_keys([ref.key(kind, self.prefix) for kind in UPLOAD_ORDER if kind not in files])
        entries: dict[ObjectKind, ObjectEntry] = {}
        uploaded: list[str] = [manifest_key]
        try:
            for kind in UPLOAD_ORDER:
                if kind not in files:
                    continue
                key = ref.key(kind, self.prefix)
                uploaded.append(key)
                size, crc = self._put_segment_object(key, files[kind], progress)
                entries[kind] = ObjectEntry(kind, key, size, crc_hex(crc))
            manifest = SegmentManifest.for_ref(ref, entries, int(time.time() * 1000))
            self._put_segment_object(manifest_key, manifest.to_json(), None)
            self._sync_segment(uploaded)
            return manifest
        except BaseException as exc:
            try:
                self.discard_keys(uploaded)
            except Exception as cleanup:  # the caller's recovery deletes them later
                log.error("%s: cleanup after failed upload also failed: %s", ref, cleanup)
            if isinstance(exc, RemoteStorageError):
                raise
            if isinstance(exc, Exception):
                raise RemoteStorageError(f"{ref}: upload failed: {type(exc).__name__}: {exc}") from exc
            raise

    def fetch(self, ref: RemoteSegmentRef, kind: ObjectKind, start: int = 0, end: int | None = None) -> bytes:
        """Bytes [start, end] (inclusive, like Kafka's fetchLogSegment) of one object; an ``end``
        past the object reads to its end. The bytes are taken from the fetch quota."""
        key = ref.key(kind, self.prefix)
        if start < 0 or (end is not None and end < start):
            raise InvalidRangeError(f"{self.describe(key)}: invalid range [{start}, {end}]")
        data = self.get_range(key, start, end)
        self.quotas.take_fetch(len(data))
        return data

    def open_stream(self, ref: RemoteSegmentRef, kind: ObjectKind, start: int = 0) -> BinaryIO:
        """A buffered stream over one object from ``start``, for reads too large to hold; its
        reads are taken from the fetch quota."""
        key = ref.key(kind, self.prefix)
        if start < 0:
            raise InvalidRangeError(f"{self.describe(key)}: invalid start {start}")
        return throttled(self.open_object(key, start), self.quotas.fetch)

    def read_manifest(self, ref: RemoteSegmentRef) -> SegmentManifest | None:
        """The segment's manifest, None if it has none; one that describes another segment, or
        keys other than this segment's, is a ManifestError."""
        key = ref.key(ObjectKind.MANIFEST, self.prefix)
        try:
            data = self.get_range(key, 0, None)
        except RemoteObjectNotFoundError:
            return None
        manifest = SegmentManifest.from_json(data)
        if manifest.ref() != ref:
            raise ManifestError(f"{self.describe(key)}: manifest describes {manifest.ref()}, not {ref}")
        for kind, entry in manifest.objects.items():
            if entry.key != ref.key(kind, self.prefix):
                raise ManifestError(f"{self.describe(key)}: manifest lists {entry.key!r} for {kind.value}")
        return manifest

    def verify_segment(self, ref: RemoteSegmentRef) -> list[str]:
        """Problems of a stored segment against its manifest (empty = every object intact).
        Each object is streamed once, its size and CRC-32C computed as it passes."""
        try:
            manifest = self.read_manifest(ref)
        except ManifestError as exc:
            return [f"manifest: {exc}"]
        if manifest is None:
            return ["manifest.json is missing"]
        problems = []
        for kind in UPLOAD_ORDER:
            entry = manifest.objects.get(kind)
            if entry is None:
                continue
            size = value = 0
            try:
                with self.open_object(entry.key) as stream:
                    while chunk := stream.read(VERIFY_CHUNK):
                        value = crc32c(chunk, value)
                        size += len(chunk)
            except RemoteObjectNotFoundError:
                problems.append(f"{kind.value}: object {entry.key} is missing")
                continue
            if size != entry.size:
                problems.append(f"{kind.value}: size {size} != manifest {entry.size}")
            elif crc_hex(value) != entry.crc32c:
                problems.append(f"{kind.value}: crc32c {crc_hex(value)} != manifest {entry.crc32c}")
        return problems

    def delete_segment(self, ref: RemoteSegmentRef) -> None:
        """Delete every object a segment may have (idempotent). The manifest goes first, in a
        call of its own: a delete that fails part-way never leaves a manifest whose objects
        are gone, so a segment with a manifest is always whole."""
        self.delete_keys([ref.key(ObjectKind.MANIFEST, self.prefix)])
        self.delete_keys([ref.key(kind, self.prefix) for kind in UPLOAD_ORDER])

    def list_objects(self, tip: TopicIdPartition) -> list[RemoteObject]:
        """Every object under the partition's prefix (segments of any state, and orphans)."""
        return self.list_prefix(partition_prefix(tip, self.prefix))

    def remote_partitions(self) -> list[TopicIdPartition]:
        """Every partition that holds objects or unfinished uploads under the configured
        prefix, read from the keys themselves: it finds the data of partitions the metadata
        store no longer knows. Names outside the layout are skipped."""
        found = []
        for topic_prefix in self.list_child_prefixes(self.prefix):
            for key_prefix in self.list_child_prefixes(topic_prefix):
                tip = parse_partition_prefix(key_prefix, self.prefix)
                if tip is not None:
                    found.append(tip)
        return sorted(found)

    def incomplete_uploads(
        self, tip: TopicIdPartition, *, older_than_ms: int = 0, now: datetime | None = None
    ) -> list[IncompleteUpload]:
        """Unfinished uploads under the partition's prefix last active at least
        ``older_than_ms`` ago."""
        now = now or datetime.now(UTC)
        uploads = self.list_incomplete_uploads(partition_prefix(tip, self.prefix))
        return [u for u in uploads if u.age_ms(now) >= older_than_ms]

    def remove_incomplete_uploads(
        self, tip: TopicIdPartition, *, older_than_ms: int, now: datetime | None = None
    ) -> list[IncompleteUpload]:
        """Abort or remove the partition's unfinished uploads older than ``older_than_ms``
        (which must be positive: an upload in flight is unfinished too); returns them."""
        if older_than_ms <= 0:
            raise ValueError(f"older_than_ms must be positive (an upload in flight is unfinished too): {older_than_ms}")
        doomed = self.incomplete_uploads(tip, older_than_ms=older_than_ms, now=now)
        for upload in doomed:
            self.remove_incomplete_upload(upload)
        return doomed
