"""Spark benchmark, the same data measured side by side in one run:

- parallel upload (spark_apps/parallel_upload.py in local[2]) vs the sequential ``tiering copy``
  command (a subprocess, as an operator runs it) of the same partitions to moto's S3 server (a
  separate process): speed-up. Each round uploads into fresh buckets and metadata; the sides
  take turns going first, so neither always gets the warmer machine;
- index rebuild of the same segments on Spark (spark_apps/rebuild_indexes.py, local[2], --local)
  and in one process vs a plain sequential read of the same bytes, and the remote check of
  ``tiering rebuild-indexes`` (download, size and CRC-32C against the copy's record, every batch
  CRC, rebuild, compare) over a filesystem tier holding the same segments.

    python bench/bench_spark.py [--upload-mb 512] [--size-mb 2048] [--rounds 2] [--quick]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from spark_apps import runtime  # noqa: E402
from spark_apps.rebuild_indexes import run_rebuild  # noqa: E402
from tiering_core.config import load_config  # noqa: E402
from tiering_core.context import TieringContext  # noqa: E402
from tiering_core.kafka.checkpoints import (  # noqa: E402
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    update_offset_checkpoint,
)
from tiering_core.kafka.index_rebuild import rebuild_indexes  # noqa: E402
from tiering_core.kafka.log_writer import PartitionWriter  # noqa: E402
from tiering_core.kafka.records import RecordSpec  # noqa: E402
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition  # noqa: E402
from tiering_core.report.results import format_index_check  # noqa: E402
from tiering_core.runs.copy import run_copy  # noqa: E402
from tiering_core.runs.copy_many import copy_partitions  # noqa: E402
from tiering_core.runs.rebuild import examine_remote_segment, remote_index_tasks  # noqa: E402

MiB = 1 << 20
CHUNK = 1 << 20
T0 = 1_700_000_000_000


def quiet(_line: str) -> None:
    pass


def build_log_dir(log_dir: Path, topic: str, partitions: int, segments: int, segment_mb: int) -> int:
    """``partitions`` partitions of ``segments`` closed segments each (one written, the rest copied)."""
    log_dir.mkdir(parents=True)
    first = TopicPartition(topic, 0)
    # The broker's 10 MiB index files, so only this loop decides where a segment ends.
    w = PartitionWriter(log_dir, first, segment_bytes=1 << 40, preallocate_index_bytes=10 << 20, clock=lambda: T0)
    value = os.urandom(512)
    n = 0
    for _ in range(segments):
        base = w.active_base
        while w.active_size < segment_mb * MiB:
            w.append([RecordSpec(f"k{n + i}".encode(), value, T0 + n + i) for i in range(64)])
            n += 64
            if w.active_base != base:
                raise RuntimeError(f"the writer rolled a segment by itself at offset {w.active_base}")
        w.roll()
    hw = w.set_high_watermark()
    for p in range(1, partitions):
        tp = TopicPartition(topic, p)
        shutil.copytree(w.path, log_dir / str(tp))
        update_offset_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT, tp, hw)
        update_offset_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT, tp, hw)
    return sum(p.stat().st_size for p in log_dir.rglob("*.log"))


def write_config(root: Path, name: str, log_dir: Path, remote: dict[str, Any]) -> Path:
    path = root / f"{name}.yaml"
    doc = {"log_dirs": [str(log_dir)], "metadata": {"url": f"sqlite:///{root / f'{name}.db'}"}, "remote": remote}
    path.write_text(yaml.safe_dump(doc))
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError("moto_server did not start")


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def plain_read(paths: list[Path]) -> int:
    total = 0
    for path in paths:
        with path.open("rb", buffering=0) as f:
            while chunk := f.read(CHUNK):
                total += len(chunk)
    return total


def tiering_command() -> list[str]:
    """The installed ``tiering`` command of this interpreter's environment."""
    script = Path(sys.executable).parent / "tiering"
    return [str(script)] if script.exists() else [sys.executable, "-m", "tiering_core.cli"]


