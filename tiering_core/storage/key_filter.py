"""A Bloom filter of one segment's record keys: which segments an erasure by key must read.

An erasure by key would otherwise decompress every segment of a topic. A filter per segment,
stored beside it and anchored by the SHA-256 of its bytes in the segment's manifest, answers
"certainly not here" for most segments; a "maybe" costs one read of the segment. A filter never
answers "no" for a key it holds (no false negatives); a "maybe" for a key it does not hold comes
at about the rate it was sized for.

Serialised form (big-endian): ``magic "TKBF", version:u16 = 1, hashes:u16, bits:u64``, then the
bit array, ``ceil(bits / 8)`` bytes, bit ``i`` at byte ``i // 8``, mask ``1 << (i % 8)``, unused
high bits of the last byte zero (one form per filter, so its digest is stable).

The ``hashes`` positions of a key are ``(h1 + i * h2) mod bits`` (Kirsch and Mitzenmacher's
double hashing) with ``h1, h2`` the two big-endian 64-bit halves of the key's 16-byte BLAKE2b
digest, personalised for this use (``h2`` forced odd so that no key maps to a single bit).
Records with a null key are not in the filter: an erasure names a key.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tiering_core.errors import TieringError
from tiering_core.kafka.batch import iter_batch_headers
from tiering_core.kafka.records import iter_batches
from tiering_core.storage.layout import ObjectKind

MAGIC = b"TKBF"
VERSION = 1
HEADER = struct.Struct(">4sHHQ")
#: A false positive costs an erasure a whole segment's read; each bit costs every segment a bit.
#: At 0.1% (14.4 bits, 1.8 bytes per key) the filters and their false positives together cost an
#: erasure about 1% of the tier's bytes for records of 200 bytes, less for larger ones (at 1%:
#: 9.6 bits per key, but a false positive in one segment of a hundred).
DEFAULT_FALSE_POSITIVE_RATE = 0.001
#: The fewest bits a filter has (an empty segment's filter is this, all zero).
MIN_BITS = 64
#: The most bits a filter may have: 64 MiB of bit array, room for about 37 million keys at 0.1 %.
MAX_BITS = 64 * 1024 * 1024 * 8
#: The most hash positions per key (the best count for a 1e-9 rate is 30).
MAX_HASHES = 32
_PERSON = b"tiering-keys-v1"
_HALVES = struct.Struct(">QQ")


class KeyFilterError(TieringError, ValueError):
    """Serialised filter bytes are malformed, or a filter is asked for sizes it cannot have."""


def _halves(key: bytes) -> tuple[int, int]:
    h1, h2 = _HALVES.unpack(hashlib.blake2b(key, digest_size=16, person=_PERSON).digest())
    return h1, h2 | 1


def optimal_sizes(expected_keys: int, false_positive_rate: float = DEFAULT_FALSE_POSITIVE_RATE) -> tuple[int, int]:
    """(bits, hashes) for ``expected_keys`` at ``false_positive_rate``: ``m = -n ln p / (ln 2)^2``,
    ``k = (m / n) ln 2``, within ``[MIN_BITS, MAX_BITS]`` and ``[1, MAX_HASHES]``."""
    if not 0.0 < false_positive_rate < 1.0:
        raise KeyFilterError(f"false-positive rate {false_positive_rate} is not between 0 and 1")
    if expected_keys < 0:
        raise KeyFilterError(f"expected key count {expected_keys} is negative")
    n = max(expected_keys, 1)
    wanted = math.ceil(-n * math.log(false_positive_rate) / math.log(2) ** 2)
    if wanted > MAX_BITS:
        raise KeyFilterError(
            f"{expected_keys} keys at a false-positive rate of {false_positive_rate} need {wanted} bits, "
            f"more than the {MAX_BITS} a filter may have"
        )
    bits = max(MIN_BITS, wanted)
    hashes = min(MAX_HASHES, max(1, round(bits / n * math.log(2))))
    return bits, hashes


@dataclass(frozen=True)
class KeyFilter:
    """A built filter: ``bits`` bits in ``bit_array``, ``hashes`` positions per key."""

    bits: int
    hashes: int
    bit_array: bytes

    def __post_init__(self) -> None:
        if not MIN_BITS <= self.bits <= MAX_BITS or not 1 <= self.hashes <= MAX_HASHES:
            raise KeyFilterError(f"a key filter of {self.bits} bits and {self.hashes} hashes is out of bounds")
        if len(self.bit_array) != (self.bits + 7) // 8:
            raise KeyFilterError(f"{len(self.bit_array)} bytes cannot hold exactly {self.bits} bits")

    def may_contain(self, key: bytes) -> bool:
        """False only if no record of ``key`` went into the filter."""
        h1, h2 = _halves(key)
        array, m = self.bit_array, self.bits
        for i in range(self.hashes):
            position = (h1 + i * h2) % m
            if not array[position >> 3] & (1 << (position & 7)):
                return False
        return True

    def to_bytes(self) -> bytes:
        return HEADER.pack(MAGIC, VERSION, self.hashes, self.bits) + self.bit_array

    @property
    def sha256(self) -> str:
        """The hex SHA-256 of the serialised form: what a manifest carries to anchor it."""
        return hashlib.sha256(self.to_bytes()).hexdigest()

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> KeyFilter:
        """Parse serialised bytes, every size checked against the bounds and the bytes at hand
        before anything is allocated; ``KeyFilterError`` names what is wrong."""
        view = memoryview(data)
        if len(view) < HEADER.size:
            raise KeyFilterError(f"key filter of {len(view)} bytes is shorter than its {HEADER.size}-byte header")
        magic, version, hashes, bits = HEADER.unpack_from(view)
        if magic != MAGIC:
            raise KeyFilterError(f"not a key filter: magic {magic!r}, expected {MAGIC!r}")
        if version != VERSION:
            raise KeyFilterError(f"key filter version {version} is not supported (only {VERSION})")
        if not 1 <= hashes <= MAX_HASHES:
            raise KeyFilterError(f"key filter has {hashes} hashes, outside [1, {MAX_HASHES}]")
        if not MIN_BITS <= bits <= MAX_BITS:
            raise KeyFilterError(f"key filter has {bits} bits, outside [{MIN_BITS}, {MAX_BITS}]")
        length = (bits + 7) // 8
        if len(view) - HEADER.size != length:
            raise KeyFilterError(
                f"key filter of {bits} bits needs {length} bytes of bit array, has {len(view) - HEADER.size}"
            )
        array = bytes(view[HEADER.size :])
        if bits % 8 and array[-1] >> (bits % 8):
            raise KeyFilterError("key filter has bits set beyond its bit count")
        return cls(bits, hashes, array)


class KeyFilterBuilder:
    """Adds keys to a filter sized up front; ``build`` freezes it."""

    def __init__(self, expected_keys: int, false_positive_rate: float = DEFAULT_FALSE_POSITIVE_RATE) -> None:
        self.bits, self.hashes = optimal_sizes(expected_keys, false_positive_rate)
        self._array = bytearray((self.bits + 7) // 8)

    def add(self, key: bytes) -> None:
        h1, h2 = _halves(key)
        array, m = self._array, self.bits
        for i in range(self.hashes):
            position = (h1 + i * h2) % m
            array[position >> 3] |= 1 << (position & 7)

    def build(self) -> KeyFilter:
        return KeyFilter(self.bits, self.hashes, bytes(self._array))


def build_key_filter(
    keys: Iterable[bytes | None], expected_keys: int, false_positive_rate: float = DEFAULT_FALSE_POSITIVE_RATE
) -> KeyFilter:
    """A filter of ``keys`` (null keys skipped) sized for ``expected_keys``."""
    builder = KeyFilterBuilder(expected_keys, false_positive_rate)
    for key in keys:
        if key is not None:
            builder.add(key)
    return builder.build()


def segment_key_filter(
    log_path: Path,
    false_positive_rate: float = DEFAULT_FALSE_POSITIVE_RATE,
    *,
    max_batch_bytes: int | None = None,
) -> KeyFilter:
    """The filter of every non-null key in a segment's data records (control records aside).

    Sized from the data batches' record counts (a walk over the 61-byte headers), then one pass
    over the records; each batch's CRC is checked and its decompression capped by the reader.
    """
    expected = sum(h.records_count for h in iter_batch_headers(log_path) if not h.is_control and h.records_count > 0)
    builder = KeyFilterBuilder(expected, false_positive_rate)
    for header, records in iter_batches(log_path, max_batch_bytes=max_batch_bytes):
        if header.is_control:
            continue
        for record in records:
            if record.key is not None:
                builder.add(record.key)
    return builder.build()


def with_key_filter(files: Mapping[ObjectKind, Path | bytes]) -> dict[ObjectKind, Path | bytes]:
    """A segment's objects with the key filter of its log (a file) beside them, as every copy of a
    segment (copy, rewrite, erase) uploads it. Without one when the log is not a file or has more
    keys than a filter may hold: an erasure then reads the whole segment, as for one copied
    before filters."""
    log_path = files.get(ObjectKind.LOG)
    out = dict(files)
    if not isinstance(log_path, Path):
        return out
    try:
        out[ObjectKind.KEY_FILTER] = segment_key_filter(log_path).to_bytes()
    except KeyFilterError:
        out.pop(ObjectKind.KEY_FILTER, None)
    return out
