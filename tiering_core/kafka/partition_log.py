"""A broker's partition directory, read-only: segments, offsets, leader epochs, snapshots, the LSO.

A ``PartitionLog`` is a view as of when a property was first read (values are cached); open a
new one to see later changes. Nothing here writes to the log dir. The broker keeps working
meanwhile: files it renames to ``.deleted`` between a listing and a ``stat`` are skipped, and
segments are read by ``pread`` bounded by the size seen at open (``batch``), never mapped.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from stat import S_ISLNK, S_ISREG

from tiering_core.errors import CorruptLogError, InvalidTopicError, TieringError
from tiering_core.kafka.batch import (
    HEADER_SIZE,
    LogFile,
    RecordBatchHeader,
    iter_batch_headers,
    parse_header_at,
    verify_batch_crc,
)
from tiering_core.kafka.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    REPLICATION_OFFSET_CHECKPOINT,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    read_partition_metadata,
)
from tiering_core.kafka.epoch import EpochEntry
from tiering_core.kafka.index import OffsetIndexEntry, last_offset_index_entry, lookup_offset_index_file
from tiering_core.kafka.index_rebuild import read_end_transaction_marker
from tiering_core.kafka.producer_snapshot import (
    ProducerStateEntry,
    open_transactions,
    read_producer_snapshot,
    snapshot_offset,
)
from tiering_core.kafka.producer_state import ProducerStateTracker
from tiering_core.kafka.records import ControlRecord, ControlRecordType
from tiering_core.kafka.topic import TopicPartition

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
#: Directory suffixes of partitions being deleted, moved between log dirs, or left stray (KRaft).
TRANSIENT_DIR_SUFFIXES = ("-delete", "-future", "-stray")
#: KRaft's metadata log (``__cluster_metadata-0``): a Raft log of its own, never tiered.
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
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
        return self._list_segments()

    def _list_segments(self) -> list[LogSegment]:
        # One scandir of the directory, a Path only for what a segment keeps: a broker of thousands
        # of partitions is listed by every plan (a .txnindex is known from the listing, not a stat).
        with os.scandir(self.path) as listing:
            entries = list(listing)
        names = {entry.name for entry in entries}
        found = []
        for entry in entries:
            match = _SEGMENT_FILE.fullmatch(entry.name)
            if not match:
                continue
            try:
                stat = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # renamed to .deleted by the broker since the listing
                continue
            log_path = self.path / entry.name
            if S_ISLNK(stat.st_mode):
                raise CorruptLogError(
                    log_path, 0, "is a symbolic link: a broker never makes one, and it is not followed"
                )
            if not S_ISREG(stat.st_mode):
                continue
            stem = match.group(1)
            found.append(
                LogSegment(
                    base_offset=int(stem),
                    log_path=log_path,
                    index_path=self.path / f"{stem}.index",
                    time_index_path=self.path / f"{stem}.timeindex",
                    txn_index_path=self.path / f"{stem}.txnindex" if f"{stem}.txnindex" in names else None,
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

        Reads only the index entries a binary search touches (an active segment's index is
        pre-allocated to 10 MiB). The entry found is trusted only if a whole batch with a good
        CRC starts there, at or below ``offset``: a missing or damaged index gives 0, a longer
        walk, never a wrong answer.
        """
        try:
            entry = lookup_offset_index_file(segment.index_path, segment.base_offset, offset)
        except (OSError, CorruptLogError):  # missing, or not a regular file
            return 0
        return self._verified_position(segment, entry, offset)

    def _verified_position(self, segment: LogSegment, entry: OffsetIndexEntry | None, offset: int | None) -> int:
        """``entry.position`` if a whole, CRC-valid batch starts there (with base offset <= ``offset``), else 0."""
        if entry is None or entry.position == 0:
            return 0
        try:
            with LogFile(segment.log_path) as log_file:
                head = log_file.read_at(entry.position, HEADER_SIZE)
                header = parse_header_at(head, 0, log_file.path, entry.position, log_file.size)
                if offset is not None and header.base_offset > offset:
                    return 0
                verify_batch_crc(log_file.batch_bytes(header), header, log_file.path)
        except (OSError, CorruptLogError):
            return 0
        return entry.position

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
        """Where the last offset-index entry points, if a whole batch starts there (else 0)."""
        try:
            entry = last_offset_index_entry(segment.index_path, segment.base_offset)
        except (OSError, CorruptLogError):  # missing, or not a regular file
            return 0
        return self._verified_position(segment, entry, None)

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
        for segment, header in self._batches_between(start, hw):
            if header.is_transactional:
                if header.is_control:
                    end_transaction_marker_for(segment, header)  # raises unless it is a commit or abort
                    ongoing.pop(header.producer_id, None)
                else:
                    ongoing.setdefault(header.producer_id, header.base_offset)
        return min([hw, *ongoing.values()])

    def _batches_between(self, start: int, end: int) -> Iterator[tuple[LogSegment, RecordBatchHeader]]:
        """Each batch holding an offset in [``start``, ``end``), by header, with its segment.

        The walk starts at ``start`` through the offset index and stops at the batch that reaches
        ``end``, never parsing past it: beyond the HW the tail may be mid-write.
        """
        for segment in self.segments:
            following = self.next_base_offset(segment)
            if following is not None and following <= start:
                continue
            if segment.base_offset >= end:
                return
            position = self.position_of(segment, start) if segment.base_offset < start else 0
            for header in iter_batch_headers(segment.log_path, position):
                if header.last_offset < start:
                    continue
                if header.base_offset >= end:
                    return
                yield segment, header
                if header.next_offset >= end:
                    return

    def _producer_state_at_or_below(self, offset: int) -> tuple[int, dict[int, int]]:
        """(offset, open transactions) from the newest usable snapshot, else the log start with none."""
        start, entries = self._newest_snapshot_at_or_below(offset)
        return start, open_transactions(entries)

    def _newest_snapshot_at_or_below(self, offset: int) -> tuple[int, list[ProducerStateEntry]]:
        """(offset, entries) of the newest usable snapshot, else the local log start with none.

        As Kafka's ``ProducerStateManager.loadFromSnapshot``: a corrupt snapshot is skipped
        (with a warning naming file and byte) for the next older one, and the batches after
        the one used are replayed. With none usable the whole local log is replayed; a
        transaction begun in a segment the broker already deleted is then unknown, exactly as
        it would be to a broker that lost its snapshots.
        """
        first = self.local_log_start_offset
        candidates = [(snap, path) for snap, path in reversed(self.snapshots()) if first <= snap <= offset]
        for snap, path in candidates:
            try:
                return snap, read_producer_snapshot(path)
            except CorruptLogError as exc:
                log.warning("%s: skipping a corrupt producer snapshot: %s", self.topic_partition, exc)
            except FileNotFoundError:
                log.info("%s: producer snapshot %s was deleted while being read", self.topic_partition, path)
        if candidates:
            log.warning(
                "%s: no usable producer snapshot at or below offset %d; replaying the log from its local "
                "start %d (transactions begun in segments already deleted are not seen)",
                self.topic_partition,
                offset,
                first,
            )
        return first, []

    def producer_state_at(self, offset: int) -> list[ProducerStateEntry]:
        """The producer snapshot a broker rolling at ``offset`` would write (``offset`` a segment base).

        For a snapshot the broker no longer has: the newest usable one below ``offset`` (else the
        local log start, with nothing) plus every batch between them replayed, by header; only
        commit/abort markers are decoded. Producers the broker expired in between
        (``producer.id.expiration.ms``) are still present: keeping them is the safe side.
        """
        start, entries = self._newest_snapshot_at_or_below(offset)
        tracker = ProducerStateTracker(entries)
        for segment, header in self._batches_between(start, offset):
            if not header.has_producer_id:
                continue
            if header.is_control:
                tracker.on_end_marker(header, end_transaction_marker_record(segment, header))
            else:
                tracker.on_data_batch(header)
        return tracker.snapshot_entries()

    # --- epochs and snapshots --------------------------------------------------------------

    @cached_property
    def leader_epoch_entries(self) -> list[EpochEntry]:
        """The broker's leader-epoch cache from ``leader-epoch-checkpoint``."""
        return read_leader_epoch_checkpoint(self.path / LEADER_EPOCH_CHECKPOINT)

    def snapshots(self) -> list[tuple[int, Path]]:
        """Producer snapshots (offset, path) by offset; names other than ``<offset:020d>.snapshot`` are not."""
        found = []
        with os.scandir(self.path) as listing:
            for entry in listing:
                offset = snapshot_offset(entry.name)
                if offset is None:
                    continue
                try:
                    regular = entry.is_file(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if regular:
                    found.append((offset, self.path / entry.name))
        return sorted(found)

    def producer_snapshot_path(self, offset: int) -> Path | None:
        """The snapshot named exactly ``<offset:020d>.snapshot``, if present."""
        path = self.path / f"{offset:020d}.snapshot"
        return path if _is_regular(path) else None


def end_transaction_marker_for(segment: LogSegment, header: RecordBatchHeader) -> ControlRecordType:
    """Decode the commit/abort marker batch ``header`` of ``segment`` (``CorruptLogError`` if it is not one)."""
    return end_transaction_marker_record(segment, header).type


def end_transaction_marker_record(segment: LogSegment, header: RecordBatchHeader) -> ControlRecord:
    """The commit/abort marker (type and coordinator epoch) of the control batch ``header``."""
    with LogFile(segment.log_path) as log_file:
        return read_end_transaction_marker(log_file, header)


def _is_regular(path: Path) -> bool:
    """A regular file itself, not through a symbolic link (gone since the listing: no)."""
    try:
        return S_ISREG(path.lstat().st_mode)
    except FileNotFoundError:
        return False


def discover_partitions(log_dirs: Sequence[Path]) -> list[PartitionLog]:
    """Every ``<topic>-<n>`` directory of the log dirs, sorted by log dir then name.

    Directories of partitions being deleted, moved or left stray (``-delete``, ``-future``,
    ``-stray``), KRaft's ``__cluster_metadata-0`` (never tiered), hidden entries, plain files,
    and directories that vanish while being listed are skipped silently; any other directory
    whose name is not ``<topic>-<n>``, and a symbolic link (the broker never makes one; it may
    lead out of the log dir), is skipped with a warning.
    """
    found: list[PartitionLog] = []
    for log_dir in log_dirs:
        for entry in sorted(Path(log_dir).iterdir()):
            if not entry.is_dir() or entry.name.startswith(".") or entry.name.endswith(TRANSIENT_DIR_SUFFIXES):
                continue
            if entry.is_symlink():
                log.warning("skipping %s: a symbolic link, not a partition directory of the log dir", entry)
                continue
            try:
                partition = PartitionLog(entry, Path(log_dir))
            except InvalidTopicError as exc:
                log.warning("skipping %s: %s", entry, exc)
                continue
            except TieringError:
                if entry.is_dir():
                    raise
                continue  # renamed (deleted, moved) by the broker since the listing
            if partition.topic_partition.topic != CLUSTER_METADATA_TOPIC:
                found.append(partition)
    return found
