"""Copy the eligible segments of many partitions at once, keeping every copy-run invariant.

Per partition the driver runs ``CopyRun`` (``runs/copy.py``), the same steps ``run_copy`` takes:
lease and fencing, recovery of killed runs, tiering gaps, COPY_SEGMENT_STARTED before a segment
is handed out. The uploads (``upload_task``) run on any ``Executor``: this process's thread pool
or Spark's executors, each upload a task of its own, so a failed or killed task costs only its
segment. Segments are handed out round robin (every partition's first segment, then every second
one, ...) as slots free up, and results are committed per partition in offset order as they
arrive: after a failure at segment k (its upload, or its check on the driver), the segments
before k still finish, as a sequential run would, and the later ones are cleaned up instead of
finished, so the copied offset never skips. A partition whose lease is lost stops alone; a
partition done releases its lease at once. If the driver itself fails, the executor drops what
is queued and stops what runs, what ended is cleaned up (a started upload is left to the next
run's recovery) and every lease released (docs/architecture.md, "Drivers and executors").

The Spark upload begins every partition up front. A lane of a scheduled run (``runs.lanes``)
begins them lazily, in its order of urgency, each only when no begun partition has a segment left
to hand out, and gives a deadline: after it nothing new starts, what is in flight still commits,
and the rest is reported deferred for the next run (docs/architecture.md, "Lanes").
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tiering_core.engine.executor import Executor, TaskOutcome
from tiering_core.errors import TieringError, TieringGapError
from tiering_core.events import EventSink, discard
from tiering_core.events.copy import (
    CopyDeferred,
    SegmentLeftUploading,
    SegmentNotFinished,
    SegmentRefused,
    UploadsPlanned,
)
from tiering_core.metadata.errors import FencedError
from tiering_core.runs.copy import CopyRun
from tiering_core.runs.copy_report import CopyResult, ParallelCopyReport
from tiering_core.runs.segment_copy import SegmentUpload, upload_segment

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.metadata.store import TaskAttempt
    from tiering_core.storage.manifest import SegmentManifest
    from tiering_core.storage.remote import RemoteStorage
    from tiering_core.tier.view import CopyCandidate

log = logging.getLogger(__name__)


# --- the task ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class UploadOutcome:
    """What an upload task reports for one segment: its manifest, or why it failed."""

    manifest: SegmentManifest | None
    error: str | None
    seconds: float
    worker: str = ""


def upload_task(storage: RemoteStorage, upload: SegmentUpload) -> UploadOutcome:
    """Upload one segment, manifest last, wherever the executor runs it; a failure is a value
    the driver cleans up after, so it stops only the segment's partition."""
    worker = f"{socket.gethostname()}:{os.getpid()}"
    started = time.monotonic()
    try:
        manifest = upload_segment(storage, upload)
    except Exception as exc:
        return UploadOutcome(None, f"{type(exc).__name__}: {exc}", time.monotonic() - started, worker)
    return UploadOutcome(manifest, None, time.monotonic() - started, worker)


Uploader = Callable[["RemoteStorage", SegmentUpload], UploadOutcome]


# --- the driver -------------------------------------------------------------------------------


@dataclass
class InFlight:
    """A segment handed out to the executor (its ``outcome`` once it returned), or the segment
    whose check failed on the driver (``refused``): commits stop there, after the segments before it."""

    candidate: CopyCandidate
    upload: SegmentUpload | None
    refused: BaseException | None = None
    outcome: TaskOutcome[UploadOutcome] | None = None

    @property
    def settled(self) -> bool:
        return self.refused is not None or self.outcome is not None


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
        """Commit nothing more (``None``: no failure of its own, e.g. fenced); segments not handed
        out never will be, those in flight are cleaned up as they return."""
        self.closed = True
        if self.failure is None:
            self.failure = failure
        self.waiting.clear()

    def refuse(self, candidate: CopyCandidate, exc: BaseException) -> None:
        """The driver's check of ``candidate`` failed: the segments before it still commit, in
        order, as a sequential run would; then the partition stops there."""
        self.pending.append(InFlight(candidate, None, exc))
        self.halted = True
        self.waiting.clear()


def _outcome(item: InFlight, report: ParallelCopyReport) -> tuple[UploadOutcome | None, str | None]:
    """What became of a returned upload: its outcome, or why there is none (its task failed)."""
    assert item.outcome is not None
    outcome = item.outcome.result
    if outcome is None:
        return None, item.outcome.error or "no result"
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


def _commit_ready(partition: PartitionUpload, report: ParallelCopyReport) -> None:
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


