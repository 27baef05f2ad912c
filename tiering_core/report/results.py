"""What a run's result reads as to a person once the run is over: the lines of ``recover``,
``orphans``, ``delete-partition``, ``delete-records``, ``verify``, ``rebuild-indexes`` and
``export``, shared by the ``tiering`` command and the Spark apps (``--json`` prints the results'
``to_dict`` instead). The lines while a run works are ``lines``; the last line of a run over
partitions is ``summaries``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiering_core.events.read import SegmentVerification
from tiering_core.events.rebuild import IndexStatus
from tiering_core.humanize import fmt_bytes, fmt_duration

if TYPE_CHECKING:
    from tiering_core.export import ExportResult
    from tiering_core.kafka.topic import TopicPartition
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


def format_verification(result: SegmentVerification) -> str:
    """One segment's verification: ``ok``, or its problems."""
    head = (
        f"{result.topic}-{result.partition}: segment {result.start_offset}..{result.end_offset} ({result.segment_id})"
    )
    legacy = "" if result.tamper_evident else " (not tamper-evident: tiering rewrite makes it so)"
    return f"{head}: ok{legacy}" if result.ok else f"{head}: " + "; ".join(result.problems) + legacy


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


def format_export_totals(results: list[ExportResult], seconds: float) -> str:
    """The Spark export's last line: every table's commits and failures."""
    committed = sum(len(r.exported) for r in results)
    failed = sum(len(r.failed) for r in results)
    return f"export: {committed} segment(s) committed, {failed} failed in {seconds:.2f} s"
