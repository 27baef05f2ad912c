"""What a table holds from the export survives snapshot expiry: every confirmed export commit is
recorded in the metadata store, and once expiry removed every export commit from the ancestry the
export reads the store's record instead of exporting everything again (docs/export.md, "Exactly
once"). A rollback to a snapshot before an export commit re-exports exactly what it removed, also
when the rolled-back commit was expired since; a table dropped and made again under its name is
another table (another UUID) and is exported from scratch."""

from __future__ import annotations

import datetime
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.types import StringType

from tests.engine_support import TieringEnv
from tests.export.support import offsets_by_partition, sqlite_catalog, table_of, with_export
from tiering_core.cli import main
from tiering_core.errors import ExportError
from tiering_core.export import dry_run, exported_ranges, load_catalog, run_export, table_name
from tiering_core.export.table import EXPORTED_PROPERTY
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.errors import MetadataStoreError
from tiering_core.metadata.store import RemoteLogMetadataStore
from tiering_core.runs.copy import run_copy

TOPIC = "orders"


def tier_segments(env: TieringEnv, writer: PartitionWriter, count: int, records: int = 5) -> None:
    """``count`` rolled segments of ``records`` records each, the next one left active, copied."""
    for _ in range(count):
        writer.append_records(records, per_batch=records)
        writer.roll()
    writer.append_records(1)
    writer.set_high_watermark()
    with env.context() as ctx:
        run_copy(ctx, writer.tp)


def duplicates(table: Any) -> dict[tuple[str, int, int], int]:
    """Rows held more than once, per (topic id, partition, offset)."""
    table.refresh()
    rows = table.scan(selected_fields=("topic_id", "partition", "offset")).to_arrow().to_pylist()
    counts = Counter((r["topic_id"], r["partition"], r["offset"]) for r in rows)
    return {key: n for key, n in counts.items() if n > 1}


def export_commits(table: Any) -> list[int]:
    """The snapshot ids of the export commits still in the table."""
    table.refresh()
    return [
        s.snapshot_id
        for s in table.snapshots()
        if s.summary is not None and EXPORTED_PROPERTY in s.summary.additional_properties
    ]


def expire_all_but_current(table: Any) -> None:
    """``expire_snapshots`` as an operator runs it, with a cutoff after the newest snapshot: every
    snapshot but the current one (the main branch's head, which expiry keeps)."""
    table.refresh()
    current = table.current_snapshot()
    newest = max(s.timestamp_ms for s in table.snapshots())
    cutoff = datetime.datetime.fromtimestamp((newest + 1) / 1000, tz=datetime.UTC)
    table.maintenance.expire_snapshots().older_than(cutoff).commit()
    table.refresh()
    assert [s.snapshot_id for s in table.snapshots()] == [current.snapshot_id]


def exported_up_to(env: TieringEnv, capsys: pytest.CaptureFixture[str]) -> dict[int, int | None]:
    capsys.readouterr()
    assert main(["--config", str(env.config_path), "--json", "status", "--topic", TOPIC]) == 0
    return {row["partition"]: row["exported_up_to"] for row in json.loads(capsys.readouterr().out)}


