"""The Spark apps on a real cluster manager: spark-submit to a Spark standalone master and worker
started by the tests (not local[N]), run from outside the checkout so executors import only the
shipped code. Verify finds a deleted index on S3, rebuild repairs it, and both then agree; the
export writes each segment's data files on the cluster's executors and commits them on the driver,
and the table (its warehouse on S3) read back with pyiceberg holds every tiered offset once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine_support import write_segments
from tests.export import support as export_support
from tests.services import TEST_JVM_OPTIONS, S3Endpoint, SparkStandalone
from tests.spark_apps.test_export_table import read_back
from tests.spark_apps.test_rebuild_indexes import s3_env

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.slow


def run(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),  # the driver and the command run this checkout; executors get the shipped zip
    }
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def submit(cluster: SparkStandalone, app: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [str(BIN / "spark-submit"), "--master", cluster.master_url, "--conf", "spark.ui.enabled=false"]
    command += ["--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=2"]
    command += ["--conf", f"spark.executor.extraJavaOptions={' '.join(TEST_JVM_OPTIONS)}"]
    return run([*command, str(ROOT / "spark_apps" / app), *args], cwd)


def test_verify_and_rebuild_run_on_a_standalone_cluster(
    tmp_path: Path, s3_endpoint: S3Endpoint, spark_cluster: SparkStandalone
) -> None:
    env = s3_env(tmp_path, s3_endpoint)
    for partition in range(2):
        writer = env.writer("orders", partition)
        write_segments(writer, 3)
        writer.set_high_watermark()
    config = str(env.config_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    copied = run([str(BIN / "tiering"), "--config", config, "copy", "--topic", "orders"], outside)
    assert copied.returncode == 0, copied.stderr

    intact = submit(spark_cluster, "verify_segments.py", "--config", config, "--topic", "orders", cwd=outside)
    assert intact.returncode == 0, intact.stderr[-3000:]
    assert "6 finished segment(s)" in intact.stdout

    bucket, prefix = env.remote["bucket"], env.remote["prefix"]
    s3 = s3_endpoint.client()
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"])
    victim = next(k for k in keys if "/1/" in k and k.endswith(".index"))
    s3.delete_object(Bucket=bucket, Key=victim)

    damaged = submit(spark_cluster, "verify_segments.py", "--config", config, "--topic", "orders", cwd=outside)
    assert damaged.returncode == 1 and "1 with problems" in damaged.stdout, damaged.stdout + damaged.stderr[-3000:]

    repaired = submit(spark_cluster, "rebuild_indexes.py", "--config", config, "--topic", "orders", cwd=outside)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr[-3000:]
    assert "missing" in repaired.stdout

    again = submit(spark_cluster, "verify_segments.py", "--config", config, "--topic", "orders", cwd=outside)
    assert again.returncode == 0 and "6 finished segment(s)" in again.stdout, again.stdout + again.stderr[-3000:]
    checked = run([str(BIN / "tiering"), "--config", config, "rebuild-indexes", "--topic", "orders", "--partition", "1",
                   "--check-only"], outside)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    applications = spark_cluster.state().get("completedapps", [])
    assert isinstance(applications, list) and len(applications) >= 4  # every app ran on this master


def test_export_runs_on_a_standalone_cluster(
    tmp_path: Path, s3_endpoint: S3Endpoint, spark_cluster: SparkStandalone
) -> None:
    """The warehouse on S3 (moto), as a cluster needs: executors write there with the FileIO
    properties the driver resolved (endpoint from the ``remote`` section, keys from the AWS chain)."""
    env = s3_env(tmp_path, s3_endpoint)
    warehouse = s3_endpoint.new_bucket()
    export_support.with_export(env, export_support.sqlite_catalog(tmp_path, f"s3://{warehouse}/warehouse"))
    expected: dict[int, list[int]] = {}
    for partition in range(2):
        writer = env.writer("orders", partition)
        bases = write_segments(writer, 3, records=7)
        writer.set_high_watermark()
        expected[partition] = list(range(bases[-1] + 7))
    config = str(env.config_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    copied = run([str(BIN / "tiering"), "--config", config, "copy", "--topic", "orders"], outside)
    assert copied.returncode == 0, copied.stderr
    before = {app["id"] for app in spark_cluster.state().get("completedapps", [])}

    exported = submit(spark_cluster, "export_table.py", "--config", config, "--topic", "orders", cwd=outside)
    assert exported.returncode == 0, exported.stdout + exported.stderr[-3000:]
    assert "export orders -> kafka.orders: 6 segment(s) to export" in exported.stdout
    table, found = read_back(env.config_path, "orders")
    assert {p: sorted(o) for p, o in found.items()} == expected
    committed = {task.file.file_path for task in table.scan().plan_files()}
    listing = s3_endpoint.client().list_objects_v2(Bucket=warehouse, Prefix="warehouse/")
    present = {f"s3://{warehouse}/{o['Key']}" for o in listing.get("Contents", []) if o["Key"].endswith(".parquet")}
    assert committed == present and len(committed) == 6

    again = submit(spark_cluster, "export_table.py", "--config", config, "--topic", "orders", cwd=outside)
    assert again.returncode == 0 and "0 segment(s) to export" in again.stdout, again.stdout + again.stderr[-3000:]
    table.refresh()
    assert len(table.snapshots()) == 1
    applications = spark_cluster.state().get("completedapps", [])
    assert isinstance(applications, list) and len({app["id"] for app in applications} - before) == 2
