"""Export the tiered log into its Iceberg table on Spark, exactly once, as ``tiering export`` does.

    spark-submit spark_apps/export_table.py --config FILE [--topic T [--partition P] | --partitions ...]
        [--isolation read_committed|read_uncommitted] [--table NAMESPACE.NAME] [--dry-run]

The logic is ``tiering_core.export``'s driver (``export_partitions``, ``run_export``'s for each
selected topic); this app gives it Spark's executors. The driver holds each topic's table as
``tiering export`` does (``exporting``: the table's export lease, so the app and the command never
export into one table at once; a retry of the scheduled task takes over its killed try's lease at
once) and plans its export (the segments the table does not hold yet, by the rule ``tiering
export`` follows); one Spark task per remote segment decodes it with the Arrow decoder and writes
its Parquet data files under the table's location, and the driver commits what the tasks wrote in
pyiceberg appends of at most ``COMMIT_BYTES`` of segments each, in plan order, that record the
segment ids in the snapshot summary (and the commit in the metadata store). Commits happen only on
the driver: a task writes files no snapshot points to, so a killed run leaves the table holding
what its commits held, and its rerun removes the other files and exports the rest. No JVM Iceberg
runtime and no Spark-side catalog: executors reach the warehouse and the remote tier with pyarrow
and boto3, as the other apps do. The app reads no log dir it does not have: where the process
serves no broker (a cluster's default-queue worker), the selection is what the metadata store
holds (``runtime.run_app``'s ``remote_only``), and a topic or partition named that it holds none
of fails the run naming it before Spark starts.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from spark_apps import runtime
from tiering_core.export import export_partitions
from tiering_core.kafka.isolation import IsolationLevel
from tiering_core.kafka.topic import TopicPartition
from tiering_core.report.exit_codes import EXIT_FAILURE, EXIT_OK
from tiering_core.report.results import format_export_totals

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

APP = "export_table"


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


def export(app: runtime.AppRun) -> int:
    started = time.monotonic()
    args, selection = app.args, app.selection
    isolation = parse_isolation(args.isolation)  # before Spark starts
    results = export_partitions(
        app.ctx,
        sorted({tp if isinstance(tp, TopicPartition) else tp.topic_partition for tp in app.selected}),
        whole_topics=not selection.partitions and selection.partition is None,
        isolation=isolation,
        table=None if args.table is None or not args.table.strip() else args.table.strip(),
        dry_run=args.dry_run,
        events=runtime.say_event,
        attempt=runtime.task_attempt(),
        executor=None if args.dry_run else app.executor(),
    )
    runtime.say(format_export_totals(results, time.monotonic() - started))
    failed = [f.reason for r in results for f in r.failed]
    if not failed:
        return EXIT_OK
    runtime.fail(APP, f"{len(failed)} segment(s) not exported: " + "; ".join(failed[:5]))
    return EXIT_FAILURE


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    return runtime.run_app(APP, argv, spark, build_parser, export, remote_only=True)


if __name__ == "__main__":
    # Re-imported under its package name, so executors unpickle these functions by reference.
    from spark_apps.export_table import main as app_main

    sys.exit(app_main())
