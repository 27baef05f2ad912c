"""The lines of an erasure and of the audit trail, for the command and the DAG tasks' logs (a
module of their own, beside the driver, until the reporting layer takes them). They name keys
by count and erasures by id, never a key; the broker's local segments still holding the keys by
base offset and file name."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tiering_core.humanize import fmt_duration, fmt_utc

if TYPE_CHECKING:
    from tiering_core.metadata.erasures import ErasureRecord, LocalSegment, LocalSegments, TableErasureRecord
    from tiering_core.runs.erase import ErasureResult, TableErasure


def format_erasure(result: ErasureResult) -> str:
    """One line per segment holding the keys, one per partition, one per export table (and in a
    dry run one per snapshot a tag or a branch holds), and the summary line."""
    verb = "would remove" if result.dry_run else "removed"
    lines = []
    for p in result.partitions:
        for hit in p.hits:
            copied = f" (now {hit.new_segment_id})" if hit.new_segment_id else ""
            lines.append(
                f"{p.topic}-{p.partition}: segment {hit.segment_id} [{hit.start_offset}..{hit.end_offset}]: "
                f"{verb} {hit.records_removed} record(s){copied}"
            )
        lines.append(
            f"{p.topic}-{p.partition}: read {p.segments_read} segment(s) ({p.segments_filtered_out} ruled out "
            f"by their key filter), {len(p.hits)} held the key(s), {p.segments_unchanged} left as they were"
        )
        if p.local_segments is not None:
            lines.extend(local_segment_lines(f"{p.topic}-{p.partition}", p.local_segments))
    lines.extend(_table_line(t, result.dry_run) for t in result.tables)
    removed = sum(p.records_removed for p in result.partitions)
    failed = f", {len(result.failures)} failure(s)" if result.failures else ""
    tables = [t for t in result.tables if t.skipped is None]
    rows = f", {len(tables)} table(s): {sum(t.rows_deleted for t in tables)} row(s)" if tables else ""
    lines.append(
        f"erase{' (dry run)' if result.dry_run else ''} {result.erasure_id}: {len(result.key_sha256)} key(s), "
        f"{len(result.partitions)} partition(s), {verb} {removed} record(s){rows}{failed}"
    )
    return "\n".join(lines)


def _table_line(table: TableErasure, dry_run: bool) -> str:
    """An export table's part: what was (or would be) deleted and expired, or why it was left alone."""
    if table.skipped is not None:
        return f"table {table.table}: left alone: {table.skipped}"
    verbs = ("would delete", "would expire") if dry_run else ("deleted", "expired")
    held = f"; {len(table.held)} snapshot(s) held by a tag or branch" if table.held else ""
    line = (
        f"table {table.table}: {verbs[0]} {table.rows_deleted} row(s) and {table.data_files_deleted} data file(s) "
        f"holding the key(s), {verbs[1]} {table.snapshots_expired} snapshot(s){held}"
    )
    return "\n".join([line, *(f"table {table.table}: {h}" for h in table.held)]) if dry_run else line


def format_erasures(records: list[ErasureRecord], tables: Sequence[TableErasureRecord] = ()) -> str:
    """The audit trail, one line per erasure and partition, then one per erasure and export
    table, newest first."""
    if not records and not tables:
        return "no erasure recorded"
    return "\n".join(
        [
            *_partition_lines(records),
            *(
                f"{t.erasure_id} table {t.table} {t.outcome}: {t.rows_deleted} row(s) deleted, "
                f"{t.data_files_deleted} data file(s) deleted, {t.snapshots_expired} snapshot(s) expired, "
                f"started {t.started_ms}"
                for t in tables
            ),
        ]
    )


def _partition_lines(records: list[ErasureRecord]) -> list[str]:
    lines = []
    for r in records:
        lines.append(
            f"{r.erasure_id} {r.topic}-{r.partition} {r.outcome}: {len(r.key_sha256)} key(s), "
            f"{sum(s.new_segment_id is not None for s in r.segments)} segment(s) copied again, "
            f"{r.records_removed} record(s) removed, "
            f"by {r.requested_by}, started {r.started_ms}"
        )
        if r.local_segments is not None:
            lines.extend(local_segment_lines(f"{r.erasure_id} {r.topic}-{r.partition}", r.local_segments))
    return lines


def local_segment_lines(where: str, local: LocalSegments) -> list[str]:
    """The broker's local segments still holding the keys: why they were not checked, none, or
    one line each with when local retention removes it (the platform never changes them)."""
    if local.not_checked is not None:
        return [f"{where}: local segments not checked: {local.not_checked}"]
    if not local.segments:
        return [f"{where}: no local segment holds the key(s) ({local.segments_read} read in {local.log_dir})"]
    lines = [
        f"{where}: {len(local.segments)} local segment(s) in {local.log_dir} still hold {local.records} record(s) "
        "of the key(s): the broker's files, which the platform cannot change; local retention removes them"
    ]
    size = _by_size(local.local_retention_bytes)
    for segment in local.segments:
        lines.append(
            f"{where}: local segment {segment.file_name} (base offset {segment.base_offset}): "
            f"{segment.records} record(s); {_by_time(segment, local.local_retention_ms)}; {size}"
        )
    return lines


def _by_time(segment: LocalSegment, retention_ms: int | None) -> str:
    """When local retention by time removes ``segment`` (Kafka's rule: its largest timestamp plus
    the effective ``local.retention.ms``, once copied to the tier, never the active segment)."""
    if segment.active:
        return "the active segment: retention never removes it before it rolls"
    not_copied = "" if segment.copied else " once copied to the tier (not yet: the next copy tiers the key(s) again)"
    if retention_ms is None:
        return f"by time: not known here (local.retention.ms not known){not_copied}"
    if retention_ms < 0:
        return f"never by time (local.retention.ms -1){not_copied}"
    if segment.removed_by_time_ms is None:
        return f"by time: not known (no timestamp){not_copied}"
    return (
        f"by time from {fmt_utc(segment.removed_by_time_ms)} (largest timestamp {fmt_utc(segment.largest_timestamp_ms)}"
        f" + local.retention.ms {fmt_duration(retention_ms)}){not_copied}"
    )


def _by_size(retention_bytes: int | None) -> str:
    if retention_bytes is None:
        return "by size: not known here (local.retention.bytes not known)"
    if retention_bytes < 0:
        return "never by size (local.retention.bytes -1)"
    return f"local.retention.bytes {retention_bytes} applies: sooner once the local log outgrows it (no time known)"
