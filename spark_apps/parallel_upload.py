"""Upload the eligible segments of many partitions at once, keeping every copy-engine invariant.

    spark-submit spark_apps/parallel_upload.py --config FILE [--topic T [--partition P] | --partitions orders-0,...]

Per partition the driver runs ``tiering_core.copy.CopyRun``, the same steps ``run_copy``
takes: lease and fencing, recovery of killed runs, tiering gaps, COPY_SEGMENT_STARTED before a
segment is handed out. Each upload is a one-task Spark job, so a failed or killed task costs
only its segment; executors build the storage backend from the config and stream the files
from the log dir path (S3 through boto3). Results are committed per partition in offset
order as they arrive: after a failure at segment k, the partition's later segments are
cleaned up instead of finished, so the copied offset never skips. Exit 1 on failures, 3 after
a tiering gap (the rest is copied first).
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if __package__ in (None, ""):  # run as a file by spark-submit: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark_apps import runtime
from tiering_core.config import RemoteConfig, load_config
from tiering_core.context import TieringContext
from tiering_core.copy import CopyResult, CopyRun, SegmentUpload, upload_segment
from tiering_core.errors import TieringError, TieringGapError
from tiering_core.kafka.topic import TopicPartition
from tiering_core.metadata.errors import FencedError
from tiering_core.tier_state import CopyCandidate

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tiering_core.storage.manifest import SegmentManifest

APP = "parallel_upload"


# --- executor side ---------------------------------------------------------------------------


@dataclass(frozen=True)
class UploadOutcome:
    """What an executor reports for one segment: its manifest, or why it failed."""

    manifest: SegmentManifest | None
    error: str | None
    seconds: float
    worker: str = ""


def upload_on_executor(remote: RemoteConfig, upload: SegmentUpload) -> UploadOutcome:
    """Upload one segment, manifest last; a failure is reported to the driver, which cleans up."""
    worker = f"{socket.gethostname()}:{os.getpid()}"
    started = time.monotonic()
    try:
        manifest = upload_segment(runtime.executor_storage(remote), upload)
    except Exception as exc:
        return UploadOutcome(None, f"{type(exc).__name__}: {exc}", time.monotonic() - started, worker)
    return UploadOutcome(manifest, None, time.monotonic() - started, worker)


Uploader = Callable[[RemoteConfig, SegmentUpload], UploadOutcome]


# --- driver side -----------------------------------------------------------------------------


@dataclass
class InFlight:
    candidate: CopyCandidate
    upload: SegmentUpload
    future: Future[UploadOutcome]


@dataclass
class PartitionUpload:
    """A partition's copy run and its uploads in flight, committed strictly in offset order."""

    run: CopyRun
    pending: collections.deque[InFlight] = field(default_factory=collections.deque)
    failure: str | None = None

    @property
    def stopped(self) -> bool:
        return self.failure is not None or not self.run.active

    def stop(self, failure: str | None) -> None:
        """Stop after a failure (``None``: the run was fenced); uploads not started never will."""
        if self.failure is None:
            self.failure = failure
        for item in self.pending:
            item.future.cancel()


@dataclass
class Report:
    results: list[CopyResult] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)
    workers: set[str] = field(default_factory=set)
    seconds: float = 0.0

    @property
    def segments(self) -> int:
        return sum(r.segments_copied for r in self.results)

    @property
    def bytes(self) -> int:
        return sum(r.bytes_copied for r in self.results)

    @property
    def cleaned_up(self) -> int:
        return sum(r.segments_cleaned_up for r in self.results)

    @property
    def fenced(self) -> list[str]:
        return [f"{r.topic}-{r.partition}" for r in self.results if r.fenced]

    @property
    def exit_code(self) -> int:
        if self.failures:
            return runtime.EXIT_FAILURE
        return runtime.EXIT_GAP if self.gaps else runtime.EXIT_OK

    def summary(self) -> str:
        line = (
            f"parallel upload: {len(self.results)} partition(s), {self.segments} segment(s), "
            f"{runtime.fmt_bytes(self.bytes)} ({self.bytes} bytes) in {self.seconds:.2f} s "
            f"({runtime.rate(self.bytes, self.seconds)}) on {len(self.workers)} executor worker(s); "
            f"{len(self.failures)} failure(s)"
        )
        if self.fenced:
            line += f", {len(self.fenced)} partition(s) held by another run"
        if self.gaps:
            line += f", {len(self.gaps)} tiering gap(s)"
        return line


def _round_robin(partitions: list[PartitionUpload]) -> Iterator[tuple[PartitionUpload, CopyCandidate]]:
    """Every partition's first segment, then every second one, ...: early offsets go out first."""
    depth = max((len(p.run.candidates) for p in partitions), default=0)
    for index in range(depth):
        for p in partitions:
            if index < len(p.run.candidates):
                yield p, p.run.candidates[index]


