"""What a table holds from the export: its own marks first, then the metadata store's record of
the export commits it landed, for when snapshot expiry removed every export commit from the table.

The rule (docs/export.md, "Exactly once"), one home, called by ``export.session`` only:

1. Walk back from the current snapshot (``table.read_ancestry``). An export commit found there is
   the answer: a snapshot of another writer after it changes nothing of it.
2. A table with no current snapshot holds nothing.
3. Otherwise the walk ended at the oldest snapshot still reached. The export commit that may lie
   beyond it is the store's record, for this table's UUID (a table dropped and made again under
   its name is another table), of the snapshot that end names as its parent when that is one, else
   of the newest commit placed before the end in the table's history (a commit placed after it is
   not an ancestor: it would have been reached). With no such record (a table the platform never
   exported to, or created or replaced outside it) the table holds nothing from the export.
4. A recorded commit still in the table's snapshots was not reached, so it is no longer an
   ancestor (a rollback to an earlier snapshot, or a table replaced in place): its data is gone
   from the table, and the ancestry is right (nothing). A recorded commit no longer in the table
   was expired: expiry never removes live data files, so its ranges stand (rows another writer
   deleted were deleted on purpose and are not exported again).

A commit is recorded after the catalog confirmed it, under the table's export lease
(``record_commit``), and an export taking a table first records the last export commit of its
ancestry if the store lacks it (``record_ancestry``: an export killed between its commit and the
record, or a table exported before commits were recorded).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiering_core.errors import ExportError, one_line
from tiering_core.export.table import (
    ExportedRanges,
    export_commit_of,
    read_ancestry,
    snapshot_position,
    store_topic_ids,
)

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from tiering_core.metadata.store import ExportCommit, RemoteLogMetadataStore, TableLease


def exported_progress(table: Table | None, store: RemoteLogMetadataStore) -> ExportedRanges:
    """What ``table`` holds from the export, by the rule of the module docstring."""
    if table is None:
        return ExportedRanges()
    ancestry = read_ancestry(table, store_topic_ids(store))
    if ancestry.commit is not None or ancestry.end is None:
        return ancestry.ranges
    table_uuid = str(table.metadata.table_uuid)
    parent = ancestry.end.parent_snapshot_id
    record = store.export_commit(table_uuid, parent) if parent is not None else None
    if record is None:
        record = store.latest_export_commit(table_uuid, before=snapshot_position(ancestry.end))
    if record is None or table.metadata.snapshot_by_id(record.snapshot_id) is not None:
        return ancestry.ranges
    try:
        return ExportedRanges.from_json(record.exported)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ExportError(
            f"the metadata store's record of export commit {record.snapshot_id} to the table "
            f"{'.'.join(table.name())} (UUID {table_uuid}) cannot be read: {one_line(exc)}"
        ) from exc


def record_commit(store: RemoteLogMetadataStore, lease: TableLease, commit: ExportCommit) -> bool:
    """Record a confirmed export commit under the table's export lease (``FencedError`` once the
    export lost it); False when it was recorded already."""
    return store.record_export_commit(lease, commit)


def record_ancestry(store: RemoteLogMetadataStore, lease: TableLease, table: Table) -> ExportCommit | None:
    """Record the last export commit of the table's ancestry if the store lacks it; the commit
    recorded, or None when there was none to record."""
    ancestry = read_ancestry(table, store_topic_ids(store))
    if ancestry.commit is None:
        return None
    commit = export_commit_of(table, ancestry.commit, ancestry.ranges)
    if store.export_commit(commit.table_uuid, commit.snapshot_id) is not None:
        return None
    return commit if record_commit(store, lease, commit) else None
