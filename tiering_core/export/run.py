"""``tiering export``: a topic's remote segments into its Iceberg table, exactly once.

Holding the table (``session.exporting``: its export lease; another export of the table at the
same time gets a one-line ``TableBusyError``), plan, write each segment's data files, and commit
them in snapshots of at most ``COMMIT_BYTES`` of segments; at the end, the export's own
uncommitted files and those killed attempts left are removed (``TableExport.finish``). A segment
that fails (a corrupt batch, a record Arrow cannot hold) is reported with its id and offset, its
files deleted, and the others go on; the run then fails naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tiering_core.cli.output import (
    format_export_cleanup,
    format_export_commit,
    format_export_failure,
    format_export_segment,
)
from tiering_core.export.plan import ExportSegment
from tiering_core.export.session import dry_run as plan_dry_run
from tiering_core.export.session import exporting
from tiering_core.export.write import ExportAttempt, SegmentExportError, write_segment_files
from tiering_core.kafka.isolation import IsolationLevel

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.export.session import TableExport
    from tiering_core.metadata.store import TaskAttempt

#: Segment bytes written before a commit: a killed run loses at most this much work.
COMMIT_BYTES = 256 * 1024 * 1024


@dataclass
class ExportResult:
    """What one ``tiering export`` did."""

    table: str
    dry_run: bool
    planned: list[ExportSegment] = field(default_factory=list)
    exported: list[ExportSegment] = field(default_factory=list)
    failed: list[SegmentExportError] = field(default_factory=list)
    rows: int = 0
    files: int = 0
    snapshots: list[int] = field(default_factory=list)
    cleaned_files: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "dry_run": self.dry_run,
            "planned": [s.to_dict() for s in self.planned],
            "exported_segments": len(self.exported),
            "rows": self.rows,
            "data_files": self.files,
            "snapshots": self.snapshots,
            "failed": [{"segment_id": f.segment_id, "offset": f.offset, "error": str(f)} for f in self.failed],
            "cleaned_files": len(self.cleaned_files),
        }


def run_export(
    ctx: TieringContext,
    topic: str,
    partition: int | None = None,
    *,
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
    table: str | None = None,
    dry_run: bool = False,
    progress: Callable[[str], None] = lambda _line: None,
    commit_bytes: int | None = None,
    attempt: TaskAttempt | None = None,
) -> ExportResult:
    if dry_run:  # reads only: no lease, nothing created or migrated
        name, planned = plan_dry_run(ctx, topic, [partition], table=table, isolation=isolation)
        return ExportResult(str(name), dry_run, planned)
    with exporting(ctx, topic, table=table, attempt=attempt) as export:
        result = ExportResult(str(export.name), dry_run)
        result.planned = export.plan(topic, partition, isolation)
        written = export.start_attempt() if result.planned else None
        if written is not None:
            _write_and_commit(export, written, result, progress, COMMIT_BYTES if commit_bytes is None else commit_bytes)
        result.cleaned_files = export.finish(written)
        if result.cleaned_files:
            progress(format_export_cleanup(len(result.cleaned_files)))
    return result


def _write_and_commit(
    export: TableExport,
    attempt: ExportAttempt,
    result: ExportResult,
    progress: Callable[[str], None],
    commit_bytes: int,
) -> None:
    """Each planned segment's data files, committed whenever ``commit_bytes`` of segments wait."""
    pending: list[tuple[ExportSegment, list[str]]] = []
    pending_bytes = 0

    def commit() -> None:
        nonlocal pending, pending_bytes
        if not pending:
            return
        # A failed commit leaves its files: the catalog may have taken it all the same (an answer
        # lost on the way back), and a later export removes them only if no snapshot holds them.
        outcome = export.commit(attempt, pending)
        result.exported.extend(outcome.committed)
        if outcome.snapshot_id is not None:
            result.snapshots.append(outcome.snapshot_id)
            progress(format_export_commit(len(outcome.committed), outcome.snapshot_id))
        pending, pending_bytes = [], 0

    for segment in result.planned:
        export.require()
        rows = 0

        def count(batch: Any) -> None:
            nonlocal rows
            rows += batch.num_rows

        try:
            files = write_segment_files(export.ctx.storage, segment, attempt, on_batch=count)
        except SegmentExportError as exc:
            result.failed.append(exc)
            progress(format_export_failure(exc))
            continue
        result.rows += rows
        result.files += len(files)
        progress(format_export_segment(segment, rows, len(files)))
        pending.append((segment, files))
        pending_bytes += segment.segment.size_bytes
        if pending_bytes >= commit_bytes:
            commit()
    commit()
