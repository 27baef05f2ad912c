"""Upload the eligible segments of many partitions at once, keeping every copy-run invariant.

    spark-submit spark_apps/parallel_upload.py --config FILE [--topic T [--partition P] | --partitions orders-0,...]

The driver is the core's (``tiering_core.runs.copy_many.copy_partitions``: each partition through
its ``CopyRun``, committed in offset order); this app gives it a ``SparkExecutor``, so each upload
is a one-task Spark job and a failed or killed task costs only its segment. Executors build the
storage backend from the config and stream the files from the log dir path (S3 through boto3).
As ``tiering copy`` does, the run records what it saw of each partition as an observation of the
broker it serves (``--broker``'s choice: ``TIERING_BROKER_ID``, the only broker, or in the
single-broker form the broker its log dirs' ``meta.properties`` name), and its uploads keep to the
broker's copy quota (``remote.log.manager.copy.max.bytes.per.second``): the driver holds a share
of the cap as one process of the broker and splits it evenly among the slots, so the tasks running
at once together never send faster than it (``runtime.SparkExecutor``).
Exit 1 on failures, 3 after a tiering gap (the rest is copied first).
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from spark_apps import runtime
from tiering_core.report.exit_codes import EXIT_FAILURE, EXIT_GAP, EXIT_OK
from tiering_core.runs.copy_many import copy_partitions
from tiering_core.runs.copy_report import ParallelCopyReport

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

APP = "parallel_upload"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=APP, description="Parallel upload of many partitions on Spark.")
    runtime.add_common_arguments(parser)
    parser.add_argument("--parallelism", type=int, default=None, help="uploads at a time (default: Spark's)")
    parser.add_argument("--run-id", default=None, help="run id recorded with the partitions' leases")
    return parser


def exit_code(report: ParallelCopyReport) -> int:
    if report.failures:
        return EXIT_FAILURE
    return EXIT_GAP if report.gaps else EXIT_OK


def upload(app: runtime.AppRun) -> int:
    report = copy_partitions(
        app.ctx,
        app.partitions,
        app.executor(uploads=True),
        run_id=app.args.run_id or f"spark-{uuid.uuid4().hex}",
        events=runtime.say_event,
        broker_id=app.ctx.config.broker_id,
    )
    for line in report.failures:
        runtime.fail(APP, line)
    for line in report.gaps:
        runtime.fail(APP, f"TIERING GAP: {line}")
    return exit_code(report)


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    return runtime.run_app(APP, argv, spark, build_parser, upload)


if __name__ == "__main__":
    # Re-imported under its package name, so executors unpickle these functions by reference.
    from spark_apps.parallel_upload import main as app_main

    sys.exit(app_main())
