"""CRC-32C (Castagnoli), the checksum of record batches and producer snapshots.

The ``crc32c`` package uses the CPU's CRC instructions (SSE4.2 / ARMv8) when present, which is
what lets a CRC check keep up with reading the file. Without them it falls back to a software
table, several times slower: still correct, so importing this module only warns, once.
"""

from __future__ import annotations

import logging

import crc32c as _crc32c

log = logging.getLogger(__name__)

_warned = False


def check_hardware_acceleration() -> bool:
    """Whether ``crc32c`` runs on the CPU's CRC instructions; logs one warning (per process) if not."""
    global _warned
    hardware = bool(getattr(_crc32c, "hardware_based", False))
    if not hardware and not _warned:
        _warned = True
        log.warning(
            "the crc32c package is not hardware-accelerated on this machine (no SSE4.2/ARMv8 CRC "
            "instructions found): CRC-32C checks of record batches and snapshots run several times slower"
        )
    return hardware


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32C of ``data``, continuing from ``value`` (the CRC of what came before)."""
    return int(_crc32c.crc32c(data, value))


#: The C function itself, for hot loops that cannot afford a Python-level wrapper call.
crc32c_raw = _crc32c.crc32c

check_hardware_acceleration()
