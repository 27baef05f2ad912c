"""A broker's partition directory, read-only: segments, offsets, leader epochs, snapshots, the LSO.

A ``PartitionLog`` is a view as of when a property was first read (values are cached); open a
new one to see later changes. Nothing here writes to the log dir.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from tiering_core.errors import CorruptLogError, InvalidTopicError, TieringError
from tiering_core.kafka.batch import HEADER_SIZE, RecordBatchHeader, iter_batch_headers, parse_header
from tiering_core.kafka.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    REPLICATION_OFFSET_CHECKPOINT,
    read_offset_checkpoint,
    read_partition_metadata,
)
from tiering_core.kafka.epoch import EpochEntry, read_leader_epoch_checkpoint
from tiering_core.kafka.index import end_transaction_marker, lookup_offset, read_offset_index
from tiering_core.kafka.records import ControlRecordType
from tiering_core.kafka.snapshot import open_transactions, read_producer_snapshot, snapshot_offset
from tiering_core.kafka.topic import TopicPartition

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
#: Directory suffixes of partitions being deleted, moved between log dirs, or left stray (KRaft).
TRANSIENT_DIR_SUFFIXES = ("-delete", "-future", "-stray")
_SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")


class HighWatermarkUnavailableError(TieringError):
    """The broker's ``replication-offset-checkpoint`` has no high watermark for the partition.

    Without it no offset is known to be replicated, so nothing may be tiered: an error rather
    than a guess (the broker writes the file every few seconds, so this is transient).
    """


@dataclass(frozen=True)
class LogSegment:
    """One segment's files as they were listed (index paths are where they would be, even if absent)."""

    base_offset: int
    log_path: Path
    index_path: Path
    time_index_path: Path
    txn_index_path: Path | None  # None: no aborted transaction in this segment
    size_bytes: int
    last_modified: float  # the .log's mtime, seconds since the epoch

    @property
    def has_index(self) -> bool:
        return self.index_path.exists()

    @property
    def has_time_index(self) -> bool:
        return self.time_index_path.exists()

    @property
    def has_txn_index(self) -> bool:
        return self.txn_index_path is not None and self.txn_index_path.exists()

    @property
    def is_empty(self) -> bool:
        return self.size_bytes == 0


