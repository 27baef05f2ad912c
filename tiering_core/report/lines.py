"""Every human-readable line the ``tiering`` command, the demo, the Spark apps and the Airflow
tasks print: the reporting layer above the runs.

The runs return values (and ``--json`` prints their ``to_dict``) and emit events
(``tiering_core.events``) while they work; how either reads to a person is decided here, in one
place. ``event_line`` has one registration per event type, beside the run's other lines; an
``Output`` (console or JSON, as pyiceberg's CLI has) says where the words go. Beside it, by
concern: ``tables`` (every table, through one formatter), ``summaries`` (the last line of a run
over partitions) and ``records`` (``fetch``'s lines). This module imports only downward: the runs'
values, never the command line.
"""

from __future__ import annotations

import json
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import fields
from functools import singledispatch
from typing import TYPE_CHECKING, Any

from tiering_core.events import RunEvent
from tiering_core.events.copy import (
    CopyDeferred,
    CopyDelayed,
    CopyFinished,
    CopyNotPlanned,
    CopySkipped,
    DryRunPlanned,
    FencedWhileCopying,
    LeaseExpiredWhileCopying,
    ParallelUploadFinished,
    PartitionCopyOutcome,
    PartitionHeld,
    SegmentCopied,
    SegmentFailed,
    SegmentLeftUploading,
    SegmentNotFinished,
    SegmentRefused,
    SegmentVanished,
    UploadsPlanned,
    WouldCopy,
)
from tiering_core.events.export import (
    ExportCleanedUp,
    ExportCommitted,
    ExportPlanned,
    SegmentExported,
    SegmentExportFailed,
    SegmentWouldExport,
)
from tiering_core.events.read import (
    RestoringFromTierAlone,
    SegmentRestored,
    SegmentVerification,
    SegmentVerified,
    VerifyPlanned,
)
from tiering_core.events.rebuild import IndexChecked, IndexStatus, PartitionBusy, RebuildPlanned
from tiering_core.events.replay import ReplayCommitted, ReplayFinished, ReplayGap, ReplayStarted
from tiering_core.events.retention import PartitionRetentionOutcome
from tiering_core.humanize import fmt_age, fmt_bytes, fmt_duration
from tiering_core.report.summaries import failed_words

if TYPE_CHECKING:
    from tiering_core.export import ExportResult
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.read.verify import SegmentVerification
    from tiering_core.replay import ReplayResult
    from tiering_core.runs.delete_records import DeleteRecordsResult
    from tiering_core.runs.orphans import OrphanObject
    from tiering_core.runs.rebuild import IndexCheck, RebuildResult
    from tiering_core.runs.recover import RecoveryResult
    from tiering_core.runs.removal import RemovalResult


def format_recovery(result: RecoveryResult) -> str:
    verb = "would record" if result.dry_run else "recorded"
    lines = []
    for p in result.partitions:
        line = f"{p.topic}-{p.partition} (topic id {p.topic_id}): {p.segments} segment(s) in the bucket"
        line += f", {verb} {p.recorded}"
        if p.already_recorded:
            line += f", {p.already_recorded} already recorded"
        if p.superseded:
            line += f", {p.superseded} superseded (deleted by the next run)"
        if p.start_offset is not None:
            line += f"; offsets {p.start_offset}..{p.end_offset}"
        if p.remote_log_start_offset is not None:
            line += f"; remote log start {p.remote_log_start_offset}"
        if p.delete_records_offset is not None:
            line += f"; DeleteRecords {p.delete_records_offset}"
        if p.gaps:
            line += "; gaps " + ", ".join(f"{s}..{e}" for s, e in p.gaps)
        if not p.state_object:
            line += "; no partition-state.json (log start and gaps from the segments)"
        lines.append(line)
        lines.extend(
            f"  recovered from its objects (copied before manifests held its metadata): {s}" for s in p.from_objects
        )
        lines.extend(f"  NOT RECOVERED: {s}" for s in p.unreadable)
    total = sum(p.recorded for p in result.partitions)
    summary = f"recover: {verb} {total} segment(s) of {len(result.partitions)} partition(s) in {result.seconds:.1f}s"
    if result.bound:
        summary += f"; the prefix is bound to this store ({result.store_id})"
        if result.previous_store_id not in (None, result.store_id):
            summary += f", no longer to {result.previous_store_id}"
    elif not result.dry_run:
        summary += "; the prefix is not bound: fix what was not recovered and run it again"
    lines.append(summary)
    return "\n".join(lines)


