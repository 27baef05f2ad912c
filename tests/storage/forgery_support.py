"""What someone who can write to the bucket, and holds no private key, can make a segment say.

Each forgery replaces a finished segment's objects and manifest with other records of the same
offsets (``forged``: the files of another log of the same shape), in a form every check the
bucket alone carries accepts: CRC-32Cs recomputed, SHA-256s recomputed, GCM tags made under a
data key wrapped with the public key. Only the manifest digest the metadata store recorded at copy
tells them from the real segment.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from tiering_core.storage.checksum import crc32c, crc_hex
from tiering_core.storage.chunks import ChunkSealer, encode_object
from tiering_core.storage.config import EncryptionConfig
from tiering_core.storage.keys import KeyRing
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef
from tiering_core.storage.manifest import CHUNKED_FORMAT, ObjectEntry, SegmentManifest
from tiering_core.storage.remote import RemoteStorage

Forgery = Callable[[RemoteStorage, RemoteSegmentRef, Mapping[ObjectKind, bytes]], None]
CHUNK = 8192


def _put(storage: RemoteStorage, ref: RemoteSegmentRef, objects: Mapping[ObjectKind, bytes], doc: bytes) -> None:
    for kind, data in objects.items():
        storage.put_object(ref.key(kind, storage.prefix), data)
    storage.put_object(ref.key(ObjectKind.MANIFEST, storage.prefix), doc)


def downgrade_to_format_1(storage: RemoteStorage, ref: RemoteSegmentRef, forged: Mapping[ObjectKind, bytes]) -> None:
    """The manifest says format 1: the objects are plaintext, byte for byte, with their CRC-32Cs."""
    entries = {k: ObjectEntry(k, ref.key(k, storage.prefix), len(d), crc_hex(crc32c(d))) for k, d in forged.items()}
    manifest = SegmentManifest.for_ref(ref, entries, 1)
    _put(storage, ref, forged, manifest.to_json())


def _chunked(
    storage: RemoteStorage,
    ref: RemoteSegmentRef,
    forged: Mapping[ObjectKind, bytes],
    *,
    compress: bool,
    keys: KeyRing | None,
) -> None:
    sealer = wrapped = None
    if keys is not None:
        data_key, wrapped = keys.new_data_key()
        sealer = ChunkSealer(str(ref.segment_id), data_key)
    entries, stored = {}, {}
    for kind, data in forged.items():
        out = io.BytesIO()
        key = ref.key(kind, storage.prefix)
        entries[kind] = encode_object(data, out, kind=kind, key=key, chunk_size=CHUNK, compress=compress, sealer=sealer)
        stored[kind] = out.getvalue()
    manifest = SegmentManifest.for_ref(ref, entries, 1, chunk_size=CHUNK, encryption=wrapped)
    _put(storage, ref, stored, manifest.to_json())


def strip_encryption(storage: RemoteStorage, ref: RemoteSegmentRef, forged: Mapping[ObjectKind, bytes]) -> None:
    """Format 2 with ``encryption: null``: plaintext chunks, every CRC-32C and SHA-256 right."""
    _chunked(storage, ref, forged, compress=False, keys=None)


def rewrap_with_public_key(public_key: Path, key_id: str) -> Forgery:
    """Format 2, zstd, encrypted under a fresh data key wrapped with the key ring's public key (which
    anyone may hold): every chunk passes its GCM tag under the segment's own AAD."""

    def forge(storage: RemoteStorage, ref: RemoteSegmentRef, forged: Mapping[ObjectKind, bytes]) -> None:
        keys = KeyRing.of(EncryptionConfig(key_id=key_id, public_key_file=public_key, private_key_files=()))
        _chunked(storage, ref, forged, compress=True, keys=keys)

    return forge


def swap_in(storage: RemoteStorage, ref: RemoteSegmentRef, other: RemoteSegmentRef) -> None:
    """The objects of ``other``, a segment the platform wrote itself (its chunks' SHA-256s its own),
    put at ``ref``'s keys, and its manifest with the ids inside renamed to ``ref``'s."""
    manifest = storage.read_manifest(other)
    assert manifest is not None
    renamed = {k: replace(e, key=ref.key(k, storage.prefix)) for k, e in manifest.objects.items()}
    for kind, entry in manifest.objects.items():
        storage.put_object(renamed[kind].key, storage.get_range(entry.key, 0, None))
    tip = ref.topic_id_partition
    doc = replace(
        manifest,
        topic=tip.topic,
        topic_id=tip.topic_id,
        partition=tip.partition,
        base_offset=ref.base_offset,
        segment_id=str(ref.segment_id),
        objects=renamed,
    )
    assert doc.format_version == CHUNKED_FORMAT and doc.tamper_evident
    storage.put_object(ref.key(ObjectKind.MANIFEST, storage.prefix), doc.to_json())
