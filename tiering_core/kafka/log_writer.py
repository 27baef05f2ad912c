"""Writes a broker's partition directory the way the broker lays it out: for tests, the demo and restore.

What follows the broker (``UnifiedLog``, ``LocalLog``, ``LogSegment``, ``ProducerStateManager``):
- segments roll when the next batch would take the ``.log`` past ``segment_bytes``, when an
  index is full (``preallocate_index_bytes`` plays ``segment.index.bytes``: the time index is
  full one entry early, keeping room for the roll entry), or on ``roll()``;
- the active segment's ``.index``/``.timeindex`` are pre-allocated and zero-filled; entries
  are written in place as they are made (``IndexBuilder``, ``LogSegment.append``'s rule); a
  roll appends the final time-index entry and trims both files; ``.txnindex`` appears with the
  first aborted transaction;
- producer state (sequence, epoch, open transaction) per producer id; a snapshot named by the
  new base offset is written at every roll;
- ``become_leader`` assigns an epoch at the log end offset in ``leader-epoch-checkpoint``;
- root checkpoints are merged with the other partitions' entries; ``log-start-offset-checkpoint``
  holds an entry only while the log start is above the first segment's base (LogManager's rule);
- the log dir gets the broker's ``meta.properties`` (KRaft: version, node.id, directory.id,
  cluster.id) unless it has one; ``delete()`` renames the partition directory to
  ``<topic>-<partition>.<uuid>-delete`` as the broker does when the partition is deleted.

Truncation's files and the state read back from them are ``log_writer_reload.py``'s.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from tiering_core.kafka.batch import CODEC_NONE, RecordBatchHeader, parse_header
from tiering_core.kafka.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    atomic_write,
    new_topic_id,
    update_offset_checkpoint,
    write_leader_epoch_checkpoint,
    write_partition_metadata,
)
from tiering_core.kafka.epoch import LeaderEpochCache
from tiering_core.kafka.index import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    MAX_RELATIVE_OFFSET,
    OFFSET_ENTRY,
    TIME_ENTRY,
    AbortedTxn,
    encode_txn_index,
)
from tiering_core.kafka.index_rebuild import IndexBuilder
from tiering_core.kafka.log_dirs import META_PROPERTIES, delete_dir_name, encode_meta_properties
from tiering_core.kafka.log_writer_reload import (
    delete_segment_files,
    delete_snapshots_below,
    reload_log,
    truncate_segment_files,
)
from tiering_core.kafka.partition_log import LEADER_EPOCH_CHECKPOINT
from tiering_core.kafka.producer_snapshot import (
    ProducerStateEntry,
    encode_producer_snapshot,
    snapshot_file_name,
)
from tiering_core.kafka.producer_state import ProducerState, ProducerStateTracker
from tiering_core.kafka.records import (
    NO_SEQUENCE,
    ControlRecord,
    ControlRecordType,
    Header,
    RecordSpec,
    encode_batch,
    encode_control_batch,
)
from tiering_core.kafka.topic import TopicPartition

DEFAULT_SEGMENT_BYTES = 1024 * 1024
DEMO_NODE_ID = 1
DEMO_CLUSTER_ID = "7KHd2BmURF-kU5B8_7ZOXQ"  # one cluster: every log dir a writer makes belongs to it
DEFAULT_PREALLOCATE_INDEX_BYTES = 12 * 1024  # the broker's default is 10 MiB; small keeps tests light

RecordLike = RecordSpec | tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, Sequence[Header]]


def _spec(record: RecordLike, timestamp: int) -> RecordSpec:
    if isinstance(record, RecordSpec):
        return record
    headers: tuple[Header, ...] = tuple(record[2]) if len(record) > 2 else ()  # type: ignore[misc]
    return RecordSpec(record[0], record[1], timestamp, headers)


def write_meta_properties(log_dir: Path, node_id: int = DEMO_NODE_ID) -> Path:
    """The broker's ``meta.properties`` in ``log_dir``, unless it has one already."""
    path = Path(log_dir) / META_PROPERTIES
    if not path.exists():
        directory_id = new_topic_id()  # a base64 UUID, as Kafka's directory ids are
        atomic_write(path, encode_meta_properties(node_id, DEMO_CLUSTER_ID, directory_id))
    return path