class PartitionLog:
    """One ``<topic>-<partition>`` directory of a broker's log dir."""

    def __init__(self, path: Path, log_dir_root: Path | None = None) -> None:
        self.path = Path(path)
        self.log_dir = Path(log_dir_root) if log_dir_root is not None else self.path.parent
        self.topic_partition = TopicPartition.from_dir_name(self.path.name)
        if not self.path.is_dir():
            raise TieringError(f"partition directory {self.path} does not exist")

    @classmethod
    def open(cls, path: Path, log_dir_root: Path | None = None) -> PartitionLog:
        return cls(path, log_dir_root)

    def __repr__(self) -> str:
        return f"PartitionLog({self.path})"

    @cached_property
    def topic_id(self) -> str:
        """From ``partition.metadata``; missing or malformed is a ``CorruptLogError`` naming the file."""
        return read_partition_metadata(self.path / PARTITION_METADATA)

    # --- segments --------------------------------------------------------------------------

    @cached_property
    def segments(self) -> list[LogSegment]:
        """Segments by base offset; ``.deleted``, ``.cleaned`` and ``.swap`` files are not segments."""
        found = []
        for entry in self.path.iterdir():
            match = _SEGMENT_FILE.match(entry.name)
            if not match or not entry.is_file():
                continue
            stem = self.path / match.group(1)
            txn = stem.with_suffix(".txnindex")
            stat = entry.stat()
            found.append(
                LogSegment(
                    base_offset=int(match.group(1)),
                    log_path=entry,
                    index_path=stem.with_suffix(".index"),
                    time_index_path=stem.with_suffix(".timeindex"),
                    txn_index_path=txn if txn.exists() else None,
                    size_bytes=stat.st_size,
                    last_modified=stat.st_mtime,
                )
            )
        if not found:
            raise TieringError(f"{self.path}: no log segments (a partition directory always has an active one)")
        found.sort(key=lambda s: s.base_offset)
        return found

    @property
    def active_segment(self) -> LogSegment:
        """The segment with the highest base offset: the broker is still appending to it."""
        return self.segments[-1]

    @property
    def closed_segments(self) -> list[LogSegment]:
        return self.segments[:-1]

    @cached_property
    def _next_bases(self) -> dict[int, int | None]:
        bases = [s.base_offset for s in self.segments]
        return dict(zip(bases, [*bases[1:], None], strict=True))

    def next_base_offset(self, segment: LogSegment) -> int | None:
        """Base offset of the segment after ``segment``; None for the active segment."""
        try:
            return self._next_bases[segment.base_offset]
        except KeyError:
            raise TieringError(f"{self.path}: no segment with base offset {segment.base_offset}") from None

    def segment_containing(self, offset: int) -> LogSegment | None:
        """The segment whose [base, next base) holds ``offset`` (the active one is open-ended)."""
        holder = None
        for segment in self.segments:
            if segment.base_offset > offset:
                break
            holder = segment
        return holder

    def position_of(self, segment: LogSegment, offset: int) -> int:
        """A byte position in ``segment`` at or before the batch holding ``offset`` (via its offset index).

        A missing or damaged index gives 0: a longer walk, never a wrong answer.
        """
        try:
            entries = read_offset_index(segment.index_path, segment.base_offset)
        except (OSError, CorruptLogError):
            return 0
        position = lookup_offset(entries, segment.base_offset, offset).position
        return position if position < segment.size_bytes else 0

    # --- offsets ---------------------------------------------------------------------------

    @cached_property
    def log_start_offset_checkpoint(self) -> int | None:
        """This partition's ``log-start-offset-checkpoint`` entry, if the broker wrote one."""
        return read_offset_checkpoint(self.log_dir / LOG_START_OFFSET_CHECKPOINT).get(self.topic_partition)

    @property
    def local_log_start_offset(self) -> int:
        """The first segment's base offset."""
        return self.segments[0].base_offset

    @property
    def log_start_offset(self) -> int:
        """max(first segment base, log-start-offset-checkpoint entry)."""
        entry = self.log_start_offset_checkpoint
        return max(self.local_log_start_offset, entry if entry is not None else -1)

    @cached_property
    def log_end_offset(self) -> int:
        """The offset after the last whole batch of the active segment; its base when it is empty.

        Only the valid prefix counts (a batch being written at the tail is not there yet, as
        Kafka's recovery would cut it). The walk starts at the last offset-index entry when the
        batch found there confirms it.
        """
        active = self.active_segment
        start = self._last_indexed_position(active)
        end = active.base_offset
        for header in iter_batch_headers(active.log_path, start, strict=False):
            end = header.next_offset
        return end

    def _last_indexed_position(self, segment: LogSegment) -> int:
        try:
            entries = read_offset_index(segment.index_path, segment.base_offset)
            if not entries or entries[-1].position >= segment.size_bytes:
                return 0
            last = entries[-1]
            with segment.log_path.open("rb") as f:
                f.seek(last.position)
                head = f.read(HEADER_SIZE)
            if len(head) < HEADER_SIZE:
                return 0
            header = parse_header(head, 0, segment.log_path, segment.size_bytes - last.position)
        except (OSError, CorruptLogError):
            return 0
        return last.position if header.last_offset == last.offset else 0

    @cached_property
    def high_watermark(self) -> int:
        """From ``replication-offset-checkpoint`` (lags the live HW: a safe lower bound), capped at the LEO."""
        path = self.log_dir / REPLICATION_OFFSET_CHECKPOINT
        entry = read_offset_checkpoint(path).get(self.topic_partition)
        if entry is None:
            reason = "does not exist" if not path.exists() else f"has no entry for {self.topic_partition}"
            raise HighWatermarkUnavailableError(
                f"{path} {reason}: the high watermark of {self.topic_partition} is unknown "
                "(the broker has not checkpointed it yet)"
            )
        return min(entry, self.log_end_offset)

    @cached_property
    def last_stable_offset(self) -> int:
        """min(HW, first offset of the earliest transaction still open at the HW).

        Producer state starts from the latest snapshot at or below the HW (within the local
        log), then the transactional batches between it and the HW are walked by header; only
        commit/abort markers are decoded. A transaction whose marker lies at or above the HW
        is still open. Without transactions this is the HW.
        """
        hw = self.high_watermark
        start, ongoing = self._producer_state_at_or_below(hw)
        for segment in self.segments:
            following = self.next_base_offset(segment)
            if following is not None and following <= start:
                continue
            if segment.base_offset >= hw:
                break
            position = self.position_of(segment, start) if segment.base_offset < start else 0
            for header in iter_batch_headers(segment.log_path, position):
                if header.last_offset < start:
                    continue
                if header.base_offset >= hw:
                    break
                if header.is_transactional:
                    if header.is_control:
                        end_transaction_marker_for(segment, header)
                        ongoing.pop(header.producer_id, None)
                    else:
                        ongoing.setdefault(header.producer_id, header.base_offset)
                if header.next_offset >= hw:
                    break  # never parse past the HW: the tail may be mid-write
        return min([hw, *ongoing.values()])

    def _producer_state_at_or_below(self, offset: int) -> tuple[int, dict[int, int]]:
        """(offset, open transactions) from the newest usable snapshot, else the log start with none."""
        first = self.local_log_start_offset
        for snap, path in reversed(self.snapshots()):
            if first <= snap <= offset:
                return snap, open_transactions(read_producer_snapshot(path))
        return first, {}

    # --- epochs and snapshots --------------------------------------------------------------

    @cached_property
    def leader_epoch_entries(self) -> list[EpochEntry]:
        """The broker's leader-epoch cache from ``leader-epoch-checkpoint``."""
        return read_leader_epoch_checkpoint(self.path / LEADER_EPOCH_CHECKPOINT)

    def snapshots(self) -> list[tuple[int, Path]]:
        """Producer snapshots (offset, path) by offset; names other than ``<offset:020d>.snapshot`` are not."""
        found = []
        for entry in self.path.iterdir():
            offset = snapshot_offset(entry.name)
            if offset is not None and entry.is_file():
                found.append((offset, entry))
        return sorted(found)

    def producer_snapshot_path(self, offset: int) -> Path | None:
        """The snapshot named exactly ``<offset:020d>.snapshot``, if present."""
        path = self.path / f"{offset:020d}.snapshot"
        return path if path.is_file() else None


