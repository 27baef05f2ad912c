"""Which segments an export writes, and from which offset: segments of the lineage that overlap
(a copy resumed inside a new leader's segment tiers it whole) give each offset to the table once,
and nothing below the partition's log start offset (a DeleteRecords) is written."""

from __future__ import annotations

from pathlib import Path

from tests.engine_support import TieringEnv, new_leader_copies, old_leader_copies
from tests.export.support import offsets_by_partition, sqlite_catalog, table_of, with_export
from tiering_core.export import run_export
from tiering_core.export.plan import ExportSegment, plan_export
from tiering_core.export.table import ExportedRanges, ExportedSegment
from tiering_core.runs.delete_records import apply_delete_records


def spans(planned: list[ExportSegment]) -> list[tuple[int, int, int]]:
    """Each planned segment's start offset, first offset written and end offset."""
    return [(s.start_offset, s.first_offset, s.end_offset) for s in planned]


def exported_values(env: TieringEnv) -> list[tuple[int, bytes]]:
    with env.context() as ctx:
        table = table_of(ctx, "orders")
        rows = table.scan(selected_fields=("offset", "value")).to_arrow()
    return sorted(zip(rows["offset"].to_pylist(), rows["value"].to_pylist(), strict=True))


def test_overlapping_segments_of_the_lineage_export_each_offset_once(tiering_env: TieringEnv, tmp_path: Path) -> None:
    old = old_leader_copies(tiering_env)
    new_leader_copies(tiering_env, old)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        planned = plan_export(ctx, "orders", done=ExportedRanges())
        assert spans(planned) == [(0, 0, 4), (5, 5, 9), (7, 10, 14)]
        result = run_export(ctx, "orders")
        assert not result.failed
        assert offsets_by_partition(table_of(ctx, "orders")) == {0: list(range(15))}
    assert exported_values(tiering_env) == [(o, f"v{o}".encode()) for o in range(15)]
    with tiering_env.context() as ctx:
        again = run_export(ctx, "orders")
        assert again.planned == [] and again.snapshots == []


def test_a_segment_copied_whole_after_an_export_adds_only_the_offsets_past_the_table(
    tiering_env: TieringEnv, tmp_path: Path
) -> None:
    old = old_leader_copies(tiering_env)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        run_export(ctx, "orders")
    new_leader_copies(tiering_env, old)
    with tiering_env.context() as ctx:
        result = run_export(ctx, "orders")
        assert spans(result.planned) == [(7, 10, 14)]
        assert not result.failed
        assert offsets_by_partition(table_of(ctx, "orders")) == {0: list(range(15))}
    assert exported_values(tiering_env) == [(o, f"v{o}".encode()) for o in range(15)]


def test_a_segment_the_table_holds_in_part_is_written_from_its_first_offset_past_the_table(
    tiering_env: TieringEnv, tmp_path: Path
) -> None:
    old = old_leader_copies(tiering_env)
    new_leader_copies(tiering_env, old)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        held = ExportedRanges().with_segments([ExportedSegment(old.topic_id, 0, "earlier", 0, 8)])
        planned = plan_export(ctx, "orders", done=held)
        assert [(s.start_offset, s.first_offset, s.from_offset) for s in planned] == [(5, 9, 9), (7, 10, 10)]
        assert planned[0].to_dict()["first_offset"] == 9
        whole = plan_export(ctx, "orders", done=ExportedRanges())
        assert [s.from_offset for s in whole] == [None, None, 10], "from_offset only where the start is held"


def test_a_delete_records_inside_a_segment_exports_from_the_new_log_start(
    tiering_env: TieringEnv, tmp_path: Path
) -> None:
    old = old_leader_copies(tiering_env)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        assert apply_delete_records(ctx, old.tp, 7).log_start_offset == 7
        planned = plan_export(ctx, "orders", done=ExportedRanges())
        assert spans(planned) == [(5, 7, 9)], "0-4 wholly below"
        result = run_export(ctx, "orders")
        assert not result.failed
        assert offsets_by_partition(table_of(ctx, "orders")) == {0: [7, 8, 9]}
    assert exported_values(tiering_env) == [(o, f"v{o}".encode()) for o in (7, 8, 9)]


def test_a_delete_records_past_the_overlap_starts_the_new_leaders_segment_there(
    tiering_env: TieringEnv, tmp_path: Path
) -> None:
    old = old_leader_copies(tiering_env)
    new = new_leader_copies(tiering_env, old)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        apply_delete_records(ctx, new.tp, 12)
        planned = plan_export(ctx, "orders", done=ExportedRanges())
        assert spans(planned) == [(7, 12, 14)]
        run_export(ctx, "orders")
        assert offsets_by_partition(table_of(ctx, "orders")) == {0: [12, 13, 14]}


def test_rows_exported_before_a_delete_records_stay_and_a_rerun_adds_nothing(
    tiering_env: TieringEnv, tmp_path: Path
) -> None:
    old = old_leader_copies(tiering_env)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        run_export(ctx, "orders")
        apply_delete_records(ctx, old.tp, 7)
        again = run_export(ctx, "orders")
        assert again.planned == [] and again.snapshots == []
        assert offsets_by_partition(table_of(ctx, "orders")) == {0: list(range(10))}