def test_expiry_of_every_export_commit_after_other_writers_exports_nothing_twice(
    tiering_env: TieringEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = tiering_env.writer(TOPIC, 0)
    tier_segments(tiering_env, w, 3)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        first = run_export(ctx, TOPIC, commit_bytes=1)  # one export commit per segment
        assert len(first.snapshots) == 3
        table = table_of(ctx, TOPIC)
        table.delete("offset = 9")  # other writers: a row delete, a schema change, a rewrite
        with table.update_schema() as update:
            update.add_column("note", StringType())
        table.refresh()
        table.overwrite(table.scan().to_arrow())
        expire_all_but_current(table)
        assert export_commits(table) == []  # the ancestry holds no export commit any more
        assert exported_ranges(table).by_topic_id == {}  # ... so the table alone says nothing
        assert dry_run(ctx, TOPIC)[1] == []  # a dry run reads the store's record
        again = run_export(ctx, TOPIC)
        assert again.planned == [] and again.snapshots == []
        assert offsets_by_partition(table) == {0: [o for o in range(15) if o != 9]}
    assert exported_up_to(tiering_env, capsys) == {0: 14}

    tier_segments(tiering_env, w, 2)  # the topic goes on: only the new segments are exported
    with tiering_env.context() as ctx:
        more = run_export(ctx, TOPIC)
        assert [(s.start_offset, s.end_offset) for s in more.exported] == [(15, 20), (21, 25)]
        table = table_of(ctx, TOPIC)
        assert duplicates(table) == {}
        assert offsets_by_partition(table) == {0: [o for o in range(26) if o != 9]}
        # the new commit carried the recorded ranges forward: the ancestry is whole again
        assert exported_ranges(table).up_to(w.topic_id, 0) == 25
        expire_all_but_current(table)  # expired again, the newest record answers
        assert run_export(ctx, TOPIC).planned == []
    assert exported_up_to(tiering_env, capsys) == {0: 25}


def test_a_rollback_before_an_export_commit_re_exports_exactly_what_it_removed(
    tiering_env: TieringEnv, tmp_path: Path
) -> None:
    w = tiering_env.writer(TOPIC, 0)
    tier_segments(tiering_env, w, 1)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        assert len(run_export(ctx, TOPIC).snapshots) == 1  # offsets 0-4
        table = table_of(ctx, TOPIC)
        table.delete("offset = 2")  # another writer's snapshot: the rollback target
        table.refresh()
        target = table.current_snapshot().snapshot_id
    tier_segments(tiering_env, w, 2)
    with tiering_env.context() as ctx:
        later = run_export(ctx, TOPIC, commit_bytes=1)
        assert [(s.start_offset, s.end_offset) for s in later.exported] == [(5, 10), (11, 15)]
        table = table_of(ctx, TOPIC)
        table.manage_snapshots().rollback_to_snapshot(target).commit()
        table.refresh()
        assert offsets_by_partition(table) == {0: [0, 1, 3, 4]}
        assert set(later.snapshots) <= set(export_commits(table))  # still in the table, not ancestors
        redone = run_export(ctx, TOPIC)
        assert [(s.start_offset, s.end_offset) for s in redone.exported] == [(5, 10), (11, 15)]
        assert duplicates(table) == {}
        assert offsets_by_partition(table) == {0: [0, 1, 3, 4, *range(5, 16)]}


def test_a_rollback_whose_commits_were_expired_since_re_exports_what_it_removed(
    tiering_env: TieringEnv, tmp_path: Path
) -> None:
    """Rolled back, then every snapshot but the current one expired: the rolled-back commits are
    gone from the table too. The newest record placed before the current snapshot is the commit
    below it (the rolled-back ones were placed after it), so what the rollback removed is exported
    again and nothing else."""
    w = tiering_env.writer(TOPIC, 0)
    tier_segments(tiering_env, w, 1)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        run_export(ctx, TOPIC)
        table = table_of(ctx, TOPIC)
        table.delete("offset = 2")
        table.refresh()
        target = table.current_snapshot().snapshot_id
    tier_segments(tiering_env, w, 2)
    with tiering_env.context() as ctx:
        assert len(run_export(ctx, TOPIC, commit_bytes=1).snapshots) == 2
        table = table_of(ctx, TOPIC)
        table.manage_snapshots().rollback_to_snapshot(target).commit()
        expire_all_but_current(table)
        assert export_commits(table) == []
        redone = run_export(ctx, TOPIC)
        assert [(s.start_offset, s.end_offset) for s in redone.exported] == [(5, 10), (11, 15)]
        assert duplicates(table) == {}
        assert offsets_by_partition(table) == {0: [0, 1, 3, 4, *range(5, 16)]}


def test_a_table_dropped_and_made_again_under_its_name_is_exported_from_scratch(
    tiering_env: TieringEnv, tmp_path: Path
) -> None:
    w = tiering_env.writer(TOPIC, 0)
    tier_segments(tiering_env, w, 3)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        run_export(ctx, TOPIC)
        table = table_of(ctx, TOPIC)
        old_uuid = str(table.metadata.table_uuid)
        table.delete("offset = 9")
        expire_all_but_current(table)  # the store's record is all that says what it held
        assert ctx.metadata.latest_export_commit(old_uuid) is not None
        load_catalog(ctx.config).drop_table(table_name(ctx.config.export, TOPIC).identifier)
        assert dry_run(ctx, TOPIC)[1] != []  # no table: it holds nothing
        again = run_export(ctx, TOPIC)  # creates the table anew: another UUID
        table = table_of(ctx, TOPIC)
        assert str(table.metadata.table_uuid) != old_uuid
        assert [(s.start_offset, s.end_offset) for s in again.exported] == [(0, 4), (5, 9), (10, 14)]
        assert offsets_by_partition(table) == {0: list(range(15))}  # 9 too: a new table
        expire_all_but_current(table)
        assert run_export(ctx, TOPIC).planned == []  # its own record, not the old table's
        assert duplicates(table) == {}


def test_a_table_exported_before_commits_were_recorded_is_recorded_when_an_export_takes_it(
    tiering_env: TieringEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit that landed but could not be recorded (the store failed just then; or a table
    exported before commits were recorded) is recorded by the next export that takes the table, so
    an expiry after that loses nothing. The export whose record failed says so and exits 1."""
    w = tiering_env.writer(TOPIC, 0)
    tier_segments(tiering_env, w, 2)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    real_record = RemoteLogMetadataStore.record_export_commit

    def failing(self: RemoteLogMetadataStore, *args: object, **kwargs: object) -> bool:
        raise MetadataStoreError("metadata store sqlite:///metadata.db: database is locked")

    monkeypatch.setattr(RemoteLogMetadataStore, "record_export_commit", failing)
    with tiering_env.context() as ctx, pytest.raises(ExportError, match=r"is in the table but could not be recorded"):
        run_export(ctx, TOPIC)
    monkeypatch.setattr(RemoteLogMetadataStore, "record_export_commit", real_record)
    with tiering_env.context() as ctx:
        table = table_of(ctx, TOPIC)
        committed = export_commits(table)
        assert len(committed) == 1  # the commit landed: the segments are in the table
        assert ctx.metadata.latest_export_commit(str(table.metadata.table_uuid)) is None
        assert run_export(ctx, TOPIC).planned == []  # up to date; it records the ancestry's commit
        recorded = ctx.metadata.latest_export_commit(str(table.metadata.table_uuid))
        assert recorded is not None and recorded.snapshot_id == committed[0]
        table.delete("offset = 0")
        expire_all_but_current(table)
        assert run_export(ctx, TOPIC).planned == []
        assert offsets_by_partition(table) == {0: list(range(1, 10))}


def test_a_table_replaced_in_place_is_exported_again(tiering_env: TieringEnv, tmp_path: Path) -> None:
    """Replaced in place (as REPLACE TABLE leaves it: the same UUID, the main branch gone, the old
    snapshots kept), then written by another writer: the store records an export commit that the
    table still holds off the ancestry of its current snapshot, so its data is gone from the table
    and everything is exported again."""
    w = tiering_env.writer(TOPIC, 0)
    tier_segments(tiering_env, w, 2)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        run_export(ctx, TOPIC)
        table = table_of(ctx, TOPIC)
        held = table.scan().to_arrow()
        table.manage_snapshots().remove_branch("main").commit()
        table.refresh()
        assert table.current_snapshot() is None and export_commits(table) != []
        assert dry_run(ctx, TOPIC)[1] != []  # no current snapshot: it holds nothing
        table.append(held.slice(0, 0))  # another writer's first snapshot of the replaced table
        table.refresh()
        assert table.current_snapshot().parent_snapshot_id is None
        assert ctx.metadata.latest_export_commit(str(table.metadata.table_uuid)) is not None
        redone = run_export(ctx, TOPIC)
        assert [(s.start_offset, s.end_offset) for s in redone.exported] == [(0, 4), (5, 9)]
        assert offsets_by_partition(table) == {0: list(range(10))}
        assert duplicates(table) == {}


def expire_as_iceberg_java_does(ctx: Any, table: Any) -> Any:
    """Every snapshot but the current one expired as Iceberg's Java library does it (Spark's and
    Trino's ``expire_snapshots``): the snapshots and their log entries removed from the metadata,
    the parent id of the snapshot kept left as it was (pyiceberg's expiry clears it). Written as the
    table's next metadata file and registered in the catalog in place of the current one."""
    from pyiceberg.serializers import ToOutputFile

    table.refresh()
    current = table.current_snapshot().snapshot_id
    metadata = table.metadata.model_copy(
        update={
            "snapshots": [s for s in table.metadata.snapshots if s.snapshot_id == current],
            "snapshot_log": [e for e in table.metadata.snapshot_log if e.snapshot_id == current],
        }
    )
    location = f"{table.location()}/metadata/99999-expired-by-java.metadata.json"
    ToOutputFile.table_metadata(metadata, table.io.new_output(location))
    catalog = load_catalog(ctx.config)
    identifier = table_name(ctx.config.export, TOPIC).identifier
    catalog.drop_table(identifier)  # the catalog's pointer only; no file is removed
    return catalog.register_table(identifier, location)


def test_an_expired_parent_the_store_recorded_is_the_export_commit_below_the_walk(
    tiering_env: TieringEnv, tmp_path: Path
) -> None:
    """Rolled back to an export commit, written by another writer, then expired as Iceberg's Java
    library does (the kept snapshot still names its expired parent): the parent is the recorded
    commit the table holds, even though newer (rolled-back) commits were recorded, so exactly what
    the rollback removed is exported again."""
    w = tiering_env.writer(TOPIC, 0)
    tier_segments(tiering_env, w, 1)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        run_export(ctx, TOPIC)
        target = table_of(ctx, TOPIC).current_snapshot().snapshot_id
    tier_segments(tiering_env, w, 2)
    with tiering_env.context() as ctx:
        assert len(run_export(ctx, TOPIC, commit_bytes=1).snapshots) == 2
        table = table_of(ctx, TOPIC)
        table.manage_snapshots().rollback_to_snapshot(target).commit()
        table.delete("offset = 2")  # another writer, after the rolled-back commits
        table = expire_as_iceberg_java_does(ctx, table)
        assert table.current_snapshot().parent_snapshot_id == target
        assert table.metadata.snapshot_by_id(target) is None and export_commits(table) == []
        redone = run_export(ctx, TOPIC)
        assert [(s.start_offset, s.end_offset) for s in redone.exported] == [(5, 10), (11, 15)]
        assert duplicates(table) == {}
        assert offsets_by_partition(table) == {0: [0, 1, 3, 4, *range(5, 16)]}
