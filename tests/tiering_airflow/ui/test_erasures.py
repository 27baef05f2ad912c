"""The page's section of the last erasures: nothing without one; counts, never a key's digest."""

from __future__ import annotations

from tiering_airflow.ui.erasures import erasures_html
from tiering_core.metadata.erasures import ErasureRecord, SegmentErasure

NOW_MS = 1_700_000_000_000


def test_no_erasure_no_section() -> None:
    assert erasures_html([], NOW_MS) == ""


def test_a_row_counts_keys_segments_and_records_and_shows_no_digest() -> None:
    record = ErasureRecord(
        "e-1", "orders", "AAAAAAAAAAAAAAAAAAAAAA", 3, ("ef" * 32,), "tiering erase", NOW_MS - 3_600_000,
        (SegmentErasure("old-1", "new-1", 12),), segments_read=4, outcome="finished", finished_ms=NOW_MS,
    )  # fmt: skip
    section = erasures_html([record], NOW_MS)
    assert '<td data-label="Partition">orders-3</td>' in section
    assert '<td data-label="Keys">1</td><td data-label="Segments copied again">1</td>' in section
    assert '<td data-label="Records removed">12</td><td data-label="Outcome">finished</td>' in section
    assert "60m ago" in section and "ef" * 32 not in section
