"""Segments as a release before manifest digests left them, made from segments copied now: the
manifest rewritten without digests (format 1 for a segment stored byte for byte, format 2 chunks
without their SHA-256 otherwise) nor the segment's metadata, and the metadata store's record
without the manifest's digest, exactly the shape an older copy has in the bucket and in the store."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from sqlalchemy import update

from tiering_core.engine.segment_ops import segment_ref
from tiering_core.metadata.models import SegmentRow
from tiering_core.storage.layout import ObjectKind
from tiering_core.storage.manifest import FORMAT_VERSION, CopyRecord, ObjectEntry, SegmentManifest

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.metadata.store import RemoteLogSegmentMetadata


def make_legacy(ctx: TieringContext, segment: RemoteLogSegmentMetadata) -> SegmentManifest:
    """Turn ``segment`` (copied now) into one copied before digests; its manifest as rewritten."""
    ref = segment_ref(segment)
    manifest = ctx.storage.read_manifest(ref)
    assert manifest is not None and manifest.tamper_evident
    plain = manifest.encryption is None and all(e.compression == "none" for e in manifest.objects.values())
    if plain:  # stored byte for byte: what format 1 was
        objects = {k: ObjectEntry(k, e.key, e.size, e.crc32c) for k, e in manifest.objects.items()}
        legacy = replace(
            manifest, objects=objects, format_version=FORMAT_VERSION, chunk_size=None, encryption=None, segment=None
        )
    else:
        objects = {
            k: replace(e, chunks=tuple(replace(c, sha256=None) for c in e.chunks or ()))
            for k, e in manifest.objects.items()
        }
        legacy = replace(manifest, objects=objects, segment=None)
    ctx.storage.put_object(ref.key(ObjectKind.MANIFEST, ctx.storage.prefix), legacy.to_json())
    record = replace(CopyRecord.of_manifest(legacy), manifest_sha256=None, compression=None, key_id=None)
    with ctx.metadata.engine.begin() as conn:
        conn.execute(
            update(SegmentRow)
            .where(SegmentRow.segment_id == str(segment.segment_id))
            .values(custom_metadata=record.to_custom_metadata())
        )
    return legacy
