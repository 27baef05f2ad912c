"""Sizes and ages as a person reads them, the one idiom every output uses: the ``tiering`` command,
the Spark apps' lines and the Tiering page (which must not import the command line).

Sizes are binary (KiB = 1024 bytes), as Kafka's log segment settings are; ages are rounded down
to the largest unit that still reads as a small number.
"""

from __future__ import annotations

from datetime import UTC, datetime


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


_DURATION_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000))


def fmt_duration(ms: int) -> str:
    """``1h 3m``, ``2d 4h``, ``45s``, ``350ms``: the two largest units, for a table's ages and
    durations, where ``63m`` or ``3780950`` make a person count. Negative values keep their sign."""
    if ms < 0:
        return "-" + fmt_duration(-ms)
    if ms < 1000:
        return f"{ms}ms"
    parts: list[str] = []
    rest = ms
    for unit, size in _DURATION_UNITS:
        if rest >= size or parts:
            parts.append(f"{rest // size}{unit}")
            rest %= size
        if len(parts) == 2:
            break
    return " ".join(part for part in parts if not part.startswith("0") or part == parts[0])


def fmt_rate(bytes_per_second: float) -> str:
    """``0.4 B/s``, ``12.0 KiB/s``: a throughput, in ``fmt_bytes``' units per second (tenths of a
    byte below ten bytes a second, where a slow trickle would otherwise read as nothing)."""
    if abs(bytes_per_second) < 10:
        return f"{bytes_per_second:.1f} B/s"
    return f"{fmt_bytes(bytes_per_second)}/s"


def fmt_utc(ms: int) -> str:
    """``2026-11-30 02:28:15 UTC``: a time in milliseconds since the epoch, in UTC."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
