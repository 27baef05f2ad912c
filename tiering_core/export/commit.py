"""The commit of exported segments: one Iceberg append (one snapshot) for several segments'
data files, whose summary names the segments and carries the exported offset ranges forward
(``tiering_core.export.table``). The table is the record: a commit that fails leaves nothing,
and a segment the table holds by the time of the commit (another export was faster) is left out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tiering_core.errors import ExportError, one_line
from tiering_core.export.plan import ExportSegment
from tiering_core.export.table import (
    EXPORTED_PROPERTY,
    ISOLATION_PROPERTY,
    SEGMENTS_PROPERTY,
    TOPIC_PROPERTY,
    ExportedSegment,
    exported_ranges,
    is_exported,
    ranges_json,
    with_segments,
)

if TYPE_CHECKING:
    from pyiceberg.table import Table


@dataclass(frozen=True)
class CommitResult:
    """What one commit did: the snapshot (None: nothing to commit), the segments it holds, and
    those left out because the table already held them (their files are the caller's to delete)."""

    snapshot_id: int | None
    committed: list[ExportSegment] = field(default_factory=list)
    already_exported: list[ExportSegment] = field(default_factory=list)


def commit_segments(table: Table, files_by_segment: Sequence[tuple[ExportSegment, Sequence[str]]]) -> CommitResult:
    """Append the segments' data files to ``table`` in one snapshot (a segment with no rows at
    its isolation level is recorded all the same, so it is not exported again)."""
    table.refresh()
    done = exported_ranges(table)
    fresh = [
        (s, files) for s, files in files_by_segment if not is_exported(done, s.partition, s.start_offset, s.end_offset)
    ]
    skipped = [s for s, _files in files_by_segment if all(s is not f for f, _ in fresh)]
    if not fresh:
        return CommitResult(None, [], skipped)
    segments = [ExportedSegment(s.partition, s.segment_id, s.start_offset, s.end_offset) for s, _ in fresh]
    topics = sorted({s.topic_partition.topic for s, _ in fresh})
    properties = {
        SEGMENTS_PROPERTY: json.dumps([s.to_dict() for s in segments], separators=(",", ":")),
        EXPORTED_PROPERTY: ranges_json(with_segments(done, segments)),
        TOPIC_PROPERTY: ",".join(topics),
        ISOLATION_PROPERTY: ",".join(sorted({str(s.isolation) for s, _ in fresh})),
    }
    paths = [path for _s, files in fresh for path in files]
    try:
        with table.transaction() as tx:
            tx.add_files(paths, snapshot_properties=properties)
    except Exception as exc:  # a conflict, the catalog gone: nothing is committed
        raise ExportError(f"commit to {'.'.join(table.name())} failed: {one_line(exc)}") from exc
    snapshot = table.current_snapshot()
    return CommitResult(snapshot.snapshot_id if snapshot is not None else None, [s for s, _ in fresh], skipped)
