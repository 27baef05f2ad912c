"""Reads from the remote tier (docs/kafka-rules.md section 8, with section 10's lineage).

Only COPY_SEGMENT_FINISHED segments inside the partition's lineage serve reads, from the global
log start offset up to the highest copied offset; what lies above is the broker's to serve.

- By offset: ``epoch_for_offset`` in the lineage, ``segment_for(epoch, offset)``, the byte
  position from the segment's remote offset index, then batches streamed from there; the first
  batch with last offset >= the fetch offset starts the answer. A segment with nothing at or
  above the offset hands over to the next one.
- Isolation (read_committed, as a Kafka consumer with ``isolation.level=read_committed``): a
  transactional batch of producer P at offset x is dropped iff an aborted transaction (P,
  first <= x <= last) exists (``tiering_core.kafka.isolation``). The entry sits in the
  ``.txnindex`` of the segment holding the ABORT marker, which may be a later segment than the
  data (a transaction spans a roll), or not tiered yet: so the txn index objects of served
  segments from the read position on are read (only those that have one, and no further than
  Kafka's stop rule: an entry whose last stable offset reaches the end of the range), then, if
  still incomplete, the local log's ``.txnindex`` files. Control records are never returned, at
  either level. Records are decoded into Arrow batches (``tiering_core.kafka.arrow``), as many
  Kafka batches at a time as the records still wanted take, so a read stops where the record
  decoder stopped.
- By timestamp: from the starting offset on, the first served segment whose max timestamp
  reaches the target, seeked through its time index then its offset index; the first record
  with timestamp >= target (and offset >= the starting offset), with its batch's leader epoch.
  Control records count, as in Kafka's ``searchForTimestamp`` (local and remote alike): the
  answer may be a transaction marker's offset, and the isolation level plays no part.

Index files come through a ``RemoteIndexCache``: least recently used out first, bounded by
bytes, each entry checked against the CRC-32C the metadata recorded at copy time, so a corrupt
cached or stored index is never used (a damaged stored offset or time index only costs a scan
from the segment's start, and is logged so ``tiering rebuild-indexes`` can repair it).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

import numpy as np
import pyarrow as pa

from tiering_core.engine.segment_ops import segment_ref
from tiering_core.errors import NoRemoteDataError, PartitionNotInLogDirsError, TieringError
from tiering_core.kafka import arrow
from tiering_core.kafka.batch import RecordBatchHeader
from tiering_core.kafka.crc import crc32c
from tiering_core.kafka.files import SNAPSHOT_READ_LIMIT
from tiering_core.kafka.index import (
    AbortedTxn,
    collect_aborted_txns,
    lookup_offset,
    lookup_timestamp,
    parse_offset_index,
    parse_time_index,
    parse_txn_index,
)
from tiering_core.kafka.isolation import IsolationLevel, local_aborted_txns
from tiering_core.kafka.producer_snapshot import parse_producer_snapshot
from tiering_core.kafka.records import Record, decode_batch, read_batch_data
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metrics import names
from tiering_core.metrics.tally import Tally
from tiering_core.storage.checksum import crc_hex
from tiering_core.storage.errors import RemoteObjectNotFoundError
from tiering_core.storage.layout import ObjectKind
from tiering_core.storage.manifest import CopyRecord
from tiering_core.tier.view import (
    TierView,
    finished_in_lineage,
    is_in_lineage,
    load_remote_tier_view,
    load_tier_view,
)

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.metadata.store import RemoteLogMetadataStore, RemoteLogSegmentMetadata
from tiering_core.read.index_cache import RemoteIndexCache, cache_directory

log = logging.getLogger(__name__)


__all__ = ["FetchedRecord", "IsolationLevel", "OffsetOutOfRangeError", "RemoteLogReader", "TimestampAndOffset"]


class OffsetOutOfRangeError(TieringError):
    """The offset is not in the remote tier (below the log start, or above what was copied)."""


@dataclass(frozen=True)
class FetchedRecord:
    """One record as ``tiering fetch`` prints it (docs/architecture.md's ``fetch`` contract)."""

    offset: int
    timestamp: int
    leader_epoch: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_type: str = arrow.TIMESTAMP_TYPES[0]  # Kafka's name: CreateTime or LogAppendTime (of the batch)

    @classmethod
    def of(cls, record: Record) -> FetchedRecord:
        return cls(record.offset, record.timestamp, record.leader_epoch, record.key, record.value, record.headers)

    @classmethod
    def rows(cls, batch: pa.RecordBatch) -> list[FetchedRecord]:
        """The records of an Arrow batch in ``tiering_core.kafka.arrow.SCHEMA``."""
        return [
            cls(offset, timestamp, epoch, key, value, headers, timestamp_type)
            for offset, timestamp, epoch, key, value, headers, timestamp_type in zip(
                batch.column("offset").to_pylist(),
                batch.column("timestamp").cast(pa.int64()).to_pylist(),
                batch.column("leader_epoch").to_pylist(),
                batch.column("key").to_pylist(),
                batch.column("value").to_pylist(),
                _header_tuples(batch.column("headers")),
                batch.column("timestamp_type").to_pylist(),
                strict=True,
            )
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "timestamp": self.timestamp,
            "leader_epoch": self.leader_epoch,
            "key": _b64(self.key),
            "value": _b64(self.value),
            "headers": [{"key": k, "value": _b64(v)} for k, v in self.headers],
        }


@dataclass(frozen=True)
class TimestampAndOffset:
    """Kafka's answer to ListOffsets by timestamp: the first record at or after it."""

    offset: int
    timestamp: int
    leader_epoch: int

    def to_dict(self) -> dict[str, int]:
        return {"offset": self.offset, "timestamp": self.timestamp, "leader_epoch": self.leader_epoch}


def _header_tuples(column: pa.ListArray) -> list[tuple[tuple[str, bytes | None], ...]]:
    """Each record's headers as ``(key, value)`` pairs, from the list column's offsets into its
    values (one conversion of all the keys and values, not a dict per header)."""
    offsets = column.offsets.to_numpy()
    if offsets[-1] == offsets[0]:
        return [()] * len(column)
    values = column.values
    pairs = list(zip(values.field("key").to_pylist(), values.field("value").to_pylist(), strict=True))
    return [tuple(pairs[start:end]) for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)]


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