class PartitionWriter:
    """Appends batches to one new partition directory exactly as a broker lays them out."""

    def __init__(
        self,
        log_dir: Path,
        tp: TopicPartition,
        *,
        topic_id: str | None = None,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        codec: int = CODEC_NONE,
        preallocate_index_bytes: int = DEFAULT_PREALLOCATE_INDEX_BYTES,
        clock: Callable[[], int] | None = None,
        initial_epoch: int = 0,
        seed: int | None = None,
        node_id: int = DEMO_NODE_ID,
    ) -> None:
        if segment_bytes <= 0 or index_interval_bytes < 0:
            raise ValueError("segment_bytes must be positive and index_interval_bytes not negative")
        if preallocate_index_bytes < 2 * TIME_ENTRY.size:
            raise ValueError(
                f"preallocate_index_bytes must hold at least two time-index entries ({2 * TIME_ENTRY.size})"
            )
        self.log_dir = Path(log_dir)
        self.tp = tp
        self.path = self.log_dir / str(tp)
        self.path.mkdir(parents=True, exist_ok=False)
        write_meta_properties(self.log_dir, node_id)
        self.topic_id = topic_id or new_topic_id()
        write_partition_metadata(self.path / PARTITION_METADATA, self.topic_id)
        self.segment_bytes = segment_bytes
        self.index_interval_bytes = index_interval_bytes
        self.codec = codec
        self.preallocate_index_bytes = preallocate_index_bytes
        self.clock: Callable[[], int] = clock or (lambda: int(time.time() * 1000))
        self.rng = random.Random(f"{tp}" if seed is None else seed)
        self.next_offset = 0
        self.log_start_offset = 0
        self.high_watermark: int | None = None
        self.epochs = LeaderEpochCache()
        self.state = ProducerStateTracker()  # every producer id's state and the open transactions
        self.in_transaction: set[int] = set()
        self._transaction_epochs: dict[int, int] = {}  # begin_transaction's epoch, until the first batch
        self._new_segment(0)
        self.become_leader(initial_epoch)

    def delete(self) -> Path:
        """Delete the partition as the broker does: its directory is renamed to
        ``<topic>-<partition>.<uuid>-delete`` (removed later); returns the new path."""
        self.flush()
        deleted = self.log_dir / delete_dir_name(self.tp)
        os.rename(self.path, deleted)
        self.path = deleted
        return deleted

    def __repr__(self) -> str:
        return f"PartitionWriter({self.path}, next_offset={self.next_offset})"

    # --- layout ----------------------------------------------------------------------------

    def _stem(self, base: int) -> Path:
        return self.path / f"{base:020d}"

    @property
    def active_log_path(self) -> Path:
        return self._stem(self.active_base).with_suffix(".log")

    def _max_entries(self, entry_size: int) -> int:
        return self.preallocate_index_bytes // entry_size

    def _new_segment(self, base: int) -> None:
        self.active_base = base
        self.active_size = 0
        self.builder = IndexBuilder(base, self.index_interval_bytes)
        self._stem(base).with_suffix(".log").touch()
        self._write_active_indexes()

    def _write_active_indexes(self) -> None:
        """Pre-allocated files (rounded down to whole entries, like the broker) holding the entries so far."""
        stem = self._stem(self.active_base)
        for suffix, data, entry_size in (
            (".index", self.builder.offset_index_bytes(), OFFSET_ENTRY.size),
            (".timeindex", self.builder.time_index_bytes(), TIME_ENTRY.size),
        ):
            size = max(self._max_entries(entry_size) * entry_size, len(data))
            stem.with_suffix(suffix).write_bytes(data + bytes(size - len(data)))
        txn = stem.with_suffix(".txnindex")
        if self.builder.aborted:
            txn.write_bytes(self.builder.txn_index_bytes())
        else:
            txn.unlink(missing_ok=True)

    def _write_entry(self, suffix: str, slot: int, data: bytes) -> None:
        fd = os.open(self._stem(self.active_base).with_suffix(suffix), os.O_WRONLY)
        try:
            os.pwrite(fd, data, slot * len(data))
        finally:
            os.close(fd)

    def _should_roll(self, batch_size: int, last_offset: int) -> bool:
        """``LogSegment.shouldRoll`` without time: size, full indexes, relative offset overflow."""
        if self.active_size == 0:
            return False
        return (
            self.active_size + batch_size > self.segment_bytes
            or len(self.builder.offset_entries) >= self._max_entries(OFFSET_ENTRY.size)
            or len(self.builder.time_entries) >= self._max_entries(TIME_ENTRY.size) - 1
            or last_offset - self.active_base > MAX_RELATIVE_OFFSET
        )

    @property
    def current_epoch(self) -> int:
        epoch = self.epochs.latest_epoch
        return 0 if epoch is None else epoch

    def segment_bases(self) -> list[int]:
        return sorted(int(p.name[:20]) for p in self.path.glob("*.log") if p.name[:20].isdigit() and len(p.name) == 24)

    # --- appends ---------------------------------------------------------------------------

    def _append_batch(self, batch: bytes) -> RecordBatchHeader:
        header = parse_header(batch, 0, self.active_log_path, len(batch))
        if header.base_offset != self.next_offset:
            raise ValueError(f"batch base offset {header.base_offset} is not the log end offset {self.next_offset}")
        if self._should_roll(len(batch), header.last_offset):
            self.roll()
        position = self.active_size
        with self.active_log_path.open("ab") as out:
            out.write(batch)
        self.active_size += len(batch)
        header = replace(header, position=position)
        builder = self.builder
        offsets, times = len(builder.offset_entries), len(builder.time_entries)
        builder.on_batch(header)
        if len(builder.offset_entries) > offsets:
            entry = builder.offset_entries[-1]
            self._write_entry(".index", offsets, OFFSET_ENTRY.pack(entry.offset - self.active_base, entry.position))
        if len(builder.time_entries) > times:
            tentry = builder.time_entries[-1]
            self._write_entry(".timeindex", times, TIME_ENTRY.pack(tentry.timestamp, tentry.offset - self.active_base))
        self.next_offset = header.next_offset
        return header

    def append(
        self,
        records: Sequence[RecordLike],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool | None = None,
        codec: int | None = None,
        timestamp: int | None = None,
    ) -> tuple[int, int]:
        """Append one batch; returns its (base offset, last offset).

        Tuples are ``(key, value)`` or ``(key, value, headers)`` stamped ``timestamp`` (default:
        the clock). With ``producer_id`` the batch is idempotent (sequence numbers continue the
        producer's; ``producer_epoch`` -1 keeps its epoch, 0 for a new producer);
        ``transactional`` defaults to whether ``begin_transaction`` was called for it.
        """
        if not records:
            raise ValueError("a batch needs at least one record")
        ts = self.clock() if timestamp is None else timestamp
        specs = [_spec(r, ts) for r in records]
        if transactional is None:
            transactional = producer_id in self.in_transaction
        if transactional and producer_id < 0:
            raise ValueError("a transactional batch needs a producer id")
        base = self.next_offset
        epoch, sequence = -1, NO_SEQUENCE
        if producer_id >= 0:
            if producer_epoch < 0:
                producer_epoch = self._transaction_epochs.get(producer_id, -1)
            epoch, sequence = self.state.next_batch(producer_id, producer_epoch)
        header = self._append_batch(
            encode_batch(
                specs,
                base_offset=base,
                partition_leader_epoch=self.current_epoch,
                codec=self.codec if codec is None else codec,
                producer_id=producer_id,
                producer_epoch=epoch,
                base_sequence=sequence,
                transactional=transactional,
            )
        )
        self.state.on_data_batch(header)
        return base, header.last_offset

    def append_records(
        self, count: int, *, value_size: int = 100, per_batch: int = 10, key_prefix: str = "key"
    ) -> tuple[int, int]:
        """``count`` records with keys and (seeded, pseudo-random) text values in batches of ``per_batch``."""
        first = self.next_offset
        written = 0
        while written < count:
            n = min(per_batch, count - written)
            self.append(
                [
                    (
                        f"{key_prefix}-{written + i}".encode(),
                        self.rng.randbytes((value_size + 1) // 2).hex()[:value_size].encode(),
                    )
                    for i in range(n)
                ]
            )
            written += n
        return first, self.next_offset - 1

    # --- transactions ----------------------------------------------------------------------

    def begin_transaction(self, producer_id: int, producer_epoch: int = -1) -> None:
        """Later appends of ``producer_id`` are transactional; the transaction starts with the first one."""
        if producer_id < 0:
            raise ValueError("a transaction needs a producer id")
        self._transaction_epochs[producer_id] = producer_epoch  # state comes with the first batch
        self.in_transaction.add(producer_id)

    def _end_transaction(self, producer_id: int, kind: ControlRecordType, coordinator_epoch: int) -> int:
        producer = self.state.producers.get(producer_id)
        if producer is None:
            raise ValueError(f"producer {producer_id} has written nothing to {self.tp}: no transaction to end")
        marker = self.next_offset
        header = self._append_batch(
            encode_control_batch(
                kind,
                base_offset=marker,
                partition_leader_epoch=self.current_epoch,
                producer_id=producer_id,
                producer_epoch=producer.epoch,
                coordinator_epoch=coordinator_epoch,
                timestamp=self.clock(),
            )
        )
        # ProducerAppendInfo.appendEndTxnMarker, then the txn index with the LSO at this point.
        self.in_transaction.discard(producer_id)
        entry = self.state.on_end_marker(header, ControlRecord(kind, coordinator_epoch))
        if entry is not None:
            self._append_aborted(entry)
        return marker

    def _append_aborted(self, entry: AbortedTxn) -> None:
        self.builder.aborted.append(entry)
        with self._stem(self.active_base).with_suffix(".txnindex").open("ab") as out:
            out.write(encode_txn_index([entry]))

    def commit(self, producer_id: int, coordinator_epoch: int = 0) -> int:
        """Write a COMMIT marker for the producer's transaction; returns the marker's offset."""
        return self._end_transaction(producer_id, ControlRecordType.COMMIT, coordinator_epoch)

    def abort(self, producer_id: int, coordinator_epoch: int = 0) -> int:
        """Write an ABORT marker; the transaction goes into the segment's ``.txnindex``."""
        return self._end_transaction(producer_id, ControlRecordType.ABORT, coordinator_epoch)

    # --- leadership ------------------------------------------------------------------------

    def _write_epochs(self) -> None:
        write_leader_epoch_checkpoint(self.path / LEADER_EPOCH_CHECKPOINT, list(self.epochs.entries))

    def become_leader(self, epoch: int) -> None:
        """A new leader epoch starting at the log end offset (``maybeAssignEpochStartOffset``)."""
        self.epochs = self.epochs.assign(epoch, self.next_offset)
        self._write_epochs()

    def truncate_epoch_cache_from_start(self, offset: int) -> None:
        """The broker's ``truncateFromStart`` after its log start moved to ``offset``."""
        self.epochs = self.epochs.truncate_from_start(offset)
        self._write_epochs()

    # --- rolls and checkpoints -------------------------------------------------------------

    @property
    def producers(self) -> dict[int, ProducerState]:
        """Producer id -> its state, as the next snapshot would hold it."""
        return self.state.producers

    @property
    def ongoing(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction."""
        return self.state.ongoing

    def snapshot_entries(self) -> list[ProducerStateEntry]:
        return self.state.snapshot_entries()

    def roll(self) -> int:
        """Close the active segment (final time entry, trimmed indexes), snapshot producers, start the next.

        Returns the new active segment's base offset; an empty active segment does not roll.
        """
        if self.active_size == 0:
            return self.active_base
        self.builder.on_roll()
        stem = self._stem(self.active_base)
        stem.with_suffix(".index").write_bytes(self.builder.offset_index_bytes())
        stem.with_suffix(".timeindex").write_bytes(self.builder.time_index_bytes())
        new_base = self.next_offset
        (self.path / snapshot_file_name(new_base)).write_bytes(encode_producer_snapshot(self.snapshot_entries()))
        self._new_segment(new_base)
        return new_base

    def flush(self) -> None:
        """Rewrite the active segment's index files from memory (they are already kept current)."""
        self._write_active_indexes()

    def set_high_watermark(self, offset: int | None = None) -> int:
        """The high watermark (default: the log end offset), then every root checkpoint."""
        hw = self.next_offset if offset is None else offset
        if not 0 <= hw <= self.next_offset:
            raise ValueError(f"high watermark {hw} is outside [0, {self.next_offset}]")
        self.high_watermark = hw
        self.write_checkpoints()
        return hw

    def write_checkpoints(self) -> None:
        """What LogManager's checkpoint threads write for this partition, merged with the others' entries."""
        if self.high_watermark is not None:
            update_offset_checkpoint(self.log_dir / REPLICATION_OFFSET_CHECKPOINT, self.tp, self.high_watermark)
        update_offset_checkpoint(self.log_dir / RECOVERY_POINT_CHECKPOINT, self.tp, self.next_offset)
        first_base = self.segment_bases()[0]
        update_offset_checkpoint(
            self.log_dir / LOG_START_OFFSET_CHECKPOINT,
            self.tp,
            self.log_start_offset if self.log_start_offset > first_base else None,
        )

    # --- the broker's own deletions --------------------------------------------------------

    def delete_oldest_segments(self, count: int, *, async_delete: bool = False) -> int:
        """The broker's own local retention: drop the oldest closed segments (never the active one).

        The log start moves up to the new first segment, the epoch cache is truncated from the
        start there, and snapshots below it go. Returns the new local log start offset.
        """
        bases = self.segment_bases()
        count = max(0, min(count, len(bases) - 1))
        for base in bases[:count]:
            delete_segment_files(self._stem(base), async_delete=async_delete)
        new_start = bases[count]
        delete_snapshots_below(self.path, new_start)
        self.log_start_offset = max(self.log_start_offset, new_start)
        self.truncate_epoch_cache_from_start(self.log_start_offset)
        self.write_checkpoints()
        return new_start

    def delete_records(self, before_offset: int) -> None:
        """A DeleteRecords request: the log start moves to ``before_offset``, segments wholly below go.

        The ``log-start-offset-checkpoint`` entry stays while the log start is above the first
        remaining segment's base (so not when ``before_offset`` is exactly a segment base). A
        follower taking its leader's log start leaves the same files (Kafka's
        ``maybeIncrementLogStartOffset`` does both).
        """
        if before_offset > self.next_offset:  # the broker also refuses offsets above the high watermark
            raise ValueError(f"DeleteRecords offset {before_offset} is beyond the log end offset {self.next_offset}")
        if before_offset <= self.log_start_offset:  # the log start never moves back
            return
        self.log_start_offset = before_offset
        self.truncate_epoch_cache_from_start(before_offset)
        self.write_checkpoints()  # the entry, while the old segments are still there
        bases = self.segment_bases()
        deletable = sum(1 for following in bases[1:] if following <= before_offset)
        if deletable:
            self.delete_oldest_segments(deletable)

    def truncate_to(self, offset: int, *, async_delete: bool = False) -> None:
        """Truncate the log to ``offset`` (a batch boundary), as a follower does after an unclean election.

        Segments above it go, the one holding it is cut and becomes active again with its
        indexes rebuilt from the ``.log``; producer state is reloaded from the newest snapshot
        at or below ``offset``, later snapshots are deleted; the epoch cache is truncated from
        the end; the high watermark is capped. ``async_delete``: the segments and snapshots
        above ``offset`` are renamed ``*.deleted`` as a real broker does (it deletes them after
        ``file.delete.delay.ms``, 60 s by default), so a refetched segment of the same base
        offset sits beside its divergent predecessor's ``.log.deleted`` for a while.
        """
        if not self.log_start_offset <= offset <= self.next_offset:
            raise ValueError(f"cannot truncate to {offset}: outside [{self.log_start_offset}, {self.next_offset}]")
        keep_base = truncate_segment_files(self.path, self.segment_bases(), offset, async_delete=async_delete)
        self.epochs = self.epochs.truncate_from_end(offset)
        self._write_epochs()
        self._reload(keep_base)
        if self.high_watermark is not None and self.high_watermark > self.next_offset:
            self.high_watermark = self.next_offset
        self.write_checkpoints()

    def _reload(self, active_base: int) -> None:
        """Producer state and the active segment's bookkeeping, replayed from snapshot and ``.log`` files."""
        bases = [b for b in self.segment_bases() if b <= active_base]
        reloaded = reload_log(self.path, bases, active_base, self.index_interval_bytes)
        self.state = reloaded.state
        self.in_transaction = {pid for pid in self.in_transaction if pid in self.state.ongoing}
        self.active_base, self.active_size, self.builder = active_base, reloaded.active_size, reloaded.builder
        self.next_offset = reloaded.next_offset
        self._write_active_indexes()