def format_orphans(orphans: list[OrphanObject]) -> str:
    from tiering_core.runs.orphans import UNRECORDED

    lines = [
        f"{'deleted' if o.deleted else 'kept' if o.kind == UNRECORDED else 'orphan'} {o.kind} {o.key} "
        f"({fmt_bytes(o.size)}, {fmt_duration(o.age_ms)} old)"
        for o in orphans
    ]
    unrecorded = sum(1 for o in orphans if o.kind == UNRECORDED)
    if unrecorded:
        lines.append(
            f"{unrecorded} object(s) of segments the metadata store has no record of are kept, never deleted: "
            "if a finished segment's manifest lists them, `tiering recover` adds the segment back"
        )
    return "\n".join(lines) or "no orphaned objects"


def format_partition_deletion(tp: TopicPartition, result: RemovalResult) -> str:
    ids = ", ".join(result.topic_ids) or "none"
    line = f"{tp} (topic id {ids}): " + (
        f"would delete {len(result.planned)} segment(s) and {len(result.orphan_objects)} unreferenced object(s)"
        if result.dry_run
        else f"deleted {result.segments_deleted} segment(s), {fmt_bytes(result.bytes_deleted)}, "
        f"{len(result.orphan_objects)} unreferenced object(s); state {result.state}"
    )
    if result.kept_topic_ids:
        line += f"; kept topic id {', '.join(result.kept_topic_ids)} (still in the log dirs)"
    return line


def format_delete_records(result: DeleteRecordsResult) -> str:
    """``tiering delete-records``: where the log start is (or would be), on the tier and the cluster."""
    where = f"{result.topic}-{result.partition}"
    if result.dry_run:
        return (
            f"{where}: a DeleteRecords to {result.before_offset} is within {result.bound} {result.high_watermark}; "
            f"the log start offset would be {result.log_start_offset} (dry run: nothing applied)"
        )
    line = f"{where}: log start offset is now {result.log_start_offset}; retention deletes the remote data below it"
    if result.sent_to_cluster:
        line += f"; the cluster's log start offset is {result.cluster_log_start_offset}"
    else:
        line += "; the cluster was not asked (no kafka: section): send it the same DeleteRecords"
    return line


def format_verify_summary(results: list[SegmentVerification], seconds: float | None = None) -> str:
    """What a verify found; with ``seconds``, how long it took and how fast it read."""
    bad = sum(1 for r in results if not r.ok)
    size = sum(r.size_bytes for r in results)
    line = f"verify: {len(results)} finished segment(s) ({fmt_bytes(size)} of log), {bad} with problems"
    if seconds is not None:
        line += f" in {seconds:.2f} s ({fmt_bytes(size / seconds if seconds > 0 else 0.0)}/s)"
    legacy = sum(1 for r in results if not r.tamper_evident)
    if legacy:
        line += f"; {legacy} not tamper-evident (copied before manifest digests: tiering rewrite makes them so)"
    return line


def format_index_check(check: IndexCheck) -> str:
    """One segment's line: the segment, its verdict and what each index showed."""
    end = "..active" if check.end_offset is None else f"..{check.end_offset}"
    head = f"{check.topic}-{check.partition}: {check.location} segment {check.base_offset} [{check.base_offset}{end}]"
    if check.error is not None:
        return f"{head}: error: {check.error}"
    parts = [f"{f.kind.value} {f.status.value}" + (f" ({f.detail})" if f.detail else "") for f in check.findings]
    line = f"{head}: {check.status.value}: {', '.join(parts)}"
    if check.repaired_as is not None:
        line += f"; copied again as {check.repaired_as}"
    return f"{line} [{fmt_bytes(check.log_bytes)} of log in {check.seconds:.2f} s]"


