"""The copy task: what Kafka's RemoteLogManager does as leader, as one idempotent batch run.

Per partition (docs/kafka-rules.md sections 5 and 10): take the partition's lease, clean up what
a killed earlier run left in COPY_SEGMENT_STARTED, find the highest copied offset along the
lineage, and copy every closed segment whose next base offset is at or below the LSO and whose
delayed upload (``remote.copy.lag.ms``/``remote.copy.lag.bytes``, KIP-1241) has passed:
new UUID, COPY_SEGMENT_STARTED, objects, manifest last, COPY_SEGMENT_FINISHED.

The run is split into ``prepare_segment_upload`` (driver), ``upload_segment`` (anywhere,
e.g. a Spark executor) and the metadata commits, so parallel uploads keep every invariant.

Every segment copy started, finished (its bytes: segment and indexes) or failed is counted in the
run's ``Tally`` (reported at once, stored in the partition's counters when the run lets the
partition go, on the run's broker), with the time of the last copy and the run's task.

What to copy is planned once per run (``runs.copy_plan``). While it works the run tells what it
does as events (``tiering_core.events.copy``) to the sink its caller gives; how they read is
``report/lines``'s business, never this module's.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from typing import TYPE_CHECKING

from tiering_core.engine.lease import HeldPartition
from tiering_core.engine.partition_state import publish_partition_state
from tiering_core.errors import TieringError, TieringGapError
from tiering_core.events import EventSink, discard
from tiering_core.events.copy import (
    CopyDelayed,
    CopyFinished,
    CopyNotPlanned,
    CopySkipped,
    FencedWhileCopying,
    LeaseExpiredWhileCopying,
    PartitionHeld,
    SegmentCopied,
    SegmentFailed,
    SegmentVanished,
)
from tiering_core.kafka.topic import TopicPartition
from tiering_core.metadata.errors import FencedError
from tiering_core.metadata.observations import check_broker_id
from tiering_core.metadata.store import Lease
from tiering_core.metrics import names
from tiering_core.metrics.tally import Tally
from tiering_core.runs.copy_lease import begin_copy_run
from tiering_core.runs.copy_plan import CopyPlan, dry_run_copy, plan_before_lease, view_after_copies
from tiering_core.runs.copy_report import CopyResult
from tiering_core.runs.errors import CopyFailedError
from tiering_core.storage.errors import RemoteStorageError
from tiering_core.tier.observation import record_views
from tiering_core.tier.offsets import OffsetRange, recorded_gaps
from tiering_core.tier.replica import tiering_gap_on
from tiering_core.tier.view import CopyCandidate, TierView, tier_view

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.metadata.store import TaskAttempt
    from tiering_core.storage.manifest import SegmentManifest
    from tiering_core.storage.partition_state import PartitionState
    from tiering_core.storage.remote import RemoteStorage
from tiering_core.runs.segment_copy import (
    SegmentUpload,
    abandon_upload,
    finish_segment,
    prepare_segment_upload,
    upload_segment,
)

log = logging.getLogger(__name__)

Uploader = Callable[["RemoteStorage", "SegmentUpload"], "SegmentManifest"]


class CopyRun:
    """One partition's copy run as the driver sees it: lease, plan, and every metadata write.

    ``run_copy`` and the multi-partition copy (``runs.copy_many``) both drive a partition through
    this class, so COPY_SEGMENT_STARTED before an upload, FINISHED only after the manifest, the
    lineage and remote-log-start bookkeeping, the cleanup of failures and the lease have one home.
    Uploads (``upload_segment``) may run anywhere; their results are committed here in offset
    order.
    The partition is held (``held_partition``, renewed in the background) from ``begin`` to
    ``finish`` or ``release``; ``active`` asks ``held.holds``.
    """

    def __init__(
        self, ctx: TieringContext, tp: TopicPartition, events: EventSink, *, broker_id: int | None = None
    ) -> None:
        self.ctx = ctx
        self.tp = tp
        self.events = events
        self.broker_id = broker_id
        self.result = CopyResult(topic=tp.topic, partition=tp.partition)
        self.held: HeldPartition | None = None
        self._hold = ExitStack()
        self.plan = CopyPlan(tp)  # the run's plan: made before the lease, then read under it (``begin``)
        self.gap: OffsetRange | None = None  # the gap the run recorded: its plan's, or one found later
        self._expired: str | None = None  # why the run fails: its lease expired under it
        self._started = time.monotonic()
        self.tally: Tally | None = None  # the run's counts, from the time it holds the partition
        self._first_copy = False  # no remote log start yet: the first finished copy sets it
        self._state: PartitionState | None = None  # the partition's state object as this run wrote it

    @classmethod
    def begin(
        cls,
        ctx: TieringContext,
        tp: TopicPartition,
        *,
        run_id: str,
        events: EventSink = discard,
        attempt: TaskAttempt | None = None,
        broker_id: int | None = None,
        now_ms: int | None = None,
    ) -> CopyRun:
        """Skip check, lease, recovery, gap recording and the candidates: the run plans once
        (``runs.copy_plan``), and only the plan read under the lease decides what it uploads.

        ``run.active`` is False when the topic is not tiered or another run holds the lease
        (``run.result`` says which); such a run has nothing to upload or release. ``broker_id``:
        the broker the run copies from, whose observation of the partition ``finish`` records
        (None: not recorded); an id the store refuses fails the run before it holds anything.
        ``now_ms``: the clock the delayed upload is judged by (None: now).
        """
        if broker_id is not None:
            check_broker_id(broker_id, ctx.config.broker_ids, tp)
        run = cls(ctx, tp, events, broker_id=broker_id)
        run.plan = before = plan_before_lease(ctx, tp)
        if before.skipped_reason is not None:  # Kafka would not tier the topic
            run.result.skipped_reason = before.skipped_reason
            events(CopySkipped(tp, before.skipped_reason))
            return run
        try:
            begun = begin_copy_run(ctx, before, run_id, run._hold, attempt, broker_id, now_ms)
            if begun is None:
                run.result.fenced = True
                events(PartitionHeld(tp))
                return run
            run.held, plan, run.result.segments_cleaned_up = begun
            run.plan = plan
            if plan.replica is not None and plan.replica.skipped_reason is not None:
                run._not_planned(plan.replica.skipped_reason)
                return run
            view = run._held()[1]
            run.tally = Tally(view.tip, broker_id, attempt)
            run._first_copy = view.remote_log_start_offset is None
            if plan.skipped_reason is not None:  # not the leader's log, or no LSO yet: nothing to copy now
                run.result.skipped_reason = plan.skipped_reason
                events(CopySkipped(tp, plan.skipped_reason))
            run._delayed(plan)
            run.gap = plan.gap
            if run.gap is not None:  # recorded even when the LSO is unknown: a gap must never hide
                run._record_gap(run.gap)
            if plan.skipped_reason is None:
                view.require_lso()
        except BaseException:
            run.release()
            raise
        run.result.planned = [p.to_dict() for p in plan.planned]
        return run

    def _not_planned(self, reason: str) -> None:
        """Another broker's replica is the one to copy (judged under the lease): let the partition
        go at once, having copied nothing, and say why."""
        self.release()
        self.held = None
        self.result.skipped_reason = reason
        self.result.highest_copied_offset = self.plan.highest_copied_offset
        self.result.last_stable_offset = self.plan.last_stable_offset
        self.events(CopyNotPlanned(self.tp, reason))

    @property
    def candidates(self) -> tuple[CopyCandidate, ...]:
        """The segments the run uploads, in offset order (its plan's)."""
        return self.plan.candidates

    @property
    def active(self) -> bool:
        """Holds the partition's lease and may still write."""
        return self.held is not None and self.held.holds

    def _delayed(self, plan: CopyPlan) -> None:
        """What the delayed upload holds back, in the result and told as an event."""
        delay = plan.delay
        if delay is None or plan.skipped_reason is not None:
            return
        self.result.copy_delay = delay.to_dict()
        self.events(CopyDelayed(self.tp, **delay.to_dict()))

    def _record_gap(self, gap: OffsetRange) -> None:
        lease, view = self._held()
        if self.ctx.metadata.record_gap(view.tip, gap.start, gap.end, lease):
            self._publish_state()
        log.error(
            "%s: TIERING GAP: offsets %d..%d were deleted by the broker before they were tiered",
            self.tp,
            gap.start,
            gap.end,
        )

    def segment_vanished(self, candidate: CopyCandidate, upload: SegmentUpload | None, exc: OSError) -> None:
        """The broker deleted the segment's files while we copied it (its own retention).

        What was uploaded of it is cleaned up; the partition is looked at again, and if the
        broker's log start has passed data not yet tiered the gap is recorded now, so ``finish``
        fails the run loudly. Otherwise the run fails naming the vanished file.
        """
        self._count(names.REMOTE_COPY_ERRORS)
        if upload is not None:
            abandon_upload(self.ctx.metadata, self.ctx.storage, upload, self._lease_if_held())
        self._held()
        fresh = tier_view(self.ctx, self.ctx.partition_log(self.tp))
        self.plan = replace(self.plan, view=fresh)  # what the run's end reports: the broker moved on
        gap = tiering_gap_on(self.ctx.config, self.ctx.metadata, fresh, self.broker_id)
        if gap is None:
            raise CopyFailedError(
                f"{self.tp}: segment {candidate.base_offset} could not be read while copying it: {exc}"
            ) from exc
        self.events(SegmentVanished(self.tp, candidate.base_offset))
        self.gap = gap
        self._record_gap(gap)

    def _publish_state(self) -> None:
        """The partition's state object, after the store committed a change to it."""
        _, view = self._held()
        self._state = publish_partition_state(self.ctx.metadata, self.ctx.storage, view.tip, last=self._state)

    def _held(self) -> tuple[Lease, TierView]:
        if self.held is None or self.plan.view is None:
            raise TieringError(f"{self.tp}: the copy run does not hold the partition")
        return self.held.lease, self.plan.view

    def _lease_if_held(self) -> Lease | None:
        return self.held.lease if self.held is not None and self.held.holds else None

    def start_segment(self, candidate: CopyCandidate) -> SegmentUpload:
        """Verify and gather the segment, then COPY_SEGMENT_STARTED (before anything is uploaded).
        Counts a copy request, and an error when this fails (a vanished segment is counted by
        ``segment_vanished``)."""
        lease, view = self._held()
        self._count(names.REMOTE_COPY_REQUESTS)
        try:
            upload = prepare_segment_upload(
                view,
                candidate,
                run_token=lease.token,
                index_interval_bytes=self.ctx.config.topic_config(self.tp.topic).index_interval_bytes,
            )
            self.ctx.metadata.add_segment(upload.metadata, lease)
        except FileNotFoundError:
            raise
        except Exception:
            self._count(names.REMOTE_COPY_ERRORS)
            raise
        return upload

    def _count(self, spec: names.MetricSpec, value: int = 1) -> None:
        if self.tally is not None:
            self.tally.count(spec, value)

    def commit_finished_segment(
        self,
        candidate: CopyCandidate,
        upload: SegmentUpload,
        manifest: SegmentManifest,
        seconds: float,
        *,
        index: int | None = None,
        worker: str | None = None,
    ) -> bool:
        """FINISHED with lineage and remote log start (one transaction; the partition's state
        object published when that was its first remote log start), then a lease renewal.
        ``index`` (of the candidates, from 1) or ``worker`` (where it was uploaded) say which copy
        it was, in the event that tells of it.

        False when the lease was lost: the upload is cleaned up and the run stops (``result.fenced``
        when a newer run took the partition; ``finish`` fails the run when the lease merely expired).
        """
        lease, _ = self._held()
        store = self.ctx.metadata
        try:
            finish_segment(store, upload, manifest, lease)
        except FencedError as exc:
            self.fenced_while_copying(candidate, upload, exc)
            return False
        if self._first_copy:  # the finish set the remote log start
            self._first_copy = False
            self._publish_state()
        if self.tally is not None:
            self.tally.copy_finished(sum(entry.size for entry in manifest.objects.values()))
        held = self.held
        if held is not None and not held.renew():
            self.fenced_while_copying(candidate, None, held.lost)
        size = candidate.segment.size_bytes
        self.result.segments_copied += 1
        self.result.bytes_copied += size
        total = len(self.candidates) if index is not None else None
        self.events(
            SegmentCopied(self.tp, candidate.base_offset, candidate.end_offset, size, seconds, index, total, worker)
        )
        return self.active

    def fenced_while_copying(
        self, candidate: CopyCandidate, upload: SegmentUpload | None, reason: object = None
    ) -> None:
        """The lease is gone: delete this run's objects and leave the metadata to the next holder.

        If a newer run holds the partition this run was fenced and stops quietly; if nobody does,
        the lease expired under this run (it stalled longer than ``metadata.lease_ms``) and
        ``finish`` fails the run, so the loss is never mistaken for a clean exit.
        """
        if upload is not None:
            abandon_upload(self.ctx.metadata, self.ctx.storage, upload, None)
        self._lost_while_copying(candidate.base_offset, reason)

    def _lost_while_copying(self, base_offset: int, reason: object) -> None:
        """Say once how the lease was lost: fenced by a newer run, or expired under this one."""
        if self.held is None or self.result.fenced or self._expired is not None:
            return
        self.held.lose(reason)
        holder = self.held.newer_holder()
        if holder is not None:
            self.result.fenced = True
            self.events(FencedWhileCopying(self.tp, base_offset, holder))
        else:
            self._expired = (
                f"the partition's lease expired while copying segment {base_offset} "
                f"(metadata.lease_ms may be too short for this segment, or the run stalled): {self.held.lost}"
            )
            self.events(LeaseExpiredWhileCopying(self.tp, self._expired))

    def abandon(self, candidate: CopyCandidate, upload: SegmentUpload, reason: object) -> CopyFailedError:
        """Clean up a failed or unfinished upload under the lease; returns the error that fails the run."""
        abandon_upload(self.ctx.metadata, self.ctx.storage, upload, self._lease_if_held())
        return CopyFailedError(
            f"{self.tp}: copying segment {candidate.base_offset} failed and was cleaned up: {reason}"
        )

    def upload_failed(self, candidate: CopyCandidate, upload: SegmentUpload, reason: object) -> None:
        """An upload failed. If the segment's ``.log`` is gone the broker deleted it meanwhile, which
        is ``segment_vanished`` (a gap recorded and this returns, or it raises naming the file);
        otherwise the upload is cleaned up and the CopyFailedError that fails the run is raised.
        Either way the run copies nothing more."""
        log_path = candidate.segment.log_path
        if not log_path.exists():
            self.segment_vanished(candidate, upload, FileNotFoundError(str(log_path)))
            return
        self._count(names.REMOTE_COPY_ERRORS)
        failure = self.abandon(candidate, upload, reason)
        self.events(SegmentFailed(self.tp, candidate.base_offset, str(reason)))
        if isinstance(reason, BaseException):
            raise failure from reason
        raise failure

    def release(self) -> None:
        """Stop renewing and give the partition up, and store the run's counts (idempotent)."""
        try:
            self._hold.close()
        finally:
            if self.tally is not None:
                self.tally.store(self.ctx.metadata)

    def finish(self) -> CopyResult:
        """Release the lease, record final offsets and lag; raise TieringGapError after a gap."""
        if self.held is not None and self.held.lost is not None:  # lost in the background
            self._lost_while_copying(self.candidates[0].base_offset if self.candidates else -1, self.held.lost)
        self.release()
        if self.held is None:
            return self.result
        result, store = self.result, self.ctx.metadata
        final = view_after_copies(store, self._held()[1])
        record_views(
            store,
            self.broker_id,
            [(final, self.ctx.topic_config(self.tp.topic), None)],
            brokers=self.ctx.config.broker_ids,
        )
        result.highest_copied_offset = final.highest_copied_offset
        result.last_stable_offset = final.last_stable_offset
        result.copy_lag_segments, result.copy_lag_bytes = final.copy_lag()
        result.gaps = recorded_gaps(store, final.tip)
        result.seconds = time.monotonic() - self._started
        self.events(
            CopyFinished(
                self.tp,
                result.segments_copied,
                result.bytes_copied,
                result.seconds,
                result.highest_copied_offset,
                result.copy_lag_segments,
                result.copy_lag_bytes,
            )
        )
        if self._expired is not None:
            raise CopyFailedError(f"{self.tp}: {self._expired}")
        if self.gap is not None:
            raise TieringGapError(
                f"{self.tp}: tiering gap: offsets {self.gap.start}..{self.gap.end} were deleted by the broker "
                f"before they were tiered (copied what remains: {result.segments_copied} segment(s))",
                result,
            )
        return result


def run_copy(
    ctx: TieringContext,
    tp: TopicPartition,
    *,
    dry_run: bool = False,
    run_id: str | None = None,
    events: EventSink = discard,
    uploader: Uploader | None = None,
    attempt: TaskAttempt | None = None,
    broker_id: int | None = None,
    now_ms: int | None = None,
) -> CopyResult:
    """Copy every eligible segment of one partition; see the module docstring.

    ``attempt`` names a scheduled task's try: a retry takes over its killed previous try's lease.
    ``uploader`` puts a segment's objects (default ``upload_segment``; a test injects faults here).
    ``broker_id``: the broker whose log dirs the run reads; what it saw of the partition at the end
    is recorded (None: not recorded). ``events`` hears what the run does (default: nobody).
    ``now_ms``: the clock the delayed upload is judged by (None: now).
    """
    if dry_run:
        return dry_run_copy(ctx, tp, events, broker_id, now_ms)
    run = CopyRun.begin(
        ctx, tp, run_id=run_id or uuid.uuid4().hex, events=events, attempt=attempt, broker_id=broker_id, now_ms=now_ms
    )
    if not run.active:
        return run.result
    try:
        for index, candidate in enumerate(run.candidates, start=1):
            upload: SegmentUpload | None = None
            t0 = time.monotonic()
            try:
                upload = run.start_segment(candidate)
                manifest = (uploader or upload_segment)(ctx.storage, upload)
            except FileNotFoundError as exc:
                run.segment_vanished(candidate, upload, exc)
                break
            except RemoteStorageError as exc:
                if upload is None:
                    raise
                run.upload_failed(candidate, upload, exc)
                break
            if not run.active:
                run.fenced_while_copying(candidate, upload, run.held.lost if run.held else None)
                break
            if not run.commit_finished_segment(candidate, upload, manifest, time.monotonic() - t0, index=index):
                break
    except BaseException:
        run.release()
        raise
    return run.finish()
