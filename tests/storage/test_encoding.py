"""How new copies are stored, and whether a stored segment is stored so already: a rewrite leaves
a segment be only when a copy made now would store it the same way."""

from __future__ import annotations

from pathlib import Path

from tests.storage.keys_support import rsa_encryption, write_key_pair
from tiering_core.storage.config import DEFAULT_CHUNK_SIZE, EncryptionConfig
from tiering_core.storage.encoding import SegmentEncoding
from tiering_core.storage.keys import AWS_KMS, RSA_OAEP, KeyRing
from tiering_core.storage.layout import ObjectKind
from tiering_core.storage.manifest import CHUNKED_FORMAT, Chunk, ObjectEntry, SegmentManifest, WrappedKey

SEGMENT_ID = "00000000-0000-4000-8000-000000000001"
KMS_KEY = "1234abcd-12ab-34cd-56ef-1234567890ab"


def entry(kind: ObjectKind, compression: str, *, digested: bool = True) -> ObjectEntry:
    chunk = Chunk(0, 0, 10, "00000000", "ab" * 32 if digested else None)
    return ObjectEntry(kind, f"key/{kind.value}", 10, "00000000", compression, 10, (chunk,))


def manifest(
    log: str = "none",
    index: str = "none",
    *,
    chunk_size: int | None = 1024,
    wrapped: WrappedKey | None = None,
    digested: bool = True,
) -> SegmentManifest:
    objects = {
        ObjectKind.LOG: entry(ObjectKind.LOG, log, digested=digested),
        ObjectKind.OFFSET_INDEX: entry(ObjectKind.OFFSET_INDEX, index, digested=digested),
    }
    chunked = {} if chunk_size is None else {"format_version": CHUNKED_FORMAT, "chunk_size": chunk_size}
    return SegmentManifest("orders", "AAAAAAAAAAAAAAAAAAAAAA", 0, 0, SEGMENT_ID, objects, encryption=wrapped, **chunked)


def kms_ring(key_id: str = KMS_KEY) -> KeyRing:
    return KeyRing(EncryptionConfig(kms_key_id=key_id))


def test_the_default_stores_plain_chunks_of_the_default_size() -> None:
    plain = SegmentEncoding()
    assert (plain.chunk_size, plain.compression, plain.encrypts) == (DEFAULT_CHUNK_SIZE, "none", False)
    assert plain.stores_like(manifest(chunk_size=DEFAULT_CHUNK_SIZE))


def test_a_segment_without_a_digest_per_chunk_is_always_copied_again() -> None:
    encoding = SegmentEncoding(1024)
    assert encoding.stores_like(manifest())
    assert not encoding.stores_like(manifest(digested=False))
    assert not encoding.stores_like(manifest(chunk_size=None))


def test_another_chunk_size_or_compression_is_not_stored_alike() -> None:
    assert not SegmentEncoding(2048).stores_like(manifest())
    assert not SegmentEncoding(1024, "zstd").stores_like(manifest())
    assert SegmentEncoding(1024, "zstd").stores_like(manifest("zstd", "zstd"))
    assert not SegmentEncoding(1024, "zstd").stores_like(manifest("zstd", "none"))


def test_auto_takes_any_compression_of_the_log_but_zstd_for_the_rest() -> None:
    auto = SegmentEncoding(1024, "auto")
    assert auto.stores_like(manifest("none", "zstd")) and auto.stores_like(manifest("zstd", "zstd"))
    assert not auto.stores_like(manifest("zstd", "none"))


def test_encryption_must_match_and_be_wrapped_under_the_current_key(tmp_path: Path) -> None:
    ring = kms_ring()
    by_arn = WrappedKey(AWS_KMS, f"arn:aws:kms:eu-west-1:111122223333:key/{KMS_KEY}", b"w")
    assert SegmentEncoding(1024, keys=ring).encrypts
    assert SegmentEncoding(1024, keys=ring).stores_like(manifest(wrapped=by_arn))
    assert not SegmentEncoding(1024, keys=ring).stores_like(manifest())
    assert not SegmentEncoding(1024).stores_like(manifest(wrapped=by_arn))
    other_key = WrappedKey(AWS_KMS, "arn:aws:kms:eu-west-1:111122223333:key/another", b"w")
    assert not SegmentEncoding(1024, keys=ring).stores_like(manifest(wrapped=other_key))
    rotated = write_key_pair(tmp_path, "k2")
    old = write_key_pair(tmp_path, "k1")
    rsa_ring = KeyRing(rsa_encryption(rotated, old))
    assert SegmentEncoding(1024, keys=rsa_ring).stores_like(manifest(wrapped=WrappedKey(RSA_OAEP, "k2", b"w")))
    assert not SegmentEncoding(1024, keys=rsa_ring).stores_like(manifest(wrapped=WrappedKey(RSA_OAEP, "k1", b"w")))


def test_a_ring_of_old_private_keys_alone_reads_but_does_not_encrypt(tmp_path: Path) -> None:
    reading = KeyRing(rsa_encryption(None, write_key_pair(tmp_path, "k1")))
    encoding = SegmentEncoding(1024, keys=reading)
    assert not encoding.encrypts
    assert encoding.stores_like(manifest())
    assert not encoding.stores_like(manifest(wrapped=WrappedKey(RSA_OAEP, "k1", b"w")))
