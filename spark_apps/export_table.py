"""Export the tiered log into its Iceberg table on Spark, exactly once, as ``tiering export`` does.

    spark-submit spark_apps/export_table.py --config FILE [--topic T [--partition P] | --partitions ...]
        [--isolation read_committed|read_uncommitted] [--table NAMESPACE.NAME] [--dry-run]

The logic is ``tiering_core.export``; this app only spreads it. The driver plans each topic's
export (the segments no snapshot of the table holds yet; data files of an attempt that never
committed are removed first), one Spark task per remote segment decodes it with the Arrow
decoder and writes its Parquet data files under the table's location, and the driver commits
what the tasks wrote in one pyiceberg append that records the segment ids in the snapshot
summary. The commit on the driver is the only commit: a task writes files no snapshot points
to, so a killed run leaves nothing in the table, and its rerun removes those files and exports
the same segments again. No JVM Iceberg runtime and no Spark-side catalog: executors reach the
warehouse and the remote tier with pyarrow and boto3, as the other apps do.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import TYPE_CHECKING

from spark_apps import runtime
from tiering_core.config import load_config
from tiering_core.context import TieringContext
from tiering_core.export import commit_segments, plan_export, write_segment_files
from tiering_core.kafka.isolation import IsolationLevel
from tiering_core.kafka.topic import TopicPartition

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

APP = "export_table"


@dataclass
class Report:
    """What the run committed, per topic, and the segments that failed (id and offset)."""

    committed: dict[str, int] = field(default_factory=dict)
    records: int = 0
    failed: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        return runtime.EXIT_FAILURE if self.failed else runtime.EXIT_OK


def run_export(
    ctx: TieringContext,
    partitions: Sequence[TopicPartition],
    spark: SparkSession,
    *,
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
    table: str | None = None,
    dry_run: bool = False,
    parallelism: int | None = None,
    say: Callable[[str], None] = runtime.say,
) -> Report:
    """Export each topic of ``partitions`` into its table: one Spark task per remote segment,
    one commit per topic on the driver."""
    started = time.monotonic()
    sc = spark.sparkContext
    report = Report()
    by_topic = {topic: [tp.partition for tp in tps] for topic, tps in groupby(sorted(partitions), lambda t: t.topic)}
    if table is not None and len(by_topic) > 1:
        raise runtime.AppError("--table names one table: select one topic")
    for topic, topic_partitions in by_topic.items():
        plan = plan_export(ctx, topic, topic_partitions, isolation=isolation, table=table)
        segments = list(plan.segments)
        size = sum(s.size_bytes for s in segments)
        say(f"export {topic} -> {plan.table_name}: {len(segments)} segment(s) to export, {runtime.fmt_bytes(size)}")
        if dry_run or not segments:
            report.committed[topic] = 0
            continue
        target = plan.target  # what an executor needs to write: picklable, no catalog connection
        written = []
        with contextlib.closing(
            runtime.run_jobs(
                sc,
                segments,
                lambda segment: write_segment_files(target, segment, isolation=isolation),
                slots=parallelism or max(1, sc.defaultParallelism),
                describe=lambda s: f"export {s.topic_id_partition.topic_partition} segment {s.start_offset}",
            )
        ) as outcomes:  # an abort cancels the queued and running tasks; their files are never committed
            for done, outcome in enumerate(outcomes, 1):
                segment = segments[outcome.index]
                where = f"{segment.topic_id_partition.topic_partition} segment {segment.segment_id} (offset {segment.start_offset})"
                if outcome.error is not None or outcome.result is None:
                    report.failed.append(f"{where}: {outcome.error or 'no result'}")
                    say(f"{where}: failed: {outcome.error} [{done}/{len(segments)}]")
                    continue
                written.append(outcome.result)
                say(f"{where}: written [{done}/{len(segments)}]")
        if written:
            commit = commit_segments(ctx, plan, written)
            report.committed[topic] = len(written)
            report.records += getattr(commit, "records", 0)
            say(f"export {topic}: committed {len(written)} segment(s) in one snapshot")
    report.seconds = time.monotonic() - started
    say(
        f"export: {sum(report.committed.values())} segment(s) committed, {len(report.failed)} failed "
        f"in {report.seconds:.2f} s"
    )
    return report


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=APP, description="Export the tiered log into its Iceberg table on Spark.")
    runtime.add_common_arguments(parser)
    parser.add_argument(
        "--isolation",
        default=IsolationLevel.READ_COMMITTED.value,
        help="read_committed (default: drops aborted transactions) or read_uncommitted",
    )
    parser.add_argument("--table", default=None, help="NAMESPACE.NAME (default: <namespace>.<topic>)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, write and commit nothing")
    parser.add_argument("--parallelism", type=int, default=None, help="segments at a time (default: Spark's)")
    return parser


def parse_isolation(value: str | None) -> IsolationLevel:
    text = "" if value is None else value.strip()
    try:
        return IsolationLevel(text or IsolationLevel.READ_COMMITTED.value)
    except ValueError as exc:
        raise runtime.AppError(f"--isolation: {value!r} is not read_committed or read_uncommitted") from exc


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    args = build_parser().parse_args(argv)
    runtime.configure_logging(args)
    own_session = spark is None
    try:
        selection = runtime.parse_selection(args)
        isolation = parse_isolation(args.isolation)
        table = None if args.table is None or not args.table.strip() else args.table.strip()
        config = load_config(runtime.config_path(args))
        with TieringContext.open(config) as ctx:
            partitions = selection.resolve(ctx)
            if spark is None:
                spark = runtime.spark_session("tiering-export-table", args.master)
            report = run_export(
                ctx,
                partitions,
                spark,
                isolation=isolation,
                table=table,
                dry_run=args.dry_run,
                parallelism=args.parallelism,
            )
    except (Exception, KeyboardInterrupt) as exc:
        return runtime.report_failure(APP, exc)
    finally:
        if own_session and spark is not None:
            spark.stop()
    if report.failed:
        runtime.fail(APP, f"{len(report.failed)} segment(s) not exported: " + "; ".join(report.failed[:5]))
    return report.exit_code


if __name__ == "__main__":
    # Re-imported under its package name, so executors unpickle these functions by reference.
    from spark_apps.export_table import main as _main

    sys.exit(_main())