def end_transaction_marker_for(segment: LogSegment, header: RecordBatchHeader) -> ControlRecordType:
    """Decode the commit/abort marker batch ``header`` of ``segment`` (``CorruptLogError`` if it is not one)."""
    with segment.log_path.open("rb") as f:
        f.seek(header.position)
        data = f.read(header.size_in_bytes)
    try:
        return end_transaction_marker(data, replace(header, position=0), segment.log_path)
    except CorruptLogError as exc:
        raise CorruptLogError(segment.log_path, header.position, exc.reason) from None


def discover_partitions(log_dirs: Sequence[Path]) -> list[PartitionLog]:
    """Every ``<topic>-<n>`` directory of the log dirs, sorted by log dir then name.

    Directories of partitions being deleted, moved or left stray (``-delete``, ``-future``,
    ``-stray``), hidden entries and plain files are skipped silently; any other directory
    whose name is not ``<topic>-<n>`` is skipped with a warning.
    """
    found: list[PartitionLog] = []
    for log_dir in log_dirs:
        for entry in sorted(Path(log_dir).iterdir()):
            if not entry.is_dir() or entry.name.startswith(".") or entry.name.endswith(TRANSIENT_DIR_SUFFIXES):
                continue
            try:
                found.append(PartitionLog(entry, Path(log_dir)))
            except InvalidTopicError as exc:
                log.warning("skipping %s: %s", entry, exc)
    return found
