"""Format-2 objects (docs/segment-format.md): chunks, each optionally zstd-compressed, then
optionally sealed with AES-256-GCM under the segment's data key.

A chunk's additional authenticated data names its segment, its object kind, its index and the
object's chunk count, so a chunk moved to another place, another object or another segment, or
an object cut short, fails its tag. Every chunk also carries the CRC-32C of its stored bytes in
the manifest, which catches damage before any decryption, and the SHA-256 of them, which catches
forgery: the manifest's own digest is in the metadata store, so a chunk nobody with the store's
word wrote is refused, encrypted or not. Decoding is bounded: a chunk's stored
size is checked against the manifest before it is read, and decompression stops one byte past
the chunk's original length.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, cast

import zstandard
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.batch import HEADER_SIZE, parse_header
from tiering_core.storage.checksum import crc32c, crc_hex
from tiering_core.storage.errors import InvalidRangeError, RemoteStorageError
from tiering_core.storage.layout import ObjectKind
from tiering_core.storage.manifest import Chunk, ObjectEntry, sha256_hex

NONCE_SIZE = 12
TAG_SIZE = 16
DATA_KEY_SIZE = 32
ZSTD_LEVEL = 3
#: Batches ``auto`` samples from the start of a log before it decides.
AUTO_SAMPLE_BATCHES = 16
#: The most stored bytes one GET of a sequential read asks for (it starts at one chunk).
READ_AHEAD_BYTES = 16 * 1024 * 1024


class ChunkError(RemoteStorageError):
    """A stored chunk fails its checks (size, CRC-32C, GCM tag, decompression): it is never served."""


@dataclass(frozen=True)
class ChunkSealer:
    """The AES-256-GCM seal of one segment's chunks under its data key (never printed)."""

    segment_id: str
    key: bytes = field(repr=False)

    def aad(self, kind: ObjectKind, index: int, count: int) -> bytes:
        return f"tiering-chunk-v2:{self.segment_id}:{kind.value}:{index}:{count}".encode()

    def seal(self, kind: ObjectKind, index: int, count: int, payload: bytes) -> bytes:
        nonce = os.urandom(NONCE_SIZE)
        return nonce + AESGCM(self.key).encrypt(nonce, payload, self.aad(kind, index, count))

    def open(self, kind: ObjectKind, index: int, count: int, stored: bytes) -> bytes:
        """The payload; InvalidTag when the chunk was altered, moved, swapped or cut."""
        return AESGCM(self.key).decrypt(stored[:NONCE_SIZE], stored[NONCE_SIZE:], self.aad(kind, index, count))


def log_is_compressed(source: Path | bytes) -> bool:
    """Whether the first batches of a ``.log`` carry a compression codec (``auto``'s sample):
    compressing compressed batches again only costs time."""
    size = len(source) if isinstance(source, bytes) else Path(source).stat().st_size
    position = 0
    with _open(source) as stream:
        for _ in range(AUTO_SAMPLE_BATCHES):
            stream.seek(position)
            header = stream.read(HEADER_SIZE)
            if len(header) < HEADER_SIZE:
                return False
            try:
                batch = parse_header(header, 0, Path("<sample>"), size - position)
            except CorruptLogError:  # not batches we can read: the bytes are all that matter
                return False
            if batch.codec != 0:
                return True
            position += batch.size_in_bytes
    return False


def _open(source: Path | bytes) -> BinaryIO:
    return io.BytesIO(source) if isinstance(source, bytes) else Path(source).open("rb")


def index_plain_object(source: Path, *, kind: ObjectKind, key: str, chunk_size: int) -> ObjectEntry:
    """The entry of ``source`` stored as it is (no compression, no encryption: each stored chunk
    is its original bytes), computed by one read of the file; the file itself is then uploaded,
    and the upload's size and CRC-32C must equal the entry's (the source did not change)."""
    sink = cast(BinaryIO, _Discard())
    return encode_object(source, sink, kind=kind, key=key, chunk_size=chunk_size, compress=False, sealer=None)


class _Discard(io.RawIOBase):
    """A sink that keeps nothing: the index pass of a plain object writes no copy of it."""

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        return len(data)


def encode_object(
    source: Path | bytes,
    out: BinaryIO,
    *,
    kind: ObjectKind,
    key: str,
    chunk_size: int,
    compress: bool,
    sealer: ChunkSealer | None,
) -> ObjectEntry:
    """Write ``source`` to ``out`` as stored chunks; its entry (original size and CRC-32C, the
    chunk index). The source is read one chunk at a time."""
    size = len(source) if isinstance(source, bytes) else Path(source).stat().st_size
    count = -(-size // chunk_size)
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL) if compress else None
    chunks: list[Chunk] = []
    value = stored_offset = 0
    with _open(source) as stream:
        for index in range(count):
            original = stream.read(min(chunk_size, size - index * chunk_size))
            if len(original) != min(chunk_size, size - index * chunk_size):
                raise RemoteStorageError(f"{key}: the source changed while it was encoded")
            value = crc32c(original, value)
            payload = compressor.compress(original) if compressor is not None else original
            stored = sealer.seal(kind, index, count, payload) if sealer is not None else payload
            out.write(stored)
            chunks.append(
                Chunk(index * chunk_size, stored_offset, len(stored), crc_hex(crc32c(stored)), sha256_hex(stored))
            )
            stored_offset += len(stored)
        if stream.read(1):
            raise RemoteStorageError(f"{key}: the source changed while it was encoded")
    return ObjectEntry(
        kind,
        key,
        size,
        crc_hex(value),
        compression="zstd" if compress else "none",
        stored_size=stored_offset,
        chunks=tuple(chunks),
    )