def format_rebuild_summary(results: list[RebuildResult], seconds: float) -> str:
    checks = [c for r in results for c in r.checks]
    size = sum(c.log_bytes for c in checks)
    counts = ", ".join(f"{sum(1 for c in checks if c.status == status)} {status.value}" for status in IndexStatus)
    busy = sum(1 for r in results if r.busy)
    speed = size / seconds if seconds > 0 else 0.0
    line = (
        f"rebuild-indexes: {len(results)} partition(s), {len(checks)} segment(s): {counts}; "
        f"{fmt_bytes(size)} ({size} bytes) of log in {seconds:.2f} s ({fmt_bytes(speed)}/s)"
    )
    damaged = sum(1 for c in checks if c.damaged_log)
    if damaged:
        line += f"; {damaged} damaged segment(s) left unrepaired"
    cleaned = sum(r.segments_cleaned_up for r in results)
    if cleaned:
        line += f"; {cleaned} unfinished copy(ies) of earlier runs cleaned up"
    if busy:
        line += f"; {busy} partition(s) held by another run"
    return line


def format_export_summary(result: ExportResult) -> str:
    """``tiering export``: what was (or would be) exported, after the run's progress lines."""
    if result.dry_run:
        return f"{result.table}: {len(result.planned)} segment(s) to export"
    line = (
        f"{result.table}: exported {len(result.exported)} segment(s), {result.rows} row(s), {result.files} data "
        f"file(s) in {len(result.snapshots)} snapshot(s)"
    )
    if not result.planned:
        line = f"{result.table}: up to date, nothing to export"
    if result.failed:
        line += f"; {len(result.failed)} segment(s) failed"
    return line


# --- events and where the words go ----------------------------------------------------------


@singledispatch
def event_line(event: RunEvent) -> str:
    """The progress line of one event; each event type registers its own (``@event_line.register``)
    beside its run's other lines. An unregistered event still reads, by its fields."""
    values = ", ".join(f"{f.name}={getattr(event, f.name)}" for f in fields(event))
    return f"{type(event).__name__}: {values}" if values else type(event).__name__


@event_line.register
def _rebuild_planned(event: RebuildPlanned) -> str:
    return (
        f"rebuild-indexes: {event.remote_segments} remote segment(s) ({fmt_bytes(event.remote_bytes)}) and "
        f"{event.local_segments} local segment(s) of {event.partitions} partition(s); "
        f"mode {'repair' if event.repair else 'check'}"
    )


@event_line.register
def _partition_busy(event: PartitionBusy) -> str:
    checked = "remote indexes" if event.local else "indexes"
    return f"{event.topic_partition}: another run holds the partition; {checked} not checked"


@event_line.register
def _index_checked(event: IndexChecked) -> str:
    return format_index_check(event.check)


class Output(ABC):
    """Where a command's words go: its runs' events while they work, its result at the end."""

    @abstractmethod
    def event(self, event: RunEvent) -> None:
        """A run's progress, as it happens."""

    @abstractmethod
    def result(self, payload: Any, human: Callable[[], str]) -> None:
        """The command's result: ``payload`` (plain values, the ``to_dict`` of the run's result)
        or the lines ``human`` makes of it."""

    def progress(self, line: str) -> None:
        """A progress line made elsewhere (a run that emits lines, not events)."""
        print(line, file=self.progress_stream(), flush=True)

    def failure(self, line: str) -> None:
        """A one-line failure on stderr, whatever the output."""
        print(line, file=sys.stderr, flush=True)

    def progress_stream(self) -> Any:
        return sys.stdout


class ConsoleOutput(Output):
    """Lines for a person: progress and result on stdout."""

    def event(self, event: RunEvent) -> None:
        self.progress(event_line(event))

    def result(self, payload: Any, human: Callable[[], str]) -> None:
        text = human()
        if text:
            print(text)


class JsonOutput(Output):
    """The result as JSON on stdout (stable field names, docs/architecture.md); progress lines go
    to stderr so stdout stays one JSON document."""

    def event(self, event: RunEvent) -> None:
        self.progress(event_line(event))

    def result(self, payload: Any, human: Callable[[], str]) -> None:
        print(json.dumps(payload, indent=2, sort_keys=False, default=str))

    def progress_stream(self) -> Any:
        return sys.stderr


def output_for(as_json: bool) -> Output:
    return JsonOutput() if as_json else ConsoleOutput()


@event_line.register
def _restored(event: SegmentRestored) -> str:
    tp = event.topic_partition
    return (
        f"{tp.topic}-{tp.partition}: restored segment {event.start_offset}..{event.end_offset} "
        f"({event.restored}/{event.total}, {event.bytes} bytes)"
    )


