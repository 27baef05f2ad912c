"""Export the tiered log into its Iceberg table on Spark, exactly once, as ``tiering export`` does.

    spark-submit spark_apps/export_table.py --config FILE [--topic T [--partition P] | --partitions ...]
        [--isolation read_committed|read_uncommitted] [--table NAMESPACE.NAME] [--dry-run]

The logic is ``tiering_core.export``; this app only spreads it. The driver holds each topic's
table as ``tiering export`` does (``exporting``: the table's export lease, so the app and the
command never export into one table at once; a retry of the scheduled task takes over its killed
try's lease at once) and plans its export (the segments the table does not hold yet, by the rule
``tiering export`` follows: its snapshot ancestry, or the metadata store's record of its export
commits once snapshot expiry removed them); one Spark task per remote segment decodes it with the
Arrow decoder and writes its Parquet data files under the table's location, and the driver commits
what the tasks wrote in one pyiceberg append that records the segment ids in the snapshot summary
(and the commit in the metadata store). The commit on the driver is the only commit: a task
writes files no snapshot points to, so a killed run leaves nothing in the table, and its rerun
removes those files and exports the same segments again. No JVM Iceberg runtime and no Spark-side
catalog: executors reach the warehouse and the remote tier with pyarrow and boto3, as the other
apps do.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spark_apps import runtime
from tiering_core.cli.output import (
    format_export_cleanup,
    format_export_commit,
    format_export_failure,
    format_export_segment,
)
from tiering_core.config import RemoteConfig, load_config
from tiering_core.context import TieringContext
from tiering_core.export.plan import ExportSegment
from tiering_core.export.session import dry_run as plan_dry_run
from tiering_core.export.session import exporting
from tiering_core.export.write import ExportAttempt, SegmentExportError, write_segment_files
from tiering_core.kafka.isolation import IsolationLevel
from tiering_core.kafka.topic import TopicPartition

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from tiering_core.export.session import TableExport
    from tiering_core.metadata.store import TaskAttempt

APP = "export_table"


@dataclass
class Report:
    """What the run committed, per table, and the segments that failed (id and offset)."""

    committed: dict[str, int] = field(default_factory=dict)
    records: int = 0
    failed: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        return runtime.EXIT_FAILURE if self.failed else runtime.EXIT_OK


@dataclass(frozen=True)
class WrittenSegment:
    """What a Spark task wrote for one segment: its data files (URLs) and rows."""

    files: list[str]
    rows: int


@dataclass(frozen=True)
class FailedSegment:
    """A segment its task could not export (a corrupt batch, its log gone): the reason names the
    segment id and the offset; the task deleted what it had written."""

    reason: str


def write_on_executor(
    remote: RemoteConfig, segment: ExportSegment, attempt: ExportAttempt
) -> WrittenSegment | FailedSegment:
    """One segment's data files, written by a Spark task. A bad segment is a result, not a task
    failure: Spark would only retry it, and the driver must name it as ``tiering export`` does."""
    rows = 0

    def count(batch: pa.RecordBatch) -> None:
        nonlocal rows
        rows += batch.num_rows

    try:
        files = write_segment_files(runtime.executor_storage(remote), segment, attempt, on_batch=count)
    except SegmentExportError as exc:
        return FailedSegment(str(exc))
    return WrittenSegment(files, rows)


def selected_topics(partitions: Sequence[TopicPartition], whole_topics: bool) -> dict[str, list[int | None]]:
    """Per topic, the partitions to plan: ``[None]`` (every partition the tier has, also those
    gone from the log dirs) unless single partitions were selected."""
    topics: dict[str, list[int | None]] = {}
    for tp in sorted(partitions):
        listed = topics.setdefault(tp.topic, [])
        if not whole_topics:
            listed.append(tp.partition)
    return {topic: listed or [None] for topic, listed in topics.items()}


def export_topic_on_spark(
    ctx: TieringContext,
    topic: str,
    partitions: Sequence[int | None],
    spark: SparkSession,
    report: Report,
    *,
    isolation: IsolationLevel,
    table: str | None,
    dry_run: bool,
    parallelism: int | None,
    say: Callable[[str], None],
    attempt: TaskAttempt | None = None,
) -> None:
    if dry_run:  # reads only: no lease, nothing created or migrated
        name, segments = plan_dry_run(ctx, topic, partitions, table=table, isolation=isolation)
        say(f"export {topic} -> {name}: {len(segments)} segment(s) to export, {runtime.fmt_bytes(_size(segments))}")
        for s in segments:
            say(f"would export {s.topic_partition}: segment {s.segment_id} offsets {s.start_offset}-{s.end_offset}")
        report.committed[str(name)] = 0
        return
    with exporting(ctx, topic, table=table, attempt=attempt) as export:
        segments = [s for p in partitions for s in export.plan(topic, p, isolation)]
        size = runtime.fmt_bytes(_size(segments))
        say(f"export {topic} -> {export.name}: {len(segments)} segment(s) to export, {size}")
        written_by = export.start_attempt() if segments else None
        committed = 0
        if written_by is not None:
            committed = write_and_commit(export, written_by, segments, spark, report, parallelism, say)
        cleaned = export.finish(written_by)
        if cleaned:
            say(format_export_cleanup(len(cleaned)))
        report.committed[str(export.name)] = committed


def _size(segments: Sequence[ExportSegment]) -> int:
    return sum(s.segment.size_bytes for s in segments)


def write_and_commit(
    export: TableExport,
    attempt: ExportAttempt,
    segments: Sequence[ExportSegment],
    spark: SparkSession,
    report: Report,
    parallelism: int | None,
    say: Callable[[str], None],
) -> int:
    """One Spark task per segment writes its files; the driver commits them in one snapshot. The
    number of segments committed."""
    sc = spark.sparkContext
    remote = export.ctx.config.remote
    written: list[tuple[ExportSegment, WrittenSegment]] = []
    with contextlib.closing(
        runtime.run_jobs(
            sc,
            segments,
            lambda segment: write_on_executor(remote, segment, attempt),
            slots=parallelism or max(1, sc.defaultParallelism),
            describe=lambda s: f"export {s.topic_partition} segment {s.start_offset}",
        )
    ) as outcomes:  # an abort cancels the queued and running tasks; their files are never committed
        for done, outcome in enumerate(outcomes, 1):
            segment = segments[outcome.index]
            if not isinstance(outcome.result, WrittenSegment):
                if isinstance(outcome.result, FailedSegment):
                    reason = outcome.result.reason
                else:  # the task itself failed (an executor lost, an unreadable tier)
                    reason = (
                        f"{segment.topic_partition}: segment {segment.segment_id} (offsets {segment.start_offset}-"
                        f"{segment.end_offset}): {outcome.error or 'no result'}"
                    )
                report.failed.append(reason)
                say(f"{format_export_failure(RuntimeError(reason))} [{done}/{len(segments)}]")
                continue
            written.append((segment, outcome.result))
            line = format_export_segment(segment, outcome.result.rows, len(outcome.result.files))
            say(f"{line} [{done}/{len(segments)}]")
    if not written:
        return 0
    # A failed commit leaves its files: the catalog may have taken it all the same (an answer
    # lost on the way back), and a later export removes them only if no snapshot holds them.
    result = export.commit(attempt, [(segment, w.files) for segment, w in written])
    skipped = {id(s) for s in result.already_exported}  # another export was faster: not ours to keep
    report.records += sum(w.rows for s, w in written if id(s) not in skipped)
    if result.snapshot_id is not None:
        say(f"{export.name}: {format_export_commit(len(result.committed), result.snapshot_id)}")
    return len(result.committed)


def run_export(
    ctx: TieringContext,
    partitions: Sequence[TopicPartition],
    spark: SparkSession,
    *,
    whole_topics: bool = True,
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
    table: str | None = None,
    dry_run: bool = False,
    parallelism: int | None = None,
    say: Callable[[str], None] = runtime.say,
    attempt: TaskAttempt | None = None,
) -> Report:
    """Export each topic of ``partitions`` into its table: one Spark task per remote segment,
    one commit per topic on the driver (``whole_topics``: every partition the tier has;
    ``attempt``: the scheduled task's try the table leases are named after)."""
    started = time.monotonic()
    report = Report()
    topics = selected_topics(partitions, whole_topics)
    if table is not None and len(topics) > 1:
        raise runtime.AppError("--table names one table: select one topic")
    for topic, topic_partitions in topics.items():
        export_topic_on_spark(
            ctx,
            topic,
            topic_partitions,
            spark,
            report,
            isolation=isolation,
            table=table,
            dry_run=dry_run,
            parallelism=parallelism,
            say=say,
            attempt=attempt,
        )
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
                whole_topics=not selection.partitions and selection.partition is None,
                isolation=isolation,
                table=table,
                dry_run=args.dry_run,
                parallelism=args.parallelism,
                attempt=runtime.task_attempt(),
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
