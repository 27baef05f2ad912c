"""Data files of an export: a remote segment decoded (``tiering_core.kafka.arrow``) into Parquet
files under the table's data location, and the clean-up of attempts that never committed.

An export attempt writes under ``<table location>/data/tiering-attempts/<attempt id>/``, whose
marker (``_attempt.json``: the attempt id, the table's UUID, the export lease's token and holder,
host, pid, start time) is written first. An attempt belongs to the export holding the table's
lease (``engine.lease.held_table``), and is over only when that lease has passed to a newer export
(a greater token) and the table has moved on since (another snapshot is current than when the
newer export took the lease): the older export could only commit on the snapshot current when it
lost the lease, so once another is current nothing of it can land any more. Neither a process id
nor a clock says so: containers share a host name across PID namespaces, and an export may run
long. A file is only ever deleted when it is ours beyond doubt: a ``.parquet`` file under an
attempt directory whose marker names this table and that directory, of an attempt that is over
(or the export's own, at its end), and that no snapshot of the table references once the table
has moved on. Nothing else under the warehouse is touched.

A segment's rows are written one decoded group at a time (memory follows ``GroupBounds``), split
by day into files of one day each, since the table is partitioned by day(timestamp) and a data
file holds one partition: a group's rows are ordered by day (stably, so by offset within a day)
and sliced, and at most ``MAX_OPEN_FILES`` files are open at once (a day whose file was closed
to make room starts another). A record's timestamp is clamped to the years a table can hold for
``timestamp`` and kept as Kafka holds it in ``timestamp_ms``, so any int64 a producer chose exports.
The segment is fetched and decoded on a thread of its own (``engine.read_ahead``),
at most ``READ_AHEAD_GROUPS`` groups ahead of the Parquet writer (numba's kernels and pyarrow's
compression release the GIL, so the two overlap); a decode error reaches the writer after the
groups decoded before it, so what was written when a segment fails is as without the thread.
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tiering_core.engine.read_ahead import read_ahead
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.errors import CorruptLogError, ExportError, TieringError, one_line
from tiering_core.export.plan import ExportSegment
from tiering_core.export.table import (
    DATA_SCHEMA,
    MAX_TIMESTAMP_MS,
    MIN_TIMESTAMP_MS,
    RAW_TIMESTAMP_COLUMN,
    TOPIC_ID_COLUMN,
)
from tiering_core.kafka import arrow
from tiering_core.kafka.arrow import GroupBounds
from tiering_core.kafka.records import read_batch_data
from tiering_core.storage.chunks import ChunkError
from tiering_core.storage.errors import ManifestError, RemoteObjectNotFoundError
from tiering_core.storage.layout import ObjectKind

if TYPE_CHECKING:
    from pyarrow.fs import FileSystem
    from pyiceberg.table import Table

    from tiering_core.metadata.store import TableLease
    from tiering_core.storage.remote import RemoteStorage

ATTEMPTS_DIR = "tiering-attempts"
MARKER = "_attempt.json"
#: An attempt whose marker names no lease (written before export leases) is over this long after
#: it started, once the table has moved on (its export may still commit until then).
STALE_ATTEMPT_MS = 6 * 3600 * 1000
_MS_PER_DAY = 86_400_000
_EPOCH_DAY = datetime.date(1970, 1, 1)
#: Data files a segment's export has open at once: a segment of many distinct days (a producer may
#: set any timestamp) never holds a file descriptor per day.
MAX_OPEN_FILES = 16
#: Decoded groups waiting for the writer: the memory of a few groups, enough to keep both busy.
READ_AHEAD_GROUPS = 2


class SegmentExportError(TieringError):
    """One segment could not be exported (a corrupt batch, its log gone): nothing of it is
    committed, the rest of the export goes on. ``offset``: the first offset the segment's decode
    did not reach (the reason names the damaged batch)."""

    def __init__(self, segment: ExportSegment, offset: int, reason: str) -> None:
        self.segment_id = segment.segment_id
        self.offset = offset
        super().__init__(
            f"{segment.topic_partition}: segment {segment.segment_id} (offsets {segment.start_offset}-"
            f"{segment.end_offset}) not exported: failed at offset {offset} or later: {one_line(reason)}"
        )


@dataclass(frozen=True)
class ExportAttempt:
    """Where one export run writes its data files, the token of the table lease it writes under
    (0: none, a probe), and the FileIO properties to write them with (picklable: a Spark executor
    writes with it)."""

    attempt_id: str
    table_uuid: str
    location: str  # the attempt's directory (a URL), no trailing slash
    io_properties: Mapping[str, str] = field(default_factory=dict)
    lease_token: int = 0

    def __repr__(self) -> str:  # the FileIO properties may hold credentials
        return f"ExportAttempt(attempt_id={self.attempt_id!r}, location={self.location!r})"

    def filesystem(self, location: str | None = None) -> tuple[FileSystem, str]:
        """The pyarrow file system and path of ``location`` (default: the attempt's directory)."""
        from pyiceberg.io.pyarrow import PyArrowFileIO

        io = PyArrowFileIO(dict(self.io_properties))
        scheme, netloc, path = PyArrowFileIO.parse_location(location or self.location, io.properties)
        return io.fs_by_scheme(scheme, netloc), path

    def url(self, path: str) -> str:
        """The URL of ``path`` (a file system path of this attempt's file system)."""
        scheme = self.location.split("://", 1)[0] if "://" in self.location else "file"
        if scheme == "file":
            return f"file://{path}" if self.location.startswith("file://") else path
        return f"{scheme}://{path}"


def attempts_location(table: Table) -> str:
    return f"{table.location().rstrip('/')}/data/{ATTEMPTS_DIR}"


def start_attempt(table: Table, lease: TableLease) -> ExportAttempt:
    """A new attempt of ``table`` under the export's ``lease``, its marker written (an unwritable
    warehouse fails here, in one line, before anything is decoded)."""
    attempt_id = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:12]}"
    attempt = ExportAttempt(
        attempt_id=attempt_id,
        table_uuid=str(table.metadata.table_uuid),
        location=f"{attempts_location(table)}/{attempt_id}",
        io_properties=dict(table.io.properties),
        lease_token=lease.token,
    )
    marker = {
        "attempt_id": attempt_id,
        "table_uuid": attempt.table_uuid,
        "lease_token": lease.token,
        "lease_holder": lease.holder,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started_ms": int(time.time() * 1000),
    }
    try:
        fs, path = attempt.filesystem()
        fs.create_dir(path, recursive=True)
        with fs.open_output_stream(f"{path}/{MARKER}") as out:
            out.write(json.dumps(marker).encode())
    except Exception as exc:  # OSError, pyarrow's ArrowException kinds
        raise ExportError(f"cannot write to the warehouse at {attempt.location}: {one_line(exc)}") from exc
    return attempt