def _commit_ready(partition: PartitionUpload, report: Report) -> None:
    """Commit the finished prefix of a partition's uploads; after a failure, clean up instead."""
    run = partition.run
    while partition.pending and partition.pending[0].future.done():
        item = partition.pending.popleft()
        outcome: UploadOutcome | None = None
        if item.future.cancelled():
            error: str | None = "not uploaded"
        elif (exc := item.future.exception()) is not None:
            error = f"Spark task failed: {runtime.spark_failure_reason(exc)}"
        else:
            outcome = item.future.result()
            report.workers.add(outcome.worker)
            error = outcome.error
        base = item.candidate.base_offset
        if partition.stopped:  # an earlier segment failed, or the run was fenced
            if run.active:
                run.abandon(item.candidate, item.upload, partition.failure)
                runtime.say(f"{run.tp}: segment {base} not finished (an earlier segment failed); cleaned up")
            else:
                run.fenced_while_copying(item.candidate, item.upload)
            continue
        if outcome is not None and outcome.manifest is not None:
            if not run.commit_finished_segment(
                item.candidate, item.upload, outcome.manifest, outcome.seconds, f" on {outcome.worker}"
            ):
                partition.stop(None)
            continue
        failure = run.abandon(item.candidate, item.upload, error)
        runtime.say(f"{run.tp}: segment {base} failed ({error}); cleaned up")
        partition.stop(str(failure))


def run_parallel_upload(
    ctx: TieringContext,
    partitions: Sequence[TopicPartition],
    spark: SparkSession,
    *,
    run_id: str | None = None,
    parallelism: int | None = None,
    uploader: Uploader = upload_on_executor,
    say: Callable[[str], None] = runtime.say,
) -> Report:
    """Copy every eligible segment of ``partitions``, uploads spread over Spark executors."""
    started = time.monotonic()
    sc = spark.sparkContext
    run = run_id or f"spark-{uuid.uuid4().hex}"
    slots = parallelism or max(1, sc.defaultParallelism)
    renew_every = max(0.5, ctx.config.metadata.lease_ms / 3000.0)
    report = Report()

    uploads: list[PartitionUpload] = []
    for tp in partitions:
        try:
            uploads.append(PartitionUpload(CopyRun.begin(ctx, tp, run_id=run, progress=say)))
        except TieringError as exc:
            report.failures.append(f"{tp}: {exc}")
    active = [p for p in uploads if p.run.active]
    total = sum(len(p.run.candidates) for p in active)
    size = sum(c.segment.size_bytes for p in active for c in p.run.candidates)
    say(
        f"parallel upload: {total} segment(s), {runtime.fmt_bytes(size)} of {len(active)} partition(s) planned; "
        f"{slots} upload(s) at a time"
    )
    last_renewal = time.monotonic()

    def renew_if_due() -> None:
        nonlocal last_renewal
        if time.monotonic() - last_renewal >= renew_every:
            for p in uploads:
                if not p.stopped:
                    p.run.renew()
                    if not p.run.active:
                        p.stop(None)
            last_renewal = time.monotonic()

    try:
        with ThreadPoolExecutor(max_workers=slots, thread_name_prefix="upload") as pool:
            for partition, candidate in _round_robin(active):
                if partition.stopped:
                    continue
                try:
                    upload = partition.run.start_segment(candidate)
                except FencedError:
                    partition.run.fenced_while_copying(candidate, None)
                    partition.stop(None)
                    continue
                except TieringError as exc:
                    say(f"{partition.run.tp}: segment {candidate.base_offset} not copied: {exc}")
                    partition.stop(f"{partition.run.tp}: {exc}")
                    continue
                future = pool.submit(
                    runtime.run_one_job,
                    sc,
                    upload,
                    functools.partial(uploader, ctx.config.remote),
                    f"upload {partition.run.tp} segment {candidate.base_offset}",
                )
                partition.pending.append(InFlight(candidate, upload, future))
                _commit_ready(partition, report)
                renew_if_due()
            while any(p.pending for p in uploads):
                futures = [item.future for p in uploads for item in p.pending]
                wait(futures, timeout=renew_every, return_when=FIRST_COMPLETED)
                for p in uploads:
                    _commit_ready(p, report)
                renew_if_due()
    except BaseException:
        for p in uploads:  # what is STARTED is cleaned up by the next run
            p.run.release()
        raise

    for p in uploads:
        try:
            report.results.append(p.run.finish())
        except TieringGapError as exc:
            report.gaps.append(str(exc))
            report.results.append(p.run.result)
        if p.failure is not None:
            report.failures.append(p.failure)
    report.seconds = time.monotonic() - started
    say(report.summary())
    return report


# --- the app ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=APP, description="Parallel upload of many partitions on Spark.")
    runtime.add_common_arguments(parser)
    parser.add_argument("--parallelism", type=int, default=None, help="uploads at a time (default: Spark's)")
    parser.add_argument("--run-id", default=None, help="run id recorded with the partitions' leases")
    return parser


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    args = build_parser().parse_args(argv)
    own_session = spark is None
    try:
        selection = runtime.parse_selection(args)
        config = load_config(runtime.config_path(args))
        with TieringContext.open(config) as ctx:
            partitions = selection.resolve(ctx)  # bad selectors fail before Spark starts
            if spark is None:
                spark = runtime.spark_session("tiering-parallel-upload", args.master)
            report = run_parallel_upload(ctx, partitions, spark, run_id=args.run_id, parallelism=args.parallelism)
    except TieringError as exc:
        runtime.fail(APP, str(exc))
        return runtime.EXIT_FAILURE
    finally:
        if own_session and spark is not None:
            spark.stop()
    for line in report.failures:
        runtime.fail(APP, line)
    for line in report.gaps:
        runtime.fail(APP, f"TIERING GAP: {line}")
    return report.exit_code


if __name__ == "__main__":
    # Re-imported under its package name, so executors unpickle these functions by reference.
    from spark_apps.parallel_upload import main as _main

    sys.exit(_main())
