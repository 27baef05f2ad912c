"""The partition directory's files as the writer's deletions and truncation leave them (segment
files deleted or renamed ``*.deleted``, producer snapshots, the cut of a truncation), and the
writer's state read back from them after a truncation (``LogLoader``'s replay from the newest
snapshot at or below the new end).

Apart from ``log_writer.py`` because these only read and change files by the broker's rules;
the writer (``PartitionWriter``) keeps its state in memory and takes what these read back.

One deliberate difference: after a truncation the bytes-since-last-index-entry counter is
derived from the ``.log`` (as a rebuild would) where a broker resets it to 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tiering_core.kafka.batch import LogFile, RecordBatchHeader, iter_batch_headers
from tiering_core.kafka.index_rebuild import IndexBuilder, read_end_transaction_marker
from tiering_core.kafka.producer_snapshot import read_producer_snapshot, snapshot_offset
from tiering_core.kafka.producer_state import ProducerStateTracker

SEGMENT_FILE_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")


def delete_segment_files(stem: Path, *, async_delete: bool = False) -> None:
    """A segment's files gone (``async_delete``: renamed ``*.deleted`` first, as the broker does)."""
    for suffix in SEGMENT_FILE_SUFFIXES:
        path = stem.with_suffix(suffix)
        if not path.exists():
            continue
        if async_delete:  # the broker renames first and deletes after file.delete.delay.ms
            path.rename(path.with_name(path.name + ".deleted"))
        else:
            path.unlink()


def producer_snapshots(partition_dir: Path) -> Iterator[tuple[int, Path]]:
    """Each producer snapshot of the directory with the offset its name carries."""
    for path in partition_dir.glob("*.snapshot"):
        offset = snapshot_offset(path.name)
        if offset is not None:
            yield offset, path


def delete_snapshots_above(partition_dir: Path, offset: int, *, async_delete: bool = False) -> None:
    """The snapshots a truncation to ``offset`` makes stale."""
    for snap, path in list(producer_snapshots(partition_dir)):
        if snap > offset:
            if async_delete:
                path.rename(path.with_name(path.name + ".deleted"))
            else:
                path.unlink()


def delete_snapshots_below(partition_dir: Path, offset: int) -> None:
    """The snapshots below a new log start (the broker's own retention)."""
    for snap, path in list(producer_snapshots(partition_dir)):
        if snap < offset:
            path.unlink()


def truncate_segment_files(partition_dir: Path, bases: list[int], offset: int, *, async_delete: bool = False) -> int:
    """The files a truncation to ``offset`` leaves: segments above it gone, the one holding it
    cut, later snapshots gone; returns the base of the segment that becomes active."""
    keep_base = max(b for b in bases if b <= offset or b == bases[0])
    log_path = partition_dir / f"{keep_base:020d}.log"
    cut = truncation_cut(log_path, offset)
    for base in bases:
        if base > keep_base:
            delete_segment_files(partition_dir / f"{base:020d}", async_delete=async_delete)
    if cut is not None:
        with log_path.open("r+b") as f:
            f.truncate(cut)
    delete_snapshots_above(partition_dir, offset, async_delete=async_delete)
    return keep_base


def truncation_cut(log_path: Path, offset: int) -> int | None:
    """Where a truncation to ``offset`` cuts the ``.log`` (the position of the first batch at or
    above it; None: nothing to cut); ``offset`` must be a batch boundary."""
    for header in iter_batch_headers(log_path):
        if header.base_offset >= offset:
            return header.position
        if header.next_offset > offset:
            raise ValueError(f"cannot truncate to {offset}: it falls inside the batch at {header.base_offset}")
    return None


@dataclass
class ReloadedLog:
    """What a reload reads back: the producer state and the active segment's bookkeeping."""

    state: ProducerStateTracker
    builder: IndexBuilder
    active_size: int
    next_offset: int


def reload_log(partition_dir: Path, bases: list[int], active_base: int, index_interval_bytes: int) -> ReloadedLog:
    """Producer state and the active segment's bookkeeping, replayed from snapshot and ``.log``
    files; ``bases`` are the segments at or below ``active_base``."""
    snapshots = sorted((o, p) for o, p in producer_snapshots(partition_dir) if o in bases)
    start = snapshots[-1][0] if snapshots else bases[0]
    entries = read_producer_snapshot(snapshots[-1][1]) if snapshots else []
    reloaded = ReloadedLog(
        ProducerStateTracker(entries), IndexBuilder(active_base, index_interval_bytes), 0, active_base
    )
    for base in (b for b in bases if b >= start):
        log_path = partition_dir / f"{base:020d}.log"
        for header in iter_batch_headers(log_path):
            if base == active_base:
                reloaded.builder.on_batch(header)
                reloaded.active_size = header.position + header.size_in_bytes
            replay_batch(reloaded, header, log_path, collect=base == active_base)
            reloaded.next_offset = header.next_offset
    if not reloaded.active_size:
        reloaded.next_offset = active_base
    return reloaded


def replay_batch(reloaded: ReloadedLog, header: RecordBatchHeader, log_path: Path, *, collect: bool) -> None:
    """Feed one batch to the producer state; with ``collect``, an abort joins the active ``.txnindex``."""
    if not header.has_producer_id:
        return
    if not header.is_control:
        reloaded.state.on_data_batch(header)
        return
    with LogFile(log_path) as log_file:
        marker = read_end_transaction_marker(log_file, header)
    entry = reloaded.state.on_end_marker(header, marker)
    if entry is not None and collect:
        reloaded.builder.aborted.append(entry)