def end_attempt(attempt: ExportAttempt) -> None:
    """Remove the marker of an attempt whose every file is committed or deleted."""
    fs, path = attempt.filesystem()
    try:
        fs.delete_file(f"{path}/{MARKER}")
    except FileNotFoundError:
        pass


def _day_name(day: int) -> str:
    """A day (since the epoch) as data files name it: YYYYMMDD, years 0001 to 9999."""
    date = _EPOCH_DAY + datetime.timedelta(days=day)
    return f"{date.year:04d}{date.month:02d}{date.day:02d}"


def table_rows(batch: pa.RecordBatch, topic_id: str) -> tuple[pa.RecordBatch, np.ndarray]:
    """A decoded group in ``DATA_SCHEMA``, and each row's day (since the epoch): ``timestamp``
    clamped to ``MIN_TIMESTAMP_MS``..``MAX_TIMESTAMP_MS`` (Iceberg's microseconds and a day
    partition hold no more), the timestamp as Kafka holds it in ``timestamp_ms``, the topic id."""
    raw = batch.column("timestamp").cast(pa.int64())
    millis = np.clip(raw.to_numpy(zero_copy_only=False), MIN_TIMESTAMP_MS, MAX_TIMESTAMP_MS)
    columns = {name: batch.column(name) for name in batch.schema.names}
    columns["timestamp"] = pa.array(millis * 1000, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    columns[TOPIC_ID_COLUMN] = pa.repeat(pa.scalar(topic_id, pa.string()), batch.num_rows)
    columns[RAW_TIMESTAMP_COLUMN] = raw
    data = pa.RecordBatch.from_arrays([columns[f.name] for f in DATA_SCHEMA], schema=DATA_SCHEMA)
    return data, millis // _MS_PER_DAY


def split_by_day(data: pa.RecordBatch, days: np.ndarray) -> Iterator[tuple[int, pa.RecordBatch]]:
    """The rows of each day, days in order and rows in their order within a day: one stable sort
    and a slice per day (a group spanning many days costs its sort, not rows x days)."""
    if len(days) == 0:
        return
    if days[0] == days[-1] and (days == days[0]).all():
        yield int(days[0]), data
        return
    order = np.argsort(days, kind="stable")
    ordered = data.take(pa.array(order))
    sorted_days = days[order]
    starts = np.flatnonzero(np.diff(sorted_days)) + 1
    bounds = [0, *starts.tolist(), len(sorted_days)]
    for start, end in itertools.pairwise(bounds):
        yield int(sorted_days[start]), ordered.slice(start, end - start)


def segment_days(
    storage: RemoteStorage, segment: ExportSegment, where: Path, bounds: GroupBounds
) -> Iterator[tuple[pa.RecordBatch, list[tuple[int, pa.RecordBatch]]]]:
    """Each decoded group of the segment's log object from its first offset written
    (``ExportSegment.first_offset``), with its rows in ``DATA_SCHEMA`` split by day: (the day since
    the epoch, and its rows)."""
    ref = segment_ref(segment.segment)
    with storage.open_stream(ref, ObjectKind.LOG, 0) as stream:
        batches = arrow.decode_batches(
            read_batch_data(stream, where, 0, segment.segment.size_bytes),
            where,
            segment.topic_partition,
            isolation=segment.isolation,
            aborted=segment.aborted,
            bounds=bounds,
        )
        for batch in batches:
            if segment.from_offset is not None and batch.num_rows:
                offsets = batch.column("offset").to_numpy()
                if offsets[0] < segment.from_offset:
                    batch = batch.filter(pa.array(offsets >= segment.from_offset))
                    if not batch.num_rows:
                        continue
            data, days = table_rows(batch, segment.topic_id)
            yield batch, list(split_by_day(data, days))


class DayFiles:
    """The segment's data files, one day each, at most ``MAX_OPEN_FILES`` open: the least recently
    written is closed to open another, and its day, should it come again, starts a new file."""

    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        segment_id: str,
        max_open: int = MAX_OPEN_FILES,
        schema: pa.Schema = DATA_SCHEMA,
    ) -> None:
        self._fs = fs
        self._schema = schema
        self._directory = directory
        self._segment_id = segment_id
        self._max_open = max_open
        self._open: OrderedDict[int, pq.ParquetWriter] = OrderedDict()
        self._files_of_day: dict[int, int] = {}
        self.paths: list[str] = []

    def write(self, day: int, rows: pa.RecordBatch) -> None:
        writer = self._open.get(day)
        if writer is None:
            while len(self._open) >= self._max_open:
                _day, oldest = self._open.popitem(last=False)
                oldest.close()
            n = self._files_of_day.get(day, 0)
            self._files_of_day[day] = n + 1
            name = f"{self._segment_id}-{_day_name(day)}" + (f"-{n}" if n else "")
            path = f"{self._directory}/{name}.parquet"
            self.paths.append(path)
            writer = pq.ParquetWriter(path, self._schema, filesystem=self._fs, compression="zstd")
            self._open[day] = writer
        else:
            self._open.move_to_end(day)
        writer.write_batch(rows)

    def close(self) -> None:
        while self._open:
            _day, writer = self._open.popitem(last=False)
            writer.close()

    def abandon(self) -> None:
        """Close what is open (errors ignored) and delete every file written."""
        while self._open:
            _day, writer = self._open.popitem(last=False)
            try:
                writer.close()
            except Exception:  # the file is deleted next
                pass
        delete_files(self._fs, self.paths)