@event_line.register
def _restoring_from_tier(event: RestoringFromTierAlone) -> str:
    tp = event.topic_partition
    return f"{tp}: not in the broker's log dirs; restoring topic id {event.topic_id} from the remote tier alone"


# --- copy (runs.copy and the Spark parallel upload) ------------------------------------------


@event_line.register
def _copy_skipped(event: CopySkipped) -> str:
    return f"{event.topic_partition}: skipped ({event.reason})"


@event_line.register
def _copy_not_planned(event: CopyNotPlanned) -> str:
    return f"{event.topic_partition}: skipped: {event.reason}"


def copy_delay_words(delay: Mapping[str, int]) -> str:
    """Why closed segments wait for their delayed upload (KIP-1241), from a ``CopyDelay``'s
    ``to_dict`` (the ``copy_delay`` of ``status --json`` and of a copy's result): ``waiting: 2
    segment(s) from 40 (2.0 MiB): remote.copy.lag.ms 600000, segment 40 is 2m old; 3.0 MiB after it
    of remote.copy.lag.bytes 64.0 MiB``."""
    base, lag_ms, lag_bytes = delay["base_offset"], delay["copy_lag_ms"], delay["copy_lag_bytes"]
    if lag_ms > 0:
        by_time = f"remote.copy.lag.ms {lag_ms}, segment {base} is {fmt_age(max(0, delay['segment_age_ms']))} old"
    else:
        by_time = "remote.copy.lag.ms not applied (unlimited or unknown local retention)"
    if lag_bytes > 0:
        by_size = f"{fmt_bytes(delay['newer_bytes'])} after it of remote.copy.lag.bytes {fmt_bytes(lag_bytes)}"
    else:
        by_size = "remote.copy.lag.bytes not applied (unlimited or unknown local retention)"
    return (
        f"waiting: {delay['waiting_segments']} segment(s) from {base} ({fmt_bytes(delay['waiting_bytes'])}): "
        f"{by_time}; {by_size}"
    )


@event_line.register
def _copy_delayed(event: CopyDelayed) -> str:
    fields_ = {f.name: getattr(event, f.name) for f in fields(event) if f.name != "topic_partition"}
    return f"{event.topic_partition}: {copy_delay_words(fields_)}"


@event_line.register
def _partition_held(event: PartitionHeld) -> str:
    return f"{event.topic_partition}: another copy run holds the partition; nothing done"


@event_line.register
def _segment_copied(event: SegmentCopied) -> str:
    elapsed = max(event.seconds, 1e-9)
    if event.index is not None:
        note = f" [{event.index}/{event.total}]"
    elif event.worker is not None:
        note = f" on {event.worker}"
    else:
        note = ""
    return (
        f"{event.topic_partition}: copied segment {event.base_offset} [{event.base_offset}..{event.end_offset}] "
        f"{fmt_bytes(event.size_bytes)} in {elapsed:.2f} s ({fmt_bytes(event.size_bytes / elapsed)}/s){note}"
    )


@event_line.register
def _segment_vanished(event: SegmentVanished) -> str:
    return f"{event.topic_partition}: the broker deleted segment {event.base_offset} while it was being copied"


@event_line.register
def _segment_failed(event: SegmentFailed) -> str:
    return f"{event.topic_partition}: segment {event.base_offset} failed ({event.reason}); cleaned up"


@event_line.register
def _segment_not_finished(event: SegmentNotFinished) -> str:
    return f"{event.topic_partition}: segment {event.base_offset} not finished (an earlier segment failed); cleaned up"


@event_line.register
def _segment_left_uploading(event: SegmentLeftUploading) -> str:
    return (
        f"{event.topic_partition}: segment {event.base_offset} was uploading when the run was aborted; "
        "left for the next run to clean up"
    )


@event_line.register
def _fenced_while_copying(event: FencedWhileCopying) -> str:
    return (
        f"{event.topic_partition}: fenced by a newer run ({event.holder}) while copying segment "
        f"{event.base_offset}; stopped"
    )


@event_line.register
def _lease_expired_while_copying(event: LeaseExpiredWhileCopying) -> str:
    return f"{event.topic_partition}: {event.reason}; stopped"


