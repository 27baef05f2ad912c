"""CRC-32C helpers: hex form for manifests, and combining the CRCs of adjacent byte ranges.

Multipart uploads checksum each part as it streams (parts go up in parallel); combining the
part CRCs gives the whole object's CRC without a second read of the file.
"""

from __future__ import annotations

from tiering_core.kafka.crc import crc32c

__all__ = ["crc32c", "crc32c_combine", "crc_hex"]

_POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected


def crc_hex(value: int) -> str:
    """The manifest's form of a CRC-32C: 8 lower-case hex digits."""
    return f"{value & 0xFFFFFFFF:08x}"


def _multmodp(a: int, b: int) -> int:
    """a(x) * b(x) modulo the CRC polynomial (reflected bit order), as zlib's crc32_combine does."""
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                break
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return p


def _powers() -> list[int]:
    table = []
    p = 1 << 30  # x^1
    for _ in range(32):
        table.append(p)
        p = _multmodp(p, p)
    return table


_X2N = _powers()  # x^(2^k) mod p


def _x8nmodp(length: int) -> int:
    """x^(8 * length) mod p."""
    p = 1 << 31  # x^0
    k = 3
    while length:
        if length & 1:
            p = _multmodp(_X2N[k & 31], p)
        length >>= 1
        k += 1
    return p


def crc32c_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32C of A + B from crc(A), crc(B) and len(B)."""
    return _multmodp(_x8nmodp(len2), crc1) ^ (crc2 & 0xFFFFFFFF)