def _finish_if_settled(partition: PartitionUpload, report: ParallelCopyReport) -> None:
    """Release a partition's lease as soon as all its segments are committed (not at the end
    of the whole run), and report what it did."""
    if partition.done or not partition.settled:
        return
    partition.done = True
    run = partition.run
    try:
        result = run.finish()
    except TieringGapError as exc:
        report.gap(partition.tp, str(exc))
        result = run.result
    except (TieringError, OSError) as exc:  # the lease expired under the run, the partition vanished
        report.fail(partition.tp, str(exc) if str(exc).startswith(f"{partition.tp}:") else f"{partition.tp}: {exc}")
        result = run.result
    if partition.failure is not None:
        report.fail(partition.tp, partition.failure)
    report.add(result)


def _abort(partitions: list[PartitionUpload], reason: BaseException) -> None:
    """After the driver failed and the executor's tasks were cancelled: clean up, under the lease,
    every STARTED upload whose task had returned, and release every lease.

    An upload whose outcome never came back is left STARTED: a cancelled task may still write for
    a moment, and the next run's recovery deletes whatever it wrote together with the metadata.
    """
    why = f"the run was aborted: {type(reason).__name__}: {reason}"
    for partition in partitions:
        run = partition.run
        for item in partition.pending:
            if item.upload is None:
                continue
            if item.outcome is None:
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


@dataclass
class ParallelCopy:
    """One multi-partition copy run as its steps share it: the partitions not begun yet (``queue``,
    most urgent first), those begun (``uploads``), and each handed-out segment by the index of its
    task's outcome (``handed``)."""

    ctx: TieringContext
    executor: Executor
    run_id: str
    events: EventSink
    uploader: Uploader
    attempt: TaskAttempt | None
    broker_id: int | None
    lazily: bool
    deadline: float | None
    clock: Callable[[], float]
    report: ParallelCopyReport
    queue: collections.deque[TopicPartition]
    uploads: list[PartitionUpload] = field(default_factory=list)
    handed: list[tuple[PartitionUpload, InFlight]] = field(default_factory=list)

    def begin(self, tp: TopicPartition) -> PartitionUpload | None:
        """The partition's copy run begun (lease, recovery, plan); None when that failed."""
        try:
            begun = CopyRun.begin(
                self.ctx, tp, run_id=self.run_id, events=self.events, attempt=self.attempt, broker_id=self.broker_id
            )
        except (TieringError, OSError) as exc:
            self.report.fail(tp, f"{tp}: {exc}")
            self.report.add(CopyResult(topic=tp.topic, partition=tp.partition))
            return None
        self.uploads.append(PartitionUpload.of(begun))
        return self.uploads[-1]

    def begin_up_front(self) -> None:
        """Every partition begun before any segment goes out (unless ``lazily``)."""
        try:
            while self.queue and not self.lazily:
                self.begin(self.queue.popleft())
        except BaseException:
            for p in self.uploads:
                p.run.release()
            raise

    def start(self, partition: PartitionUpload, candidate: CopyCandidate) -> SegmentUpload | None:
        """The segment checked and STARTED on the driver; None when it was refused or the lease lost."""
        t0 = time.monotonic()
        try:
            upload = partition.run.start_segment(candidate)
        except FencedError as exc:
            held = partition.run.held
            if partition.pending and held is not None:
                # Lost while earlier segments upload: the first of them, as it returns, tells
                # whether a newer run took the partition or the lease merely expired.
                held.lose(exc)
            else:
                partition.run.fenced_while_copying(candidate, None, exc)
            partition.stop(None)
            return None
        except (TieringError, OSError) as exc:  # a CRC failure, a vanished file, ...
            self.events(SegmentRefused(partition.tp, candidate.base_offset, str(exc)))
            partition.refuse(candidate, exc)
            return None
        finally:
            self.report.check_seconds += time.monotonic() - t0
        item = InFlight(candidate, upload)
        partition.pending.append(item)
        self.handed.append((partition, item))
        return upload

    def defer(self) -> None:
        """The deadline passed: nothing more starts; what waits is left to the next run."""
        for p in self.uploads:
            if p.handing_out:
                self.events(CopyDeferred(p.tp, len(p.waiting)))
                p.run.result.deferred = True
                p.waiting.clear()
                _finish_if_settled(p, self.report)
        while self.queue:
            tp = self.queue.popleft()
            self.events(CopyDeferred(tp))
            self.report.add(CopyResult(topic=tp.topic, partition=tp.partition, deferred=True))

    def past_deadline(self) -> bool:
        return self.deadline is not None and self.clock() >= self.deadline

    def segments(self) -> Iterator[tuple[PartitionUpload, CopyCandidate]]:
        """Every partition's first segment, then every second one, ...: early offsets go out
        first; when no begun partition has one left, the next partition is begun."""
        while True:
            if self.past_deadline():
                self.defer()
                return
            ready = [p for p in self.uploads if p.handing_out]
            if not ready:
                if not self.queue:
                    return
                if (begun := self.begin(self.queue.popleft())) is not None:
                    _finish_if_settled(begun, self.report)  # nothing to upload: done at once
                continue
            for p in ready:
                if p.handing_out:
                    yield p, p.waiting.popleft()
                    if self.past_deadline():
                        break

    def hand_out(self) -> Iterator[SegmentUpload]:
        """The executor pulls the next segment when a slot is free: round robin over the
        partitions still going on, each segment checked and STARTED just before it goes out."""
        for partition, candidate in self.segments():
            upload = self.start(partition, candidate)
            if upload is not None:
                yield upload
            else:
                _commit_ready(partition, self.report)
                _finish_if_settled(partition, self.report)

    def upload(self) -> None:
        """Hand the segments out on the executor and commit each partition's as they return; on
        any failure of the driver, clean up and release every lease (``_abort``)."""
        active = [p for p in self.uploads if p.run.active]
        total = sum(len(p.waiting) for p in active)
        size = sum(c.segment.size_bytes for p in active for c in p.waiting)
        report = self.report
        try:
            if not self.lazily:
                self.events(UploadsPlanned(total, size, len(active), self.executor.slots))
            for p in self.uploads:  # nothing to upload: done at once
                _finish_if_settled(p, report)
            with closing(self.executor.run(self.hand_out(), self.uploader, describe=describe_upload)) as outcomes:
                for outcome in outcomes:
                    partition, item = self.handed[outcome.index]
                    item.outcome = outcome
                    _commit_ready(partition, report)
                    _finish_if_settled(partition, report)
            for p in self.uploads:
                _commit_ready(p, report)
                _finish_if_settled(p, report)
        except BaseException as exc:  # closing the outcomes cancelled what was queued and running
            _abort(self.uploads, exc)
            raise