@event_line.register
def _copy_finished(event: CopyFinished) -> str:
    rate = event.bytes_copied / event.seconds if event.seconds > 0 else 0.0
    return (
        f"{event.topic_partition}: copied {event.segments_copied} segment(s), {fmt_bytes(event.bytes_copied)} "
        f"in {event.seconds:.2f} s ({fmt_bytes(rate)}/s); highest copied offset {event.highest_copied_offset}, "
        f"copy lag {event.copy_lag_segments} segment(s) / {fmt_bytes(event.copy_lag_bytes)}"
    )


@event_line.register
def _would_copy(event: WouldCopy) -> str:
    return (
        f"{event.topic_partition}: would copy segment {event.base_offset} [{event.base_offset}..{event.end_offset}] "
        f"{fmt_bytes(event.size_bytes)}"
    )


@event_line.register
def _dry_run_planned(event: DryRunPlanned) -> str:
    return f"{event.topic_partition}: dry run: {event.segments} segment(s) would be copied"


@event_line.register
def _uploads_planned(event: UploadsPlanned) -> str:
    return (
        f"parallel upload: {event.segments} segment(s), {fmt_bytes(event.size_bytes)} of {event.partitions} "
        f"partition(s) planned; {event.slots} upload(s) at a time"
    )


@event_line.register
def _segment_refused(event: SegmentRefused) -> str:
    return (
        f"{event.topic_partition}: segment {event.base_offset} not copied ({event.reason}); "
        "the segments before it are still committed"
    )


@event_line.register
def _parallel_upload_finished(event: ParallelUploadFinished) -> str:
    rate = event.bytes_copied / event.seconds if event.seconds > 0 else 0.0
    line = (
        f"parallel upload: {event.partitions} partition(s), {event.segments} segment(s), "
        f"{fmt_bytes(event.bytes_copied)} ({event.bytes_copied} bytes) in {event.seconds:.2f} s "
        f"({fmt_bytes(rate)}/s) on {event.workers} executor worker(s); {event.failures} failure(s); "
        f"segment checks on the driver {event.check_seconds:.2f} s"
    )
    if event.fenced:
        line += f", {event.fenced} partition(s) held by another run"
    if event.gaps:
        line += f", {event.gaps} tiering gap(s)"
    if event.deferred:
        line += f", {event.deferred} partition(s) deferred to the next run"
    return line


@event_line.register
def _copy_deferred(event: CopyDeferred) -> str:
    what = "not begun" if event.segments is None else f"{event.segments} segment(s) not started"
    return f"{event.topic_partition}: {what}: the run's time budget ran out; the next run copies the rest"


@event_line.register
def _partition_retention_outcome(event: PartitionRetentionOutcome) -> str:
    line = (
        f"{event.topic_partition}: retention {event.outcome}: {event.segments_deleted} segment(s), "
        f"{fmt_bytes(event.bytes_deleted)} deleted"
    )
    return f"{line} ({event.detail})" if event.detail else line


@event_line.register
def _partition_copy_outcome(event: PartitionCopyOutcome) -> str:
    line = (
        f"{event.topic_partition}: {event.outcome}: {event.segments_copied} segment(s), "
        f"{fmt_bytes(event.bytes_copied)} copied; copy lag {event.copy_lag_segments} segment(s) / "
        f"{fmt_bytes(event.copy_lag_bytes)}"
    )
    return f"{line} ({event.detail})" if event.detail else line


# --- export and verify ------------------------------------------------------------------------


def format_verification(result: SegmentVerification) -> str:
    """One segment's verification: ``ok``, or its problems."""
    head = (
        f"{result.topic}-{result.partition}: segment {result.start_offset}..{result.end_offset} ({result.segment_id})"
    )
    legacy = "" if result.tamper_evident else " (not tamper-evident: tiering rewrite makes it so)"
    return f"{head}: ok{legacy}" if result.ok else f"{head}: " + "; ".join(result.problems) + legacy


def format_export_totals(results: list[ExportResult], seconds: float) -> str:
    """The Spark export's last line: every table's commits and failures."""
    committed = sum(len(r.exported) for r in results)
    failed = sum(len(r.failed) for r in results)
    return f"export: {committed} segment(s) committed, {failed} failed in {seconds:.2f} s"


