"""The lines of an erasure and of the audit trail, for the command and the DAG tasks' logs (a
module of their own, beside the driver, until the reporting layer takes them). They name keys
by count and erasures by id, never a key."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tiering_core.metadata.erasures import ErasureRecord
    from tiering_core.runs.erase import ErasureResult


def format_erasure(result: ErasureResult) -> str:
    """One line per segment holding the keys, one per partition, and the summary line."""
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
    removed = sum(p.records_removed for p in result.partitions)
    failed = f", {len(result.failures)} partition(s) failed" if result.failures else ""
    lines.append(
        f"erase{' (dry run)' if result.dry_run else ''} {result.erasure_id}: {len(result.key_sha256)} key(s), "
        f"{len(result.partitions)} partition(s), {verb} {removed} record(s){failed}"
    )
    return "\n".join(lines)


def format_erasures(records: list[ErasureRecord]) -> str:
    """The audit trail, one line per erasure and partition, newest first."""
    if not records:
        return "no erasure recorded"
    return "\n".join(
        f"{r.erasure_id} {r.topic}-{r.partition} {r.outcome}: {len(r.key_sha256)} key(s), "
        f"{sum(s.new_segment_id is not None for s in r.segments)} segment(s) copied again, "
        f"{r.records_removed} record(s) removed, "
        f"by {r.requested_by}, started {r.started_ms}"
        for r in records
    )
