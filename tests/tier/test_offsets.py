"""Offsets over the tier as plain values (``tiering_core/tier/offsets.py``): inclusive ranges and
their merging, the global log start, the first offset the remote tier serves, what only the tier
serves, and the recorded tiering gaps as ``status`` shows them (docs/kafka-rules.md section 10)."""

from __future__ import annotations

from tests.engine_support import TieringEnv, tip_of, write_segments
from tiering_core.runs.copy import run_copy
from tiering_core.tier.offsets import (
    OffsetRange,
    first_served_offset,
    global_log_start,
    merge_offset_ranges,
    recorded_gaps,
    remote_only_offsets,
)


def test_recorded_gaps_are_shown_merged(fs_env: TieringEnv) -> None:
    """A gap seen again by a later run, wider, is one range in ``status``'s ``gaps``."""
    w = fs_env.writer()
    write_segments(w, 1)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        assert run_copy(ctx, w.tp).segments_copied == 1
        lease = ctx.metadata.acquire_lease(tip_of(w), "test")
        for start, end in ((10, 14), (40, 44), (12, 19), (20, 24)):
            ctx.metadata.record_gap(tip_of(w), start, end, lease)
        ctx.metadata.release_lease(lease)
        assert recorded_gaps(ctx.metadata, tip_of(w)) == [[10, 24], [40, 44]]


def test_offset_ranges_merge_when_they_overlap_or_touch() -> None:
    assert merge_offset_ranges([]) == []
    assert merge_offset_ranges([(20, 24), (10, 14), (15, 16), (30, 31), (13, 19)]) == [
        OffsetRange(10, 24),
        OffsetRange(30, 31),
    ]
    assert OffsetRange(3, 7).as_list() == [3, 7]


def test_the_log_starts_and_what_only_the_tier_serves() -> None:
    assert global_log_start(None, None) is None
    assert (global_log_start(5, None), global_log_start(None, 9), global_log_start(5, 9), global_log_start(9, 5)) == (
        5,
        9,
        9,
        9,
    )
    # The first served offset: the finished segments' first, raised by a DeleteRecords inside it.
    assert (first_served_offset(7, None, 0), first_served_offset(7, 12, 7), first_served_offset(7, 3, 3)) == (7, 12, 7)
    assert first_served_offset(None, None, 4) == 4  # nothing finished: the recorded remote log start
    # Readable from the tier only: tiered offsets below the broker's local log start.
    assert remote_only_offsets(None, 20, 10) is None
    assert remote_only_offsets(0, 20, 10) == OffsetRange(0, 9)
    assert remote_only_offsets(0, 5, 10) == OffsetRange(0, 5)
    assert remote_only_offsets(10, 20, 10) is None  # the broker still holds every tiered offset
