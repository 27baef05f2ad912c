"""Erasure by record key in a topic's export tables (``tiering erase``, docs/export.md "Erasure").

Deleting rows is not enough in Iceberg: every older snapshot still names the data files holding
them, time travel reads them back, and the manifests of a delete name the files it removed with
their column bounds (a key's bytes among them). So, for the topic's table (and a typed table's
dead-letter table), under the table's export lease, so that no export of ours commits meanwhile:

1. the last export commit of the table's ancestry is recorded in the metadata store
   (``progress.record_ancestry``), so ``export.progress`` still finds what is exported once the
   snapshots holding it are expired;
2. the data files holding a row of the keys are found over every snapshot of the table: the files
   a scan filtered on the keys plans (metrics pruning), each confirmed by reading its key column,
   one file at a time;
3. the rows are deleted from the main branch (copy-on-write), then one empty commit on top gives
   the table a current snapshot whose manifests name live files only; both carry the export's
   ranges forward (``tiering.exported-by-topic-id``, recorded in the store like an export commit)
   and the erasure id;
4. every other snapshot naming a holding file (in any manifest entry) is expired; one a tag or
   another branch holds cannot be, and is a failure line naming it. When those snapshots lie
   between the last export commit and the current snapshot (another writer's rows of the keys),
   that export commit is expired with them: left alone, hidden from the walk, ``export.progress``
   would read it as rolled back (its record in the store answers once it is expired);
5. the holding files and what only the expired snapshots named (their manifest lists, manifests
   and data files) are deleted through the table's FileIO, never a file a remaining snapshot names.

The files of step 5 are recorded in the audit trail (``metadata/erasures.py``) before the expiry
commit: a run killed after it leaves them named, and the next erasure of the table deletes them
first. Every step finds what is left to do from the table itself, so a rerun converges. pyiceberg
is imported only inside functions, as ``export.table`` does.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tiering_core.engine.lease import HeldTable, held_table
from tiering_core.errors import ExportError, TieringError, one_line
from tiering_core.export.progress import exported_progress, record_ancestry, record_commit
from tiering_core.export.table import (
    EXPORTED_PROPERTY,
    LEASE_PROPERTY,
    TableName,
    export_commit_of,
    load_catalog,
    open_table,
    read_ancestry,
    table_name,
)
from tiering_core.export.typed import dead_letter_table
from tiering_core.metadata.erasures import FINISHED, HELD, TableErasureRecord
from tiering_core.metadata.errors import LeaseHeldError
from tiering_core.runs.erase import ErasureRequest, ErasureResult, TableErasure, run_erase
from tiering_core.runs.errors import ErasureRefusedError

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import Table

    from tiering_core.context import TieringContext
    from tiering_core.metadata.store import RemoteLogMetadataStore, TaskAttempt

log = logging.getLogger(__name__)

#: The snapshot summary key naming the erasure that made the snapshot.
ERASURE_PROPERTY = "tiering.erasure-id"
#: The columns an erasure matches rows by.
KEY_COLUMN = "key"
PARTITION_COLUMN = "partition"


def key_row_filter(request: ErasureRequest) -> BooleanExpression:
    """The rows of the request's keys (of its partitions only, when it names some)."""
    from pyiceberg.expressions import And, In

    member: Any = In  # built as In(term, literals); its pydantic fields read otherwise to mypy
    keys = member(KEY_COLUMN, set(request.keys))
    return And(keys, member(PARTITION_COLUMN, set(request.partitions))) if request.partitions else keys


@dataclass(frozen=True)
class Holding:
    """The data files of a table holding rows of the keys (path -> rows), and the rows of them its
    current snapshot holds (what the delete removes)."""

    files: dict[str, int]
    current_rows: int


#: The remote tier's part of an erasure: ``runs.erase.run_erase`` in this process, or a run that
#: hands the partitions to other workers (the Spark app ``erase_keys``) with the same result.
TierErasure = Callable[..., ErasureResult]