class _CountedStream:
    """A stream that adds the bytes read through it to its reader's count."""

    def __init__(self, stream: BinaryIO, reader: RemoteLogReader) -> None:
        self._stream = stream
        self._reader = reader

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        self._reader.fetched_bytes += len(data)
        return data


class RemoteLogReader:
    """Records and offsets of one partition's remote tier, as a consumer would see them.

    Each ``read`` and ``offset_for_timestamp`` is one remote fetch request: counted with the bytes
    it read from the remote tier (and as an error when it fails, but for an offset out of range,
    the caller's mistake) and stored in the partition's counters when it returns (``tally``, on
    no broker)."""

    def __init__(self, view: TierView, store: RemoteLogMetadataStore, cache: RemoteIndexCache) -> None:
        self.view = view
        self.store = store
        self.cache = cache
        self.storage = cache.storage
        self._served = finished_in_lineage(view, store)
        self.tally = Tally(view.tip)
        self.fetched_bytes = 0

    @contextmanager
    def _request(self) -> Iterator[None]:
        """One remote fetch request, counted and stored when it ends."""
        self.tally.count(names.REMOTE_FETCH_REQUESTS)
        self.fetched_bytes = 0
        try:
            yield
        except OffsetOutOfRangeError:
            raise
        except Exception:
            self.tally.count(names.REMOTE_FETCH_ERRORS)
            raise
        finally:
            if self.fetched_bytes:
                self.tally.count(names.REMOTE_FETCH_BYTES, self.fetched_bytes)
            self.tally.store(self.store)

    @property
    def tp(self) -> str:
        tp = self.view.tip.topic_partition
        return f"{tp.topic}-{tp.partition}"

    @property
    def log_start_offset(self) -> int | None:
        """The first offset the remote tier serves (None when it serves nothing)."""
        if not self._served:
            return None
        first = min(s.first_epoch_offset for s in self._served)
        start = self.view.global_log_start_offset
        return first if start is None else max(first, start)

    @property
    def highest_offset(self) -> int:
        return self.view.highest_copied_offset

    def check_offset(self, offset: int) -> None:
        start = self.log_start_offset
        if start is None:
            raise OffsetOutOfRangeError(f"{self.tp}: the remote tier holds no data yet")
        if offset < start:
            raise OffsetOutOfRangeError(f"{self.tp}: offset {offset} is below the log start offset {start}")
        if offset > self.highest_offset:
            raise OffsetOutOfRangeError(
                f"{self.tp}: offset {offset} is above the remote tier (highest copied offset {self.highest_offset}); "
                "the broker serves it"
            )

    def segment_for(self, offset: int) -> RemoteLogSegmentMetadata | None:
        """The served segment holding ``offset``, else the first served one after it (also one that
        starts below it but whose epochs cover only offsets after it)."""
        epoch = self.view.lineage.epoch_for_offset(offset)
        if epoch is not None:
            found = self.store.segment_for(self.view.tip, epoch, offset)
            if found is not None and is_in_lineage(self.view, found):
                return found
        later = [s for s in self._served if s.first_epoch_offset > offset]
        return min(later, key=lambda s: s.first_epoch_offset) if later else None

    def _position(self, segment: RemoteLogSegmentMetadata, offset: int) -> int:
        data = self.cache.get(segment, ObjectKind.OFFSET_INDEX)
        if data is None:
            return 0  # no usable index: scan the segment from its start
        entries = parse_offset_index(data, segment.start_offset, Path(f"<{segment.segment_id}.index>"))
        return lookup_offset(entries, segment.start_offset, offset).position

    def _where(self, segment: RemoteLogSegmentMetadata) -> Path:
        return Path(self.storage.describe(segment_ref(segment).key(ObjectKind.LOG, self.storage.prefix)))

    def _batch_data(self, segment: RemoteLogSegmentMetadata, position: int) -> Iterator[tuple[int, bytes]]:
        """The segment's whole batches from ``position``, read one at a time from its log object."""
        try:
            with self.storage.open_stream(segment_ref(segment), ObjectKind.LOG, position) as stream:
                counted = cast(BinaryIO, _CountedStream(stream, self))
                yield from read_batch_data(counted, self._where(segment), position, segment.size_bytes)
        except RemoteObjectNotFoundError as exc:
            raise TieringError(
                f"{self.tp}: segment {segment.segment_id} is finished but its log is gone: {exc}"
            ) from exc

    def _batches(
        self, segment: RemoteLogSegmentMetadata, position: int
    ) -> Iterator[tuple[RecordBatchHeader, list[Record]]]:
        where = self._where(segment)
        for at, data in self._batch_data(segment, position):
            yield decode_batch(data, where, at)

    def read(
        self, offset: int, max_records: int, isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    ) -> list[FetchedRecord]:
        """Up to ``max_records`` data records from ``offset`` (control records are skipped; with
        read_committed, so are the batches of aborted transactions)."""
        with self._request():
            return self._read(offset, max_records, isolation)

    def _read(self, offset: int, max_records: int, isolation: IsolationLevel) -> list[FetchedRecord]:
        self.check_offset(offset)
        out: list[FetchedRecord] = []
        next_offset = offset
        while len(out) < max_records and next_offset <= self.highest_offset:
            segment = self.segment_for(next_offset)
            if segment is None:
                break
            next_offset = max(next_offset, segment.first_epoch_offset)
            aborted: set[AbortedTxn] = set()
            if isolation == IsolationLevel.READ_COMMITTED:
                aborted = self.aborted_transactions(next_offset, segment.end_offset + 1)
            batches = arrow.decode_batches(
                self._batch_data(segment, self._position(segment, next_offset)),
                self._where(segment),
                self.view.tip.topic_partition,
                isolation=isolation,
                aborted=aborted,
                records_wanted=lambda: max_records - len(out),
            )
            for batch in batches:
                offsets = batch.column("offset").to_numpy()
                wanted = np.flatnonzero((offsets >= next_offset) & (offsets <= self.highest_offset))
                out.extend(FetchedRecord.rows(batch.take(pa.array(wanted[: max_records - len(out)]))))
                if len(out) == max_records:
                    return out
            next_offset = segment.end_offset + 1
        return out

    def offset_for_timestamp(self, timestamp: int, starting_offset: int | None = None) -> TimestampAndOffset | None:
        """The first record (a control record too) with timestamp >= ``timestamp`` and offset >=
        ``starting_offset``."""
        with self._request():
            return self._offset_for_timestamp(timestamp, starting_offset)

    def _offset_for_timestamp(self, timestamp: int, starting_offset: int | None) -> TimestampAndOffset | None:
        start = self.log_start_offset
        if start is None:
            return None
        if starting_offset is not None:
            self.check_offset(starting_offset)
            start = starting_offset
        for segment in sorted(self._served, key=lambda s: (s.start_offset, s.event_time)):
            if segment.end_offset < start or segment.max_timestamp < timestamp:
                continue
            # As Kafka's LogSegment.findOffsetByTimestamp: the time index names an offset whose batch
            # starts the scan; records before it in that batch may match too, so filter by ``start`` only.
            seek = max(start, self._time_seek(segment, timestamp))
            for _header, records in self._batches(segment, self._position(segment, seek)):
                for record in records:
                    if record.offset >= start and record.timestamp >= timestamp:
                        return TimestampAndOffset(record.offset, record.timestamp, record.leader_epoch)
        return None

    def aborted_transactions(self, fetch_offset: int, upper_offset: int) -> set[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_offset), as Kafka's
        ``RemoteLogManager.collectAbortedTransactions`` gathers them for a remote fetch: the txn
        indexes of served segments from ``fetch_offset`` on (only segments that have one), then,
        while the search is incomplete, the local log's (markers not tiered yet)."""
        found: set[AbortedTxn] = set()
        later = sorted(
            (s for s in self._served if s.end_offset >= fetch_offset and _has_txn_index(s)),
            key=lambda s: (s.start_offset, s.event_time),
        )
        for segment in later:
            data = self.cache.get(segment, ObjectKind.TRANSACTION_INDEX)
            if data is None:
                raise TieringError(
                    f"{self.tp}: the transaction index of segment {segment.segment_id} is missing or damaged, so "
                    "aborted transactions cannot be told apart (tiering rebuild-indexes repairs it)"
                )
            result = collect_aborted_txns(
                parse_txn_index(data, Path(f"<{segment.segment_id}.txnindex>")), fetch_offset, upper_offset
            )
            found.update(result.aborted)
            if result.is_complete:
                return found
        return found | local_aborted_txns(self._local_txn_indexes(fetch_offset), fetch_offset, upper_offset)

    def first_undecided_offset(self) -> int | None:
        """Without the broker's log (a deleted topic, the tier read alone): the first offset of a
        transaction still open at the end of the tiered data, whose marker was never tiered, so
        read_committed cannot tell its records from committed ones (from the last served
        segment's producer snapshot). None when every transaction is decided, or the broker's
        log is there to decide it."""
        if self.view.local_log is not None or not self._served:
            return None
        last = max(self._served, key=lambda s: (s.end_offset, s.event_time))
        try:
            data = self.storage.fetch(segment_ref(last), ObjectKind.PRODUCER_SNAPSHOT, 0, SNAPSHOT_READ_LIMIT)
        except RemoteObjectNotFoundError:
            data = None
        expected = CopyRecord.of_segment(last).crc(ObjectKind.PRODUCER_SNAPSHOT)
        if data is None or len(data) > SNAPSHOT_READ_LIMIT or (expected and crc_hex(crc32c(data)) != expected):
            raise TieringError(
                f"{self.tp}: the producer snapshot of segment {last.segment_id} is missing or damaged, so "
                "transactions still open at the end of the tier cannot be told apart"
            )
        entries = parse_producer_snapshot(data, Path(f"<{last.segment_id}.snapshot>"))
        opened = [e.current_txn_first_offset for e in entries if e.has_open_transaction]
        return min(opened) if opened else None

    def _local_txn_indexes(self, fetch_offset: int) -> list[Path]:
        """The broker's ``.txnindex`` files of segments that may hold markers at or after
        ``fetch_offset`` (a segment rolled or deleted by the broker since the listing is skipped)."""
        if self.view.local_log is None:  # the partition's directory is gone: the remote tier is all
            return []
        segments = self.view.local_log.segments
        return [
            segment.log_path.with_suffix(".txnindex")
            for i, segment in enumerate(segments)
            if not (i + 1 < len(segments) and segments[i + 1].base_offset <= fetch_offset)
        ]

    def _time_seek(self, segment: RemoteLogSegmentMetadata, timestamp: int) -> int:
        data = self.cache.get(segment, ObjectKind.TIME_INDEX)
        if data is None:
            return segment.start_offset
        entries = parse_time_index(data, segment.start_offset, Path(f"<{segment.segment_id}.timeindex>"))
        return lookup_timestamp(entries, segment.start_offset, timestamp).offset


