"""The Spark export: one task per remote segment writes its data files, only the driver commits
(in snapshots of at most ``COMMIT_BYTES`` of segments: one for these small segments). The table
read back with pyiceberg holds each tiered offset once; a rerun commits nothing; spark-submit
killed (-9) in the middle of a run leaves no snapshot, and the rerun (once the killed run's table
lease expired) exports every offset once and removes the data files the killed attempt wrote."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.engine_support import TieringEnv, serving_no_broker, write_segments
from tests.export import support as export_support
from tiering_core.config import load_config
from tiering_core.export import load_catalog
from tiering_core.export.write import referenced_files
from tiering_core.runs.copy import run_copy

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def with_export(env: TieringEnv, root: Path) -> Path:
    """The env's config with an ``export`` section (a SQLite catalog), and its file warehouse."""
    export_support.with_export(env, export_support.sqlite_catalog(root))
    return root / "warehouse"


def tiered(env: TieringEnv, topic: str, partitions: int, segments: int, records: int = 5) -> dict[int, set[int]]:
    """``partitions`` partitions of ``segments`` rolled segments each, copied: the offsets per partition."""
    offsets: dict[int, set[int]] = {}
    with env.context() as ctx:
        for partition in range(partitions):
            writer = env.writer(topic, partition)
            bases = write_segments(writer, segments, records)
            writer.set_high_watermark()
            offsets[partition] = set(range(bases[-1] + records))  # every segment rolled: all copied
            run_copy(ctx, writer.tp)
    return offsets


def read_back(config: Path, topic: str) -> tuple[Any, dict[int, list[int]]]:
    """The table (pyiceberg) and its offsets per partition, in scan order, duplicates kept."""
    table = load_catalog(load_config(config)).load_table(("kafka", topic))
    rows = table.scan(selected_fields=("partition", "offset")).to_arrow().to_pylist()
    found: dict[int, list[int]] = {}
    for row in rows:
        found.setdefault(row["partition"], []).append(row["offset"])
    return table, found


def committed_and_present_files(table: Any) -> tuple[set[str], set[str]]:
    """The data files the table's snapshot references, and the Parquet files under its data dir."""
    table.refresh()
    committed = {task.file.file_path.removeprefix("file://") for task in table.scan().plan_files()}
    data_dir = Path(table.location().removeprefix("file://")) / "data"
    present = {str(p) for p in data_dir.rglob("*.parquet")} if data_dir.exists() else set()
    return {str(Path(p)) for p in committed}, present


def test_spark_export_holds_every_offset_once_and_a_rerun_commits_nothing(
    tmp_path: Path, fs_env: TieringEnv, spark
) -> None:
    from spark_apps.export_table import main

    with_export(fs_env, tmp_path)
    expected = tiered(fs_env, "orders", 2, 3)
    config = str(fs_env.config_path)
    assert main(["--config", config, "--topic", "orders"], spark=spark) == 0
    table, found = read_back(fs_env.config_path, "orders")
    assert {p: sorted(o) for p, o in found.items()} == {p: sorted(o) for p, o in expected.items()}
    assert all(len(o) == len(set(o)) for o in found.values())
    snapshots = len(table.snapshots())
    committed, present = committed_and_present_files(table)
    assert committed == present

    assert main(["--config", config, "--topic", "orders"], spark=spark) == 0  # up to date
    table.refresh()
    assert len(table.snapshots()) == snapshots


