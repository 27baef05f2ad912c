"""Sizes and ages as a person reads them, the one idiom every output uses: the ``tiering`` command,
the Spark apps' lines and the Tiering page (which must not import the command line).

Sizes are binary (KiB = 1024 bytes), as Kafka's log segment settings are; ages are rounded down
to the largest unit that still reads as a small number.
"""

from __future__ import annotations


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"


def fmt_age(ms: int) -> str:
    """``45s``, ``12m``, ``5h``, ``3d``: seconds below two minutes, minutes below two hours, hours
    below two days, then days."""
    if ms < 120_000:
        return f"{ms // 1000}s"
    if ms < 7_200_000:
        return f"{ms // 60_000}m"
    if ms < 172_800_000:
        return f"{ms // 3_600_000}h"
    return f"{ms // 86_400_000}d"