def cli_copy(config: Path) -> int:
    """``tiering --config FILE --json copy`` as a subprocess; the segments it copied."""
    done = subprocess.run(
        [*tiering_command(), "--config", str(config), "--json", "copy"], capture_output=True, text=True, cwd=ROOT
    )
    if done.returncode != 0:
        raise RuntimeError(f"tiering copy failed ({done.returncode}): {done.stderr.strip()}")
    return sum(int(r["segments_copied"]) for r in json.loads(done.stdout))


def bench_upload(root: Path, spark: Any, partitions: int, segments: int, segment_mb: int, rounds: int) -> None:
    log_dir = root / "upload-logs"
    size = build_log_dir(log_dir, "orders", partitions, segments, segment_mb)
    plain_read(sorted(log_dir.rglob("*.log")))  # both sides read from the page cache
    server, endpoint = start_moto()
    times: dict[str, list[float]] = {"cli": [], "spark": []}
    checks: list[tuple[float, float]] = []
    try:
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")

        def fresh(side: str, r: int) -> Path:
            bucket = f"bench-{side}-{r}"
            s3.create_bucket(Bucket=bucket)
            remote = {"backend": "s3", "bucket": bucket, "endpoint_url": endpoint}
            return write_config(root, f"{side}-{r}", log_dir, remote)

        def parallel(config: Path) -> int:
            with TieringContext.open(load_config(config)) as ctx:
                tps = [log.topic_partition for log in ctx.partitions()]
                executor = runtime.SparkExecutor(spark.sparkContext, ctx.config.remote)
                seconds, report = timed(lambda: copy_partitions(ctx, tps, executor))
                assert not report.failures, report.failures
                checks.append((report.check_seconds, seconds))
                return int(report.segments)

        for r in range(rounds):
            order = ("cli", "spark") if r % 2 == 0 else ("spark", "cli")
            for side in order:
                config = fresh(side, r)
                seconds, copied = timed(functools.partial(cli_copy if side == "cli" else parallel, config))
                assert copied == partitions * segments, (side, copied)
                times[side].append(seconds)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(
        f"upload: {partitions} partitions x {segments} segments of {segment_mb} MiB = {size / MiB:.0f} MiB, moto S3, "
        f"{rounds} round(s), sides alternating first"
    )
    for r in range(rounds):
        t_cli, t_par = times["cli"][r], times["spark"][r]
        first = "tiering copy" if r % 2 == 0 else "parallel upload"
        print(
            f"  round {r + 1} ({first} first): tiering copy {t_cli:7.2f} s {size / MiB / t_cli:7.1f} MiB/s | "
            f"parallel upload, local[2] {t_par:7.2f} s {size / MiB / t_par:7.1f} MiB/s | "
            f"speed-up {t_cli / t_par:.2f}"
        )
    check_s = sum(c for c, _ in checks)
    run_s = sum(t for _, t in checks)
    print(
        f"  driver segment checks (CRC scan of every segment, COPY_SEGMENT_STARTED): {check_s:.2f} s of "
        f"{run_s:.2f} s of parallel upload ({100 * check_s / run_s:.0f}%)"
    )
    print(f"RATIO parallel_upload_speedup/sequential_cli_copy = {sum(times['cli']) / sum(times['spark']):.2f}")
    print(
        f"RATIO parallel_upload_speedup_median_round/sequential_cli_copy = "
        f"{statistics.median(c / p for c, p in zip(times['cli'], times['spark'], strict=True)):.2f}"
    )
    print(f"RATIO driver_check_time/parallel_upload_time = {check_s / run_s:.2f}")