def test_a_worker_serving_no_broker_exports_what_the_metadata_store_holds(
    tmp_path: Path, fs_env: TieringEnv, spark, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster's default-queue worker, without the broker's disk: the selection is what the
    store holds (as ``tiering export`` there), and a partition it holds nothing of is named."""
    import shutil

    from spark_apps.export_table import main

    monkeypatch.delenv("TIERING_BROKER_ID", raising=False)
    with_export(fs_env, tmp_path)
    expected = tiered(fs_env, "orders", 2, 2)
    cluster = str(serving_no_broker(fs_env.config_path, tmp_path))
    shutil.rmtree(fs_env.log_dir)  # no broker disk on this host
    assert main(["--config", cluster, "--partitions", "orders-1"], spark=spark) == 0
    _, found = read_back(fs_env.config_path, "orders")
    assert {p: sorted(o) for p, o in found.items()} == {1: sorted(expected[1])}
    assert main(["--config", cluster, "--topic", "orders"], spark=spark) == 0
    table, found = read_back(fs_env.config_path, "orders")
    assert {p: sorted(o) for p, o in found.items()} == {p: sorted(o) for p, o in expected.items()}
    snapshots = len(table.snapshots())
    capsys.readouterr()
    assert main(["--config", cluster, "--partitions", "orders-0,orders-7"], spark=spark) == 1
    err = capsys.readouterr().err
    assert err == "export_table: failed: partition orders-7 has no remote data (unknown to the metadata store)\n"
    table.refresh()
    assert len(table.snapshots()) == snapshots  # refused before anything was exported


def spark_submit(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "PATH": f"{BIN}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}  # fmt: skip  # this checkout's code
    command = [str(BIN / "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false"]
    return subprocess.Popen(
        [*command, str(ROOT / "spark_apps" / "export_table.py"), *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # spark-submit, its JVM and the Python driver: one group to kill
    )


@pytest.mark.slow
def test_spark_export_killed_mid_run_then_rerun_is_exactly_once_with_no_stray_files(
    tmp_path: Path, fs_env: TieringEnv
) -> None:
    warehouse = with_export(fs_env, tmp_path)
    export_support.with_lease_ms(fs_env, 6_000)  # how long the killed run's table lease outlives it
    expected = tiered(fs_env, "orders", 2, 8, records=200)
    args = ["--config", str(fs_env.config_path), "--topic", "orders", "--parallelism", "1"]
    killed = spark_submit(args, tmp_path)
    deadline = time.monotonic() + 240
    try:
        while not any(warehouse.rglob("*.parquet")):
            if killed.poll() is not None:
                out, err = killed.communicate()
                pytest.fail(f"the export ended before any data file was written: {out}{err[-3000:]}")
            assert time.monotonic() < deadline, "no data file written in time"
            time.sleep(0.05)
    finally:
        if killed.poll() is None:
            os.killpg(killed.pid, signal.SIGKILL)
            killed.communicate(timeout=60)
    written = set(warehouse.rglob("*.parquet"))
    assert written  # an attempt's files, committed by no snapshot
    catalog = load_catalog(load_config(fs_env.config_path))
    if catalog.table_exists(("kafka", "orders")):
        assert catalog.load_table(("kafka", "orders")).current_snapshot() is None

    export_support.wait_until_table_is_free(fs_env, "kafka.orders")  # the rerun is another export
    rerun = spark_submit(args, tmp_path)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, out + err[-3000:]
    table, found = read_back(fs_env.config_path, "orders")
    assert {p: sorted(o) for p, o in found.items()} == {p: sorted(o) for p, o in expected.items()}
    assert all(len(o) == len(set(o)) for o in found.values())
    committed, present = committed_and_present_files(table)
    assert committed == present


def test_spark_export_equals_tiering_export_row_for_row_at_both_isolations(
    tmp_path: Path, fs_env: TieringEnv, spark
) -> None:
    """Every codec, headers, null keys and values, aborted and committed transactions across rolls:
    the Spark app's table holds exactly the rows of ``tiering export``'s."""
    from spark_apps.export_table import main
    from tiering_core.export import run_export
    from tiering_core.kafka.isolation import IsolationLevel

    with_export(fs_env, tmp_path)
    writers = [export_support.build_partition(fs_env, "orders", p) for p in range(2)]
    config = load_config(fs_env.config_path)
    with fs_env.context() as ctx:
        for w in writers:
            run_copy(ctx, w.tp)
        for isolation in IsolationLevel:
            cli = run_export(ctx, "orders", isolation=isolation, table=f"cli.orders_{isolation.value}")
            assert not cli.failed and cli.exported
    catalog = load_catalog(config)
    for isolation in IsolationLevel:
        table = f"spark.orders_{isolation.value}"
        args = ["--config", str(fs_env.config_path), "--topic", "orders", "--isolation", isolation.value]
        assert main([*args, "--table", table], spark=spark) == 0
        columns = [f.name for f in catalog.load_table(("cli", f"orders_{isolation.value}")).schema().fields]
        keys = [("partition", "ascending"), ("offset", "ascending")]
        ours = catalog.load_table(("spark", f"orders_{isolation.value}")).scan().to_arrow().sort_by(keys)
        theirs = catalog.load_table(("cli", f"orders_{isolation.value}")).scan().to_arrow().sort_by(keys)
        assert ours.num_rows == theirs.num_rows > 0
        assert ours.select(columns).to_pylist() == theirs.select(columns).to_pylist()
    committed = catalog.load_table(("spark", "orders_read_committed")).scan().to_arrow().num_rows
    uncommitted = catalog.load_table(("spark", "orders_read_uncommitted")).scan().to_arrow().num_rows
    assert committed < uncommitted  # the aborted transactions' records are dropped at read_committed


def test_a_corrupt_batch_fails_its_segment_only_naming_its_id_and_offset(
    tmp_path: Path, fs_env: TieringEnv, spark, capsys: pytest.CaptureFixture[str]
) -> None:
    from spark_apps.export_table import main
    from tiering_core.engine.segment_ops import segment_ref
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.read.reader import open_reader
    from tiering_core.storage.layout import ObjectKind

    with_export(fs_env, tmp_path)
    expected = tiered(fs_env, "orders", 1, 4, records=20)
    with fs_env.context() as ctx:
        tip = open_reader(ctx, TopicPartition("orders", 0)).view.tip
        segments = sorted(ctx.metadata.list_segments(tip), key=lambda s: s.start_offset)
        bad = segments[2]
        log = Path(fs_env.remote["root"]) / segment_ref(bad).key(ObjectKind.LOG, ctx.storage.prefix)
    body = bytearray(log.read_bytes())
    body[-10] ^= 0xFF  # inside the last batch's records: its CRC no longer matches
    log.write_bytes(bytes(body))
    args = ["--config", str(fs_env.config_path), "--topic", "orders"]
    assert main(args, spark=spark) == 1
    captured = capsys.readouterr()
    assert f"segment {bad.segment_id}" in captured.err and "at offset" in captured.err
    assert "FAILED" in captured.out
    table, found = read_back(fs_env.config_path, "orders")
    assert sorted(found[0]) == sorted(o for o in expected[0] if not bad.start_offset <= o <= bad.end_offset)
    assert main(args, spark=spark) == 1  # a rerun retries the failed segment only
    table, again = read_back(fs_env.config_path, "orders")
    assert sorted(again[0]) == sorted(found[0])
    committed, present = committed_and_present_files(table)
    assert committed == present


def test_the_app_holds_the_table_lease_as_tiering_export_does_and_a_retry_takes_it_over(
    tmp_path: Path, fs_env: TieringEnv, spark, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another export of the table (``tiering export``, or an earlier try of another task) makes the
    app exit with one line and touch nothing; a later try of the same scheduled task (its
    ``TIERING_TASK_ATTEMPT``) takes its killed try's lease over at once."""
    import dataclasses

    from spark_apps.export_table import main
    from spark_apps.runtime import TASK_ATTEMPT_ENV
    from tiering_core.metadata.store import TaskAttempt

    with_export(fs_env, tmp_path)
    expected = tiered(fs_env, "orders", 2, 2)
    args = ["--config", str(fs_env.config_path), "--topic", "orders"]
    with fs_env.context() as ctx:
        command = ctx.metadata.acquire_table_lease("tiering", "kafka.orders", "export:a-tiering-export-run")
    assert main(args, spark=spark) == 1
    err = capsys.readouterr().err.strip()
    assert "another export holds the table" in err and "export:a-tiering-export-run" in err and "\n" not in err
    catalog = load_catalog(load_config(fs_env.config_path))
    assert not catalog.table_exists(("kafka", "orders"))  # nothing made, nothing written

    killed = TaskAttempt("tiering_export", "scheduled__2026-11-25T00:00:00+00:00", "export_table", -1, 1)
    with fs_env.context() as ctx:
        ctx.metadata.release_table_lease(command)
        ctx.metadata.acquire_table_lease("tiering", "kafka.orders", killed.holder("export"), attempt=killed)
    monkeypatch.setenv(TASK_ATTEMPT_ENV, dataclasses.replace(killed, run_id="manual__other").to_json())
    assert main(args, spark=spark) == 1  # another run of the task is not its retry
    assert "another export holds the table" in capsys.readouterr().err
    monkeypatch.setenv(TASK_ATTEMPT_ENV, dataclasses.replace(killed, try_number=2).to_json())
    assert main(args, spark=spark) == 0
    _table, found = read_back(fs_env.config_path, "orders")
    assert {p: sorted(o) for p, o in found.items()} == {p: sorted(o) for p, o in expected.items()}
    with fs_env.context() as ctx:
        assert ctx.metadata.latest_table_lease_token("tiering", "kafka.orders") == (3, None)  # released
    monkeypatch.setenv(TASK_ATTEMPT_ENV, "not json")
    assert main(args, spark=spark) == 1
    assert "TIERING_TASK_ATTEMPT" in capsys.readouterr().err


def test_the_app_keeps_exactly_once_beside_another_writer_a_new_topic_id_and_hostile_timestamps(
    tmp_path: Path, fs_env: TieringEnv, spark
) -> None:
    from spark_apps.export_table import main

    with_export(fs_env, tmp_path)
    old = fs_env.writer("orders", 0)
    write_segments(old, 2)
    old.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, old.tp)
    args = ["--config", str(fs_env.config_path), "--topic", "orders"]
    assert main(args, spark=spark) == 0
    table, found = read_back(fs_env.config_path, "orders")
    assert sorted(found[0]) == list(range(10))
    table.delete("offset = 3")  # another writer: a snapshot without export marks
    assert main(args, spark=spark) == 0  # nothing exported again
    old.delete()
    new = fs_env.writer("orders", 0)  # the topic made again under its name
    stamps = [2**63 - 1, -(2**63), 9_300_000_000_000_000, -100_000_000_000_000, 1_700_000_000_000]
    for ts in stamps:
        new.append([(b"k", b"v")], timestamp=ts)
    new.roll()
    new.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, new.tp)
    assert main(args, spark=spark) == 0
    table, _found = read_back(fs_env.config_path, "orders")
    rows = table.scan(selected_fields=("offset", "topic_id", "timestamp_ms")).to_arrow().to_pylist()
    assert sorted(r["offset"] for r in rows if r["topic_id"] == old.topic_id) == [o for o in range(10) if o != 3]
    assert {r["offset"]: r["timestamp_ms"] for r in rows if r["topic_id"] == new.topic_id} == dict(enumerate(stamps))
    _committed, present = committed_and_present_files(table)
    assert present == {p.removeprefix("file://") for p in referenced_files(table)}  # no stray file


