"""The page's section of the last erasures: nothing without one; counts, never a key's digest."""

from __future__ import annotations

from tiering_airflow.ui.erasures import erasures_html, table_erasures_html
from tiering_core.metadata.erasures import STARTED, ErasureRecord, SegmentErasure, TableErasureRecord

NOW_MS = 1_700_000_000_000


def test_no_erasure_no_section() -> None:
    assert erasures_html([], NOW_MS) == "" and table_erasures_html([], NOW_MS) == ""


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


def test_a_table_row_counts_rows_snapshots_and_files_and_marks_one_not_finished() -> None:
    going = TableErasureRecord("e-1", "orders", "kafka.orders", "1" * 36, NOW_MS - 120_000, rows_deleted=5)
    assert going.outcome == STARTED
    section = table_erasures_html([going], NOW_MS)
    assert "Last erasures from export tables" in section and '<td data-label="Table">kafka.orders</td>' in section
    assert '<td data-label="Rows deleted">5</td><td data-label="Snapshots expired">0</td>' in section
    assert '<td class="bad" data-label="Outcome">not finished (under way, or killed: run it again)</td>' in section
    assert "2m ago" in section
