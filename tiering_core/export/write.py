"""Data files of an export: a remote segment decoded (``tiering_core.kafka.arrow``) into Parquet
files under the table's data location, and the clean-up of attempts that never committed.

An export attempt writes under ``<table location>/data/tiering-attempts/<attempt id>/``, whose
marker (``_attempt.json``: the attempt id, the table's UUID, host, pid, start time) is written
first. A file is only ever deleted when it is ours beyond doubt: a ``.parquet`` file under an
attempt directory whose marker names this table and that directory, of an attempt that is over
(its process gone on this host, or older than ``STALE_ATTEMPT_MS``), and that no snapshot of the
table references. Nothing else under the warehouse is touched.

A segment's rows are written one decoded group at a time (memory follows ``GroupBounds``), split
by day into one file per day of the segment, since the table is partitioned by day(timestamp)
and a data file holds one partition. The segment is fetched and decoded on a thread of its own,
at most ``READ_AHEAD_GROUPS`` groups ahead of the Parquet writer (numba's kernels and pyarrow's
compression release the GIL, so the two overlap); a decode error reaches the writer after the
groups decoded before it, so what was written when a segment fails is as without the thread.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tiering_core.errors import CorruptLogError, ExportError, TieringError, one_line
from tiering_core.export.plan import ExportSegment
from tiering_core.export.table import DATA_SCHEMA
from tiering_core.kafka import arrow
from tiering_core.kafka.arrow import GroupBounds
from tiering_core.kafka.records import read_batch_data
from tiering_core.runs.segment_ops import segment_ref
from tiering_core.storage.errors import RemoteObjectNotFoundError
from tiering_core.storage.layout import ObjectKind

if TYPE_CHECKING:
    from pyarrow.fs import FileSystem
    from pyiceberg.table import Table

    from tiering_core.storage.segments import RemoteStorage

ATTEMPTS_DIR = "tiering-attempts"
MARKER = "_attempt.json"
#: An attempt of another host (or of a process we cannot see) is over after this long.
STALE_ATTEMPT_MS = 6 * 3600 * 1000
_MS_PER_DAY = 86_400_000
#: Decoded groups waiting for the writer: the memory of a few groups, enough to keep both busy.
READ_AHEAD_GROUPS = 2
_POLL_SECONDS = 0.1

T = TypeVar("T")


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
    """Where one export run writes its data files, and the FileIO properties to write them with
    (picklable: a Spark executor writes with it)."""

    attempt_id: str
    table_uuid: str
    location: str  # the attempt's directory (a URL), no trailing slash
    io_properties: Mapping[str, str] = field(default_factory=dict)

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


def start_attempt(table: Table) -> ExportAttempt:
    """A new attempt of ``table``, its marker written (an unwritable warehouse fails here, in
    one line, before anything is decoded)."""
    attempt_id = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:12]}"
    attempt = ExportAttempt(
        attempt_id=attempt_id,
        table_uuid=str(table.metadata.table_uuid),
        location=f"{attempts_location(table)}/{attempt_id}",
        io_properties=dict(table.io.properties),
    )
    marker = {
        "attempt_id": attempt_id,
        "table_uuid": attempt.table_uuid,
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


def _day(ms: int) -> str:
    return time.strftime("%Y%m%d", time.gmtime(ms / 1000))


def _read_ahead(produce: Callable[[], Iterator[T]], depth: int = READ_AHEAD_GROUPS) -> Generator[T, None, None]:
    """The items of ``produce()``, made on a thread of their own at most ``depth`` ahead of the
    consumer. An exception of ``produce`` is raised here, after the items made before it; once
    the consumer stops (done, an error of its own, ``close``), the thread stops at its next item
    and is joined."""
    items: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: tuple[bool, Any]) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=_POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        made = produce()
        try:
            for item in made:
                if not put((True, item)):
                    return
        except BaseException as exc:  # the consumer's to raise, in its thread
            put((False, exc))
        else:
            put((False, None))
        finally:
            close = getattr(made, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=run, name="export-decode", daemon=True)
    thread.start()
    try:
        while True:
            more, value = items.get()
            if not more:
                if value is not None:
                    raise value
                return
            yield value
    finally:
        stop.set()
        thread.join()


def _days(
    storage: RemoteStorage, segment: ExportSegment, where: Path, bounds: GroupBounds
) -> Iterator[tuple[pa.RecordBatch, list[tuple[str, pa.RecordBatch]]]]:
    """Each decoded group of the segment's log object, with its rows in ``DATA_SCHEMA`` split by
    day: (the day, as a data file names it, and its rows)."""
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
            data = batch.cast(DATA_SCHEMA)
            days = batch.column("timestamp").cast(pa.int64()).to_numpy() // _MS_PER_DAY
            unique = np.unique(days)
            if len(unique) == 1:
                yield batch, [(_day(int(unique[0]) * _MS_PER_DAY), data)]
            else:
                yield batch, [(_day(int(day) * _MS_PER_DAY), data.filter(pa.array(days == day))) for day in unique]


def write_segment_files(
    storage: RemoteStorage,
    segment: ExportSegment,
    attempt: ExportAttempt,
    *,
    bounds: GroupBounds = GroupBounds(),
    on_batch: Callable[[pa.RecordBatch], None] | None = None,
) -> list[str]:
    """The segment's records at its isolation level written as Parquet data files under the
    attempt's directory (one per day of the segment's timestamps), their URLs returned.

    A corrupt batch or a missing log object is a ``SegmentExportError`` naming the segment and
    the offset; the files written so far for the segment are deleted first."""
    fs, root = attempt.filesystem()
    directory = f"{root}/partition={segment.partition}"
    fs.create_dir(directory, recursive=True)
    writers: dict[str, pq.ParquetWriter] = {}
    paths: list[str] = []
    next_offset = segment.start_offset
    where = Path(storage.describe(segment_ref(segment.segment).key(ObjectKind.LOG, storage.prefix)))
    try:
        for batch, parts in _read_ahead(lambda: _days(storage, segment, where, bounds)):
            for name, part in parts:
                writer = writers.get(name)
                if writer is None:
                    path = f"{directory}/{segment.segment_id}-{name}.parquet"
                    writer = pq.ParquetWriter(path, DATA_SCHEMA, filesystem=fs, compression="zstd")
                    writers[name] = writer
                    paths.append(path)
                writer.write_batch(part)
            if on_batch is not None:
                on_batch(batch)
            if batch.num_rows:
                next_offset = int(batch.column("offset")[-1].as_py()) + 1
        for writer in writers.values():
            writer.close()
    except (CorruptLogError, RemoteObjectNotFoundError) as exc:
        _abandon(fs, writers, paths)
        raise SegmentExportError(segment, next_offset, str(exc)) from exc
    except BaseException:
        _abandon(fs, writers, paths)
        raise
    return [attempt.url(p) for p in paths]


def _abandon(fs: FileSystem, writers: Mapping[str, pq.ParquetWriter], paths: Iterable[str]) -> None:
    for writer in writers.values():
        try:
            writer.close()
        except Exception:  # the file is deleted next
            pass
    delete_files(fs, paths)


def delete_files(fs: FileSystem, paths: Iterable[str]) -> None:
    for path in paths:
        try:
            fs.delete_file(path)
        except FileNotFoundError:
            pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _attempt_over(marker: Mapping[str, Any], now_ms: int) -> bool:
    if now_ms - int(marker["started_ms"]) > STALE_ATTEMPT_MS:
        return True
    return marker.get("host") == socket.gethostname() and not _pid_alive(int(marker["pid"]))


def referenced_files(table: Table) -> set[str]:
    """The data files any snapshot of the table references."""
    if table.current_snapshot() is None:
        return set()
    return set(table.inspect.all_data_files().column("file_path").to_pylist())


def clean_abandoned_attempts(table: Table, *, now_ms: int | None = None) -> list[str]:
    """Delete the data files of this table's attempts that are over and never committed them;
    the URLs deleted. Only files proven ours are deleted (the module's rule)."""
    from pyarrow.fs import FileSelector, FileType

    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
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
            or not _attempt_over(marker, now_ms)
        ):
            continue
        if referenced is None:
            referenced = referenced_files(table)
        attempt = ExportAttempt(
            entry.base_name, probe.table_uuid, f"{probe.location}/{entry.base_name}", probe.io_properties
        )
        files = fs.get_file_info(FileSelector(entry.path, recursive=True))
        ours = [
            f.path
            for f in files
            if f.type == FileType.File
            and f.base_name.endswith(".parquet")
            and Path(f.path).parent.name.startswith("partition=")
        ]
        stale = [p for p in ours if attempt.url(p) not in referenced]
        delete_files(fs, stale)
        deleted.extend(attempt.url(p) for p in stale)
        end_attempt(attempt)
    return deleted
