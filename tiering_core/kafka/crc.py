"""CRC-32C (Castagnoli), the checksum of record batches and producer snapshots.

The ``crc32c`` package uses the CPU's CRC instructions (SSE4.2 / ARMv8) when present, which is
what lets a CRC check keep up with reading the file.
"""

from __future__ import annotations

import crc32c as _crc32c


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32C of ``data``, continuing from ``value`` (the CRC of what came before)."""
    return int(_crc32c.crc32c(data, value))


#: The C function itself, for hot loops that cannot afford a Python-level wrapper call.
crc32c_raw = _crc32c.crc32c
