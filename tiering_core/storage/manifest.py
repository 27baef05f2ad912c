"""``manifest.json``: written last, it lists every object of a segment with size and CRC-32C.

Format 1 stores each object byte for byte. Format 2 (docs/segment-format.md) stores each object
as chunks, each optionally zstd-compressed and AES-256-GCM-encrypted; its manifest adds the chunk
size, each object's compression and chunk index, and the segment's wrapped data key. An entry's
``size`` and ``crc32c`` are always those of the original bytes, which every reader gets back.

Every copy made now is format 2 with a SHA-256 for each stored chunk, and the metadata store
records the SHA-256 of the manifest itself (``CopyRecord``): the store vouches for the manifest,
the manifest for every chunk, so nothing the bucket alone says is served (docs/segment-format.md,
"Integrity").

A copy made now also writes the segment's metadata into its manifest (``SegmentFacts``, the
``segment`` object): its end offset, max timestamp and leader epochs as the metadata store's
segment row holds them, and the leader-epoch index the copy uploaded, which the store merges into
its recorded lineage. With them the manifest alone says what the store knows of the segment.
Manifests written before have no ``segment`` object and read as they always did.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from tiering_core.errors import InvalidTopicError
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.storage.errors import ManifestError
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef
from tiering_core.storage.segment_facts import SegmentFacts, manifest_field

FORMAT_VERSION = 1
#: The chunked format (docs/segment-format.md).
CHUNKED_FORMAT = 2
FORMAT_VERSIONS = (FORMAT_VERSION, CHUNKED_FORMAT)
MIN_CHUNK_SIZE = 1024
MAX_CHUNK_SIZE = 64 * 1024 * 1024
#: What a stored chunk may add to its original bytes: zstd's worst case, a nonce and a tag.
CHUNK_OVERHEAD = 12 + 16 + 1024
COMPRESSIONS = ("none", "zstd")
#: How a segment's data key is wrapped: RSA-OAEP with SHA-256 under a key pair of the key ring,
#: or by AWS KMS.
KEY_WRAPS = ("RSA-OAEP-SHA256", "AWS-KMS")
CIPHER = "AES-256-GCM"
MAX_WRAPPED_KEY = 4096
MAX_KEY_ID = 2048
#: A manifest larger than this is refused unread, so no copy may write one.
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
#: Kafka's largest ``segment.bytes`` (Integer.MAX_VALUE): no segment's log is larger.
MAX_SEGMENT_BYTES = 2**31 - 1
#: What ``to_json`` lays around one chunk's values: the chunk's brackets and each value on
#: indented lines of their own, the commas between (five values: the SHA-256 is the fifth).
_CHUNK_LAYOUT = 80
#: A SHA-256 as the manifest and the metadata store write it: 64 lower-case hex digits.
SHA256_HEX = 64
#: The closing line of a non-empty chunk list.
_CHUNKS_CLOSE = 7


def max_stored_chunk(original: int) -> int:
    """The largest stored chunk a manifest may claim for ``original`` bytes (reads stay bounded)."""
    return original + original // 128 + CHUNK_OVERHEAD


def max_chunk_index_bytes(size: int, chunk_size: int) -> int:
    """At most how many bytes ``to_json`` spends on the chunk index of an object of ``size``
    original bytes, each chunk's values taken with the most digits they can have; what a
    configured chunk size is judged by before any copy (the manifest must stay readable)."""
    count = -(-size // chunk_size)
    if count == 0:
        return 0
    largest = max_stored_chunk(chunk_size)
    last = count - 1  # the offsets grow chunk by chunk: the last chunk's are the widest
    digits = len(str(last * chunk_size)) + len(str(last * largest)) + len(str(largest)) + len('"00000000"')
    return count * (_CHUNK_LAYOUT + digits + SHA256_HEX + 2) + _CHUNKS_CLOSE


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of ``data`` in the form manifests and the metadata store record."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Chunk:
    """One stored chunk of a format-2 object: where its original bytes start, where its stored
    bytes lie in the object, and the CRC-32C and SHA-256 of those stored bytes (the SHA-256 is
    absent from chunks copied before it was written: CRC-32C catches damage, not forgery)."""

    original_offset: int
    stored_offset: int
    stored_size: int
    crc32c: str
    sha256: str | None = None


@dataclass(frozen=True)
class WrappedKey:
    """A segment's data key as the manifest holds it: wrapped, never in the clear, with the id of
    the key that unwraps it."""

    key_wrap: str
    key_id: str
    wrapped: bytes = field(repr=False)


@dataclass(frozen=True)
class ObjectEntry:
    """One object: its key, and the size and CRC-32C of its original bytes. A format-2 object
    adds its compression, its stored size and its chunk index."""

    kind: ObjectKind
    key: str
    size: int
    crc32c: str
    compression: str | None = None
    stored_size: int | None = None
    chunks: tuple[Chunk, ...] | None = None

    def chunk_length(self, index: int, chunk_size: int) -> int:
        """The original length of chunk ``index``."""
        return min(chunk_size, self.size - index * chunk_size)

    @property
    def digested(self) -> bool:
        """Whether every stored chunk carries its SHA-256."""
        return self.chunks is not None and all(c.sha256 is not None for c in self.chunks)


@dataclass(frozen=True)
class SegmentManifest:
    topic: str
    topic_id: str
    partition: int
    base_offset: int
    segment_id: str
    objects: dict[ObjectKind, ObjectEntry] = field(default_factory=dict)
    created_at_ms: int = 0
    format_version: int = FORMAT_VERSION
    chunk_size: int | None = None
    encryption: WrappedKey | None = None
    #: The segment's metadata (None: a manifest written before copies wrote it).
    segment: SegmentFacts | None = None

    def __post_init__(self) -> None:
        if self.segment is not None:
            self.segment.validate(self.base_offset)

    @classmethod
    def for_ref(
        cls,
        ref: RemoteSegmentRef,
        objects: dict[ObjectKind, ObjectEntry],
        created_at_ms: int,
        *,
        chunk_size: int | None = None,
        encryption: WrappedKey | None = None,
        segment: SegmentFacts | None = None,
    ) -> SegmentManifest:
        """Format 2 when a ``chunk_size`` is given (its objects then carry chunk indexes)."""
        tip = ref.topic_id_partition
        return cls(
            topic=tip.topic,
            topic_id=tip.topic_id,
            partition=tip.partition,
            base_offset=ref.base_offset,
            segment_id=str(ref.segment_id),
            objects=objects,
            created_at_ms=created_at_ms,
            format_version=FORMAT_VERSION if chunk_size is None else CHUNKED_FORMAT,
            chunk_size=chunk_size,
            encryption=encryption,
            segment=segment,
        )

    @property
    def chunked(self) -> bool:
        return self.format_version == CHUNKED_FORMAT

    @property
    def tamper_evident(self) -> bool:
        """Whether every stored byte is covered by a SHA-256 this manifest holds (format 2, a
        digest per chunk): with the manifest's own digest in the metadata store, a forgery of
        any object is caught before a byte of it is served."""
        return self.chunked and all(e.digested for e in self.objects.values())

    def digest(self) -> str:
        """The SHA-256 of the manifest as ``to_json`` writes it: what the metadata store records."""
        return sha256_hex(self.to_json())

    def ref(self) -> RemoteSegmentRef:
        """The segment this manifest describes (fields were validated when parsed)."""
        tip = TopicIdPartition(self.topic_id, TopicPartition(self.topic, self.partition))
        return RemoteSegmentRef(tip, self.base_offset, uuid.UUID(self.segment_id))

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {
            "format_version": self.format_version,
            "topic": self.topic,
            "topic_id": self.topic_id,
            "partition": self.partition,
            "base_offset": self.base_offset,
            "segment_id": self.segment_id,
            "created_at_ms": self.created_at_ms,
            "objects": {k.value: _entry_doc(e) for k, e in sorted(self.objects.items())},
        }
        if self.chunked:
            doc["chunk_size"] = self.chunk_size
            doc["encryption"] = None
            if self.encryption is not None:
                doc["encryption"] = {
                    "cipher": CIPHER,
                    "key_wrap": self.encryption.key_wrap,
                    "key_id": self.encryption.key_id,
                    "wrapped_key": base64.b64encode(self.encryption.wrapped).decode(),
                }
        if self.segment is not None:  # absent, the manifest is byte for byte what older versions wrote
            doc["segment"] = self.segment.to_doc()
        return json.dumps(doc, indent=2, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> SegmentManifest:
        """Parse and validate; anything malformed is a ManifestError, never a KeyError nor a
        RecursionError: a manifest nests five deep, and brackets nested past what the decoder
        takes are refused as it meets them."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ManifestError(f"segment manifest is not UTF-8: {exc.reason} at byte {exc.start}") from None
        try:
            doc = json.loads(text)
        except RecursionError:
            raise ManifestError("segment manifest is not valid JSON: nested too deep") from None
        except ValueError as exc:
            raise ManifestError(f"segment manifest is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ManifestError("segment manifest is not a JSON object")
        version = manifest_field(doc, "format_version", int)
        if version not in FORMAT_VERSIONS:
            raise ManifestError(f"unsupported manifest format_version {version}")
        chunk_size = encryption = None
        if version == CHUNKED_FORMAT:
            chunk_size = manifest_field(doc, "chunk_size", int)
            if not MIN_CHUNK_SIZE <= chunk_size <= MAX_CHUNK_SIZE:
                raise ManifestError(f"manifest chunk_size {chunk_size} is outside [{MIN_CHUNK_SIZE}, {MAX_CHUNK_SIZE}]")
            encryption = _encryption(doc.get("encryption"))
        raw_objects = manifest_field(doc, "objects", dict)
        objects: dict[ObjectKind, ObjectEntry] = {}
        for name, raw in raw_objects.items():
            try:
                kind = ObjectKind(name)
            except ValueError:
                raise ManifestError(f"manifest lists an unknown object kind {name!r}") from None
            if kind is ObjectKind.MANIFEST or not isinstance(raw, dict):
                raise ManifestError(f"manifest entry {name!r} is invalid")
            key = manifest_field(raw, "key", str)
            size = manifest_field(raw, "size", int)
            crc = manifest_field(raw, "crc32c", str)
            if size < 0 or not _CRC.fullmatch(crc) or not key.endswith(f".{kind.value}"):
                raise ManifestError(f"manifest entry {name!r} is invalid: key {key!r}, size {size}, crc32c {crc!r}")
            objects[kind] = ObjectEntry(kind, key, size, crc)
            if chunk_size is not None:
                objects[kind] = _chunked_entry(objects[kind], raw, chunk_size, encrypted=encryption is not None)
        if ObjectKind.LOG not in objects:
            raise ManifestError("manifest lists no log object")
        partition = manifest_field(doc, "partition", int)
        base_offset = manifest_field(doc, "base_offset", int)
        if partition < 0 or base_offset < 0:
            raise ManifestError(f"manifest partition {partition} / base offset {base_offset} is negative")
        segment = SegmentFacts.from_doc(doc["segment"]) if "segment" in doc else None
        manifest = cls(
            topic=manifest_field(doc, "topic", str),
            topic_id=manifest_field(doc, "topic_id", str),
            partition=partition,
            base_offset=base_offset,
            segment_id=manifest_field(doc, "segment_id", str),
            objects=objects,
            created_at_ms=manifest_field(doc, "created_at_ms", int),
            format_version=version,
            chunk_size=chunk_size,
            encryption=encryption,
            segment=segment,
        )
        try:
            ref = manifest.ref()  # validates topic name, topic id, base offset
        except (InvalidTopicError, ValueError) as exc:
            raise ManifestError(f"manifest names no valid segment: {exc}") from exc
        if str(ref.segment_id) != manifest.segment_id:
            raise ManifestError(f"manifest segment_id {manifest.segment_id!r} is not a canonical UUID")
        return manifest


_CRC = re.compile(r"[0-9a-f]{8}")  # with fullmatch: "$" would accept a trailing newline
_SHA256 = re.compile(r"[0-9a-f]{64}")
T = TypeVar("T")


def _entry_doc(entry: ObjectEntry) -> dict[str, Any]:
    doc: dict[str, Any] = {"key": entry.key, "size": entry.size, "crc32c": entry.crc32c}
    if entry.chunks is not None:
        doc["compression"] = entry.compression
        doc["stored_size"] = entry.stored_size
        doc["chunks"] = [
            [c.original_offset, c.stored_offset, c.stored_size, c.crc32c] + ([] if c.sha256 is None else [c.sha256])
            for c in entry.chunks
        ]
    return doc


def _encryption(raw: object) -> WrappedKey | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ManifestError("manifest encryption must be an object or null")
    if raw.get("cipher") != CIPHER:
        raise ManifestError(f"manifest encryption cipher {raw.get('cipher')!r:.40} is not {CIPHER}")
    key_wrap = manifest_field(raw, "key_wrap", str)
    key_id = manifest_field(raw, "key_id", str)
    if key_wrap not in KEY_WRAPS:
        raise ManifestError(f"manifest key_wrap {key_wrap!r:.40} is not one of {', '.join(KEY_WRAPS)}")
    if not 0 < len(key_id) <= MAX_KEY_ID or not key_id.isprintable():
        raise ManifestError("manifest key_id is empty, too long or not printable")
    encoded = manifest_field(raw, "wrapped_key", str)
    if len(encoded) > MAX_WRAPPED_KEY * 2:
        raise ManifestError("manifest wrapped_key is too long")
    try:
        wrapped = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ManifestError("manifest wrapped_key is not base64") from None
    if not 0 < len(wrapped) <= MAX_WRAPPED_KEY:
        raise ManifestError(f"manifest wrapped_key has {len(wrapped)} bytes")
    return WrappedKey(key_wrap, key_id, wrapped)


def _chunked_entry(entry: ObjectEntry, raw: dict[str, Any], chunk_size: int, *, encrypted: bool) -> ObjectEntry:
    """A format-2 entry whose chunk index tiles the original and the stored object exactly."""
    name = entry.kind.value
    compression = manifest_field(raw, "compression", str)
    if compression not in COMPRESSIONS:
        raise ManifestError(f"manifest entry {name!r}: compression {compression!r:.40} is not none or zstd")
    stored_size = manifest_field(raw, "stored_size", int)
    raw_chunks = manifest_field(raw, "chunks", list)
    count = -(-entry.size // chunk_size)
    if len(raw_chunks) != count:
        raise ManifestError(f"manifest entry {name!r}: {len(raw_chunks)} chunks for {entry.size} bytes, not {count}")
    chunks = []
    stored = 0
    for index, item in enumerate(raw_chunks):
        if (
            not isinstance(item, list)
            or len(item) not in (4, 5)
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in item[:3])
            or not isinstance(item[3], str)
            or not _CRC.fullmatch(item[3])
            or (len(item) == 5 and not (isinstance(item[4], str) and _SHA256.fullmatch(item[4])))
        ):
            raise ManifestError(f"manifest entry {name!r}: chunk {index} is malformed")
        chunk = Chunk(item[0], item[1], item[2], item[3], item[4] if len(item) == 5 else None)
        length = entry.chunk_length(index, chunk_size)
        smallest = 28 if encrypted else 1
        if (
            chunk.original_offset != index * chunk_size
            or chunk.stored_offset != stored
            or not smallest <= chunk.stored_size <= max_stored_chunk(length)
        ):
            raise ManifestError(f"manifest entry {name!r}: chunk {index} does not tile the object")
        stored += chunk.stored_size
        chunks.append(chunk)
    if stored != stored_size:
        raise ManifestError(f"manifest entry {name!r}: chunks hold {stored} bytes, stored_size says {stored_size}")
    return replace(entry, compression=compression, stored_size=stored_size, chunks=tuple(chunks))


@dataclass(frozen=True)
class CopyRecord:
    """What copy records of a segment's objects in its metadata (KIP-405's custom metadata):
    each object's key, size and CRC-32C, as the manifest lists them, and the manifest's own
    SHA-256 with its format, the log's compression and the id of the key that wraps its data key.

    Copy, rewrite and the index repair write it (``to_custom_metadata``); every reader (the remote
    reader, restore, verify, rebuild, status) decodes it with ``of_segment``, which keeps only
    well-typed values: a record written by an older version, or none at all, reads as empty. The
    manifest digest is what makes the metadata store the root of trust: a reader given it refuses
    any manifest but the one the copy wrote.
    """

    objects: dict[str, str] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    crc32c: dict[str, str] = field(default_factory=dict)
    #: The manifest's format (recorded for format 2 only), so readers of a format-1 segment
    #: need not read its manifest first.
    format_version: int = FORMAT_VERSION
    #: The SHA-256 of ``manifest.json`` as written (None: copied before digests were recorded).
    manifest_sha256: str | None = None
    #: The log object's compression (``none`` or ``zstd``) and the wrapping key's id (None:
    #: not encrypted), for reports: the digest already binds the manifest that says them.
    compression: str | None = None
    key_id: str | None = None

    @classmethod
    def of_manifest(cls, manifest: SegmentManifest) -> CopyRecord:
        entries = manifest.objects.items()
        log_entry = manifest.objects.get(ObjectKind.LOG)
        return cls(
            objects={kind.value: entry.key for kind, entry in entries},
            sizes={kind.value: entry.size for kind, entry in entries},
            crc32c={kind.value: entry.crc32c for kind, entry in entries},
            format_version=manifest.format_version,
            manifest_sha256=manifest.digest(),
            compression=None if log_entry is None else log_entry.compression,
            key_id=None if manifest.encryption is None else manifest.encryption.key_id,
        )

    @classmethod
    def decode(cls, custom_metadata: object) -> CopyRecord:
        meta = custom_metadata if isinstance(custom_metadata, dict) else {}

        def typed(name: str, kind: type[T]) -> dict[str, T]:
            raw = meta.get(name)
            if not isinstance(raw, dict):
                return {}
            return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, kind)}

        def text(name: str) -> str | None:
            value = meta.get(name)
            return value if isinstance(value, str) else None

        version = meta.get("format_version", FORMAT_VERSION)
        digest = text("manifest_sha256")
        return cls(
            objects=typed("objects", str),
            sizes=typed("sizes", int),
            crc32c=typed("crc32c", str),
            format_version=version if isinstance(version, int) and not isinstance(version, bool) else FORMAT_VERSION,
            manifest_sha256=digest if digest is not None and _SHA256.fullmatch(digest) else None,
            compression=text("compression"),
            key_id=text("key_id"),
        )

    @classmethod
    def of_segment(cls, segment: Any) -> CopyRecord:
        """The record of a ``RemoteLogSegmentMetadata`` (any object with ``custom_metadata``). A
        segment listed without its custom metadata is a programming error, never "nothing
        recorded": a reader would skip every checksum."""
        custom_metadata = getattr(segment, "custom_metadata", None)
        if custom_metadata is None:
            raise ValueError(f"segment {getattr(segment, 'segment_id', '?')} was listed without its custom metadata")
        return cls.decode(custom_metadata)

    def to_custom_metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"objects": dict(self.objects), "sizes": dict(self.sizes), "crc32c": dict(self.crc32c)}
        if self.format_version != FORMAT_VERSION:
            meta["format_version"] = self.format_version
        if self.manifest_sha256 is not None:
            meta["manifest_sha256"] = self.manifest_sha256
        if self.compression is not None:
            meta["compression"] = self.compression
        if self.key_id is not None:
            meta["key_id"] = self.key_id
        return meta

    @property
    def tamper_evident(self) -> bool:
        """Whether the store vouches for this segment's manifest (a copy made with digests)."""
        return self.manifest_sha256 is not None

    def size(self, kind: ObjectKind) -> int | None:
        return self.sizes.get(kind.value)

    def crc(self, kind: ObjectKind) -> str | None:
        return self.crc32c.get(kind.value)