def test_the_app_reads_what_the_table_holds_by_the_same_rule_after_expiry_and_rollback(
    tmp_path: Path, fs_env: TieringEnv, spark, capsys: pytest.CaptureFixture[str]
) -> None:
    """The app records its commits as ``tiering export`` does: once another writer's snapshots and
    an expiry removed every export commit from the table, a rerun (and its dry run) exports nothing
    again; a rollback to before an export commit has exactly what it removed exported again."""
    import datetime

    from spark_apps.export_table import main

    with_export(fs_env, tmp_path)
    writers = [fs_env.writer("orders", p) for p in (0, 1)]

    def tier(segments: int) -> None:
        with fs_env.context() as ctx:
            for w in writers:
                write_segments(w, segments)
                w.set_high_watermark()
                run_copy(ctx, w.tp)

    tier(2)  # offsets 0-9 of each partition
    args = ["--config", str(fs_env.config_path), "--topic", "orders"]
    assert main(args, spark=spark) == 0
    table, _found = read_back(fs_env.config_path, "orders")
    exported = table.current_snapshot()
    with fs_env.context() as ctx:
        recorded = ctx.metadata.latest_export_commit(str(table.metadata.table_uuid))
        assert recorded is not None and recorded.snapshot_id == exported.snapshot_id
    table.delete("partition = 1 and offset = 2")  # another writer
    table.refresh()
    cutoff = datetime.datetime.fromtimestamp((table.current_snapshot().timestamp_ms + 1) / 1000, tz=datetime.UTC)
    table.maintenance.expire_snapshots().older_than(cutoff).commit()  # the export commit with it
    table.refresh()
    assert table.metadata.snapshot_by_id(exported.snapshot_id) is None and len(table.snapshots()) == 1
    capsys.readouterr()
    assert main([*args, "--dry-run"], spark=spark) == 0
    assert "0 segment(s) to export" in capsys.readouterr().out
    assert main(args, spark=spark) == 0
    table, found = read_back(fs_env.config_path, "orders")
    assert len(table.snapshots()) == 1  # nothing committed
    assert {p: sorted(o) for p, o in found.items()} == {0: list(range(10)), 1: [o for o in range(10) if o != 2]}

    target = table.current_snapshot().snapshot_id
    tier(2)  # offsets 10-19
    assert main(args, spark=spark) == 0
    table.refresh()
    table.manage_snapshots().rollback_to_snapshot(target).commit()  # the new segments' commit undone
    assert main(args, spark=spark) == 0
    table, found = read_back(fs_env.config_path, "orders")
    want = {0: list(range(20)), 1: [o for o in range(20) if o != 2]}
    assert {p: sorted(o) for p, o in found.items()} == want  # each offset once
