"""A table written before topic ids (ranges keyed by partition alone, no ``topic_id`` and
``timestamp_ms`` columns) keeps working: the first export migrates it in place (schema evolution,
no data rewritten), exports only what it does not hold, and carries its ranges forward by topic
id, attributing each listed segment to the topic id the metadata store knows it by."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.engine_support import TieringEnv
from tests.export.support import (
    LEGACY_COLUMNS,
    build_partition,
    export_the_old_way,
    offsets_by_partition,
    sqlite_catalog,
    table_of,
    with_export,
)
from tiering_core.cli import main
from tiering_core.export import (
    ExportedRanges,
    dry_run,
    exported_ranges,
    exported_so_far,
    plan_export,
    run_export,
    store_topic_ids,
)
from tiering_core.export.table import ANY_TOPIC_ID, EXPORTED_PROPERTY, LEGACY_EXPORTED_PROPERTY
from tiering_core.kafka.isolation import IsolationLevel
from tiering_core.read.reader import open_reader
from tiering_core.runs.copy import run_copy


def fetched(ctx, tp) -> list[int]:  # type: ignore[no-untyped-def]
    reader = open_reader(ctx, tp)
    return [r.offset for r in reader.read(0, 100_000, IsolationLevel.READ_COMMITTED)]


def test_a_table_written_before_topic_ids_is_migrated_in_place_on_first_use(
    tiering_env: TieringEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    writers = [build_partition(tiering_env, "orders", p) for p in (0, 1)]
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        for w in writers:
            run_copy(ctx, w.tp)
        want = {w.tp.partition: fetched(ctx, w.tp) for w in writers}
        planned = dry_run(ctx, "orders")[1]
        old = [s for s in planned if s.start_offset < 20]  # the first segments of each partition
        table = export_the_old_way(ctx, "orders", old)
        assert [f.name for f in table.schema().fields] == list(LEGACY_COLUMNS)
        # a foreign writer after the old version's last commit: its snapshot carries no ranges
        table.delete("partition = 0 and offset = 3")
        held_before = offsets_by_partition(table)
        old_files = {t.file.file_path for t in table.scan().plan_files()}
        # read as it is (status, a dry run): the legacy ranges under the topic ids the store knows
        done = exported_ranges(table, store_topic_ids(ctx.metadata))
        for w in writers:
            ends = [s.end_offset for s in old if s.partition == w.tp.partition]
            assert done.up_to(w.topic_id, w.tp.partition) == max(ends)
        rest = plan_export(ctx, "orders", done=exported_so_far(ctx, table))
        assert {s.segment_id for s in rest} == {s.segment_id for s in planned} - {s.segment_id for s in old}
    assert main(["--config", str(tiering_env.config_path), "export", "--topic", "orders"]) == 0
    capsys.readouterr()
    with tiering_env.context() as ctx:
        table = table_of(ctx, "orders")
        assert [f.name for f in table.schema().fields] == [*LEGACY_COLUMNS, "topic_id", "timestamp_ms"]
        got = offsets_by_partition(table)
        assert got == {p: [o for o in want[p] if (p, o) != (0, 3)] for p in want}  # once each, 3 stays deleted
        rows = table.scan(selected_fields=("partition", "offset", "topic_id", "timestamp_ms")).to_arrow().to_pylist()
        ids = {w.tp.partition: w.topic_id for w in writers}
        for row in rows:
            held_by_old = row["offset"] in held_before.get(row["partition"], [])
            assert row["topic_id"] == (None if held_by_old else ids[row["partition"]])
            assert (row["timestamp_ms"] is None) == held_by_old
        assert old_files <= {t.file.file_path for t in table.scan().plan_files()}  # nothing rewritten
        summary = table.current_snapshot().summary.additional_properties
        assert LEGACY_EXPORTED_PROPERTY not in summary
        carried = ExportedRanges.from_json(summary[EXPORTED_PROPERTY])
        assert ANY_TOPIC_ID not in carried.by_topic_id
        for w in writers:
            assert carried.up_to(w.topic_id, w.tp.partition) == max(want[w.tp.partition])
    assert main(["--config", str(tiering_env.config_path), "--json", "status", "--topic", "orders"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert all(r["exported_up_to"] == r["highest_copied_offset"] for r in rows)
    with tiering_env.context() as ctx:
        again = run_export(ctx, "orders")
        assert again.planned == [] and again.snapshots == []


def test_legacy_ranges_go_to_the_topic_ids_of_their_segments(tiering_env: TieringEnv, tmp_path: Path) -> None:
    """The old version keyed ranges by partition: a topic made again under its name got the old
    one's offsets counted as exported. Migrated, the old topic's segments keep its topic id, and
    the new topic's offsets are exported; a range no listed segment accounts for (its snapshots
    expired) stays exported for every topic id, as the table meant it."""
    old = tiering_env.writer("orders", 0)
    old.append_records(10, per_batch=5)
    old.roll()
    old.append_records(1)
    old.set_high_watermark()
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        run_copy(ctx, old.tp)
        export_the_old_way(ctx, "orders", dry_run(ctx, "orders")[1])
    old.delete()  # the topic is deleted ...
    new = tiering_env.writer("orders", 0)  # ... and made again: a new topic id, the same name
    assert new.topic_id != old.topic_id
    new.append_records(15, per_batch=5)
    new.roll()
    new.append_records(1)
    new.set_high_watermark()
    with tiering_env.context() as ctx:
        run_copy(ctx, new.tp)
        done = exported_ranges(table_of(ctx, "orders"), store_topic_ids(ctx.metadata))
        assert done.up_to(old.topic_id, 0) == 9 and done.up_to(new.topic_id, 0) is None
        assert exported_ranges(table_of(ctx, "orders")).up_to(new.topic_id, 0) == 9  # without the store's word
        result = run_export(ctx, "orders")
        assert not result.failed and [(s.start_offset, s.end_offset) for s in result.exported] == [(0, 14)]
        rows = table_of(ctx, "orders").scan(selected_fields=("offset", "topic_id")).to_arrow().to_pylist()
        assert sorted(r["offset"] for r in rows if r["topic_id"] is None) == list(range(10))
        assert sorted(r["offset"] for r in rows if r["topic_id"] == new.topic_id) == list(range(15))


def test_a_legacy_range_no_listed_segment_accounts_for_is_never_exported_again(
    tiering_env: TieringEnv, tmp_path: Path
) -> None:
    """The old version's first commit expired (snapshot expiry): the last one still carries its
    range, but no summary lists its segment any more. That range stays exported for every topic
    id of the partition, as the table meant it; the listed one goes to its topic id."""
    w = tiering_env.writer("orders", 0)
    for _ in range(2):
        w.append_records(5, per_batch=5)
        w.roll()
    w.append_records(1)
    w.set_high_watermark()
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        first, second = dry_run(ctx, "orders")[1]
        export_the_old_way(ctx, "orders", [first])
        table = export_the_old_way(ctx, "orders", [second])
        oldest = table.snapshots()[0].snapshot_id
        table.maintenance.expire_snapshots().by_id(oldest).commit()
        table.refresh()
        assert [s.snapshot_id for s in table.snapshots()] == [table.current_snapshot().snapshot_id]
        done = exported_ranges(table, store_topic_ids(ctx.metadata))
        assert [r.as_list() for r in done.by_topic_id[w.topic_id][0]] == [[5, 9]]
        assert [r.as_list() for r in done.by_topic_id[ANY_TOPIC_ID][0]] == [[0, 4]]
        assert done.up_to(w.topic_id, 0) == 9 and done.up_to("a-topic-id-made-later", 0) == 4
        result = run_export(ctx, "orders")
        assert result.planned == [] and result.snapshots == []
        assert offsets_by_partition(table_of(ctx, "orders")) == {0: list(range(10))}