def describe_upload(upload: SegmentUpload) -> str:
    return f"upload {upload.metadata.topic_id_partition.topic_partition} segment {upload.metadata.start_offset}"


def copy_partitions(
    ctx: TieringContext,
    partitions: Sequence[TopicPartition],
    executor: Executor,
    *,
    run_id: str | None = None,
    events: EventSink = discard,
    uploader: Uploader = upload_task,
    attempt: TaskAttempt | None = None,
    broker_id: int | None = None,
    lazily: bool = False,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    tell_outcomes: bool = False,
    report: ParallelCopyReport | None = None,
) -> ParallelCopyReport:
    """Copy every eligible segment of ``partitions``, at most ``executor.slots`` uploads at a time;
    see the module docstring. ``events`` hears what the run and its partitions' copy runs do;
    ``uploader`` is the upload task (default ``upload_task``; a test injects faults here).

    ``attempt`` and ``broker_id`` are ``run_copy``'s (a scheduled task's try, whose retry takes
    over the leases it left; the broker whose observations are recorded). ``lazily``: each
    partition is begun (lease, recovery, plan) only when no begun one has a segment to hand out,
    in the given order (most urgent first), instead of every partition up front. ``deadline`` (a
    ``clock`` reading): after it no segment and no partition starts; what is in flight finishes,
    and the rest is reported deferred (``CopyResult.deferred``) for the next run. ``tell_outcomes``:
    ``events`` also hears each partition's ``PartitionCopyOutcome`` as that partition ends.
    ``report``: the report to fill (its ``announce`` hears the outcomes), for a caller that must
    know which partitions ended should the run be stopped before it returns (a killed task).
    """
    started = time.monotonic()
    if report is None:
        report = ParallelCopyReport(announce=events if tell_outcomes else None)
    copy = ParallelCopy(
        ctx=ctx,
        executor=executor,
        run_id=run_id or uuid.uuid4().hex,
        events=events,
        uploader=uploader,
        attempt=attempt,
        broker_id=broker_id,
        lazily=lazily,
        deadline=deadline,
        clock=clock,
        report=report,
        queue=collections.deque(partitions),
    )
    copy.begin_up_front()
    copy.upload()
    report.results.sort(key=lambda r: (r.topic, r.partition))
    report.seconds = time.monotonic() - started
    events(report.finished())
    return report
