"""A typed table's export (``export.typed``): its dead-letter table beside it, under the one lease.

The dead-letter table ``<table>_dead_letters`` is held by the main table's export lease (nothing
else writes it for the export), opened (created on first use) with it, and follows the same rules:
its commits carry the same marks (``tiering.segments``, ``tiering.exported-by-topic-id``, the
lease token), recorded in the metadata store, read back by ``export.progress``'s rule; its own
attempts are cleaned up as the table's are. The dead letters of a batch of segments are committed
*before* the table's commit of the same segments: a rerun after a kill between the two finds the
segments held by the dead-letter table and commits their dead letters no second time, then
commits their rows to the table. The table's commit evolves its columns in the same atomic commit
(``evolve``): the value schema ids its files need, merged after those the table holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from tiering_core.config.export_topics import BYTES
from tiering_core.errors import ExportError, one_line
from tiering_core.export.commit import CommitResult, commit_segments
from tiering_core.export.plan import ExportSegment
from tiering_core.export.progress import exported_progress, record_ancestry, record_commit
from tiering_core.export.registry import RegistryEndpoint
from tiering_core.export.table import ExportedRanges, TableName, open_table
from tiering_core.export.typed import (
    DEAD_LETTER_SCHEMA,
    KEY_SCHEMA_IDS_PROPERTY,
    SCHEMA_ID_COLUMN,
    SubjectStrategy,
    TypedColumns,
    dead_letter_table,
    schema_ids_of,
    typed_columns,
    typed_schema,
)
from tiering_core.export.typed_write import TypedWrite
from tiering_core.export.write import (
    ExportAttempt,
    clean_abandoned_attempts,
    current_snapshot_id,
    delete_files,
    finish_attempt,
    start_attempt,
)

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from tiering_core.config import PlatformConfig
    from tiering_core.engine.lease import HeldTable
    from tiering_core.metadata.store import RemoteLogMetadataStore

log = logging.getLogger(__name__)


def registry_endpoint(config: PlatformConfig) -> RegistryEndpoint:
    """The export's registry, its password read now (a ``ConfigError`` naming where it is)."""
    registry = config.export.schema_registry if config.export is not None else None
    if registry is None:
        raise ExportError("no export.schema_registry in the config: a typed topic needs one")
    return RegistryEndpoint(registry.url, registry.username, registry.password())


def open_typed_table(catalog: Catalog, name: TableName, *, create: bool, value_typed: bool = True) -> Table | None:
    """A typed table (created with the Kafka columns; the value's and the key's are added by the
    first commit, with its rows); a table that holds the value as bytes is refused when the value
    is decoded (``value_typed``)."""
    table = open_table(catalog, name, create=create, columns=typed_schema(pa.struct([]) if value_typed else None))
    if table is not None and value_typed:
        names = {f.name for f in table.schema().fields}
        if SCHEMA_ID_COLUMN not in names and "value" in names:  # a table of bytes (a typed one has it from the start)
            raise ExportError(
                f"the table {name} holds the value as bytes: a typed export needs a table of its own "
                "(export.topics.<topic>.table)"
            )
    return table


