"""Export benchmark: one uncompressed segment (512 MiB), measured side by side in one run.

- Arrow decode (``tiering_core.kafka.arrow.read_segment``, CRC checked, every column built) vs
  kafka-python's full decode (``kafka.record``, every record built) of the same ``.log``:
  records/s ratio (target >= 10);
- export to a local Iceberg table (``tiering export`` in this process: SQLite catalog, file
  warehouse; the segment fetched from a filesystem tier, decoded, written as Parquet data files
  and committed) vs pyarrow writing the same, already decoded, table as one Parquet file with
  the same codec: time ratio (target <= 2);
- the Spark export (the same driver, ``run_export``, with a ``SparkExecutor`` on ``local[2]``, as
  ``spark_apps/export_table.py`` runs it: one task for the segment, the commit on the driver) vs
  the same ``tiering export``: time ratio.

Each round exports into a fresh catalog and warehouse; the sides take turns going first, the
best of ``--rounds`` is kept. The page cache is warm: these are CPU costs.

    python bench/bench_export.py [--size-mb 512] [--rounds 2] [--quick]
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
for path in (ROOT, BENCH):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from bench_arrow_decode import decode_arrow, warm_up  # noqa: E402
from bench_kafka_format import decode_kafka_python  # noqa: E402
from bench_spark import T0, build_log_dir, plain_read  # noqa: E402

from spark_apps import runtime  # noqa: E402
from tiering_core.config import load_config  # noqa: E402
from tiering_core.context import TieringContext  # noqa: E402
from tiering_core.export import run_export as tiering_export  # noqa: E402
from tiering_core.kafka.arrow import read_segment  # noqa: E402
from tiering_core.kafka.compression import CODEC_NONE  # noqa: E402
from tiering_core.kafka.isolation import IsolationLevel  # noqa: E402
from tiering_core.kafka.log_writer import PartitionWriter  # noqa: E402
from tiering_core.kafka.records import RecordSpec  # noqa: E402
from tiering_core.kafka.topic import TopicPartition  # noqa: E402
from tiering_core.runs.copy import run_copy  # noqa: E402

MiB = 1 << 20
TOPIC = "bench"
TP = TopicPartition(TOPIC, 0)
#: pyiceberg's default codec for Parquet data files (``write.parquet.compression-codec``).
PARQUET_CODEC = "zstd"


def write_config(root: Path, name: str, log_dir: Path, tier: Path) -> Path:
    """A config over ``log_dir`` and a filesystem tier, with a fresh catalog and warehouse."""
    warehouse = root / f"{name}-warehouse"
    warehouse.mkdir()
    doc = {
        "log_dirs": [str(log_dir)],
        "metadata": {"url": f"sqlite:///{root / 'metadata.db'}"},
        "remote": {"backend": "filesystem", "root": str(tier)},
        "export": {"catalog": {"type": "sql", "uri": f"sqlite:///{root / f'{name}-catalog.db'}",
                               "warehouse": warehouse.as_uri()}},
    }  # fmt: skip
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def build_distinct(log_dir: Path, size_mb: int, value_bytes: int = 512, per_batch: int = 64) -> int:
    """One closed segment of ``size_mb`` whose records all have distinct (random) values, as real
    payloads do: Parquet cannot shrink them to one dictionary entry."""
    w = PartitionWriter(log_dir, TP, segment_bytes=1 << 40, preallocate_index_bytes=10 << 20, clock=lambda: T0)
    n = 0
    while w.active_size < size_mb * MiB:
        values = os.urandom(value_bytes * per_batch)
        w.append(
            [
                RecordSpec(f"k{n + i}".encode(), values[i * value_bytes : (i + 1) * value_bytes], T0 + n + i)
                for i in range(per_batch)
            ]
        )
        n += per_batch
    w.roll()
    w.set_high_watermark()
    return sum(p.stat().st_size for p in log_dir.rglob("*.log"))


def best(times: list[float]) -> float:
    return min(times)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def cli_export(config: Path) -> int:
    """``tiering export --topic bench`` in this process: the records committed."""
    with TieringContext.open(load_config(config)) as ctx:
        result = tiering_export(ctx, TOPIC)
    assert not result.failed, result.failed
    return int(result.rows)


def spark_export(config: Path, spark: Any) -> int:
    with TieringContext.open(load_config(config)) as ctx:
        result = tiering_export(ctx, TOPIC, executor=runtime.SparkExecutor(spark.sparkContext, ctx.config.remote))
    assert not result.failed, result.failed
    return int(result.rows)


def bench_decode(log: Path, rounds: int) -> float:
    size = log.stat().st_size
    counts: dict[str, int] = {}
    wall: dict[str, list[float]] = {"kafka-python": [], "arrow": []}
    for r in range(rounds):
        order = ("kafka-python", "arrow") if r % 2 == 0 else ("arrow", "kafka-python")
        for side in order:
            fn = decode_kafka_python if side == "kafka-python" else decode_arrow
            seconds, counts[side] = timed(functools.partial(fn, log))
            wall[side].append(seconds)
    assert counts["arrow"] == counts["kafka-python"], counts
    records = counts["arrow"]
    for side, times in wall.items():
        t = best(times)
        print(f"  {side:>12}: {records / t:>12,.0f} records/s ({t:.3f} s, {size / MiB / t:,.0f} MiB/s)")
    ratio = best(wall["kafka-python"]) / best(wall["arrow"])
    print(f"RATIO arrow_decode/kafka_python_decode = {ratio:.2f} (records/s; target >= 10)")
    return ratio


def bench_export(root: Path, log_dir: Path, tier: Path, rounds: int, spark: Any, records: int) -> dict[str, float]:
    table = pa.Table.from_batches(list(read_segment(log_dir / str(TP) / f"{0:020d}.log", TP)))
    assert table.num_rows == records, (table.num_rows, records)
    print(f"  decoded table: {table.num_rows:,} rows, {table.nbytes / MiB:,.0f} MiB in Arrow")
    times: dict[str, list[float]] = {"pyarrow": [], "cli": [], "spark": []}
    sides: dict[str, Callable[[int], int]] = {
        "pyarrow": lambda r: (
            pq.write_table(table, root / f"pyarrow-{r}.parquet", compression=PARQUET_CODEC) or table.num_rows
        ),
        "cli": lambda r: cli_export(write_config(root, f"cli-{r}", log_dir, tier)),
        "spark": lambda r: spark_export(write_config(root, f"spark-{r}", log_dir, tier), spark),
    }
    for r in range(rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for side in order:
            seconds, written = timed(functools.partial(sides[side], r))
            assert written == records, (side, written, records)
            times[side].append(seconds)
            print(f"  round {r + 1}: {side:>7} {seconds:7.2f} s")
    print(
        f"  best: pyarrow Parquet write ({PARQUET_CODEC}) {best(times['pyarrow']):.2f} s | tiering export (fetch, "
        f"decode, write, commit) {best(times['cli']):.2f} s | Spark export local[2] {best(times['spark']):.2f} s"
    )
    ratios = {
        "iceberg_export_time/pyarrow_parquet_write_time": best(times["cli"]) / best(times["pyarrow"]),
        "spark_export_time/cli_export_time": best(times["spark"]) / best(times["cli"]),
    }
    targets = {"iceberg_export_time/pyarrow_parquet_write_time": " (target <= 2)"}
    for name, value in ratios.items():
        print(f"RATIO {name} = {value:.2f}{targets.get(name, '')}")
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=512, help="the segment's size (uncompressed records)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, sides alternating first (best is kept)")
    parser.add_argument(
        "--values", choices=("random", "repeated"), default="random", help="distinct random values, or one repeated"
    )
    parser.add_argument("--quick", action="store_true", help="an 8 MiB segment, 1 round: a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.size_mb, args.rounds = 8, 1
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = Path(tempfile.mkdtemp(prefix="bench-export-"))
    spark = None
    try:
        print(f"warm-up: first Arrow decode in this process {warm_up(root, CODEC_NONE):.2f} s (numba)")
        log_dir, tier = root / "logs", root / "tier"
        tier.mkdir()
        if args.values == "repeated":  # bench_spark's segments: one value in every record
            size = build_log_dir(log_dir, TOPIC, 1, 1, args.size_mb)
        else:
            log_dir.mkdir()
            size = build_distinct(log_dir, args.size_mb)
        log = log_dir / str(TP) / f"{0:020d}.log"
        copy_config = write_config(root, "copy", log_dir, tier)
        with TieringContext.open(load_config(copy_config)) as ctx:
            run_copy(ctx, TP)
        plain_read([log])
        print(
            f"segment: {size / MiB:.0f} MiB uncompressed, 512 B {args.values} values, one partition, copied to a "
            "filesystem tier"
        )
        print("\n[decode] the same .log, records/s")
        bench_decode(log, args.rounds)
        records = decode_arrow(log)
        from pyspark.sql import SparkSession

        spark = (
            SparkSession.builder.master("local[2]")
            .appName("bench-export")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.memory", "2g")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        runtime.ship_packages(spark.sparkContext)
        print(f"\n[export] {records:,} records ({IsolationLevel.READ_COMMITTED.value}), {args.rounds} round(s)")
        bench_export(root, log_dir, tier, args.rounds, spark, records)
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
