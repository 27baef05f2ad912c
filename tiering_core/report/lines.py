"""The line of every run event: what the ``tiering`` command, the demo, the Spark apps and the
Airflow tasks print while a run works.

The runs emit events (``tiering_core.events``) as values; how each reads to a person is decided
here, in one place: ``event_line`` has one registration per event type, grouped by the family of
runs that emits it. Where the lines go is ``output``; the results at the end of a run are
``results`` and ``summaries``. This module imports only downward: the events, never a run and
never the command line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from functools import singledispatch

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
from tiering_core.events.read import RestoringFromTierAlone, SegmentRestored, SegmentVerified, VerifyPlanned
from tiering_core.events.rebuild import IndexChecked, LocalIndexesSkipped, PartitionBusy, RebuildPlanned
from tiering_core.events.replay import ReplayCommitted, ReplayFinished, ReplayGap, ReplayStarted
from tiering_core.events.retention import PartitionRetentionOutcome
from tiering_core.humanize import fmt_age, fmt_bytes
from tiering_core.report.results import format_index_check, format_verification
from tiering_core.report.summaries import throughput_words


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
def _local_indexes_skipped(event: LocalIndexesSkipped) -> str:
    return (
        f"rebuild-indexes: local indexes of {event.partitions} partition(s) skipped: this process serves no "
        "broker (no log dir to read); the remote segments are checked"
    )


@event_line.register
def _partition_busy(event: PartitionBusy) -> str:
    checked = "remote indexes" if event.local else "indexes"
    return f"{event.topic_partition}: another run holds the partition; {checked} not checked"


@event_line.register
def _index_checked(event: IndexChecked) -> str:
    return format_index_check(event.check)


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
        f"{fmt_bytes(event.bytes)}{throughput_words(event.records, event.bytes, event.seconds)}"
    )


@event_line.register
def _replay_finished(event: ReplayFinished) -> str:
    why = f": {event.detail}" if event.detail else ""
    return (
        f"{event.topic_partition}: {event.outcome}, {event.records:,} record(s), {fmt_bytes(event.bytes)} in "
        f"{event.seconds:.1f} s{throughput_words(event.records, event.bytes, event.seconds)}{why}"
    )
