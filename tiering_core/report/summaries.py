"""What the runs over many partitions (``copy``, ``retention``, ``rewrite``, ``replay``) print at
the end: a line per partition where the run has one, then one summary line that counts every
partition tried and the ones that failed, so that it agrees with the failures' lines on stderr
(one per failed partition). Sizes in human units (``tiering_core.humanize``); ``--json`` has the raw numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiering_core.humanize import fmt_bytes

if TYPE_CHECKING:
    from tiering_core.replay import ReplayResult
    from tiering_core.runs.copy_report import CopyResult
    from tiering_core.runs.retention import RetentionResult
    from tiering_core.runs.rewrite import RewriteResult


def failed_words(failed: int) -> str:
    """The summary's count of failed partitions (nothing when none failed)."""
    return f", {failed} partition(s) failed" if failed else ""


def format_copy_summary(results: list[CopyResult], partitions: int | None = None, failed: int = 0) -> str:
    """One line for a copy of ``partitions`` partitions (default: one per result), ``failed`` of
    them with an error (a partition that failed before it had a result has none)."""
    count = len(results) if partitions is None else partitions
    if results and all(r.dry_run for r in results):
        planned = [segment for r in results for segment in r.planned]
        size = sum(segment["size_bytes"] for segment in planned)
        line = f"copy: {count} partition(s), would copy {len(planned)} segment(s), {fmt_bytes(size)}"
    else:
        copied = sum(r.segments_copied for r in results)
        size = sum(r.bytes_copied for r in results)
        fenced = sum(1 for r in results if r.fenced)
        line = f"copy: {count} partition(s), {copied} segment(s), {fmt_bytes(size)}"
        if fenced:
            line += f", {fenced} partition(s) held by another run"
    return line + failed_words(failed)


def format_retention(results: list[RetentionResult]) -> str:
    """One line per partition of a retention run."""
    return "\n".join(retention_line(r) for r in results)


def retention_line(r: RetentionResult) -> str:
    line = f"{r.topic}-{r.partition}: "
    if r.skipped_reason:
        return line + f"skipped ({r.skipped_reason})"
    line += f"{'would delete' if r.dry_run else 'deleted'} "
    line += f"{len(r.planned) if r.dry_run else r.segments_deleted} segment(s)"
    if not r.dry_run:
        line += f", {fmt_bytes(r.bytes_deleted)}"
    if r.copies_cleaned:
        line += f"; cleaned up {r.copies_cleaned} copy(ies) a killed run left"
    if r.new_remote_log_start_offset is not None:
        line += f"; remote log start offset {'would become' if r.dry_run else '->'} {r.new_remote_log_start_offset}"
    if r.fenced:
        line += " (held by another run)"
    return line


def format_retention_summary(results: list[RetentionResult], partitions: int, failed: int) -> str:
    """The last line of ``tiering retention``: ``partitions`` tried, ``failed`` of them with an error."""
    fenced = sum(1 for r in results if r.fenced)
    if results and all(r.dry_run for r in results):
        line = f"retention: {partitions} partition(s), would delete {sum(len(r.planned) for r in results)} segment(s)"
    else:
        deleted = sum(r.segments_deleted for r in results)
        size = sum(r.bytes_deleted for r in results)
        line = f"retention: {partitions} partition(s), deleted {deleted} segment(s), {fmt_bytes(size)}"
    if fenced:
        line += f", {fenced} partition(s) held by another run"
    return line + failed_words(failed)


def format_rewrite(results: list[RewriteResult]) -> str:
    """One line per partition of ``tiering rewrite``."""
    lines = []
    for r in results:
        line = f"{r.topic}-{r.partition}: rewrote {r.segments_rewritten} segment(s)"
        if r.segments_rewritten:
            line += f" ({fmt_bytes(r.stored_bytes_before)} stored -> {fmt_bytes(r.stored_bytes_after)})"
        line += f", {r.segments_current} already in the current format"
        if r.segments_cleaned_up:
            line += f"; cleaned up {r.segments_cleaned_up} copy(ies) a killed run left"
        lines.append(line)
    return "\n".join(lines)


def format_rewrite_summary(results: list[RewriteResult], partitions: int, failed: int) -> str:
    """The last line of ``tiering rewrite``: ``partitions`` tried, ``failed`` of them with an error."""
    rewritten = sum(r.segments_rewritten for r in results)
    return f"rewrite: {partitions} partition(s), rewrote {rewritten} segment(s)" + failed_words(failed)


def with_summary(lines: str, summary: str) -> str:
    """A run's lines per partition, then its summary line."""
    return f"{lines}\n{summary}" if lines else summary


def throughput_words(records: int, size: int, seconds: float) -> str:
    """A replay's speed, records and bytes a second (nothing for no time at all)."""
    if seconds <= 0:
        return ""
    return f", {records / seconds:,.0f} records/s, {fmt_bytes(size / seconds)}/s"


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
        f"{throughput_words(result.records, result.bytes, seconds)}{failed_words(len(result.failed))}"
    )
    return "\n".join(lines)
