"""Verify (scrub) the remote tier on Spark: every finished segment against its manifest and metadata.

    spark-submit spark_apps/verify_segments.py --config FILE [--topic T [--partition P] | --partitions ...]

The logic is ``tiering_core.read.verify.run_verify``, the driver ``tiering verify`` runs too; this
app gives it Spark's executors. The driver lists the finished segments of the selected partitions
(reading metadata only: no lease, nothing is written); executors stream each segment's objects,
checking sizes and CRC-32C against the manifest, and the manifest against the checksums recorded
when the copy finished. One line per segment and a summary; exit 1 when any segment has a problem
(``tiering rebuild-indexes`` repairs damaged indexes; a damaged ``.log`` needs the broker's copy or
a restore from elsewhere).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from spark_apps import runtime
from tiering_core.read.verify import run_verify
from tiering_core.report.exit_codes import EXIT_FAILURE, EXIT_OK
from tiering_core.report.results import format_verification, format_verify_summary

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

APP = "verify_segments"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=APP, description="Verify the remote tier against manifests on Spark.")
    runtime.add_common_arguments(parser)
    parser.add_argument("--parallelism", type=int, default=None, help="segments at a time (default: Spark's)")
    return parser


def verify(app: runtime.AppRun) -> int:
    result = run_verify(app.ctx, app.selected, app.executor(), runtime.say_event)
    runtime.say(format_verify_summary(result.results, result.seconds))
    if not result.damaged:
        return EXIT_OK
    named = "; ".join(format_verification(r) for r in result.damaged[:5])
    runtime.fail(APP, f"{len(result.damaged)} segment(s) with problems: {named}")
    return EXIT_FAILURE


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    return runtime.run_app(APP, argv, spark, build_parser, verify, remote_only=True)


if __name__ == "__main__":
    # Re-imported under its package name, so executors unpickle these functions by reference.
    from spark_apps.verify_segments import main as app_main

    sys.exit(app_main())