@dataclass
class DeadLetters:
    """The dead-letter table of a typed export, held under the main table's lease (``held``)."""

    store: RemoteLogMetadataStore
    name: TableName
    table: Table
    held: HeldTable
    since: int | None
    endpoint: RegistryEndpoint
    value_format: str
    key_format: str = BYTES
    subjects: SubjectStrategy | None = None
    created: bool = False
    messages: tuple[str | None, str | None] = (None, None)
    attempts: list[ExportAttempt] = field(default_factory=list)

    @classmethod
    def open(
        cls,
        store: RemoteLogMetadataStore,
        catalog: Catalog,
        name: TableName,
        held: HeldTable,
        endpoint: RegistryEndpoint,
        value_format: str,
        key_format: str = BYTES,
        subjects: SubjectStrategy | None = None,
        messages: tuple[str | None, str | None] = (None, None),
    ) -> DeadLetters:
        dead = dead_letter_table(name)
        existing = open_table(catalog, dead, create=False)
        table = existing if existing is not None else open_table(catalog, dead, columns=DEAD_LETTER_SCHEMA)
        assert table is not None
        since = current_snapshot_id(table)
        created = existing is None
        letters = cls(
            store, dead, table, held, since, endpoint, value_format, key_format, subjects, created, messages=messages
        )
        record_ancestry(store, held.lease, table)
        return letters

    def exported(self, table: Table) -> ExportedRanges:
        return exported_progress(table, self.store)

    def start(self, main: Table) -> TypedWrite:
        """The picklable part of a typed segment's task: the registry, the main table's value
        schema ids as now, and a new attempt of the dead-letter table."""
        attempt = start_attempt(self.table, self.held.lease)
        self.attempts.append(attempt)
        main.refresh()
        key_ids = schema_ids_of(main.properties, KEY_SCHEMA_IDS_PROPERTY)
        value_ids = schema_ids_of(main.properties)
        formats = (self.value_format, self.key_format)
        return TypedWrite(self.endpoint, value_ids, attempt, *formats, key_ids, self.subjects, self.messages)

    def commit(self, attempt: ExportAttempt, written: Sequence[tuple[ExportSegment, Sequence[str]]]) -> CommitResult:
        """The dead letters of ``written`` in one snapshot (those the table holds already, from
        a killed export's commit, are deleted, not committed again), recorded in the store."""
        result = commit_segments(self.table, written, progress=self.exported, held=self.held)
        if result.already_exported:
            fs, _root = attempt.filesystem()
            skipped = {id(s) for s in result.already_exported}
            delete_files(fs, [attempt.filesystem(f)[1] for s, files in written if id(s) in skipped for f in files])
        if result.record is not None:
            record_commit(self.store, self.held.lease, result.record)
        return result

    def widened(
        self, table: Table, schema_ids: Sequence[tuple[int, ...]], key_schema_ids: Sequence[tuple[int, ...]] = ()
    ) -> TypedColumns | None:
        """The table's columns with the value and key schema ids its files need (each segment's,
        in plan order) merged after its own; None when it holds them all. A ``SchemaChangeError``
        when they cannot merge: checked before either table's commit, so nothing of it lands."""
        held = schema_ids_of(table.properties)
        held_keys = schema_ids_of(table.properties, KEY_SCHEMA_IDS_PROPERTY)
        wanted, wanted_keys = _wanted(held, schema_ids), _wanted(held_keys, key_schema_ids)
        if (wanted, wanted_keys) == (held, held_keys):
            return None
        formats = (self.value_format, self.key_format)
        return typed_columns(self.endpoint, formats, wanted, wanted_keys, self.subjects, self.messages)[2]

    def evolver(
        self, schema_ids: Sequence[tuple[int, ...]], key_schema_ids: Sequence[tuple[int, ...]] = ()
    ) -> Callable[[Any, Table], None]:
        """The table commit's ``evolve``: its columns widened (``widened``) in the same commit."""

        def evolve(tx: Any, table: Table) -> None:
            columns = self.widened(table, schema_ids, key_schema_ids)
            if columns is None:
                return
            with tx.update_schema() as update:
                update.union_by_name(columns.schema)
            tx.set_properties(columns.properties())

        return evolve

    def finish(self, lease_token: int) -> list[str]:
        deleted: list[str] = []
        for attempt in self.attempts:
            deleted += finish_attempt(self.table, attempt)
        return deleted + clean_abandoned_attempts(self.table, lease_token, self.since)

    def abandon(self) -> None:
        for attempt in self.attempts:
            try:
                finish_attempt(self.table, attempt)
            except Exception as exc:  # a later export removes them once the table moves on
                log.warning("%s: could not remove the files of attempt %s: %s", self.name, attempt.attempt_id, exc)

    def drop_if_unused(self) -> None:
        if not self.created:
            return
        self.abandon()
        try:
            self.table.refresh()
            if not self.table.metadata.snapshots:
                self.table.catalog.purge_table(self.name.identifier)
                self.attempts = []  # purged with the table
        except Exception as exc:  # the failure that brought us here is the one to report
            log.warning("%s: could not drop the table this failed export created: %s", self.name, one_line(exc))


def _wanted(held: tuple[int, ...], needed: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    wanted = list(held)
    for ids in needed:
        wanted.extend(i for i in ids if i not in wanted)
    return tuple(wanted)