@event_line.register
def _verify_planned(event: VerifyPlanned) -> str:
    return (
        f"verify: {event.segments} finished segment(s), {fmt_bytes(event.size_bytes)} of log, "
        f"{event.partitions} partition(s)"
    )


@event_line.register
def _segment_verified(event: SegmentVerified) -> str:
    return f"{format_verification(event.result)} [{event.done}/{event.total}]"


@event_line.register
def _export_planned(event: ExportPlanned) -> str:
    return (
        f"export {event.topic} -> {event.table}: {event.segments} segment(s) to export, {fmt_bytes(event.size_bytes)}"
    )


@event_line.register
def _segment_would_export(event: SegmentWouldExport) -> str:
    return (
        f"would export {event.topic_partition}: segment {event.segment_id} offsets {event.start_offset}-"
        f"{event.end_offset}"
    )


@event_line.register
def _segment_exported(event: SegmentExported) -> str:
    return (
        f"{event.topic_partition}: segment {event.segment_id} offsets {event.start_offset}-{event.end_offset}: "
        f"{event.rows} row(s) in {event.files} data file(s) [{event.done}/{event.total}]"
    )


@event_line.register
def _segment_export_failed(event: SegmentExportFailed) -> str:
    return f"FAILED {event.reason} [{event.done}/{event.total}]"


@event_line.register
def _export_committed(event: ExportCommitted) -> str:
    return f"{event.table}: committed {event.segments} segment(s) in snapshot {event.snapshot_id}"


@event_line.register
def _export_cleaned_up(event: ExportCleanedUp) -> str:
    return f"removed {event.files} data file(s) of an export attempt that never committed"


# --- replay ------------------------------------------------------------------------------------


def _rates(records: int, size: int, seconds: float) -> str:
    if seconds <= 0:
        return ""
    return f", {records / seconds:,.0f} records/s, {fmt_bytes(size / seconds)}/s"


@event_line.register
def _replay_started(event: ReplayStarted) -> str:
    resumed = "" if event.resumed_after is None else f", resuming after offset {event.resumed_after}"
    return (
        f"replay {event.topic_partition} -> {event.target_topic}: offsets {event.first_offset}-{event.last_offset}"
        f"{resumed}"
    )


@event_line.register
def _replay_gap(event: ReplayGap) -> str:
    return f"{event.topic_partition}: offsets {event.start_offset}-{event.end_offset} NOT replayed: {event.reason}"


@event_line.register
def _replay_committed(event: ReplayCommitted) -> str:
    return (
        f"{event.topic_partition}: committed up to offset {event.up_to}: {event.records:,} record(s), "
        f"{fmt_bytes(event.bytes)}{_rates(event.records, event.bytes, event.seconds)}"
    )


@event_line.register
def _replay_finished(event: ReplayFinished) -> str:
    why = f": {event.detail}" if event.detail else ""
    return (
        f"{event.topic_partition}: {event.outcome}, {event.records:,} record(s), {fmt_bytes(event.bytes)} in "
        f"{event.seconds:.1f} s{_rates(event.records, event.bytes, event.seconds)}{why}"
    )


def format_replay_summary(result: ReplayResult) -> str:
    """A line per source partition, then the summary, which counts the failed partitions (each
    also one line on stderr)."""
    seconds = max((p.seconds for p in result.partitions), default=0.0)
    lines = []
    for p in result.partitions:
        span = (
            "nothing in range"
            if p.first_offset is None or p.last_offset is None
            else (f"offsets {p.first_offset}-{p.last_offset}")
        )
        gaps = "".join(f"; offsets {g.start}-{g.end} NOT replayed ({why})" for g, why in p.gaps)
        why = f": {p.detail}" if p.detail else ""
        lines.append(f"  {p.topic}-{p.partition}: {p.outcome}, {span}, {p.records:,} record(s){gaps}{why}")
    lines.append(
        f"replay {result.topic} (topic id {result.topic_id}) -> {result.target_topic}: "
        f"{result.records:,} record(s), {fmt_bytes(result.bytes)} from {len(result.partitions)} partition(s)"
        f"{_rates(result.records, result.bytes, seconds)}{failed_words(len(result.failed))}"
    )
    return "\n".join(lines)
