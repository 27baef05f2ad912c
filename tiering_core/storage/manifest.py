"""``manifest.json``: written last, it lists every object of a segment with size and CRC-32C."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tiering_core.errors import InvalidTopicError
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.storage.errors import ManifestError
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef

FORMAT_VERSION = 1


@dataclass(frozen=True)
class ObjectEntry:
    kind: ObjectKind
    key: str
    size: int
    crc32c: str


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

    @classmethod
    def for_ref(
        cls, ref: RemoteSegmentRef, objects: dict[ObjectKind, ObjectEntry], created_at_ms: int
    ) -> SegmentManifest:
        tip = ref.topic_id_partition
        return cls(
            topic=tip.topic,
            topic_id=tip.topic_id,
            partition=tip.partition,
            base_offset=ref.base_offset,
            segment_id=str(ref.segment_id),
            objects=objects,
            created_at_ms=created_at_ms,
        )

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
            "objects": {
                k.value: {"key": e.key, "size": e.size, "crc32c": e.crc32c} for k, e in sorted(self.objects.items())
            },
        }
        return json.dumps(doc, indent=2, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> SegmentManifest:
        """Parse and validate; anything malformed is a ManifestError, never a KeyError."""
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ManifestError(f"segment manifest is not valid JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise ManifestError("segment manifest is not a JSON object")
        version = _field(doc, "format_version", int)
        if version != FORMAT_VERSION:
            raise ManifestError(f"unsupported manifest format_version {version}")
        raw_objects = _field(doc, "objects", dict)
        objects: dict[ObjectKind, ObjectEntry] = {}
        for name, raw in raw_objects.items():
            try:
                kind = ObjectKind(name)
            except ValueError:
                raise ManifestError(f"manifest lists an unknown object kind {name!r}") from None
            if kind is ObjectKind.MANIFEST or not isinstance(raw, dict):
                raise ManifestError(f"manifest entry {name!r} is invalid")
            key = _field(raw, "key", str)
            size = _field(raw, "size", int)
            crc = _field(raw, "crc32c", str)
            if size < 0 or not _CRC.fullmatch(crc) or not key.endswith(f".{kind.value}"):
                raise ManifestError(f"manifest entry {name!r} is invalid: key {key!r}, size {size}, crc32c {crc!r}")
            objects[kind] = ObjectEntry(kind, key, size, crc)
        if ObjectKind.LOG not in objects:
            raise ManifestError("manifest lists no log object")
        partition = _field(doc, "partition", int)
        base_offset = _field(doc, "base_offset", int)
        if partition < 0 or base_offset < 0:
            raise ManifestError(f"manifest partition {partition} / base offset {base_offset} is negative")
        manifest = cls(
            topic=_field(doc, "topic", str),
            topic_id=_field(doc, "topic_id", str),
            partition=partition,
            base_offset=base_offset,
            segment_id=_field(doc, "segment_id", str),
            objects=objects,
            created_at_ms=_field(doc, "created_at_ms", int),
            format_version=version,
        )
        try:
            ref = manifest.ref()  # validates topic name, topic id, base offset
        except (InvalidTopicError, ValueError) as exc:
            raise ManifestError(f"manifest names no valid segment: {exc}") from exc
        if str(ref.segment_id) != manifest.segment_id:
            raise ManifestError(f"manifest segment_id {manifest.segment_id!r} is not a canonical UUID")
        return manifest


_CRC = re.compile(r"[0-9a-f]{8}")  # with fullmatch: "$" would accept a trailing newline
F = TypeVar("F")
T = TypeVar("T")


def _field(doc: dict[str, Any], name: str, kind: type[F]) -> F:
    value = doc.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ManifestError(f"manifest field {name!r} must be {kind.__name__}, got {value!r}")
    return value


@dataclass(frozen=True)
class CopyRecord:
    """What copy records of a segment's objects in its metadata (KIP-405's custom metadata):
    each object's key, size and CRC-32C, as the manifest lists them.

    Copy and the index repair write it (``to_custom_metadata``); every reader (the remote
    reader, restore, verify, rebuild, status) decodes it with ``of_segment``, which keeps only
    well-typed values: a record written by an older version, or none at all, reads as empty.
    """

    objects: dict[str, str] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    crc32c: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of_manifest(cls, manifest: SegmentManifest) -> CopyRecord:
        entries = manifest.objects.items()
        return cls(
            objects={kind.value: entry.key for kind, entry in entries},
            sizes={kind.value: entry.size for kind, entry in entries},
            crc32c={kind.value: entry.crc32c for kind, entry in entries},
        )

    @classmethod
    def decode(cls, custom_metadata: object) -> CopyRecord:
        meta = custom_metadata if isinstance(custom_metadata, dict) else {}

        def typed(name: str, kind: type[T]) -> dict[str, T]:
            raw = meta.get(name)
            if not isinstance(raw, dict):
                return {}
            return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, kind)}

        return cls(objects=typed("objects", str), sizes=typed("sizes", int), crc32c=typed("crc32c", str))

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
        return {"objects": dict(self.objects), "sizes": dict(self.sizes), "crc32c": dict(self.crc32c)}

    def size(self, kind: ObjectKind) -> int | None:
        return self.sizes.get(kind.value)

    def crc(self, kind: ObjectKind) -> str | None:
        return self.crc32c.get(kind.value)