def _has_txn_index(segment: RemoteLogSegmentMetadata) -> bool:
    """Whether copy stored a txn index object (it stores none for a segment without aborts)."""
    record = CopyRecord.of_segment(segment)
    return ObjectKind.TRANSACTION_INDEX.value in record.objects or record.crc(ObjectKind.TRANSACTION_INDEX) is not None


def open_reader(ctx: TieringContext, tp: TopicPartition, cache: RemoteIndexCache | None = None) -> RemoteLogReader:
    """A reader over the partition's remote tier, with the config's index cache.

    A process of a cluster that serves no broker (several configured, none chosen: ``fetch`` needs
    no broker id) reads the remote tier alone, of the partition's newest topic id the store holds
    live; so does a broker's process once the broker holds no directory of the partition (its data
    is in the tier); otherwise it reads the tier joined with its own replica's lineage."""
    if ctx.config.serves_no_broker:
        return _newest_remote_reader(ctx, tp, cache)
    try:
        partition_log = ctx.partition_log(tp)
    except PartitionNotInLogDirsError as gone:  # what was tiered of it is still served, from the tier alone
        try:
            return _newest_remote_reader(ctx, tp, cache)
        except NoRemoteDataError:
            raise gone from None
    return _reader(ctx, load_tier_view(partition_log, ctx.metadata), cache)


def _newest_remote_reader(ctx: TieringContext, tp: TopicPartition, cache: RemoteIndexCache | None) -> RemoteLogReader:
    """A reader over the remote tier alone of the newest topic id of ``tp`` the store holds live."""
    live = [r for r in ctx.metadata.list_partitions() if r.topic_partition == tp and r.live]
    if not live:
        raise NoRemoteDataError(tp)
    newest = max(live, key=lambda r: (r.created_ms, r.topic_id))
    return open_remote_reader(ctx, TopicIdPartition(newest.topic_id, tp), cache)


def open_remote_reader(
    ctx: TieringContext, tip: TopicIdPartition, cache: RemoteIndexCache | None = None
) -> RemoteLogReader:
    """A reader over ``tip``'s remote tier alone, for a partition the broker holds no directory of
    (``load_remote_tier_view``)."""
    return _reader(ctx, load_remote_tier_view(ctx.metadata, tip), cache)


def _reader(ctx: TieringContext, view: TierView, cache: RemoteIndexCache | None) -> RemoteLogReader:
    if cache is None:
        cache = RemoteIndexCache(ctx.storage, ctx.config.index_cache_bytes, cache_directory(ctx.config.index_cache_dir))
    return RemoteLogReader(view, ctx.metadata, cache)
