"""Upload the eligible segments of many partitions at once, keeping every copy-engine invariant.

    spark-submit spark_apps/parallel_upload.py --config FILE [--topic T [--partition P] | --partitions orders-0,...]

Per partition the driver runs ``tiering_core.runs.copy.CopyRun``, the same steps ``run_copy``
takes: lease and fencing, recovery of killed runs, tiering gaps, COPY_SEGMENT_STARTED before a
segment is handed out. Each upload is a one-task Spark job, so a failed or killed task costs
only its segment; executors build the storage backend from the config and stream the files
from the log dir path (S3 through boto3). Results are committed per partition in offset
order as they arrive: after a failure at segment k (its upload, or its check on the driver),
the segments before k still finish, as a sequential run would, and the later ones are cleaned
up instead of finished, so the copied offset never skips. A partition whose lease is lost
stops alone; a partition done releases its lease at once. If the driver itself fails, queued
uploads are dropped, running ones cancelled, what never ran is cleaned up and every lease
released. Exit 1 on failures, 3 after a tiering gap (the rest is copied first).
"""

from __future__ import annotations

import argparse
import collections
import functools
import logging
import os
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spark_apps import runtime
from tiering_core.cli.exit_codes import EXIT_FAILURE, EXIT_GAP, EXIT_OK
from tiering_core.cli.output import event_line
from tiering_core.config import RemoteConfig
from tiering_core.context import TieringContext
from tiering_core.errors import TieringError, TieringGapError
from tiering_core.events import RunEvent
from tiering_core.events.copy import (
    ParallelUploadFinished,
    SegmentLeftUploading,
    SegmentNotFinished,
    SegmentRefused,
    UploadsPlanned,
)
from tiering_core.kafka.topic import TopicPartition
from tiering_core.metadata.errors import FencedError
from tiering_core.runs.copy import CopyResult, CopyRun
from tiering_core.runs.lease import renew_interval
from tiering_core.runs.segment_copy import SegmentUpload, upload_segment
from tiering_core.tier.view import CopyCandidate

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tiering_core.storage.manifest import SegmentManifest

APP = "parallel_upload"

log = logging.getLogger(__name__)


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
    """A segment handed out to an executor (``future``), or the segment whose check failed on
    the driver (``refused``): commits stop there, after the segments before it."""

    candidate: CopyCandidate
    upload: SegmentUpload | None
    future: Future[UploadOutcome] | None
    refused: BaseException | None = None

    @property
    def settled(self) -> bool:
        return self.future is None or self.future.done()


@dataclass
class PartitionUpload:
    """A partition's copy run and its uploads in flight, committed strictly in offset order."""

    run: CopyRun
    waiting: collections.deque[CopyCandidate] = field(default_factory=collections.deque)
    pending: collections.deque[InFlight] = field(default_factory=collections.deque)
    failure: str | None = None
    closed: bool = False  # nothing more is committed (a failure, a fence, a vanished segment)
    halted: bool = False  # a segment was refused: none after it is handed out
    done: bool = False  # finished: lease released, result reported

    @classmethod
    def of(cls, run: CopyRun) -> PartitionUpload:
        return cls(run, collections.deque(run.candidates))

    @property
    def tp(self) -> TopicPartition:
        return self.run.tp

    @property
    def stopped(self) -> bool:
        return self.closed or not self.run.active

    @property
    def handing_out(self) -> bool:
        return bool(self.waiting) and not self.stopped and not self.halted

    @property
    def settled(self) -> bool:
        """Every candidate committed, cleaned up or never to be handed out."""
        return not self.pending and not self.handing_out

    def stop(self, failure: str | None) -> None:
        """Commit nothing more (``None``: no failure of its own, e.g. fenced); uploads not
        started never will be, the others are cleaned up as they end."""
        self.closed = True
        if self.failure is None:
            self.failure = failure
        self.waiting.clear()
        for item in self.pending:
            if item.future is not None:
                item.future.cancel()

    def refuse(self, candidate: CopyCandidate, exc: BaseException) -> None:
        """The driver's check of ``candidate`` failed: the segments before it still commit, in
        order, as a sequential run would; then the partition stops there."""
        self.pending.append(InFlight(candidate, None, None, exc))
        self.halted = True
        self.waiting.clear()


