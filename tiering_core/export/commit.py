"""The commit of exported segments: one Iceberg append (one snapshot) for several segments'
data files, whose summary names the segments and carries the exported offset ranges forward
(``tiering_core.export.table``). The table is the record: a commit that fails leaves nothing,
and a segment the table holds by the time of the commit (another export was faster) is left out.
What the table holds is the caller's rule (``progress``: ``export.session`` passes the one of
``export.progress``), read anew for each try.

What the summary carries is computed from the snapshot the commit is based on, so the commit must
land on that snapshot or not at all: pyiceberg would retry a conflicting commit by itself on the
newer snapshot with the summary computed before (a range of another commit lost, or the same
segment committed twice), so its retries are off for this commit, and a conflict is met here by
reading the table again, leaving out what it now holds and committing anew. Just before each try
the export's table lease is renewed (``HeldTable.renew``): an export that lost it commits nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tiering_core.errors import ExportError, one_line
from tiering_core.export.plan import ExportSegment
from tiering_core.export.table import (
    EXPORTED_PROPERTY,
    ISOLATION_PROPERTY,
    LEASE_PROPERTY,
    SEGMENTS_PROPERTY,
    TOPIC_PROPERTY,
    ExportedRanges,
    ExportedSegment,
    export_commit_of,
)

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from tiering_core.engine.lease import HeldTable
    from tiering_core.metadata.store import ExportCommit

log = logging.getLogger(__name__)

#: Conflicting commits met in a row before the export gives up (each one read the table anew).
MAX_CONFLICTS = 20


class TableLeaseLostError(ExportError):
    """The export no longer holds its table's lease (a newer export took it, or it expired while
    the process stalled): it commits nothing more."""


@dataclass(frozen=True)
class CommitResult:
    """What one commit did: the snapshot (None: nothing to commit), the segments it holds, those
    left out because the table already held them (their files are the caller's to delete), and
    the commit as the metadata store records it (``record``, None when nothing was committed)."""

    snapshot_id: int | None
    committed: list[ExportSegment] = field(default_factory=list)
    already_exported: list[ExportSegment] = field(default_factory=list)
    record: ExportCommit | None = None


def _without_retries(table: Table) -> Table:
    """The table as pyiceberg sees it, but committing without retries of its own: the retry
    setting is changed in this process's copy of the metadata only, never in the catalog (other
    writers of the table keep theirs)."""
    from pyiceberg.table import Table as IcebergTable
    from pyiceberg.table import TableProperties

    properties = {**table.metadata.properties, TableProperties.COMMIT_NUM_RETRIES: "0"}
    metadata = table.metadata.model_copy(update={"properties": properties})
    return IcebergTable(table.name(), metadata, table.metadata_location, table.io, table.catalog, table.config)


def commit_segments(
    table: Table,
    files_by_segment: Sequence[tuple[ExportSegment, Sequence[str]]],
    *,
    progress: Callable[[Table], ExportedRanges],
    held: HeldTable | None = None,
    evolve: Callable[[Any, Table], None] | None = None,
) -> CommitResult:
    """Append the segments' data files to ``table`` in one snapshot (a segment with no rows at
    its isolation level is recorded all the same, so it is not exported again). ``progress``:
    what a table holds, read after each refresh; ``held``: the export's table lease, renewed
    before each try (an ``ExportError`` once lost); ``evolve``: called with the commit's transaction
    and the table as read for it, before the files are added (a schema change in the same commit)."""
    from pyiceberg.exceptions import CommitFailedException

    name = ".".join(table.name())
    for _try in range(MAX_CONFLICTS + 1):
        table.refresh()
        done = progress(table)
        fresh = [
            (s, files)
            for s, files in files_by_segment
            if not done.holds(s.segment.topic_id_partition, s.first_offset, s.end_offset)
        ]
        skipped = [s for s, _files in files_by_segment if all(s is not f for f, _ in fresh)]
        if not fresh:
            return CommitResult(None, [], skipped)
        segments = [
            ExportedSegment(s.topic_id, s.partition, s.segment_id, s.first_offset, s.end_offset) for s, _ in fresh
        ]
        exported = done.with_segments(segments)
        properties = {
            SEGMENTS_PROPERTY: ExportedSegment.list_json(segments),
            EXPORTED_PROPERTY: exported.to_json(),
            TOPIC_PROPERTY: ",".join(sorted({s.topic_partition.topic for s, _ in fresh})),
            ISOLATION_PROPERTY: ",".join(sorted({str(s.isolation) for s, _ in fresh})),
        }
        if held is not None:
            if not held.renew():
                raise TableLeaseLostError(f"commit to {name}: the export no longer holds the table: {held.lost}")
            properties[LEASE_PROPERTY] = str(held.lease.token)
        paths = [path for _s, files in fresh for path in files]
        try:
            tx = _without_retries(table).transaction()
            if evolve is not None:
                evolve(tx, table)
            tx.add_files(paths, snapshot_properties=properties)
            committed = tx.commit_transaction()
        except CommitFailedException as exc:  # another commit landed first: nothing of this one did
            log.info("%s: commit conflicted (%s); reading the table again", name, one_line(exc))
            continue
        except ExportError:  # evolve's: nothing was committed
            raise
        except Exception as exc:  # the catalog gone, an answer lost: the outcome is not known
            raise ExportError(f"commit to {name} failed: {one_line(exc)}") from exc
        table.refresh()
        snapshot = committed.current_snapshot()  # this commit's, as the catalog confirmed it
        if snapshot is None:
            return CommitResult(None, [s for s, _ in fresh], skipped)
        record = export_commit_of(committed, snapshot, exported)
        return CommitResult(snapshot.snapshot_id, [s for s, _ in fresh], skipped, record)
    raise ExportError(f"commit to {name}: {MAX_CONFLICTS + 1} commits in a row conflicted with other writers")