def erase_topic(
    ctx: TieringContext,
    request: ErasureRequest,
    *,
    dry_run: bool = False,
    attempt: TaskAttempt | None = None,
    erase_tier: TierErasure = run_erase,
) -> ErasureResult:
    """Erase ``request``'s keys from the topic's remote tier (``erase_tier(ctx, request, dry_run=,
    attempt=)``), then from its export tables on this process; a table that fails is one line in
    ``failures``, as a partition is, and so is each snapshot a tag or a branch keeps holding the keys."""
    try:
        result = erase_tier(ctx, request, dry_run=dry_run, attempt=attempt)
    except ErasureRefusedError:  # the tier holds nothing of the topic (removed, or retention deleted it all)
        if request.partitions or not _has_table(ctx, request.topic):
            raise
        result = ErasureResult(request.erasure_id, request.key_sha256, dry_run=dry_run)
    try:
        result.tables = erase_topic_tables(ctx, request, dry_run=dry_run, attempt=attempt)
    except TieringError as exc:
        result.failures.append(f"export table of {request.topic}: {exc}")
    if not dry_run:
        result.failures.extend(f"{t.table}: {line}" for t in result.tables for line in t.held)
    return result


def _has_table(ctx: TieringContext, topic: str) -> bool:
    config = ctx.config.export
    if config is None:
        return False
    with _named(table_name(config, topic)):
        return open_table(load_catalog(ctx.config), table_name(config, topic), create=False) is not None


def erase_topic_tables(
    ctx: TieringContext, erasure: ErasureRequest, *, dry_run: bool = False, attempt: TaskAttempt | None = None
) -> list[TableErasure]:
    """Erase the keys from ``erasure.topic``'s export table (and a typed table's dead letters), by
    the module docstring; nothing without an ``export`` section, one skipped result without a table."""
    config = ctx.config.export
    if config is None:
        return []
    name = table_name(config, erasure.topic)
    catalog = load_catalog(ctx.config)
    table = open_table(catalog, name, create=False)
    if table is None:
        return [TableErasure(str(name), skipped="the topic has no export table", dry_run=dry_run)]
    tables = [(name, table)]
    if config.topic(erasure.topic).typed:
        dead = open_table(catalog, dead_letter_table(name), create=False)
        if dead is not None:
            tables.append((dead_letter_table(name), dead))
    with _named(name):
        if dry_run:
            return [plan_table_erasure(str(n), t, erasure) for n, t in tables]
        with _held(ctx, config.catalog_name, name, erasure.erasure_id, attempt) as held:
            for _name, t in tables:
                record_ancestry(ctx.metadata, held.lease, t)
            return [erase_table(ctx, str(n), t, erasure, held) for n, t in tables]


@contextmanager
def _named(name: TableName) -> Iterator[None]:
    """pyiceberg's and the warehouse's errors, of many kinds, as one ``ExportError`` line naming the table."""
    try:
        yield
    except TieringError:
        raise
    except Exception as exc:
        raise ExportError(f"erase from {name}: {one_line(exc)}") from exc


@contextmanager
def _held(
    ctx: TieringContext, catalog: str, name: TableName, erasure_id: str, attempt: TaskAttempt | None
) -> Iterator[HeldTable]:
    """The table's export lease (a typed table's lease holds its dead letters too)."""
    with ExitStack() as stack:
        try:
            held = stack.enter_context(
                held_table(
                    ctx.metadata, catalog, str(name), holder=f"erase:{erasure_id}", run_id=erasure_id, attempt=attempt
                )
            )
        except LeaseHeldError as exc:
            raise ExportError(
                f"erase from {name}: an export holds the table, try again later: {one_line(exc)}"
            ) from exc
        yield held


def find_holding(table: Table, row_filter: BooleanExpression) -> Holding:
    """The files holding rows matching ``row_filter`` over every snapshot of ``table``: the union
    of what a filtered scan of each snapshot plans, each candidate read (its key and partition
    columns only, one file at a time, deletes not applied: the bytes are what counts)."""
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.table import FileScanTask

    candidates: dict[str, Any] = {}
    current = table.current_snapshot()
    in_current: set[str] = set()
    for snapshot in table.snapshots():
        for task in table.scan(snapshot_id=snapshot.snapshot_id, row_filter=row_filter).plan_files():
            candidates.setdefault(task.file.file_path, task.file)
            if current is not None and snapshot.snapshot_id == current.snapshot_id:
                in_current.add(task.file.file_path)
    projected = table.schema().select(KEY_COLUMN, PARTITION_COLUMN)
    files: dict[str, int] = {}
    for path, data_file in candidates.items():
        scan = ArrowScan(table.metadata, table.io, projected, row_filter)
        rows = scan.to_table([FileScanTask(data_file)]).num_rows
        if rows:
            files[path] = rows
    return Holding(files, sum(n for path, n in files.items() if path in in_current))