@dataclass
class Report:
    results: list[CopyResult] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)
    workers: set[str] = field(default_factory=set)
    seconds: float = 0.0
    check_seconds: float = 0.0  # the driver's segment checks (CRC scan) and STARTED writes

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
            return EXIT_FAILURE
        return EXIT_GAP if self.gaps else EXIT_OK

    def finished(self) -> ParallelUploadFinished:
        """The run's summary, as the event that tells it."""
        return ParallelUploadFinished(
            partitions=len(self.results),
            segments=self.segments,
            bytes_copied=self.bytes,
            seconds=self.seconds,
            workers=len(self.workers),
            failures=len(self.failures),
            check_seconds=self.check_seconds,
            fenced=len(self.fenced),
            gaps=len(self.gaps),
        )


def _round_robin(partitions: list[PartitionUpload]) -> Iterator[tuple[PartitionUpload, CopyCandidate]]:
    """Every partition's first segment, then every second one, ...: early offsets go out first."""
    while ready := [p for p in partitions if p.handing_out]:
        for p in ready:
            if p.handing_out:
                yield p, p.waiting.popleft()


def _outcome(item: InFlight, report: Report) -> tuple[UploadOutcome | None, str | None]:
    """What became of a settled upload: its outcome, or why there is none."""
    assert item.future is not None
    if item.future.cancelled():
        return None, "not uploaded"
    exc = item.future.exception()
    if exc is not None:
        return None, f"Spark task failed: {runtime.spark_failure_reason(exc)}"
    outcome = item.future.result()
    report.workers.add(outcome.worker)
    return outcome, outcome.error


def _stop_after(partition: PartitionUpload, settle: Callable[[], None]) -> None:
    """Stop the partition after ``settle`` (a ``CopyRun`` failure path), as ``run_copy`` stops: with
    the failure it raised, or with none when it recorded a tiering gap (reported at the finish)."""
    try:
        settle()
    except TieringError as failure:
        partition.stop(str(failure))
    else:
        partition.stop(None)


def _refused(partition: PartitionUpload, item: InFlight) -> None:
    """The commits reached the refused segment: stop there, as ``run_copy`` would."""
    exc = item.refused
    if isinstance(exc, FileNotFoundError):
        _stop_after(partition, functools.partial(partition.run.segment_vanished, item.candidate, item.upload, exc))
    else:
        partition.stop(f"{partition.tp}: segment {item.candidate.base_offset} not copied: {exc}")


def _commit_ready(partition: PartitionUpload, report: Report) -> None:
    """Commit the settled prefix of a partition's uploads; after a failure, clean up instead."""
    run = partition.run
    while partition.pending and partition.pending[0].settled:
        item = partition.pending.popleft()
        base = item.candidate.base_offset
        if item.refused is not None:
            if not partition.stopped:
                _refused(partition, item)
            continue
        assert item.upload is not None
        outcome, error = _outcome(item, report)
        if partition.stopped:  # an earlier segment failed, or the run was fenced
            if run.active:
                run.abandon(item.candidate, item.upload, partition.failure)
                run.events(SegmentNotFinished(run.tp, base))
            else:
                run.fenced_while_copying(item.candidate, item.upload, "the run lost the partition")
            continue
        if outcome is not None and outcome.manifest is not None:
            if not run.commit_finished_segment(
                item.candidate, item.upload, outcome.manifest, outcome.seconds, worker=outcome.worker
            ):
                partition.stop(None)
            continue
        _stop_after(partition, functools.partial(run.upload_failed, item.candidate, item.upload, error))


def _finish_if_settled(partition: PartitionUpload, report: Report) -> None:
    """Release a partition's lease as soon as all its segments are committed (not at the end
    of the whole run), and report what it did."""
    if partition.done or not partition.settled:
        return
    partition.done = True
    run = partition.run
    try:
        report.results.append(run.finish())
    except TieringGapError as exc:
        report.gaps.append(str(exc))
        report.results.append(run.result)
    except (TieringError, OSError) as exc:  # the lease expired under the run, the partition vanished
        report.failures.append(str(exc) if str(exc).startswith(f"{partition.tp}:") else f"{partition.tp}: {exc}")
        report.results.append(run.result)
    if partition.failure is not None:
        report.failures.append(partition.failure)


