"""Verify (scrub) the remote tier on Spark: every finished segment against its manifest and metadata.

    spark-submit spark_apps/verify_segments.py --config FILE [--topic T [--partition P] | --partitions ...]

The logic is ``tiering_core.read.verify``; this app only spreads it. The driver lists the finished
segments of the selected partitions (reading metadata only: no lease, nothing is written);
executors stream each segment's objects, checking sizes and CRC-32C against the manifest, and the
manifest against the checksums recorded when the copy finished. One line per segment and a
summary; exit 1 when any segment has a problem (``tiering rebuild-indexes`` repairs damaged
indexes; a damaged ``.log`` needs the broker's copy or a restore from elsewhere).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_apps import runtime
from tiering_core.cli.output import format_verify_summary
from tiering_core.config import RemoteConfig, load_config
from tiering_core.context import TieringContext
from tiering_core.kafka.topic import TopicPartition
from tiering_core.read.verify import SegmentVerification, segments_to_verify, verify_segment

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tiering_core.metadata.store import RemoteLogSegmentMetadata

APP = "verify_segments"


def verify_on_executor(remote: RemoteConfig, segment: RemoteLogSegmentMetadata) -> SegmentVerification:
    return verify_segment(runtime.executor_storage(remote), segment)


@dataclass
class Report:
    results: list[SegmentVerification]
    seconds: float

    @property
    def damaged(self) -> list[SegmentVerification]:
        return [r for r in self.results if not r.ok]

    @property
    def exit_code(self) -> int:
        return runtime.EXIT_FAILURE if self.damaged else runtime.EXIT_OK


def run_verify(
    ctx: TieringContext,
    partitions: Sequence[TopicPartition],
    spark: SparkSession,
    *,
    parallelism: int | None = None,
    say: Callable[[str], None] = runtime.say,
) -> Report:
    """Verify every finished segment of ``partitions``, one Spark task per segment."""
    started = time.monotonic()
    sc = spark.sparkContext
    segments = [s for tp in partitions for s in segments_to_verify(ctx, tp)]
    size = sum(s.size_bytes for s in segments)
    say(
        f"verify: {len(segments)} finished segment(s), {runtime.fmt_bytes(size)} of log, {len(partitions)} partition(s)"
    )
    remote = ctx.config.remote
    results: list[SegmentVerification | None] = [None] * len(segments)
    done = 0
    with contextlib.closing(
        runtime.run_jobs(
            sc,
            segments,
            lambda segment: verify_on_executor(remote, segment),
            slots=parallelism or max(1, sc.defaultParallelism),
            describe=lambda s: f"verify {s.topic_id_partition.topic_partition} segment {s.start_offset}",
        )
    ) as outcomes:  # an abort cancels the queued and running checks
        for outcome in outcomes:
            segment = segments[outcome.index]
            result = outcome.result
            if not isinstance(result, SegmentVerification):
                tp = segment.topic_id_partition.topic_partition
                result = SegmentVerification(
                    tp.topic,
                    tp.partition,
                    str(segment.segment_id),
                    segment.start_offset,
                    segment.end_offset,
                    segment.size_bytes,
                    [outcome.error or "no result"],
                )
            results[outcome.index] = result
            done += 1
            say(f"{result.describe()} [{done}/{len(segments)}]")
    checked = [r for r in results if r is not None]
    report = Report(checked, time.monotonic() - started)
    say(f"{format_verify_summary(checked)} in {report.seconds:.2f} s ({runtime.rate(size, report.seconds)})")
    return report


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=APP, description="Verify the remote tier against manifests on Spark.")
    runtime.add_common_arguments(parser)
    parser.add_argument("--parallelism", type=int, default=None, help="segments at a time (default: Spark's)")
    return parser


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    args = build_parser().parse_args(argv)
    runtime.configure_logging(args)
    own_session = spark is None
    try:
        selection = runtime.parse_selection(args)
        config = load_config(runtime.config_path(args))
        with TieringContext.open(config) as ctx:
            partitions = selection.resolve(ctx)
            if spark is None:
                spark = runtime.spark_session("tiering-verify-segments", args.master)
            report = run_verify(ctx, partitions, spark, parallelism=args.parallelism)
    except (Exception, KeyboardInterrupt) as exc:
        return runtime.report_failure(APP, exc)
    finally:
        if own_session and spark is not None:
            spark.stop()
    if report.damaged:
        runtime.fail(
            APP,
            f"{len(report.damaged)} segment(s) with problems: " + "; ".join(r.describe() for r in report.damaged[:5]),
        )
    return report.exit_code


if __name__ == "__main__":
    # Re-imported under its package name, so executors unpickle these functions by reference.
    from spark_apps.verify_segments import main as _main

    sys.exit(_main())