def write_segment_files(
    storage: RemoteStorage,
    segment: ExportSegment,
    attempt: ExportAttempt,
    *,
    bounds: GroupBounds = GroupBounds(),
    on_batch: Callable[[pa.RecordBatch], None] | None = None,
) -> list[str]:
    """The segment's records at its isolation level written as Parquet data files under the
    attempt's directory (one day each), their URLs returned.

    A corrupt batch, a missing log object, a manifest or chunk that fails its digests (the segment
    is not what was copied) or a record Arrow cannot hold is a
    ``SegmentExportError`` naming the segment and the offset; the files written so far for the
    segment are deleted first."""
    fs, root = attempt.filesystem()
    directory = f"{root}/partition={segment.partition}"
    fs.create_dir(directory, recursive=True)
    files = DayFiles(fs, directory, segment.segment_id)
    next_offset = segment.first_offset
    where = Path(storage.describe(segment_ref(segment.segment).key(ObjectKind.LOG, storage.prefix)))
    try:
        for batch, parts in read_ahead(
            lambda: segment_days(storage, segment, where, bounds), READ_AHEAD_GROUPS, thread_name="export-decode"
        ):
            for day, part in parts:
                files.write(day, part)
            if on_batch is not None:
                on_batch(batch)
            if batch.num_rows:
                next_offset = int(batch.column("offset")[-1].as_py()) + 1
        files.close()
    except (CorruptLogError, RemoteObjectNotFoundError, ManifestError, ChunkError, pa.ArrowInvalid) as exc:
        files.abandon()
        raise SegmentExportError(segment, next_offset, str(exc)) from exc
    except BaseException:
        files.abandon()
        raise
    return [attempt.url(p) for p in files.paths]


def delete_files(fs: FileSystem, paths: Iterable[str]) -> None:
    for path in paths:
        try:
            fs.delete_file(path)
        except FileNotFoundError:
            pass


