"""What the table holds outlives the segments: an index-repair copy (same offsets, a new segment
id) is not exported again, and a segment deleted by retention stays in the table."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

from tests.engine_support import TieringEnv, tip_of
from tests.export.support import build_partition, sqlite_catalog, with_export
from tiering_core.cli import main
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.export import exported_segments, load_catalog, newest_copies, open_table, run_export, table_name
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.runs.copy import run_copy
from tiering_core.runs.retention import run_retention
from tiering_core.storage.layout import ObjectKind

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def offsets(ctx, topic: str) -> list[int]:  # type: ignore[no-untyped-def]
    table = open_table(load_catalog(ctx.config), table_name(ctx.config.export, topic), create=False)
    assert table is not None
    return sorted(table.scan().to_arrow()["offset"].to_pylist())


def test_an_index_repair_copy_is_not_exported_twice(tiering_env: TieringEnv, tmp_path: Path) -> None:
    w = build_partition(tiering_env, "orders", 0)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        run_export(ctx, "orders")
        before = offsets(ctx, "orders")
        damaged = sorted(
            (s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED), key=lambda s: s.start_offset
        )[2]
        ctx.storage.delete_keys([segment_ref(damaged).key(ObjectKind.OFFSET_INDEX, ctx.storage.prefix)])
    assert (
        main(["--config", str(tiering_env.config_path), "rebuild-indexes", "--topic", "orders", "--partition", "0"])
        == 0
    )
    with tiering_env.context() as ctx:
        finished = [s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED]
        repaired = [s for s in finished if s.start_offset == damaged.start_offset]
        assert [s.segment_id for s in repaired] != [damaged.segment_id]  # a new copy of the same offsets
        again = run_export(ctx, "orders")
        assert again.planned == [] and again.snapshots == []
        assert offsets(ctx, "orders") == before


def test_of_two_finished_copies_of_the_same_offsets_the_newest_is_taken(tiering_env: TieringEnv) -> None:
    w = build_partition(tiering_env, "orders", 0)
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        segments = [s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED]
    repair = dataclasses.replace(segments[1], segment_id=uuid.uuid4(), event_time=segments[1].event_time + 1)
    chosen = newest_copies([*segments, repair])
    assert len(chosen) == len(segments)
    assert repair in chosen and segments[1] not in chosen
    assert [s.start_offset for s in chosen] == sorted(s.start_offset for s in segments)


def test_a_segment_deleted_by_retention_stays_in_the_table(tiering_env: TieringEnv, tmp_path: Path) -> None:
    w = build_partition(tiering_env, "orders", 0)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        run_export(ctx, "orders")
        before = offsets(ctx, "orders")
        segments_before = {
            s.segment_id
            for s in exported_segments(
                open_table(load_catalog(ctx.config), table_name(ctx.config.export, "orders"))  # type: ignore[arg-type]
            )
        }
    tiering_env.write_config(orders={"retention.bytes": 1, "local.retention.bytes": 1})
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        result = run_retention(ctx, w.tp)
        assert result.segments_deleted > 0
        assert offsets(ctx, "orders") == before
        again = run_export(ctx, "orders")
        assert again.planned == [] and again.snapshots == []
        assert offsets(ctx, "orders") == before
        table = open_table(load_catalog(ctx.config), table_name(ctx.config.export, "orders"))
        assert table is not None and {s.segment_id for s in exported_segments(table)} == segments_before
