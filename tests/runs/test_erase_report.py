"""An erasure's lines name each segment, each export table and the counts, and the audit trail's
one line per erasure and partition or table; no key, only counts and ids."""

from __future__ import annotations

from dataclasses import replace

from tiering_core.metadata.erasures import (
    HELD,
    ErasureRecord,
    LocalSegment,
    LocalSegments,
    SegmentErasure,
    TableErasureRecord,
)
from tiering_core.runs.erase import ErasureResult, PartitionErasure, SegmentHit, TableErasure
from tiering_core.runs.erase_report import format_erasure, format_erasures, local_segment_lines


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


def test_an_export_table_s_part_is_a_line_of_its_own_and_a_held_snapshot_is_named_in_a_dry_run() -> None:
    partition = PartitionErasure("orders", 0, "T" * 22, segments_read=1, hits=[SegmentHit("s-1", 0, 9, 2)])
    held = "snapshot 7 is held by tag audit and still holds rows of the erased keys: drop the tag and run erase again"
    table = TableErasure("kafka.orders", "u-1", rows_deleted=2, data_files_deleted=1, snapshots_expired=3, held=[held])
    result = ErasureResult("e-1", ("aa" * 32,), [partition], failures=[f"kafka.orders: {held}"], tables=[table])
    lines = format_erasure(result).splitlines()
    assert lines[-2:] == [
        "table kafka.orders: deleted 2 row(s) and 1 data file(s) holding the key(s), expired 3 snapshot(s); "
        "1 snapshot(s) held by a tag or branch",
        "erase e-1: 1 key(s), 1 partition(s), removed 2 record(s), 1 table(s): 2 row(s), 1 failure(s)",
    ]
    planned = ErasureResult("e-2", ("aa" * 32,), [], dry_run=True, tables=[replace(table, dry_run=True)])
    assert format_erasure(planned).splitlines()[:2] == [
        "table kafka.orders: would delete 2 row(s) and 1 data file(s) holding the key(s), would expire 3 "
        "snapshot(s); 1 snapshot(s) held by a tag or branch",
        f"table kafka.orders: {held}",
    ]
    alone = ErasureResult("e-3", ("aa" * 32,), [], tables=[TableErasure("kafka.orders", skipped="no table")])
    assert format_erasure(alone).splitlines()[0] == "table kafka.orders: left alone: no table"
    record = TableErasureRecord("e-1", "orders", "kafka.orders", "u-1", 5, 2, 1, 3, outcome=HELD)
    assert format_erasures([], [record]) == (
        "e-1 table kafka.orders held: 2 row(s) deleted, 1 data file(s) deleted, 3 snapshot(s) expired, started 5"
    )


def test_the_local_segments_lines_say_when_retention_removes_each_or_why_it_cannot_be_said() -> None:
    """Never by time (-1), not known here (None), the active segment, one not yet copied, and the
    size limit named without a time; a partition not checked, or holding none, in one line."""
    segments = (
        LocalSegment(0, "00000000000000000000.log", 2, 1_700_000_000_000),
        LocalSegment(10, "00000000000000000010.log", 1, 1_700_000_100_000, copied=False),
        LocalSegment(20, "00000000000000000020.log", 1, 1_700_000_200_000, active=True),
    )
    never = LocalSegments("/kafka", segments, 3, local_retention_ms=-1, local_retention_bytes=-1)
    assert local_segment_lines("orders-0", never) == [
        "orders-0: 3 local segment(s) in /kafka still hold 4 record(s) of the key(s): the broker's files, which "
        "the platform cannot change; local retention removes them",
        "orders-0: local segment 00000000000000000000.log (base offset 0): 2 record(s); never by time "
        "(local.retention.ms -1); never by size (local.retention.bytes -1)",
        "orders-0: local segment 00000000000000000010.log (base offset 10): 1 record(s); never by time "
        "(local.retention.ms -1) once copied to the tier (not yet: the next copy tiers the key(s) again); "
        "never by size (local.retention.bytes -1)",
        "orders-0: local segment 00000000000000000020.log (base offset 20): 1 record(s); the active segment: "
        "retention never removes it before it rolls; never by size (local.retention.bytes -1)",
    ]
    unknown = LocalSegments("/kafka", segments[:1], 1)
    assert local_segment_lines("orders-0", unknown)[1].endswith(
        "by time: not known here (local.retention.ms not known); by size: not known here "
        "(local.retention.bytes not known)"
    )
    none = LocalSegments("/kafka", (), 4, 60_000, -1)
    assert local_segment_lines("orders-0", none) == ["orders-0: no local segment holds the key(s) (4 read in /kafka)"]
    elsewhere = LocalSegments(None, not_checked="no log dir of orders-0 on this host")
    assert local_segment_lines("e-1 orders-0", elsewhere) == [
        "e-1 orders-0: local segments not checked: no log dir of orders-0 on this host"
    ]
    record = ErasureRecord("e-1", "orders", "T" * 22, 0, ("aa" * 32,), "me", 5, local_segments=elsewhere)
    assert format_erasures([record]).splitlines()[1] == local_segment_lines("e-1 orders-0", elsewhere)[0]