def referenced_files(table: Table) -> set[str]:
    """The data files any snapshot of the table references (its manifests read once each, for
    their paths alone: ``inspect.all_data_files`` also renders each file's column bounds, and
    fails on a column pyarrow builds no Python bounds of, a uuid)."""
    from pyiceberg.manifest import DataFileContent

    manifests = {m.manifest_path: m for snapshot in table.snapshots() for m in snapshot.manifests(table.io)}
    return {
        entry.data_file.file_path
        for manifest in manifests.values()
        for entry in manifest.fetch_manifest_entry(table.io)
        if entry.data_file.content == DataFileContent.DATA
    }


def current_snapshot_id(table: Table) -> int | None:
    """The id of the table's current snapshot (None: it has none)."""
    snapshot = table.current_snapshot()
    return None if snapshot is None else snapshot.snapshot_id


def _attempt_files(fs: FileSystem, path: str) -> list[str]:
    """The ``.parquet`` files under an attempt directory's ``partition=`` directories."""
    from pyarrow.fs import FileSelector, FileType

    return [
        f.path
        for f in fs.get_file_info(FileSelector(path, recursive=True, allow_not_found=True))
        if f.type == FileType.File
        and f.base_name.endswith(".parquet")
        and Path(f.path).parent.name.startswith("partition=")
    ]


def finish_attempt(table: Table, attempt: ExportAttempt) -> list[str]:
    """At the end of an export still holding the lease, its commits done: delete what its own
    attempt holds that no snapshot references (the files of a Spark task lost or killed before it
    could clean up) and its marker; the URLs deleted. A commit whose outcome is unknown raised
    before this, so its files stay for the next export to judge."""
    fs, root = attempt.filesystem()
    table.refresh()
    referenced = referenced_files(table)
    stray = [p for p in _attempt_files(fs, root) if attempt.url(p) not in referenced]
    delete_files(fs, stray)
    end_attempt(attempt)
    return [attempt.url(p) for p in stray]


def _attempt_over(marker: Mapping[str, Any], lease_token: int, now_ms: int) -> bool:
    """An attempt of an older holder of the table's lease (the caller has checked the table moved
    on since it took the lease); one whose marker names no lease (written before export leases)
    also had ``STALE_ATTEMPT_MS`` to commit."""
    token = marker.get("lease_token")
    if token is None:
        return now_ms - int(marker["started_ms"]) > STALE_ATTEMPT_MS
    return isinstance(token, int) and not isinstance(token, bool) and token < lease_token


def clean_abandoned_attempts(
    table: Table, lease_token: int, since_snapshot_id: int | None, *, now_ms: int | None = None
) -> list[str]:
    """Delete the data files of this table's attempts that are over and never committed them;
    the URLs deleted. ``lease_token`` is the table lease the caller holds and
    ``since_snapshot_id`` the snapshot current when it took it: until the table has moved on from
    it, an older holder may still commit, and nothing is deleted. Only files proven ours are
    deleted (the module's rule)."""
    from pyarrow.fs import FileSelector, FileType

    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    table.refresh()
    if current_snapshot_id(table) == since_snapshot_id:
        return []  # no commit since the lease passed: an older holder's may still land
    probe = ExportAttempt("", str(table.metadata.table_uuid), attempts_location(table), dict(table.io.properties))
    fs, root = probe.filesystem()
    try:
        entries = fs.get_file_info(FileSelector(root, allow_not_found=True))
    except Exception as exc:
        raise ExportError(f"cannot list the warehouse at {probe.location}: {one_line(exc)}") from exc
    referenced: set[str] | None = None
    deleted: list[str] = []
    for entry in entries:
        if entry.type != FileType.Directory:
            continue
        try:
            with fs.open_input_stream(f"{entry.path}/{MARKER}") as stream:
                marker = json.loads(stream.read())
        except (FileNotFoundError, OSError, ValueError):
            continue  # no marker: not proven ours
        if (
            not isinstance(marker, dict)
            or marker.get("attempt_id") != entry.base_name
            or marker.get("table_uuid") != probe.table_uuid
            or not _attempt_over(marker, lease_token, now_ms)
        ):
            continue
        if referenced is None:  # read after the table moved on: what an older holder landed is in it
            referenced = referenced_files(table)
        attempt = ExportAttempt(
            entry.base_name, probe.table_uuid, f"{probe.location}/{entry.base_name}", probe.io_properties
        )
        stale = [p for p in _attempt_files(fs, entry.path) if attempt.url(p) not in referenced]
        delete_files(fs, stale)
        deleted.extend(attempt.url(p) for p in stale)
        end_attempt(attempt)
    return deleted