def _abort(partitions: list[PartitionUpload], reason: BaseException, running: set[int]) -> None:
    """After the driver failed and the jobs were cancelled: clean up, under the lease, every
    STARTED upload that never ran or had ended before the abort, and release every lease.

    An upload whose task was running (``running``: ids of its future) is left STARTED: a
    cancelled task's Python worker may still write for a moment, and the next run's recovery
    deletes whatever it wrote together with the metadata.
    """
    why = f"the run was aborted: {type(reason).__name__}: {reason}"
    for partition in partitions:
        run = partition.run
        for item in partition.pending:
            if item.upload is None or item.future is None:
                continue
            if id(item.future) in running and not item.future.cancelled():
                run.events(SegmentLeftUploading(run.tp, item.candidate.base_offset))
                continue
            try:
                if run.active:
                    run.abandon(item.candidate, item.upload, why)
                else:
                    run.fenced_while_copying(item.candidate, item.upload, why)
            except Exception as exc:  # keep cleaning up; the original error is what is raised
                log.warning("%s: could not clean up segment %d: %s", run.tp, item.candidate.base_offset, exc)
        partition.pending.clear()
        try:
            run.release()
        except Exception as exc:
            log.warning("%s: could not release the lease: %s", run.tp, exc)


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
    """Copy every eligible segment of ``partitions``, uploads spread over Spark executors; ``say``
    prints the lines of the events the run and its partitions' copy runs emit (``cli/output``)."""
    started = time.monotonic()
    sc = spark.sparkContext
    run = run_id or f"spark-{uuid.uuid4().hex}"
    slots = parallelism or max(1, sc.defaultParallelism)
    check_every = renew_interval(ctx.config.metadata.lease_ms)
    upload_fn = functools.partial(uploader, ctx.config.remote)
    report = Report()

    def tell(event: RunEvent) -> None:
        say(event_line(event))

    uploads: list[PartitionUpload] = []
    try:
        for tp in partitions:
            try:
                uploads.append(PartitionUpload.of(CopyRun.begin(ctx, tp, run_id=run, events=tell)))
            except (TieringError, OSError) as exc:
                report.failures.append(f"{tp}: {exc}")
    except BaseException:
        for p in uploads:
            p.run.release()
        raise
    active = [p for p in uploads if p.run.active]
    total = sum(len(p.waiting) for p in active)
    size = sum(c.segment.size_bytes for p in active for c in p.waiting)
    tell(UploadsPlanned(total, size, len(active), slots))

    def start(partition: PartitionUpload, candidate: CopyCandidate) -> None:
        t0 = time.monotonic()
        try:
            upload = partition.run.start_segment(candidate)
        except FencedError as exc:
            partition.run.fenced_while_copying(candidate, None, exc)
            partition.stop(None)
            return
        except (TieringError, OSError) as exc:  # a CRC failure, a vanished file, ...
            tell(SegmentRefused(partition.tp, candidate.base_offset, str(exc)))
            partition.refuse(candidate, exc)
            return
        finally:
            report.check_seconds += time.monotonic() - t0
        description = f"upload {partition.tp} segment {candidate.base_offset}"
        partition.pending.append(InFlight(candidate, upload, jobs.submit(upload, upload_fn, description)))

    jobs = runtime.SparkJobs(sc, slots, "upload")
    try:
        for partition, candidate in _round_robin(uploads):
            start(partition, candidate)
            _commit_ready(partition, report)
            _finish_if_settled(partition, report)
        while not all(p.done for p in uploads):
            futures = [i.future for p in uploads for i in p.pending if i.future is not None]
            if futures:
                wait(futures, timeout=check_every, return_when=FIRST_COMPLETED)
            for p in uploads:
                _commit_ready(p, report)
                _finish_if_settled(p, report)
    except BaseException as exc:
        running = {id(i.future) for p in uploads for i in p.pending if i.future is not None and not i.future.done()}
        jobs.cancel()  # queued uploads never start, running ones are interrupted
        _abort(uploads, exc, running)
        raise
    jobs.close()

    report.results.sort(key=lambda r: (r.topic, r.partition))
    report.seconds = time.monotonic() - started
    tell(report.finished())
    return report


# --- the app ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=APP, description="Parallel upload of many partitions on Spark.")
    runtime.add_common_arguments(parser)
    parser.add_argument("--parallelism", type=int, default=None, help="uploads at a time (default: Spark's)")
    parser.add_argument("--run-id", default=None, help="run id recorded with the partitions' leases")
    return parser


def upload(app: runtime.AppRun) -> int:
    report = run_parallel_upload(
        app.ctx, app.partitions, app.spark, run_id=app.args.run_id, parallelism=app.args.parallelism
    )
    for line in report.failures:
        runtime.fail(APP, line)
    for line in report.gaps:
        runtime.fail(APP, f"TIERING GAP: {line}")
    return report.exit_code


def main(argv: Sequence[str] | None = None, spark: SparkSession | None = None) -> int:
    return runtime.run_app(APP, argv, spark, build_parser, upload)


if __name__ == "__main__":
    # Re-imported under its package name, so executors unpickle these functions by reference.
    from spark_apps.parallel_upload import main as _main

    sys.exit(_main())
