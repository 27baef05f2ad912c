"""An export holding its table: the rules every export runner follows (``tiering export`` and the
Spark app alike), each in one place.

``exporting`` takes the table's export lease (``engine.lease.held_table``: one export of a table at
a time, renewed in the background; a later try of the same scheduled task takes over its killed
try's lease at once, anyone else gets ``TableBusyError``), opens the table (created on first use,
migrated in place when written before topic ids) and notes the snapshot current when the lease
was taken, and records the last export commit of the table's ancestry if the metadata store lacks
it. Through the ``TableExport`` it yields, a runner plans (what the table holds, by the rule of
``export.progress``: its ancestry, or the store's record of its export commits once snapshot
expiry removed them from it), starts its attempt (marked with the lease's token), commits (no
commit lands on a snapshot it was not computed from, and none once the lease is lost; each
confirmed commit is recorded in the store, fenced by the lease) and finishes: its own uncommitted
files are deleted, and those of older holders' attempts once the table has moved on
(``write.clean_abandoned_attempts``). Reads that hold no lease (``status``, a dry run) go through
``exported_so_far``, so every reader of what a table holds follows the one rule.
docs/export.md tells the whole story.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tiering_core.config.export_topics import BYTES
from tiering_core.engine.lease import HeldTable, held_table
from tiering_core.errors import ExportError, one_line
from tiering_core.export.commit import CommitResult, TableLeaseLostError, commit_segments
from tiering_core.export.plan import ExportSegment, newest_topic_ids, plan_export, require_remote_data
from tiering_core.export.progress import exported_progress, record_ancestry, record_commit
from tiering_core.export.table import (
    ExportedRanges,
    TableName,
    export_config,
    load_catalog,
    migrate_table,
    open_table,
    table_name,
)
from tiering_core.export.typed import SubjectStrategy
from tiering_core.export.typed_session import DeadLetters, open_typed_table, registry_endpoint
from tiering_core.export.typed_write import TypedWrite
from tiering_core.export.write import (
    ExportAttempt,
    clean_abandoned_attempts,
    current_snapshot_id,
    delete_files,
    finish_attempt,
    start_attempt,
)
from tiering_core.kafka.isolation import IsolationLevel
from tiering_core.kafka.topic import TopicPartition
from tiering_core.metadata.errors import FencedError, LeaseHeldError, MetadataStoreError

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from tiering_core.context import TieringContext
    from tiering_core.metadata.store import ExportCommit, TaskAttempt

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
    created: bool = False  # this export created the table (it did not exist when the lease was taken)
    #: A typed topic's dead-letter table (``export.typed_session``), None for a table of bytes.
    dead_letters: DeadLetters | None = None

    def plan(
        self, topic: str, partition: int | None = None, isolation: IsolationLevel = IsolationLevel.READ_COMMITTED
    ) -> list[ExportSegment]:
        """The segments of ``topic`` (or of one partition) the table does not hold yet."""
        self.require()
        self.table.refresh()
        return plan_export(self.ctx, topic, partition, isolation=isolation, done=self.exported(self.table))

    def exported(self, table: Table) -> ExportedRanges:
        """What ``table`` (this export's, as last read) holds: ``export.progress``'s rule."""
        return exported_progress(table, self.ctx.metadata)

    def record(self, commit: ExportCommit | None) -> None:
        """Record a confirmed commit in the metadata store (None: the last export commit of the
        table's ancestry, if the store lacks it), fenced by the lease. An export that lost the
        lease records nothing (``TableLeaseLostError``); a store that fails is an ``ExportError``
        naming the snapshot: it is in the table, and the next export records it."""
        lease = self.held.lease
        try:
            if commit is None:
                record_ancestry(self.ctx.metadata, lease, self.table)
            else:
                record_commit(self.ctx.metadata, lease, commit)
        except FencedError as exc:
            self.held.lose(exc)
            raise TableLeaseLostError(
                f"export to {self.name}: the export no longer holds the table to record its commit: {one_line(exc)}"
            ) from exc
        except MetadataStoreError as exc:
            what = "the last export commit" if commit is None else f"snapshot {commit.snapshot_id}"
            raise ExportError(
                f"export to {self.name}: {what} is in the table but could not be recorded in the metadata store "
                f"(the next export records it): {one_line(exc)}"
            ) from exc

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

    def start_typed(self) -> TypedWrite | None:
        """A typed topic's part of each segment's task (None for a table of bytes)."""
        self.require()
        return None if self.dead_letters is None else self.dead_letters.start(self.table)

    def abandon(self) -> None:
        """After the lease was lost: delete what this export's attempts hold that no snapshot
        references (it can commit none of it any more, and the newer export may have judged the
        attempts over before this one wrote its last files)."""
        if self.dead_letters is not None:
            self.dead_letters.abandon()
        for attempt in self.attempts:
            try:
                finish_attempt(self.table, attempt)
            except Exception as exc:  # the newer export removes them once the table moves on
                log.warning("%s: could not remove the files of attempt %s: %s", self.name, attempt.attempt_id, exc)

    def drop_if_unused(self) -> bool:
        """After a failed export: drop the table if this export created it and nothing was ever
        committed to it (by this export or any other writer), so that a failed export leaves no
        table behind; a table someone else created, or one with a snapshot, is kept. Whether it
        was dropped."""
        if self.dead_letters is not None:
            self.dead_letters.drop_if_unused()
        if not self.created:
            return False
        self.abandon()
        try:
            self.table.refresh()
            if self.table.metadata.snapshots:
                return False
            self.table.catalog.purge_table(self.name.identifier)
        except Exception as exc:  # the failure that brought us here is the one to report
            log.warning("%s: could not drop the table this failed export created: %s", self.name, one_line(exc))
            return False
        log.debug("%s: dropped the table this failed export created", self.name)  # the failure is the line
        return True

    def commit(
        self,
        attempt: ExportAttempt,
        written: Sequence[tuple[ExportSegment, Sequence[str]]],
        *,
        evolve: Callable[[Any, Table], None] | None = None,
    ) -> CommitResult:
        """One snapshot of the written segments' files (``commit_segments``; ``evolve``: a schema
        change in the same commit); the files of segments the table held by then (not ours to
        keep) are deleted; the commit is recorded in the metadata store (``record``)."""
        self.require()
        result = commit_segments(self.table, written, progress=self.exported, held=self.held, evolve=evolve)
        if result.already_exported:
            fs, _root = attempt.filesystem()
            skipped = {id(s) for s in result.already_exported}
            delete_files(fs, [attempt.filesystem(f)[1] for s, files in written if id(s) in skipped for f in files])
        if result.record is not None:
            self.record(result.record)
        return result

    def finish(self, attempt: ExportAttempt | None) -> list[str]:
        """At the end, still holding the table: delete what the attempt holds that no snapshot
        references, then the uncommitted files of older holders' attempts if the table has moved
        on since the lease passed to this export; the URLs deleted."""
        self.require()
        deleted = finish_attempt(self.table, attempt) if attempt is not None else []
        if self.dead_letters is not None:
            deleted += self.dead_letters.finish(self.held.lease.token)
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
    opened, created or migrated under it and the last export commit of its ancestry recorded, the
    lease released at the end. The topic is checked first, and an export that fails drops the table
    it created while nothing was committed to it (``TableExport.drop_if_unused``)."""
    config = export_config(ctx.config)
    name = table_name(config, topic, table)
    require_remote_data(ctx, topic)  # before the table is created: an unknown topic makes none
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
        typed = config.topic(topic).typed
        endpoint = registry_endpoint(ctx.config) if typed else None
        if typed:
            value_typed = config.topic(topic).value != BYTES
            opened = functools.partial(open_typed_table, catalog, name, value_typed=value_typed)
        else:
            opened = functools.partial(open_table, catalog, name)
        existing = opened(create=False)
        iceberg = existing if existing is not None else opened(create=True)
        assert iceberg is not None
        iceberg = migrate_table(iceberg)
        export = TableExport(ctx, name, iceberg, held, current_snapshot_id(iceberg), created=existing is None)
        try:
            if endpoint is not None:
                formats = config.topic(topic)
                strategy = formats.subject_strategy
                subjects = SubjectStrategy(topic, strategy) if strategy is not None else None
                export.dead_letters = DeadLetters.open(
                    ctx.metadata, catalog, name, held, endpoint, formats.value, formats.key, subjects, formats.messages
                )
            export.record(None)
            yield export
        except TableLeaseLostError:
            export.abandon()
            raise
        except BaseException:
            export.drop_if_unused()
            raise


def exported_so_far(ctx: TieringContext, table: Table | None) -> ExportedRanges:
    """What ``table`` holds, read without holding it (``status``, a dry run), by the same rule as
    an export (``export.progress``); nothing for a table that does not exist."""
    return exported_progress(table, ctx.metadata)


def dry_run(
    ctx: TieringContext,
    topic: str,
    partitions: Sequence[int | None] = (None,),
    *,
    table: str | None = None,
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
) -> tuple[TableName, list[ExportSegment]]:
    """The table and the segments an export of ``topic`` (of each of ``partitions``; None: every
    partition) would write: reads only, no lease taken, nothing created or migrated."""
    name = table_name(export_config(ctx.config), topic, table)
    done = exported_so_far(ctx, open_table(load_catalog(ctx.config), name, create=False))
    return name, [s for p in partitions for s in plan_export(ctx, topic, p, isolation=isolation, done=done)]


def exported_by_topic(ctx: TieringContext, topics: Iterable[str]) -> dict[str, ExportedRanges]:
    """``status``'s view: per topic with a table, what the table holds (one catalog load and one
    table load per topic, no data read). Empty when no ``export`` section is configured."""
    config = ctx.config
    if config.export is None:
        return {}
    catalog = load_catalog(config)
    found: dict[str, ExportedRanges] = {}
    for topic in sorted(set(topics)):
        try:
            table = open_table(catalog, table_name(config.export, topic), create=False)
            if table is not None:
                found[topic] = exported_so_far(ctx, table)
        except Exception as exc:
            raise ExportError(f"cannot read the export table of {topic}: {one_line(exc)}") from exc
    return found


def exported_offsets(ctx: TieringContext, topic: str) -> dict[int, int]:
    """Per partition of ``topic``, the highest offset its table holds of the newest live topic id
    the metadata store knows (the Tiering page's view); empty without a table."""
    ranges = exported_by_topic(ctx, [topic]).get(topic)
    if ranges is None:
        return {}
    live = newest_topic_ids(ctx.metadata, topic)
    partitions = sorted({p for held in ranges.by_topic_id.values() for p in held})
    found = {p: ranges.up_to(live.get(TopicPartition(topic, p)), p) for p in partitions}
    return {p: offset for p, offset in found.items() if offset is not None}
