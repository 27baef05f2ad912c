"""Segments over remote objects (KIP-405's remote storage manager).

Copying a segment (objects first, ``manifest.json`` last, cleanup on failure), ranged fetches,
verification and idempotent deletes are implemented once here, over the object primitives of
``objects.ObjectStore`` that each backend provides.

This is the one seam every reader goes through, so the chunked format 2 lives here too
(docs/segment-format.md): ``copy_segment`` writes every new copy as format 2 in the configured
encoding, a SHA-256 for each stored chunk, and ``fetch``, ``open_stream`` and ``verify_segment``
read either format, handing out the original bytes (a format-2 read fetches only the chunks it
needs, by ranged GETs). A ref that carries the manifest digest the metadata store recorded is
read only through the manifest with that digest, each chunk checked against it before a byte
of it is handed out.
"""

from __future__ import annotations

import io
import logging
import tempfile
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import BinaryIO

from tiering_core.humanize import fmt_bytes
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.storage.cache import RecentCache
from tiering_core.storage.checksum import crc32c, crc_hex
from tiering_core.storage.chunks import (
    ChunkedObject,
    ChunkError,
    ChunkSealer,
    encode_object,
    index_plain_object,
    log_is_compressed,
)
from tiering_core.storage.encoding import SegmentEncoding
from tiering_core.storage.errors import (
    InvalidRangeError,
    ManifestError,
    RemoteObjectNotFoundError,
    RemoteStorageError,
)
from tiering_core.storage.keys import DataKeyError
from tiering_core.storage.layout import (
    ObjectKind,
    RemoteSegmentRef,
    parse_partition_prefix,
    partition_prefix,
)
from tiering_core.storage.manifest import (
    FORMAT_VERSION,
    MAX_MANIFEST_BYTES,
    ObjectEntry,
    SegmentFacts,
    SegmentManifest,
    WrappedKey,
    sha256_hex,
)
from tiering_core.storage.objects import IncompleteUpload, Progress, RemoteObject
from tiering_core.storage.partition_state import PartitionStates
from tiering_core.storage.quota import throttled

log = logging.getLogger(__name__)
#: Upload order: the log first, the manifest (not listed here) always last.
UPLOAD_ORDER = [k for k in ObjectKind if k != ObjectKind.MANIFEST]
VERIFY_CHUNK = 1 << 20
#: Objects larger than this are encoded into a temporary file, not memory, before they go out.
ENCODE_IN_MEMORY = 32 * 1024 * 1024
#: Manifests and data keys of segments recently read, per storage.
LAYOUT_CACHE = 1024
#: The bytes of manifest JSON the cache holds at most, per storage: a format-2 manifest grows
#: with its segment (up to MAX_MANIFEST_BYTES), so a count alone does not bound the memory.
MANIFEST_CACHE_BYTES = 64 * 1024 * 1024


