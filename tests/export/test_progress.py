"""What a table holds from the export, by ``export.progress``' rule: no table and a table without
snapshots hold nothing; an export commit in the ancestry answers without the store; once expiry
removed every export commit, the store's record answers, and one that cannot be read is refused
naming the commit and the table; a recorded commit still in the table but no longer an ancestor
(a rollback) is not; an export commit missing from the store is recorded once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, delete, update

from tests.engine_support import TieringEnv
from tests.export.support import sqlite_catalog, table_of, with_export
from tiering_core.errors import ExportError
from tiering_core.export import load_catalog, open_table, run_export, table_name
from tiering_core.export.progress import exported_progress, record_ancestry, record_commit
from tiering_core.export.table import ExportedRanges, exported_ranges
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.models import ExportCommitRow
from tiering_core.runs.copy import run_copy

TOPIC = "orders"


def exported_segments(env: TieringEnv, tmp_path: Path, count: int) -> PartitionWriter:
    """``count`` segments of five records copied, the active one holding one more, and exported
    one commit per segment."""
    w = env.writer(TOPIC)
    for _ in range(count):
        w.append_records(5, per_batch=5)
        w.roll()
    w.append_records(1)
    w.set_high_watermark()
    with_export(env, sqlite_catalog(tmp_path))
    with env.context() as ctx:
        run_copy(ctx, w.tp)
        assert len(run_export(ctx, TOPIC, commit_bytes=1).snapshots) == count
    return w


def other_writer_then_expiry(table: Any) -> None:
    """Another writer's snapshot, then every snapshot but the current one expired: the ancestry
    holds no export commit any more."""
    import datetime

    table.delete("offset = 0")
    table.refresh()
    newest = max(s.timestamp_ms for s in table.snapshots())
    cutoff = datetime.datetime.fromtimestamp((newest + 1) / 1000, tz=datetime.UTC)
    table.maintenance.expire_snapshots().older_than(cutoff).commit()
    table.refresh()
    assert len(table.snapshots()) == 1


def test_no_table_and_a_table_without_snapshots_hold_nothing(fs_env: TieringEnv, tmp_path: Path) -> None:
    with_export(fs_env, sqlite_catalog(tmp_path))
    with fs_env.context() as ctx:
        assert exported_progress(None, ctx.metadata) == ExportedRanges()
        table = open_table(load_catalog(ctx.config), table_name(ctx.config.export, TOPIC))
        assert table is not None and table.current_snapshot() is None
        assert exported_progress(table, ctx.metadata) == ExportedRanges()


def test_an_export_commit_in_the_ancestry_answers_without_the_store(fs_env: TieringEnv, tmp_path: Path) -> None:
    """The store's records made unreadable change nothing while the ancestry holds an export commit."""
    w = exported_segments(fs_env, tmp_path, 2)
    engine = create_engine(fs_env.metadata_url)
    with engine.begin() as conn:
        conn.execute(update(ExportCommitRow).values(exported="not json"))
    engine.dispose()
    with fs_env.context() as ctx:
        table = table_of(ctx, TOPIC)
        progress = exported_progress(table, ctx.metadata)
    assert progress == exported_ranges(table)
    assert progress.up_to(w.topic_id, 0) == 9


def test_after_expiry_the_stores_record_answers_and_an_unreadable_one_is_refused(
    fs_env: TieringEnv, tmp_path: Path
) -> None:
    w = exported_segments(fs_env, tmp_path, 2)
    with fs_env.context() as ctx:
        table = table_of(ctx, TOPIC)
        before = exported_ranges(table)
        last_commit = table.current_snapshot().snapshot_id
        other_writer_then_expiry(table)
        assert exported_ranges(table) == ExportedRanges()  # the table alone says nothing
        assert exported_progress(table, ctx.metadata) == before
        assert before.up_to(w.topic_id, 0) == 9
    engine = create_engine(fs_env.metadata_url)
    with engine.begin() as conn:
        conn.execute(update(ExportCommitRow).values(exported="not json"))
    engine.dispose()
    with fs_env.context() as ctx, pytest.raises(ExportError) as refused:
        exported_progress(table, ctx.metadata)
    message = str(refused.value)
    assert f"export commit {last_commit}" in message and str(table.metadata.table_uuid) in message
    assert "cannot be read" in message and "\n" not in message


def test_a_recorded_commit_rolled_back_from_the_ancestry_holds_nothing(fs_env: TieringEnv, tmp_path: Path) -> None:
    """Another writer's snapshot, the export's commit on it, a rollback to the first and another
    writer's snapshot on that, the rollback target then expired: the walk ends without an export
    commit, and the store's newest record before its end is the export commit, still in the
    table's snapshots but no longer an ancestor: the table holds nothing of it."""
    w = fs_env.writer(TOPIC)
    w.append_records(5, per_batch=5)
    w.roll()
    w.append_records(1)
    w.set_high_watermark()
    with_export(fs_env, sqlite_catalog(tmp_path))
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        table = open_table(load_catalog(ctx.config), table_name(ctx.config.export, TOPIC))
        assert table is not None
        table.append(table.scan().to_arrow())  # another writer's (empty) snapshot
        table.refresh()
        target = table.current_snapshot().snapshot_id
        [commit] = run_export(ctx, TOPIC).snapshots
        table.refresh()
        table.manage_snapshots().rollback_to_snapshot(target).commit()
        table.refresh()
        table.append(table.scan().to_arrow())  # another writer's, on the rolled-back table
        table.refresh()
        table.maintenance.expire_snapshots().by_id(target).commit()
        table.refresh()
        assert table.metadata.snapshot_by_id(commit) is not None  # in the table, not an ancestor
        recorded = ctx.metadata.latest_export_commit(str(table.metadata.table_uuid))
        assert recorded is not None and recorded.snapshot_id == commit
        assert ExportedRanges.from_json(recorded.exported).up_to(w.topic_id, 0) == 4  # what it landed
        assert exported_progress(table, ctx.metadata) == ExportedRanges()


def test_an_export_commit_missing_from_the_store_is_recorded_once(fs_env: TieringEnv, tmp_path: Path) -> None:
    exported_segments(fs_env, tmp_path, 1)
    engine = create_engine(fs_env.metadata_url)
    with engine.begin() as conn:
        conn.execute(delete(ExportCommitRow))
    engine.dispose()
    with fs_env.context() as ctx:
        table = table_of(ctx, TOPIC)
        uuid = str(table.metadata.table_uuid)
        name = table_name(ctx.config.export, TOPIC)
        lease = ctx.metadata.acquire_table_lease(ctx.config.export.catalog_name, str(name), "export:test")
        assert ctx.metadata.latest_export_commit(uuid) is None
        recorded = record_ancestry(ctx.metadata, lease, table)
        assert recorded is not None and recorded.snapshot_id == table.current_snapshot().snapshot_id
        assert ExportedRanges.from_json(recorded.exported) == exported_ranges(table)
        assert ctx.metadata.latest_export_commit(uuid) == recorded
        assert record_ancestry(ctx.metadata, lease, table) is None  # recorded already
        assert record_commit(ctx.metadata, lease, recorded) is False
        ctx.metadata.release_table_lease(lease)
