"""The tiered log as Apache Iceberg tables, exactly once.

A topic's COPY_SEGMENT_FINISHED, in-lineage remote segments are decoded (at read_committed by
default, as a consumer would read them) into Parquet data files and appended to the table
``<namespace>.<topic>``, partitioned by identity(partition) and day(timestamp), sorted by
offset. Each commit is one snapshot whose summary names its segments and carries the exported
offset ranges forward per topic id, so what is exported is read from the table itself (the last
export commit in the current snapshot's ancestry), atomically with the data: a rerun after a kill
exports each offset once, another writer of the table (a delete, a compaction) changes nothing of
it, and an up-to-date export commits nothing. Each confirmed commit is also recorded in the
metadata store, read when snapshot expiry removed every export commit from the ancestry
(``progress``). A segment later deleted by retention stays in the
table (the table is the long-term copy).

One export of a table runs at a time: it holds the table's export lease in the metadata store
(``session.exporting``), and every runner (``tiering export``, the Spark app) goes through the
``TableExport`` it yields. The steps are pure and run anywhere (a Spark app's executors write,
its driver commits): ``TableExport.plan`` -> ``start_attempt`` -> ``write_segment_files`` per
segment -> ``commit`` -> ``finish``, driven once for every runner by ``run_export`` on an
``Executor``. pyiceberg is imported only when a table is used.
"""

from tiering_core.errors import ExportError
from tiering_core.export.commit import CommitResult, TableLeaseLostError, commit_segments
from tiering_core.export.plan import ExportSegment, newest_copies, plan_export
from tiering_core.export.run import ExportResult, export_partitions, export_topic, run_export
from tiering_core.export.schema import iceberg_schema
from tiering_core.export.session import (
    TableBusyError,
    TableExport,
    dry_run,
    exported_by_topic,
    exported_offsets,
    exported_so_far,
    exporting,
)
from tiering_core.export.table import (
    DATA_SCHEMA,
    ExportedRanges,
    ExportedSegment,
    TableName,
    catalog_properties,
    exported_ranges,
    exported_segments,
    load_catalog,
    migrate_table,
    open_table,
    store_topic_ids,
    table_name,
)
from tiering_core.export.write import (
    ExportAttempt,
    SegmentExportError,
    clean_abandoned_attempts,
    end_attempt,
    finish_attempt,
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
    "ExportedRanges",
    "ExportedSegment",
    "SegmentExportError",
    "TableBusyError",
    "TableExport",
    "TableLeaseLostError",
    "TableName",
    "catalog_properties",
    "clean_abandoned_attempts",
    "commit_segments",
    "dry_run",
    "end_attempt",
    "export_partitions",
    "export_topic",
    "exported_by_topic",
    "exported_offsets",
    "exported_ranges",
    "exported_segments",
    "exported_so_far",
    "exporting",
    "finish_attempt",
    "iceberg_schema",
    "load_catalog",
    "migrate_table",
    "newest_copies",
    "open_table",
    "plan_export",
    "run_export",
    "start_attempt",
    "store_topic_ids",
    "table_name",
    "write_segment_files",
]