def bench_rebuild(root: Path, spark: Any, size_mb: int, segment_mb: int) -> None:
    partitions = max(1, size_mb // segment_mb)
    log_dir = root / "rebuild-logs"
    size = build_log_dir(log_dir, "rebuild", partitions, 1, segment_mb)
    tier = root / "tier"
    config = write_config(root, "rebuild", log_dir, {"backend": "filesystem", "root": str(tier)})
    logs = sorted(p for p in log_dir.rglob("*.log") if p.stat().st_size > 0)
    with TieringContext.open(load_config(config)) as ctx:  # the remote tier: the same segments, copied
        for log in ctx.partitions():
            run_copy(ctx, log.topic_partition)
        tasks = []
        for log in ctx.partitions():
            tip = TopicIdPartition(log.topic_id, log.topic_partition)
            tasks.extend(remote_index_tasks(ctx.metadata, tip, ctx.config.topic_config(tip.topic).index_interval_bytes))
    remote_logs = sorted(tier.rglob("*.log"))
    assert len(tasks) == len(logs) == len(remote_logs) and sum(p.stat().st_size for p in remote_logs) == size
    plain_read(logs)  # warm the page cache: every side reads from memory
    t_read, read_bytes = timed(lambda: plain_read(logs))
    assert read_bytes == size
    t_one, _ = timed(lambda: [rebuild_indexes(p, 0) for p in logs])
    with TieringContext.open(load_config(config)) as ctx:
        tps = [log.topic_partition for log in ctx.partitions()]
        t_spark, report = timed(lambda: run_rebuild(ctx, tps, spark, repair=False, local=True, say=quiet))
        checked = [c for c in report.checks if c.log_bytes]
        assert len(checked) == 2 * len(logs) and all(c.status.value == "ok" for c in checked)
        plain_read(remote_logs)
        t_remote_read, _ = timed(lambda: plain_read(remote_logs))
        t_remote, found = timed(lambda: [examine_remote_segment(ctx.storage, task, workdir=root) for task in tasks])
        assert all(f.check.status.value == "ok" for f in found), [format_index_check(f.check) for f in found]
    print(f"index rebuild: {len(logs)} segments, {size / MiB:.0f} MiB (page cache warm)")
    print(f"  plain sequential read:        {t_read:7.2f} s  {size / MiB / t_read:7.1f} MiB/s")
    print(f"  rebuild, one process:         {t_one:7.2f} s  {size / MiB / t_one:7.1f} MiB/s")
    print(
        f"  rebuild + compare, local[2]:  {t_spark:7.2f} s  {2 * size / MiB / t_spark:7.1f} MiB/s "
        "(remote and local copies of every segment)"
    )
    print(f"  remote tier, plain read:      {t_remote_read:7.2f} s  {size / MiB / t_remote_read:7.1f} MiB/s")
    print(
        f"  remote check, one process:    {t_remote:7.2f} s  {size / MiB / t_remote:7.1f} MiB/s "
        "(download, size + CRC-32C, batch CRCs, rebuild, compare)"
    )
    print(f"RATIO index_rebuild_time/plain_read_time = {t_one / t_read:.2f}")
    print(f"RATIO spark_index_rebuild_time/plain_read_time = {t_spark / (2 * t_read):.2f}")
    print(f"RATIO remote_index_check_time/plain_read_time = {t_remote / t_remote_read:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=8, help="partitions uploaded")
    parser.add_argument("--upload-mb", type=int, default=512, help="total bytes uploaded by each side")
    parser.add_argument("--segment-mb", type=int, default=16, help="segment size of the upload data")
    parser.add_argument("--size-mb", type=int, default=2048, help="bytes of segments rebuilt")
    parser.add_argument("--rebuild-segment-mb", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2, help="upload rounds; the sides alternate going first")
    parser.add_argument("--quick", action="store_true", help="tiny sizes for a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.partitions, args.upload_mb, args.segment_mb = 4, 8, 1
        args.size_mb, args.rebuild_segment_mb = 8, 2
    segments = max(1, args.upload_mb // (args.partitions * args.segment_mb))
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    t_start, spark = timed(lambda: runtime.spark_session("tiering-bench", "local[2]"))
    spark.sparkContext.setLogLevel("ERROR")
    spark.sparkContext.parallelize(range(2), 2).map(lambda x: x).collect()  # start the Python workers
    print(f"Spark session (local[2]) started in {t_start:.1f} s (not counted below)")
    try:
        bench_upload(root, spark, args.partitions, segments, args.segment_mb, max(1, args.rounds))
        bench_rebuild(root, spark, args.size_mb, args.rebuild_segment_mb)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
