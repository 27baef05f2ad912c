"""An export holding its table: the rules every export runner follows (``tiering export`` and the
Spark app alike), each in one place.

``exporting`` takes the table's export lease (``runs.lease.held_table``: one export of a table at
a time, renewed in the background; a later try of the same scheduled task takes over its killed
try's lease at once, anyone else gets ``TableBusyError``), opens the table (created on first use,
migrated in place when written before topic ids) and notes the snapshot current when the lease
was taken. Through the ``TableExport`` it yields, a runner plans (what the table's ancestry says is
not exported yet), starts its attempt (marked with the lease's token), commits (no commit lands on
a snapshot it was not computed from, and none once the lease is lost) and finishes: its own
uncommitted files are deleted, and those of older holders' attempts once the table has moved on
(``write.clean_abandoned_attempts``). docs/export.md tells the whole story.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tiering_core.errors import ExportError, one_line
from tiering_core.export.commit import CommitResult, TableLeaseLostError, commit_segments
from tiering_core.export.plan import ExportSegment, plan_export
from tiering_core.export.table import (
    TableName,
    export_config,
    exported_ranges,
    load_catalog,
    migrate_table,
    open_table,
    store_topic_ids,
    table_name,
)
from tiering_core.export.write import (
    ExportAttempt,
    clean_abandoned_attempts,
    current_snapshot_id,
    delete_files,
    finish_attempt,
    start_attempt,
)
from tiering_core.kafka.isolation import IsolationLevel
from tiering_core.metadata.errors import LeaseHeldError
from tiering_core.runs.lease import HeldTable, held_table

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from tiering_core.context import TieringContext
    from tiering_core.metadata.store import TaskAttempt

log = logging.getLogger(__name__)


class TableBusyError(ExportError):
    """Another export holds the table's lease: this one exports nothing (try again later)."""


@dataclass
class TableExport:
    """An export holding ``name``'s lease (``held``) with the table open; ``since`` is the snapshot
    current when the lease was taken (None: the table had none); ``attempts``: those it started."""

    ctx: TieringContext
    name: TableName
    table: Table
    held: HeldTable
    since: int | None
    attempts: list[ExportAttempt] = field(default_factory=list)

    def plan(
        self, topic: str, partition: int | None = None, isolation: IsolationLevel = IsolationLevel.READ_COMMITTED
    ) -> list[ExportSegment]:
        """The segments of ``topic`` (or of one partition) the table does not hold yet."""
        self.require()
        self.table.refresh()
        done = exported_ranges(self.table, store_topic_ids(self.ctx.metadata))
        return plan_export(self.ctx, topic, partition, table=self.table, isolation=isolation, done=done)

    def require(self) -> None:
        """``TableLeaseLostError`` once the export no longer holds the table (fenced, or expired
        while the process stalled): it writes and commits nothing more."""
        if not self.held.holds:
            raise TableLeaseLostError(f"export to {self.name}: the export no longer holds the table: {self.held.lost}")

    def start_attempt(self) -> ExportAttempt:
        self.require()
        attempt = start_attempt(self.table, self.held.lease)
        self.attempts.append(attempt)
        return attempt

    def abandon(self) -> None:
        """After the lease was lost: delete what this export's attempts hold that no snapshot
        references (it can commit none of it any more, and the newer export may have judged the
        attempts over before this one wrote its last files)."""
        for attempt in self.attempts:
            try:
                finish_attempt(self.table, attempt)
            except Exception as exc:  # the newer export removes them once the table moves on
                log.warning("%s: could not remove the files of attempt %s: %s", self.name, attempt.attempt_id, exc)

    def commit(self, attempt: ExportAttempt, written: Sequence[tuple[ExportSegment, Sequence[str]]]) -> CommitResult:
        """One snapshot of the written segments' files (``commit_segments``); the files of segments
        the table held by then (not ours to keep) are deleted."""
        self.require()
        result = commit_segments(self.table, written, held=self.held, topic_ids_of=store_topic_ids(self.ctx.metadata))
        if result.already_exported:
            fs, _root = attempt.filesystem()
            skipped = {id(s) for s in result.already_exported}
            delete_files(fs, [attempt.filesystem(f)[1] for s, files in written if id(s) in skipped for f in files])
        return result

    def finish(self, attempt: ExportAttempt | None) -> list[str]:
        """At the end, still holding the table: delete what the attempt holds that no snapshot
        references, then the uncommitted files of older holders' attempts if the table has moved
        on since the lease passed to this export; the URLs deleted."""
        self.require()
        deleted = finish_attempt(self.table, attempt) if attempt is not None else []
        return deleted + clean_abandoned_attempts(self.table, self.held.lease.token, self.since)


@contextmanager
def exporting(
    ctx: TieringContext,
    topic: str,
    *,
    table: str | None = None,
    run_id: str | None = None,
    attempt: TaskAttempt | None = None,
) -> Iterator[TableExport]:
    """Hold ``topic``'s table (``table``: ``NAMESPACE.NAME`` instead of ``<namespace>.<topic>``)
    for the block: its lease taken (``TableBusyError`` while another export holds it), the table
    opened, created or migrated under it, the lease released at the end."""
    config = export_config(ctx.config)
    name = table_name(config, topic, table)
    catalog = load_catalog(ctx.config)
    run = run_id or uuid.uuid4().hex
    with ExitStack() as stack:
        try:
            held = stack.enter_context(
                held_table(
                    ctx.metadata, config.catalog_name, str(name), holder=f"export:{run}", run_id=run, attempt=attempt
                )
            )
        except LeaseHeldError as exc:
            raise TableBusyError(
                f"export to {name}: another export holds the table, try again later: {one_line(exc)}"
            ) from exc
        iceberg = open_table(catalog, name, create=True)
        assert iceberg is not None
        iceberg = migrate_table(iceberg)
        export = TableExport(ctx, name, iceberg, held, current_snapshot_id(iceberg))
        try:
            yield export
        except TableLeaseLostError:
            export.abandon()
            raise
