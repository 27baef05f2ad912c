"""Fewer garbage collections while a run builds what it keeps for thousands of partitions.

Planning a broker's partitions builds a tier view of each (segments, epochs, offsets) and keeps
them all: every object survives, so each young-generation collection (CPython's default: every
700 allocations) only promotes, and every tenth of those walks the older generation, all of the
process's objects (an Airflow task process holds a few hundred thousand). ``fewer_collections``
raises the young generation's threshold for the block and puts it back after; the collector still
runs, just less often. Measured at 4,000 partitions inside a process with Airflow loaded: the
copy sensor's planning about a fifth faster.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

#: Allocations between young-generation collections inside the block.
BULK_THRESHOLD = 50_000


@contextmanager
def fewer_collections(threshold: int = BULK_THRESHOLD) -> Iterator[None]:
    """The young generation collected every ``threshold`` allocations (never more often than the
    process had it) inside the block; the process's thresholds as they were afterwards."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], threshold), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
