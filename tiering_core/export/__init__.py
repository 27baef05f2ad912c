"""The tiered log as Apache Iceberg tables, exactly once.

A topic's COPY_SEGMENT_FINISHED, in-lineage remote segments are decoded (at read_committed by
default, as a consumer would read them) into Parquet data files and appended to the table
``<namespace>.<topic>``, partitioned by identity(partition) and day(timestamp), sorted by
offset. Each commit is one snapshot whose summary names its segments and carries the exported
offset ranges forward, so what is exported is read from the table itself, atomically with the
data: a rerun after a kill exports each offset once, and an up-to-date export commits nothing.
A segment later deleted by retention stays in the table (the table is the long-term copy).

The steps are pure and run anywhere (a Spark app's executors write, its driver commits):
``plan_export`` -> ``start_attempt`` -> ``write_segment_files`` per segment ->
``commit_segments`` -> ``end_attempt``; ``clean_abandoned_attempts`` first removes the data
files of attempts that never committed. pyiceberg is imported only when a table is used.
"""

from tiering_core.errors import ExportError
from tiering_core.export.commit import CommitResult, commit_segments
from tiering_core.export.plan import ExportSegment, newest_copies, plan_export
from tiering_core.export.run import ExportResult, run_export
from tiering_core.export.table import (
    DATA_SCHEMA,
    ExportedSegment,
    TableName,
    catalog_properties,
    exported_offsets,
    exported_ranges,
    exported_segments,
    exported_up_to,
    iceberg_schema,
    load_catalog,
    open_table,
    table_name,
)
from tiering_core.export.write import (
    ExportAttempt,
    SegmentExportError,
    clean_abandoned_attempts,
    end_attempt,
    start_attempt,
    write_segment_files,
)

__all__ = [
    "DATA_SCHEMA",
    "CommitResult",
    "ExportAttempt",
    "ExportError",
    "ExportResult",
    "ExportSegment",
    "ExportedSegment",
    "SegmentExportError",
    "TableName",
    "catalog_properties",
    "clean_abandoned_attempts",
    "commit_segments",
    "end_attempt",
    "exported_offsets",
    "exported_ranges",
    "exported_segments",
    "exported_up_to",
    "iceberg_schema",
    "load_catalog",
    "newest_copies",
    "open_table",
    "plan_export",
    "run_export",
    "start_attempt",
    "table_name",
    "write_segment_files",
]
