"""An erasure's lines name each segment and the counts, and the audit trail's one line per
erasure and partition; no key, only counts and ids."""

from __future__ import annotations

from tiering_core.metadata.erasures import ErasureRecord, SegmentErasure
from tiering_core.runs.erase import ErasureResult, PartitionErasure, SegmentHit
from tiering_core.runs.erase_report import format_erasure, format_erasures


def test_the_lines_name_each_segment_and_the_counts() -> None:
    hits = [SegmentHit("s-1", 0, 9, 3, "n-1"), SegmentHit("s-2", 20, 29, 1, "n-2")]
    partition = PartitionErasure(
        "orders", 0, "T" * 22, segments_read=3, segments_filtered_out=5, segments_unchanged=1, hits=hits
    )
    result = ErasureResult("e-1", ("aa" * 32,), [partition])
    assert format_erasure(result).splitlines() == [
        "orders-0: segment s-1 [0..9]: removed 3 record(s) (now n-1)",
        "orders-0: segment s-2 [20..29]: removed 1 record(s) (now n-2)",
        "orders-0: read 3 segment(s) (5 ruled out by their key filter), 2 held the key(s), 1 left as they were",
        "erase e-1: 1 key(s), 1 partition(s), removed 4 record(s)",
    ]
    record = ErasureRecord("e-1", "orders", "T" * 22, 0, ("aa" * 32,), "dag run 7", 5, (SegmentErasure("a", "b", 4),))
    assert format_erasures([record]) == (
        "e-1 orders-0 started: 1 key(s), 1 segment(s) copied again, 4 record(s) removed, by dag run 7, started 5"
    )
    assert format_erasures([]) == "no erasure recorded"