class RemoteStorage(PartitionStates):
    """Copy, fetch and delete segments' objects; idempotent and checksummed. Each partition's
    ``partition-state.json`` is read and written through ``PartitionStates``."""

    def __init__(self, prefix: str = "") -> None:
        super().__init__(prefix)
        self.encoding = SegmentEncoding()
        #: Each manifest with the SHA-256 of the bytes it was read from, so a ref carrying the
        #: store's digest is never answered by a manifest read for a ref without one.
        self._manifests: RecentCache[RemoteSegmentRef, tuple[SegmentManifest, str]] = RecentCache(
            LAYOUT_CACHE, MANIFEST_CACHE_BYTES
        )
        self._data_keys: RecentCache[tuple[RemoteSegmentRef, WrappedKey], bytes] = RecentCache(LAYOUT_CACHE)

    def copy_segment(
        self,
        ref: RemoteSegmentRef,
        files: Mapping[ObjectKind, Path | bytes],
        *,
        facts: SegmentFacts | None = None,
        progress: Progress | None = None,
    ) -> SegmentManifest:
        """Upload every object of a segment, then its manifest; on failure nothing stays behind.
        ``facts``, the segment's metadata, go into the manifest (checked before anything is
        uploaded: facts a reader would refuse fail the copy, naming the problem).

        If an earlier upload of the same segment finished, its manifest is deleted first (then
        the kinds this upload does not carry), so a crash part-way through never leaves a
        manifest that describes objects this upload overwrote. The check is a HEAD, not a
        blind delete, so a fresh segment leaves no delete markers in a versioned bucket.
        """
        self.require_writable()
        if ObjectKind.LOG not in files:
            raise RemoteStorageError(f"{ref}: a segment needs its log object")
        if ObjectKind.MANIFEST in files:
            raise RemoteStorageError(f"{ref}: the manifest is written by copy_segment, not given")
        for kind, source in files.items():
            if not isinstance(source, bytes) and not Path(source).is_file():
                raise RemoteStorageError(f"{ref}: {kind.value} source {source} is not a readable file")
        if facts is not None:
            try:
                facts.validate(ref.base_offset)
            except ManifestError as exc:
                raise ManifestError(f"{ref}: {exc}") from None
        manifest_key = ref.key(ObjectKind.MANIFEST, self.prefix)
        self._manifests.drop(ref)
        if self.object_size(manifest_key) is not None:
            self.delete_keys([manifest_key])  # first, and alone: no manifest outlives its objects
            self.delete_keys([ref.key(kind, self.prefix) for kind in UPLOAD_ORDER if kind not in files])
        uploaded: list[str] = [manifest_key]
        try:
            manifest = self._copy_chunked(ref, files, facts, progress, uploaded)
            document = manifest.to_json()
            if len(document) > MAX_MANIFEST_BYTES:  # a finished segment nobody could read
                raise RemoteStorageError(
                    f"{ref}: its manifest would be {len(document)} bytes, above the "
                    f"{fmt_bytes(MAX_MANIFEST_BYTES)} readers accept: raise remote.chunk_size "
                    f"(now {self.encoding.chunk_size})"
                )
            self._put_segment_object(manifest_key, document, None)
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

    def _copy_chunked(
        self,
        ref: RemoteSegmentRef,
        files: Mapping[ObjectKind, Path | bytes],
        facts: SegmentFacts | None,
        progress: Progress | None,
        uploaded: list[str],
    ) -> SegmentManifest:
        """Every object of the segment as format-2 chunks (under a fresh data key when encrypted),
        each with its SHA-256; the manifest."""
        encoding = self.encoding
        sealer = wrapped = None
        if encoding.keys is not None and encoding.keys.encrypts:
            data_key, wrapped = encoding.keys.new_data_key()
            sealer = ChunkSealer(str(ref.segment_id), data_key)
        compress = encoding.compression != "none"
        compress_log = encoding.compression == "zstd" or (
            encoding.compression == "auto" and not log_is_compressed(files[ObjectKind.LOG])
        )
        entries: dict[ObjectKind, ObjectEntry] = {}
        with tempfile.TemporaryDirectory(prefix="tiering-encode-") as scratch:
            for kind in UPLOAD_ORDER:
                if kind not in files:
                    continue
                source = files[kind]
                key = ref.key(kind, self.prefix)
                uploaded.append(key)
                size = len(source) if isinstance(source, bytes) else Path(source).stat().st_size
                plain = sealer is None and not (compress_log if kind is ObjectKind.LOG else compress)
                if plain and not isinstance(source, bytes):  # stored as it is: index it, send the file
                    entry = index_plain_object(Path(source), kind=kind, key=key, chunk_size=encoding.chunk_size)
                    put_size, put_crc = self._put_segment_object(key, source, progress)
                    if (put_size, crc_hex(put_crc)) != (entry.size, entry.crc32c):
                        raise RemoteStorageError(f"{ref}: {kind.value} changed while it was copied")
                    entries[kind] = entry
                    continue
                encode = partial(
                    encode_object,
                    kind=kind,
                    key=key,
                    chunk_size=encoding.chunk_size,
                    compress=compress_log if kind is ObjectKind.LOG else compress,
                    sealer=sealer,
                )
                stored: Path | bytes
                if size <= ENCODE_IN_MEMORY:
                    buffer = io.BytesIO()
                    entry = encode(source, buffer)
                    stored = buffer.getvalue()
                else:
                    stored = Path(scratch) / kind.value
                    with stored.open("wb") as out:
                        entry = encode(source, out)
                put_size, _ = self._put_segment_object(key, stored, progress)
                if put_size != entry.stored_size:
                    raise RemoteStorageError(f"{ref}: {kind.value} stored {put_size} bytes of {entry.stored_size}")
                entries[kind] = entry
        return SegmentManifest.for_ref(
            ref, entries, int(time.time() * 1000), chunk_size=encoding.chunk_size, encryption=wrapped, segment=facts
        )

    def _chunked(self, ref: RemoteSegmentRef, kind: ObjectKind) -> ChunkedObject | None:
        """The format-2 object of ``kind``, or None for a format-1 segment (read byte for byte).
        A format-2 segment without that object reads as a missing object. A ref with the store's
        manifest digest always reads through that manifest (what the store says wins over what
        the bucket says: a manifest "downgraded" to format 1 is refused, not obeyed)."""
        if ref.format_version == FORMAT_VERSION and ref.manifest_sha256 is None:
            return None
        manifest = self._cached_manifest(ref)
        if manifest is None:
            manifest = self.read_manifest(ref)  # which caches it
            if manifest is None:
                if ref.manifest_sha256 is not None or ref.format_version is not None:
                    raise RemoteObjectNotFoundError(
                        f"{self.describe(ref.key(ObjectKind.MANIFEST, self.prefix))}: the manifest of a "
                        f"format-{ref.format_version or 2} segment is missing"
                    )
                return None
        if not manifest.chunked or manifest.chunk_size is None:
            return None
        entry = manifest.objects.get(kind)
        if entry is None:
            raise RemoteObjectNotFoundError(
                f"{self.describe(ref.key(kind, self.prefix))}: the segment has no {kind.value}"
            )
        sealer = None
        if manifest.encryption is not None:
            sealer = ChunkSealer(str(ref.segment_id), self._data_key(ref, manifest.encryption))
        return ChunkedObject(str(ref), entry, manifest.chunk_size, sealer)

    def _data_key(self, ref: RemoteSegmentRef, wrapped: WrappedKey) -> bytes:
        cached = self._data_keys.get((ref, wrapped))
        if cached is not None:
            return cached
        keys = self.encoding.keys
        if keys is None:
            raise DataKeyError(
                f"{ref}: encrypted under key id {wrapped.key_id!r}, and remote.encryption is not configured"
            )
        key = keys.unwrap(wrapped, str(ref))
        self._data_keys.put((ref, wrapped), key)
        return key

    def _chunk_getter(self, obj: ChunkedObject, key: str) -> Callable[[int, int], bytes]:
        """Ranged GETs of stored bytes, taken from the fetch quota; an object shorter than its
        chunk index is a ChunkError naming the first chunk it cuts."""

        def get(first: int, last: int) -> bytes:
            try:
                data = self.get_range(key, first, last)
            except InvalidRangeError:
                data = b""
            self.quotas.take_fetch(len(data))
            if len(data) != last - first + 1:
                end = first + len(data)
                cut = next(i for i, c in enumerate(obj.chunks) if c.stored_offset + c.stored_size > end)
                raise ChunkError(
                    f"{obj.where(cut)}: the stored object is cut short (truncated): {end} bytes where its chunks "
                    f"need {obj.entry.stored_size}"
                )
            return data

        return get

    def fetch(self, ref: RemoteSegmentRef, kind: ObjectKind, start: int = 0, end: int | None = None) -> bytes:
        """Bytes [start, end] (inclusive, like Kafka's fetchLogSegment) of one object's original
        bytes; an ``end`` past the object reads to its end. The bytes are taken from the fetch
        quota. A format-2 object is read by one ranged GET of the chunks holding the range."""
        key = ref.key(kind, self.prefix)
        if start < 0 or (end is not None and end < start):
            raise InvalidRangeError(f"{self.describe(key)}: invalid range [{start}, {end}]")
        chunked = self._chunked(ref, kind)
        if chunked is not None:
            return chunked.read(self._chunk_getter(chunked, key), start, end)
        data = self.get_range(key, start, end)
        self.quotas.take_fetch(len(data))
        return data

    def open_stream(self, ref: RemoteSegmentRef, kind: ObjectKind, start: int = 0) -> BinaryIO:
        """A buffered stream over one object's original bytes from ``start``, for reads too large
        to hold; its reads are taken from the fetch quota. A format-2 object is fetched chunk by
        chunk as the stream is read."""
        key = ref.key(kind, self.prefix)
        if start < 0:
            raise InvalidRangeError(f"{self.describe(key)}: invalid start {start}")
        chunked = self._chunked(ref, kind)
        if chunked is not None:
            return chunked.stream(self._chunk_getter(chunked, key), start)
        return throttled(self.open_object(key, start), self.quotas.fetch)

    def _cached_manifest(self, ref: RemoteSegmentRef) -> SegmentManifest | None:
        """The manifest read before for ``ref``, if it was read from bytes of the digest ``ref``
        carries (any, for a ref without one)."""
        held = self._manifests.get(ref)
        if held is None or ref.manifest_sha256 not in (None, held[1]):
            return None
        return held[0]

    def read_manifest(self, ref: RemoteSegmentRef) -> SegmentManifest | None:
        """The segment's manifest, None if it has none; one too large, undecodable, not the one
        whose SHA-256 the metadata store recorded (``ref.manifest_sha256``), or that describes
        another segment or keys other than this segment's, is a ManifestError naming the
        manifest's key (its segment's base offset and id)."""
        read = self.read_manifest_digested(ref)
        return None if read is None else read[0]

    def read_manifest_digested(self, ref: RemoteSegmentRef) -> tuple[SegmentManifest, str] | None:
        """``read_manifest``, with the SHA-256 of the bytes it was read from (what ``tiering
        recover`` records for the store to vouch for from then on)."""
        key = ref.key(ObjectKind.MANIFEST, self.prefix)
        try:
            data = self.get_range(key, 0, MAX_MANIFEST_BYTES)
        except RemoteObjectNotFoundError:
            return None
        if len(data) > MAX_MANIFEST_BYTES:
            raise ManifestError(f"{self.describe(key)}: manifest is larger than {MAX_MANIFEST_BYTES} bytes")
        digest = sha256_hex(data)
        if ref.manifest_sha256 is not None and digest != ref.manifest_sha256:
            raise ManifestError(
                f"{self.describe(key)}: manifest SHA-256 {digest} is not {ref.manifest_sha256}, the one the "
                "metadata store recorded at copy: replaced or forged, nothing of the segment is served"
            )
        try:
            manifest = SegmentManifest.from_json(data)
        except ManifestError as exc:
            raise ManifestError(f"{self.describe(key)}: {exc}") from None
        if manifest.ref() != ref:
            raise ManifestError(f"{self.describe(key)}: manifest describes {manifest.ref()}, not {ref}")
        for kind, entry in manifest.objects.items():
            if entry.key != ref.key(kind, self.prefix):
                raise ManifestError(f"{self.describe(key)}: manifest lists {entry.key!r} for {kind.value}")
        self._manifests.put(ref, (manifest, digest), len(data))  # the reads that follow need not fetch it again
        return manifest, digest

    def verify_segment(self, ref: RemoteSegmentRef) -> list[str]:
        """Problems of a stored segment against its manifest (empty = every object intact).
        Each object is streamed once, its size and CRC-32C computed as it passes."""
        try:
            manifest = self.read_manifest(ref)
        except ManifestError as exc:
            return [f"manifest: {exc}"]
        if manifest is None:
            return ["manifest.json is missing"]
        if manifest.chunked:
            return self._verify_chunked(ref, manifest)
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

    def _verify_chunked(self, ref: RemoteSegmentRef, manifest: SegmentManifest) -> list[str]:
        """Each format-2 object streamed once: every chunk's size, CRC-32C, GCM tag and
        decompression, then the original bytes' size and CRC-32C."""
        problems: list[str] = []
        for kind in UPLOAD_ORDER:
            if kind not in manifest.objects:
                continue
            try:
                obj = self._chunked(ref, kind)
            except DataKeyError as exc:
                return [f"encryption: {exc}"]
            if obj is None:
                continue
            entry = obj.entry
            stored_size = self.object_size(entry.key)
            if stored_size is None:
                problems.append(f"{kind.value}: object {entry.key} is missing")
                continue
            if stored_size != entry.stored_size:
                problems.append(f"{kind.value}: stored size {stored_size} != manifest {entry.stored_size}")
            size = value = 0
            try:
                with self.open_object(entry.key) if stored_size else io.BytesIO() as stream:
                    for index, chunk in enumerate(obj.chunks):
                        stored = stream.read(chunk.stored_size)
                        try:
                            original = obj.decode(index, stored)
                        except ChunkError as exc:
                            problems.append(f"{kind.value}: {exc}")
                            if len(stored) < chunk.stored_size:
                                break
                            continue
                        value = crc32c(original, value)
                        size += len(original)
            except RemoteObjectNotFoundError:
                problems.append(f"{kind.value}: object {entry.key} is missing")
                continue
            if any(p.startswith(f"{kind.value}:") for p in problems):
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
        self.require_writable()
        self._manifests.drop(ref)
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
        self.require_writable()
        doomed = self.incomplete_uploads(tip, older_than_ms=older_than_ms, now=now)
        for upload in doomed:
            self.remove_incomplete_upload(upload)
        return doomed
