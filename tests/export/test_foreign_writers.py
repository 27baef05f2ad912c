"""What is exported is found by the export's own marks (the last export commit in the snapshot
ancestry, per topic id), never by the latest state: another writer of the table (a row delete, a
schema change, a compaction-like rewrite) loses nothing and causes no second export, and a topic
deleted and made again under its name (a new topic id) has every one of its offsets exported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyiceberg.types import StringType

from tests.engine_support import TieringEnv
from tests.export.support import offsets_by_partition, sqlite_catalog, table_of, with_export
from tiering_core.cli import main
from tiering_core.export import dry_run, exported_so_far, plan_export, run_export
from tiering_core.runs.copy import run_copy


def segments(env: TieringEnv, writer, count: int, records: int = 5) -> None:  # type: ignore[no-untyped-def]
    for _ in range(count):
        writer.append_records(records, per_batch=records)
        writer.roll()


def test_another_writer_of_the_table_changes_nothing_of_what_is_exported(
    tiering_env: TieringEnv, tmp_path: Path
) -> None:
    w = tiering_env.writer("orders", 0)
    segments(tiering_env, w, 3)
    w.append_records(1)
    w.set_high_watermark()
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        assert len(run_export(ctx, "orders").exported) == 3
        table = table_of(ctx, "orders")
        table.delete("offset = 9")  # a row delete: a snapshot of its own, no export marks
        assert len(run_export(ctx, "orders").planned) == 0
        with table.update_schema() as update:  # a schema change
            update.add_column("note", StringType())
        table.refresh()
        rows = table.scan().to_arrow()
        table.overwrite(rows)  # a compaction-like rewrite: every row into new files, one snapshot
        table.refresh()
        assert [s.summary.operation.value for s in table.snapshots()][-1] in ("overwrite", "append")
        assert offsets_by_partition(table) == {0: [o for o in range(15) if o != 9]}
        again = run_export(ctx, "orders")
        assert again.planned == [] and again.snapshots == []  # nothing exported twice
    segments(tiering_env, w, 2)  # the topic goes on
    w.set_high_watermark()
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        more = run_export(ctx, "orders")
        assert [(s.start_offset, s.end_offset) for s in more.exported] == [(15, 20), (21, 25)]
        table = table_of(ctx, "orders")
        assert offsets_by_partition(table) == {0: [o for o in range(26) if o != 9]}  # 9 stays deleted
        assert plan_export(ctx, "orders", done=exported_so_far(ctx, table)) == []
        notes = table.scan(selected_fields=("offset", "note")).to_arrow()
        assert set(notes["note"].to_pylist()) == {None}  # the export writes what the table has beside


def test_a_topic_made_again_under_its_name_has_every_offset_exported(
    tiering_env: TieringEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tiering_env.writer("orders", 0)
    segments(tiering_env, old, 2)
    old.append_records(1)
    old.set_high_watermark()
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        run_copy(ctx, old.tp)
        assert len(run_export(ctx, "orders").exported) == 2  # offsets 0-9 of the old topic
    old.delete()  # the topic is deleted (its directory renamed by the broker) ...
    new = tiering_env.writer("orders", 0)  # ... and made again: a new topic id, the same name
    assert new.topic_id != old.topic_id
    segments(tiering_env, new, 3)
    new.append_records(1)
    new.set_high_watermark()
    with tiering_env.context() as ctx:
        run_copy(ctx, new.tp)
        planned = dry_run(ctx, "orders")[1]
        assert [(s.start_offset, s.end_offset) for s in planned] == [(0, 4), (5, 9), (10, 14)]
        assert {s.segment.topic_id_partition.topic_id for s in planned} == {new.topic_id}
        assert not run_export(ctx, "orders").failed
        rows = table_of(ctx, "orders").scan(selected_fields=("offset", "topic_id")).to_arrow().to_pylist()
        by_topic_id: dict[str, list[int]] = {}
        for row in rows:
            by_topic_id.setdefault(row["topic_id"], []).append(row["offset"])
        assert {t: sorted(o) for t, o in by_topic_id.items()} == {
            old.topic_id: list(range(10)),
            new.topic_id: list(range(15)),
        }
    assert main(["--config", str(tiering_env.config_path), "--json", "status", "--topic", "orders"]) == 0
    rows = json.loads(capsys.readouterr().out)  # both topic ids the tier holds, each its own
    assert {r["topic_id"]: r["exported_up_to"] for r in rows} == {old.topic_id: 9, new.topic_id: 14}