class References:
    """What each snapshot names (its manifest list, manifests, and the files of every manifest
    entry, deleted ones too), each manifest read once."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self._entries: dict[str, frozenset[str]] = {}

    def of(self, snapshot: Any) -> set[str]:
        io = self.table.io
        found = {snapshot.manifest_list}
        for manifest in snapshot.manifests(io):
            found.add(manifest.manifest_path)
            entries = self._entries.get(manifest.manifest_path)
            if entries is None:
                listed = manifest.fetch_manifest_entry(io, discard_deleted=False)
                entries = self._entries[manifest.manifest_path] = frozenset(e.data_file.file_path for e in listed)
            found |= entries
        return found

    def of_all(self, snapshots: Iterable[Any]) -> set[str]:
        found: set[str] = set()
        for snapshot in snapshots:
            found |= self.of(snapshot)
        return found


def snapshots_holding(
    table: Table, holding: Iterable[str], references: References, *, replaced: int | None = None
) -> tuple[list[int], list[str]]:
    """The snapshots naming a holding file that can be expired, and a failure line for each one a
    tag or a branch holds (the current snapshot among them when it still names one; ``replaced``:
    the one the erasure's own commit is to replace, counted as expired)."""
    from pyiceberg.table.refs import MAIN_BRANCH

    wanted = set(holding)
    refs: dict[int, list[tuple[str, str]]] = {}
    for name, ref in table.metadata.refs.items():
        refs.setdefault(ref.snapshot_id, []).append((str(ref.snapshot_ref_type), name))
    expire: list[int] = []
    held: list[str] = []
    for snapshot in table.snapshots():
        if not references.of(snapshot) & wanted:
            continue
        holders = [] if snapshot.snapshot_id == replaced else refs.get(snapshot.snapshot_id, [])
        if not holders:
            expire.append(snapshot.snapshot_id)
        for kind, name in holders:
            if name == MAIN_BRANCH:
                held.append(
                    f"snapshot {snapshot.snapshot_id}, the table's current one, still names a data file holding rows "
                    "of the erased keys"
                )
            else:
                held.append(
                    f"snapshot {snapshot.snapshot_id} is held by {kind} {name} and still holds rows of the erased "
                    f"keys: drop the {kind} and run erase again"
                )
    return expire, held


def plan_table_erasure(name: str, table: Table, erasure: ErasureRequest) -> TableErasure:
    """What ``erase_table`` would do, read without the lease: writes nothing. The current snapshot
    counts among those expired when it names a holding file (the erasure's own commit replaces it)."""
    holding = find_holding(table, key_row_filter(erasure))
    out = TableErasure(name, str(table.metadata.table_uuid), dry_run=True)
    out.rows_deleted, out.data_files_deleted = holding.current_rows, len(holding.files)
    if holding.files:
        current = table.current_snapshot()
        replaced = None if current is None else current.snapshot_id
        expire, out.held = snapshots_holding(table, holding.files, References(table), replaced=replaced)
        if replaced not in expire:  # no commit of the erasure's own to carry the ranges forward
            expire = keep_progress(table, expire)
        out.snapshots_expired = len(expire)
    return out


def erase_table(ctx: TieringContext, name: str, table: Table, erasure: ErasureRequest, held: HeldTable) -> TableErasure:
    """Erase the keys from ``table`` holding its export lease (module docstring, steps 2 to 5)."""
    store = ctx.metadata
    table_uuid = str(table.metadata.table_uuid)
    finish_killed(store, table, table_uuid)
    holding = find_holding(table, key_row_filter(erasure))
    record = TableErasureRecord(erasure.erasure_id, erasure.topic, name, table_uuid, _now_ms())
    out = TableErasure(name, table_uuid)
    if holding.files:
        store.record_table_erasure(record)
        out.rows_deleted = delete_rows(store, table, erasure, holding, held)
        record = replace(record, rows_deleted=out.rows_deleted)
        store.record_table_erasure(record)
        references = References(table)
        expire, out.held = snapshots_holding(table, holding.files, references)
        expire = keep_progress(table, expire)
        kept = references.of_all(s for s in table.snapshots() if s.snapshot_id not in set(expire))
        doomed = set(holding.files) | references.of_all(table.metadata.snapshot_by_id(i) for i in expire)
        record = replace(record, pending=tuple(sorted(doomed - kept)))
        store.record_table_erasure(record)  # before the expiry: a kill after it leaves them named
        if expire:
            held.require()  # an erasure that lost the table expires nothing
            table.maintenance.expire_snapshots().by_ids(expire).commit()
        out.snapshots_expired = len(expire)
        deleted = delete_unreferenced(table, record.pending)
        out.data_files_deleted = len(set(deleted) & set(holding.files))
        record = replace(record, snapshots_expired=out.snapshots_expired, data_files_deleted=out.data_files_deleted)
    outcome = HELD if out.held else FINISHED
    store.record_table_erasure(replace(record, pending=(), outcome=outcome, finished_ms=_now_ms()))
    log.info(
        "%s: erasure %s deleted %d row(s) and %d data file(s), expired %d snapshot(s)",
        name,
        erasure.erasure_id,
        out.rows_deleted,
        out.data_files_deleted,
        out.snapshots_expired,
    )
    return out


def delete_rows(
    store: RemoteLogMetadataStore, table: Table, erasure: ErasureRequest, holding: Holding, held: HeldTable
) -> int:
    """Delete the request's rows from the main branch, then, while the current snapshot still
    names a holding file (a delete's manifests name the files it removed, with their bounds),
    commit an empty snapshot on top whose manifests name live files only; both carry the export's
    ranges forward, and the last is recorded in the store as an export commit. The rows deleted."""
    before = table.current_snapshot()
    ranges = exported_progress(table, store)
    properties = {ERASURE_PROPERTY: erasure.erasure_id, LEASE_PROPERTY: str(held.require().token)}
    if ranges.by_topic_id:
        properties[EXPORTED_PROPERTY] = ranges.to_json()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "did not match any records": a rerun's rows are gone
        table.delete(key_row_filter(erasure), snapshot_properties=properties)
    table.refresh()
    current = table.current_snapshot()
    if current is None or not References(table).of(current) & set(holding.files):
        return _total_records(before) - _total_records(current)
    held.require()
    with table.transaction() as tx, tx.update_snapshot(snapshot_properties=properties).fast_append():
        pass
    table.refresh()
    head = table.current_snapshot()
    if ranges.by_topic_id and head is not None:
        record_commit(store, held.lease, export_commit_of(table, head, ranges))
    return _total_records(before) - _total_records(head)


def _total_records(snapshot: Any) -> int:
    summary = snapshot.summary.additional_properties if snapshot is not None and snapshot.summary is not None else {}
    return int(summary.get("total-records", 0))


def keep_progress(table: Table, expire: list[int]) -> list[int]:
    """``expire`` with the last export commit of the current ancestry added when an expired
    snapshot would hide it from the walk while it stays in the table (``export.progress`` would
    then read it as no longer an ancestor): expired, the store's record of it answers."""
    from pyiceberg.table.snapshots import ancestors_of

    last = read_ancestry(table).commit
    if last is None or last.snapshot_id in expire:
        return expire
    protected = {ref.snapshot_id for ref in table.metadata.refs.values()}
    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        if snapshot.snapshot_id == last.snapshot_id:
            return expire
        if snapshot.snapshot_id in expire:
            return expire if last.snapshot_id in protected else [*expire, last.snapshot_id]
    return expire


def delete_unreferenced(table: Table, paths: Iterable[str]) -> list[str]:
    """Delete each of ``paths`` that no snapshot of the table (read now) names; the paths gone
    (deleted now, or before: a rerun's)."""
    table.refresh()
    named = References(table).of_all(table.snapshots())
    gone = []
    for path in paths:
        if path in named:
            continue
        try:
            table.io.delete(path)
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise ExportError(f"cannot delete {path}: {one_line(exc)}") from exc
        gone.append(path)
    return gone


def finish_killed(store: RemoteLogMetadataStore, table: Table, table_uuid: str) -> None:
    """Delete the files an erasure of this table killed after its expiry left named, those no
    snapshot names (the rest: this erasure finds them again), and clear them from its row."""
    for record in store.table_erasures(table_uuid=table_uuid):
        if record.pending and record.outcome not in (FINISHED, HELD):
            delete_unreferenced(table, record.pending)
            store.record_table_erasure(replace(record, pending=()))


def _now_ms() -> int:
    return int(time.time() * 1000)