@dataclass(frozen=True)
class ChunkedObject:
    """One format-2 object as its manifest describes it: what reading and checking it needs."""

    segment: str  # how messages name the segment
    entry: ObjectEntry
    chunk_size: int
    sealer: ChunkSealer | None

    @property
    def chunks(self) -> tuple[Chunk, ...]:
        return self.entry.chunks or ()

    def where(self, index: int) -> str:
        return f"{self.segment}: {self.entry.kind.value} chunk {index}"

    def decode(self, index: int, stored: bytes) -> bytes:
        """Chunk ``index``'s original bytes from its stored bytes, or a ChunkError naming it."""
        chunk = self.chunks[index]
        if len(stored) != chunk.stored_size:
            raise ChunkError(f"{self.where(index)}: {len(stored)} stored bytes, manifest says {chunk.stored_size}")
        if crc_hex(crc32c(stored)) != chunk.crc32c:
            raise ChunkError(f"{self.where(index)}: crc32c {crc_hex(crc32c(stored))} != manifest {chunk.crc32c}")
        if chunk.sha256 is not None and sha256_hex(stored) != chunk.sha256:
            raise ChunkError(f"{self.where(index)}: its SHA-256 is not the manifest's (replaced or forged)")
        payload = stored
        if self.sealer is not None:
            try:
                payload = self.sealer.open(self.entry.kind, index, len(self.chunks), stored)
            except (InvalidTag, ValueError):
                raise ChunkError(
                    f"{self.where(index)}: fails its AES-GCM tag (altered, moved, swapped or cut)"
                ) from None
        length = self.entry.chunk_length(index, self.chunk_size)
        if self.entry.compression == "zstd":
            try:
                with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(payload)) as reader:
                    payload = reader.read(length + 1)  # bounded: never more than the chunk
            except zstandard.ZstdError as exc:
                raise ChunkError(f"{self.where(index)}: does not decompress: {exc}") from None
        if len(payload) != length:
            raise ChunkError(f"{self.where(index)}: holds {len(payload)} bytes, not {length}")
        return payload

    def chunk_range(self, start: int, end: int) -> range:
        """The chunks holding original bytes [start, end] (``end`` inclusive, within the object)."""
        return range(start // self.chunk_size, end // self.chunk_size + 1)

    def read(self, get: Callable[[int, int], bytes], start: int, end: int | None) -> bytes:
        """Original bytes [start, end] (inclusive; an ``end`` past the object reads to its end)
        with one ranged GET of the chunks holding them (``get(first, last)`` inclusive)."""
        size = self.entry.size
        if start >= size and not (start == 0 and size == 0):
            raise InvalidRangeError(
                f"{self.where(start // self.chunk_size)}: range start {start} is beyond the object's {size} bytes"
            )
        if size == 0:
            return b""
        last = size - 1 if end is None else min(end, size - 1)
        wanted = self.chunk_range(start, last)
        data = self._decoded(get, wanted)
        offset = wanted.start * self.chunk_size
        return data[start - offset : last - offset + 1]

    def _decoded(self, get: Callable[[int, int], bytes], wanted: range) -> bytes:
        first, last = self.chunks[wanted.start], self.chunks[wanted.stop - 1]
        stored = get(first.stored_offset, last.stored_offset + last.stored_size - 1)
        parts = []
        for index in wanted:
            chunk = self.chunks[index]
            at = chunk.stored_offset - first.stored_offset
            parts.append(self.decode(index, stored[at : at + chunk.stored_size]))
        return b"".join(parts)

    def stream(self, get: Callable[[int, int], bytes], start: int) -> BinaryIO:
        """A stream of the original bytes from ``start``, fetching chunks as it is read."""
        if start > self.entry.size or (start == self.entry.size and start != 0):
            raise InvalidRangeError(f"{self.segment}: {self.entry.kind.value} start {start} is beyond its end")
        return io.BufferedReader(_ChunkStream(self, get, start), 1 << 16)  # type: ignore[return-value]


class _ChunkStream(io.RawIOBase):
    """Reads chunk by chunk from a position: the first two GETs ask for one chunk each, each next
    one for twice as many as the last, up to READ_AHEAD_BYTES, so a short read costs one or two
    chunks (a batch may cross into the next) and a long one few requests."""

    def __init__(self, obj: ChunkedObject, get: Callable[[int, int], bytes], start: int) -> None:
        self.obj = obj
        self.get = get
        self.next_chunk = start // obj.chunk_size
        self.buffer = memoryview(b"")
        self.skip = start - self.next_chunk * obj.chunk_size
        self.batch = 1
        self.gets = 0

    def readable(self) -> bool:
        return True

    def readinto(self, target: bytearray | memoryview) -> int:  # type: ignore[override]
        if not self.buffer:
            count = len(self.obj.chunks)
            if self.next_chunk >= count:
                return 0
            most = max(1, READ_AHEAD_BYTES // max(1, self.obj.chunk_size))
            wanted = range(self.next_chunk, min(count, self.next_chunk + min(self.batch, most)))
            self.buffer = memoryview(self.obj._decoded(self.get, wanted))[self.skip :]
            self.skip = 0
            self.next_chunk = wanted.stop
            self.gets += 1
            if self.gets >= 2:
                self.batch *= 2
        n = min(len(target), len(self.buffer))
        target[:n] = self.buffer[:n]
        self.buffer = self.buffer[n:]
        return n
