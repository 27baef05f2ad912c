"""The Spark export: one task per remote segment writes its data files, the driver makes the only
commit. The table read back with pyiceberg holds each tiered offset once; a rerun commits nothing;
spark-submit killed (-9) in the middle of a run leaves no snapshot, and the rerun exports every
offset once and removes the data files the killed attempt wrote."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.engine_support import TieringEnv, write_segments
from tiering_core.config import load_config
from tiering_core.export import load_catalog
from tiering_core.runs.copy import run_copy

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def with_export(env: TieringEnv, root: Path) -> Path:
    """The env's config with an ``export`` section: a SQLite catalog and a file warehouse."""
    doc = yaml.safe_load(env.config_path.read_text())
    warehouse = root / "warehouse"
    warehouse.mkdir(exist_ok=True)
    doc["export"] = {
        "catalog": {"type": "sql", "uri": f"sqlite:///{root / 'iceberg.db'}", "warehouse": warehouse.as_uri()}
    }
    env.config_path.write_text(yaml.safe_dump(doc))
    return warehouse


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

    rerun = spark_submit(args, tmp_path)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, out + err[-3000:]
    table, found = read_back(fs_env.config_path, "orders")
    assert {p: sorted(o) for p, o in found.items()} == {p: sorted(o) for p, o in expected.items()}
    assert all(len(o) == len(set(o)) for o in found.values())
    committed, present = committed_and_present_files(table)
    assert committed == present
