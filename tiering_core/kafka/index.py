"""Offset, time and transaction indexes: codecs, lookups, rebuild from a ``.log``, and checks of a broker's files.

The rebuild follows a broker's ``LogSegment.append`` (and ``LogSegment.recover``, which runs
the same rule): an index entry is added when more than ``index.interval.bytes`` were appended
since the last one (counted before the current batch), mapping the batch's last offset to its
start position; the time index gets (max timestamp so far, its offset) at the same cadence when
the timestamp grew, and once more when the segment rolls. So a rebuild is byte for byte what a
broker writes while it appends a segment's batches one by one in a single run, and what the
platform uploads when it rebuilds an index itself.

A broker's own files may differ from that and still be correct (checked against Kafka's
``LogSegment``, ``LocalLog`` and ``UnifiedLog``):

- ``bytesSinceLastIndexEntry`` lives only in memory: a segment reloaded after a broker restart
  starts it at 0, and so does ``truncateTo``, so the next entry comes later than a rebuild puts it;
- a follower appends each fetched chunk of batches with one ``LogSegment.append``: its entry
  maps the chunk's last offset to the chunk's first batch (a produce request carrying several
  batches for one partition does the same on the leader);
- ``LogSegment.recover`` (after an unclean shutdown) and ``close`` (a clean one) append the final
  time-index entry to the active segment too, not only at a roll;
- ``index.interval.bytes`` is a dynamic topic config, so the spacing may change mid-segment;
- brokers before Kafka 3.8 stored the offset of the record with the largest timestamp in the
  time index, not its batch's last offset.

``check_broker_index`` tells these apart from damage: a stored index that differs from the
rebuild is ``EQUIVALENT`` when it is a valid index for the ``.log`` (every lookup through it
finds the right batch), and ``DAMAGED`` otherwise.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.batch import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    HEADER_ONLY_FROM,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    READ_CHUNK,
    Buffer,
    LogFile,
    RecordBatchHeader,
    iter_batch_headers,
    parse_header_at,
)
from tiering_core.kafka.records import ControlRecord, ControlRecordType, decode_control_record, decode_records

DEFAULT_INDEX_INTERVAL_BYTES = 4096
NO_TIMESTAMP = -1
TXN_INDEX_VERSION = 0
OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
TXN_ENTRY = struct.Struct(">hqqqq")
MAX_RELATIVE_OFFSET = 2**31 - 1
# baseOffset, batchLength, (leaderEpoch skipped), magic, (crc skipped), attributes, lastOffsetDelta,
# (baseTimestamp skipped), maxTimestamp, producerId
_REBUILD_FIELDS = struct.Struct(">qi4xb4xhi8xqq")


@dataclass(frozen=True)
class OffsetIndexEntry:
    """An absolute offset and the byte position of the batch that holds it (or an earlier one)."""

    offset: int
    position: int


@dataclass(frozen=True)
class TimeIndexEntry:
    """The largest timestamp seen so far in the segment and the (batch last) offset carrying it."""

    timestamp: int
    offset: int


@dataclass(frozen=True)
class AbortedTxn:
    """One ``.txnindex`` entry: an aborted transaction's range and the LSO when its marker was written."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


# --- codecs ----------------------------------------------------------------------------------


def encode_offset_index(entries: Sequence[OffsetIndexEntry], base_offset: int) -> bytes:
    return b"".join(OFFSET_ENTRY.pack(e.offset - base_offset, e.position) for e in entries)


def encode_time_index(entries: Sequence[TimeIndexEntry], base_offset: int) -> bytes:
    return b"".join(TIME_ENTRY.pack(e.timestamp, e.offset - base_offset) for e in entries)


def encode_txn_index(entries: Sequence[AbortedTxn]) -> bytes:
    return b"".join(
        TXN_ENTRY.pack(TXN_INDEX_VERSION, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)
        for e in entries
    )


def _check_size(data: bytes, entry_size: int, path: Path, what: str) -> None:
    if len(data) % entry_size:
        raise CorruptLogError(
            path,
            len(data) - len(data) % entry_size,
            f"{what} size {len(data)} is not a multiple of its {entry_size}-byte entries",
        )


def parse_offset_index(data: bytes, base_offset: int, path: Path = Path("<memory>")) -> list[OffsetIndexEntry]:
    """Entries up to the first all-zero one (the pre-allocated tail of an active segment).

    No real entry is all zero: the first batch of a segment never gets an entry, so no entry
    has position 0. Entries must grow strictly in offset and position, as the broker appends them.
    """
    _check_size(data, OFFSET_ENTRY.size, path, "offset index")
    entries: list[OffsetIndexEntry] = []
    last_offset, last_position = -1, -1
    for i, (rel, position) in enumerate(OFFSET_ENTRY.iter_unpack(data)):
        if rel == 0 and position == 0:
            break
        if rel < 0 or position < 0:
            raise CorruptLogError(
                path, i * OFFSET_ENTRY.size, f"offset index entry ({rel}, {position}) has a negative field"
            )
        offset = base_offset + rel
        if offset <= last_offset or position <= last_position:
            raise CorruptLogError(
                path,
                i * OFFSET_ENTRY.size,
                f"offset index entry (offset {offset}, position {position}) does not follow "
                f"(offset {last_offset}, position {last_position}): entries go backwards",
            )
        entries.append(OffsetIndexEntry(offset, position))
        last_offset, last_position = offset, position
    return entries


def parse_time_index(data: bytes, base_offset: int, path: Path = Path("<memory>")) -> list[TimeIndexEntry]:
    """Entries up to the zero-filled tail; timestamps and offsets never go backwards.

    An all-zero entry after the first is always the tail (a later entry has a larger timestamp
    and a later offset). The first entry is all zero only for a record stamped 0 ms at the
    base offset; it counts as real only when a non-zero entry follows, otherwise the index is
    read as empty, which looks up the same position (the segment's start) anyway.
    """
    _check_size(data, TIME_ENTRY.size, path, "time index")
    entries: list[TimeIndexEntry] = []
    last_ts, last_offset = -1, -1
    for i, (ts, rel) in enumerate(TIME_ENTRY.iter_unpack(data)):
        if ts == 0 and rel == 0:
            if i > 0 or len(data) < 2 * TIME_ENTRY.size or TIME_ENTRY.unpack_from(data, TIME_ENTRY.size) == (0, 0):
                break
        if rel < 0:
            raise CorruptLogError(path, i * TIME_ENTRY.size, f"time index entry ({ts}, {rel}) has a negative offset")
        offset = base_offset + rel
        if entries and (ts < last_ts or offset < last_offset):
            raise CorruptLogError(
                path,
                i * TIME_ENTRY.size,
                f"time index entry (timestamp {ts}, offset {offset}) does not follow "
                f"(timestamp {last_ts}, offset {last_offset}): entries go backwards",
            )
        entries.append(TimeIndexEntry(ts, offset))
        last_ts, last_offset = ts, offset
    return entries


def parse_txn_index(data: bytes, path: Path = Path("<memory>")) -> list[AbortedTxn]:
    """Aborted transactions in the order their markers were appended (no pre-allocation here)."""
    _check_size(data, TXN_ENTRY.size, path, "transaction index")
    entries = []
    for i, (version, pid, first, last, lso) in enumerate(TXN_ENTRY.iter_unpack(data)):
        if version != TXN_INDEX_VERSION:
            raise CorruptLogError(path, i * TXN_ENTRY.size, f"transaction index entry version {version} (expected 0)")
        if first > last:
            raise CorruptLogError(
                path,
                i * TXN_ENTRY.size,
                f"aborted transaction of producer {pid} has first offset {first} > last {last}",
            )
        entries.append(AbortedTxn(pid, first, last, lso))
    return entries


def read_offset_index(path: Path, base_offset: int) -> list[OffsetIndexEntry]:
    return parse_offset_index(Path(path).read_bytes(), base_offset, Path(path))


def read_time_index(path: Path, base_offset: int) -> list[TimeIndexEntry]:
    return parse_time_index(Path(path).read_bytes(), base_offset, Path(path))


def read_txn_index(path: Path) -> list[AbortedTxn]:
    return parse_txn_index(Path(path).read_bytes(), Path(path))


_ZERO_OFFSET_ENTRY = bytes(OFFSET_ENTRY.size)


def _offset_index_entries_in_use(fd: int, size: int) -> int:
    """How many entries precede the zero-filled tail, by binary search (no real entry is all zero).

    A trimmed (closed) index has no tail: its last entry is checked first, so it costs one read.
    """
    count = size // OFFSET_ENTRY.size

    def is_zero(i: int) -> bool:
        data = os.pread(fd, OFFSET_ENTRY.size, i * OFFSET_ENTRY.size)
        return len(data) < OFFSET_ENTRY.size or data == _ZERO_OFFSET_ENTRY

    if count == 0 or not is_zero(count - 1):
        return count
    lo, hi = 0, count - 1  # entry hi is zero; every entry below lo is not
    while lo < hi:
        mid = (lo + hi) // 2
        if is_zero(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _offset_index_entry(fd: int, i: int, base_offset: int) -> OffsetIndexEntry:
    rel, position = OFFSET_ENTRY.unpack(os.pread(fd, OFFSET_ENTRY.size, i * OFFSET_ENTRY.size))
    return OffsetIndexEntry(base_offset + rel, position)


def lookup_offset_index_file(path: Path, base_offset: int, target: int) -> OffsetIndexEntry | None:
    """Kafka's ``OffsetIndex.lookup`` on the file itself, reading only the entries a binary search
    touches (about 2 log2(n) of 8 bytes); None where ``lookup_offset`` gives (base, 0).

    Entries are not validated: a caller checks that the position found holds a batch.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        count = _offset_index_entries_in_use(fd, os.fstat(fd).st_size)
        lo, hi = 0, count  # the answer is the last entry below hi with offset <= target
        while lo < hi:
            mid = (lo + hi) // 2
            if _offset_index_entry(fd, mid, base_offset).offset <= target:
                lo = mid + 1
            else:
                hi = mid
        return _offset_index_entry(fd, lo - 1, base_offset) if lo else None
    finally:
        os.close(fd)


def last_offset_index_entry(path: Path, base_offset: int) -> OffsetIndexEntry | None:
    """The last entry before the zero-filled tail, reading only what a binary search touches."""
    fd = os.open(path, os.O_RDONLY)
    try:
        count = _offset_index_entries_in_use(fd, os.fstat(fd).st_size)
        return _offset_index_entry(fd, count - 1, base_offset) if count else None
    finally:
        os.close(fd)


def lookup_offset(entries: Sequence[OffsetIndexEntry], base_offset: int, target: int) -> OffsetIndexEntry:
    """Kafka's ``OffsetIndex.lookup``: the greatest entry with offset <= target, else (base, 0).

    The batch holding ``target`` starts at or after the returned position.
    """
    i = bisect_right(entries, target, key=lambda e: e.offset)
    return entries[i - 1] if i else OffsetIndexEntry(base_offset, 0)


def lookup_timestamp(entries: Sequence[TimeIndexEntry], base_offset: int, target: int) -> TimeIndexEntry:
    """Kafka's ``TimeIndex.lookup``: the greatest entry with timestamp <= target, else (-1, base).

    A search for the first record with timestamp >= target starts at the offset returned
    (looked up in the offset index); records before it all have smaller timestamps.
    """
    i = bisect_right(entries, target, key=lambda e: e.timestamp)
    return entries[i - 1] if i else TimeIndexEntry(NO_TIMESTAMP, base_offset)


def aborted_transactions_in(entries: Sequence[AbortedTxn], fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
    """Kafka's ``TransactionIndex.collectAbortedTxns``: those overlapping [fetch_offset, upper_offset)."""
    return [e for e in entries if e.last_offset >= fetch_offset and e.first_offset < upper_offset]


# --- rebuild ---------------------------------------------------------------------------------


@dataclass
class IndexBuilder:
    """The broker's per-segment index bookkeeping, kept by the writer as it appends.

    ``rebuild_indexes`` applies the same ``LogSegment.append`` rule in its own loop, written out
    for speed; the writer's files and a rebuild of the same ``.log`` are equal byte for byte.
    """

    base_offset: int
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    offset_entries: list[OffsetIndexEntry] = field(default_factory=list)
    time_entries: list[TimeIndexEntry] = field(default_factory=list)
    aborted: list[AbortedTxn] = field(default_factory=list)
    bytes_since_last_entry: int = 0
    max_timestamp_so_far: int = -1
    offset_of_max_timestamp: int = -1

    def on_batch(self, header: RecordBatchHeader) -> None:
        """``LogSegment.append`` for one batch: update the max timestamp, then maybe index it."""
        if header.max_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        if self.bytes_since_last_entry > self.index_interval_bytes:
            self.offset_entries.append(OffsetIndexEntry(header.last_offset, header.position))
            self._maybe_append_time(self.max_timestamp_so_far, self.offset_of_max_timestamp)
            self.bytes_since_last_entry = 0
        self.bytes_since_last_entry += header.size_in_bytes

    def _maybe_append_time(self, timestamp: int, offset: int) -> None:
        last_ts = self.time_entries[-1].timestamp if self.time_entries else NO_TIMESTAMP
        if timestamp > last_ts:
            self.time_entries.append(TimeIndexEntry(timestamp, offset))

    def on_roll(self) -> None:
        """Closing the segment appends the final (max timestamp so far, its offset) entry if it is new."""
        self._maybe_append_time(self.max_timestamp_so_far, self.offset_of_max_timestamp)

    def offset_index_bytes(self) -> bytes:
        return encode_offset_index(self.offset_entries, self.base_offset)

    def time_index_bytes(self) -> bytes:
        return encode_time_index(self.time_entries, self.base_offset)

    def txn_index_bytes(self) -> bytes:
        return encode_txn_index(self.aborted)


def complete_txn(ongoing: dict[int, int], producer_id: int, marker_offset: int, aborted: bool) -> AbortedTxn | None:
    """End ``producer_id``'s transaction at its marker; an abort yields its ``.txnindex`` entry.

    As Kafka's ``ProducerStateManager``: the transaction's first offset is the producer's open
    transaction (the marker's own offset if none is known), and the entry's last stable offset
    is ``lastStableOffset(completedTxn)``: the first offset of the earliest transaction of
    *another* producer still open when the marker is appended, else the marker's offset + 1.
    ``ongoing`` (producer id -> first offset of its open transaction) is updated in place.
    """
    first = ongoing.pop(producer_id, marker_offset)
    if not aborted:
        return None
    lso = min(ongoing.values()) if ongoing else marker_offset + 1
    return AbortedTxn(producer_id, first, marker_offset, lso)


def decode_end_transaction_marker(data: Buffer, header: RecordBatchHeader, path: Path) -> ControlRecord:
    """The commit/abort marker (type and coordinator epoch) in a transactional control batch.

    ``data`` holds the batch from its byte 0 (e.g. ``LogFile.batch_bytes``); only its one record
    is decoded. Anything but one ABORT or COMMIT record is a ``CorruptLogError`` naming the
    batch at ``header.position``, where it sits in its file.
    """
    records = decode_records(header, bytes(data[HEADER_SIZE : header.size_in_bytes]), path)
    try:
        if len(records) != 1:
            raise ValueError(f"holds {len(records)} records, not one")
        marker = decode_control_record(records[0])
        if marker.type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            raise ValueError(f"is a {marker.type.name} record, not a transaction marker")
    except ValueError as exc:
        raise CorruptLogError(
            path, header.position, f"transactional control batch at offset {header.base_offset} {exc}"
        ) from None
    return marker


def read_end_transaction_marker(log: LogFile, header: RecordBatchHeader) -> ControlRecord:
    """Read and decode the marker batch ``header`` describes from an open ``.log``."""
    return decode_end_transaction_marker(log.batch_bytes(header), header, log.path)


@dataclass(frozen=True)
class RebuiltIndexes:
    """A segment's index files as the broker writes them, and the open transactions at its end."""

    offset_index: bytes
    time_index: bytes
    txn_index: bytes
    open_transactions: dict[int, int]


def rebuild_indexes(
    log_path: Path,
    base_offset: int,
    *,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    is_active: bool = False,
    open_txn_first_offsets: Mapping[int, int] | None = None,
) -> RebuiltIndexes:
    """Rebuild a segment's three indexes by walking its batch headers, byte for byte as the broker writes them.

    Only headers are read, except the one record of each commit/abort marker. ``is_active``
    leaves out the final time-index entry a roll adds. ``open_txn_first_offsets`` is the
    producer state at the segment's base (producer id -> first offset of its open transaction,
    e.g. from the producer snapshot named by the base offset): a transaction begun in an earlier
    segment and aborted in this one needs it for its first offset and for the LSO of other
    producers' aborts. Damage raises ``CorruptLogError`` (no CRC check: see ``verify_log_crc``).

    The loop is written out for speed (it is the cost of every index check): between large
    batches only each 61-byte header is read, between small ones a chunk at a time; entries are
    packed as they are found. The file is read by ``pread`` (see ``batch``: never mmap).
    """
    with LogFile(Path(log_path)) as log:
        try:
            return _rebuild(log, base_offset, index_interval_bytes, is_active, dict(open_txn_first_offsets or {}))
        except CorruptLogError as exc:
            raise log.explain(exc) from None


def _rebuild(log: LogFile, base_offset: int, interval: int, is_active: bool, ongoing: dict[int, int]) -> RebuiltIndexes:
    """The loop of ``rebuild_indexes`` over an open ``.log``."""
    aborted: list[AbortedTxn] = []
    offset_fields: list[int] = []  # relative offset, position, relative offset, ...: packed at the end
    time_index = bytearray()
    add_offset_field = offset_fields.append
    pack_time = TIME_ENTRY.pack
    max_ts, max_ts_offset = -1, -1
    path, size = log.path, log.size
    unpack = _REBUILD_FIELDS.unpack_from
    pread, preadv = os.pread, os.preadv
    fd = log.fd
    buf = bytearray(READ_CHUNK)
    view = memoryview(buf)
    window: bytes | bytearray = buf
    window_start = window_len = 0
    position = since_last = batch_size = 0
    last_indexed, last_time = base_offset - 1, NO_TIMESTAMP
    highest = base_offset + MAX_RELATIVE_OFFSET
    min_length = HEADER_SIZE - LOG_OVERHEAD
    while position < size:
        at = position - window_start
        if at + HEADER_SIZE > window_len:
            if batch_size >= HEADER_ONLY_FROM:
                window = pread(fd, HEADER_SIZE, position)
                window_len = len(window)
            else:
                window = buf
                window_len = preadv(fd, [view[: min(READ_CHUNK, size - position)]], position)
            window_start, at = position, 0
            if window_len < HEADER_SIZE:  # the file ends (or was cut) inside this header
                parse_header_at(window, 0, path, position, position + window_len)
        base, length, magic, attributes, last_delta, batch_max_ts, producer_id = unpack(window, at)
        batch_size = LOG_OVERHEAD + length
        if magic != MAGIC_V2 or length < min_length or position + batch_size > size:
            parse_header_at(window, at, path, position, size)  # raises, naming the problem
        last = base + last_delta
        if batch_max_ts > max_ts:
            max_ts, max_ts_offset = batch_max_ts, last
        if since_last > interval:
            if not last_indexed < last <= highest:
                raise _offset_out_of_order(path, position, base_offset, last, last_indexed)
            add_offset_field(last - base_offset)
            add_offset_field(position)
            last_indexed = last
            if max_ts > last_time:
                time_index += pack_time(max_ts, max_ts_offset - base_offset)
                last_time = max_ts
            since_last = 0
        since_last += batch_size
        if attributes & ATTR_TRANSACTIONAL:
            if attributes & ATTR_CONTROL:
                header = parse_header_at(window, at, path, position, size)
                marker = read_end_transaction_marker(log, header)
                entry = complete_txn(ongoing, producer_id, base, marker.type == ControlRecordType.ABORT)
                if entry is not None:
                    aborted.append(entry)
            else:
                ongoing.setdefault(producer_id, base)
        position += batch_size
    if not is_active and max_ts > last_time:  # the roll's final entry
        if not base_offset <= max_ts_offset <= base_offset + MAX_RELATIVE_OFFSET:
            raise _offset_out_of_order(path, 0, base_offset, max_ts_offset, base_offset - 1)
        time_index += pack_time(max_ts, max_ts_offset - base_offset)
    offset_index = struct.pack(f">{len(offset_fields)}i", *offset_fields)
    return RebuiltIndexes(offset_index, bytes(time_index), encode_txn_index(aborted), ongoing)


def _offset_out_of_order(path: Path, position: int, base_offset: int, offset: int, previous: int) -> CorruptLogError:
    if offset <= previous:
        reason = f"batch last offset {offset} does not follow the previous indexed offset {previous}"
    else:
        reason = f"batch last offset {offset} is outside the segment's range [{base_offset}, {base_offset} + 2^31 - 1]"
    return CorruptLogError(path, position, reason)


# --- broker files against the log -----------------------------------------------------------


class IndexVerdict(StrEnum):
    """How a broker's index file compares with the ``.log`` it indexes."""

    IDENTICAL = "identical"  # what a rebuild gives (entry for entry on the active segment)
    EQUIVALENT = "equivalent"  # differs from a rebuild only as real brokers write it: every lookup is right
    DAMAGED = "damaged"  # a lookup through it could go wrong, or it cannot be read


@dataclass(frozen=True)
class IndexJudgement:
    """The verdict on one index file, with what differs or why it is damaged."""

    verdict: IndexVerdict
    detail: str | None = None


@dataclass(frozen=True)
class LogLayout:
    """Every batch of a ``.log``: start position, first and last offset, and the largest
    timestamp up to and including it. What index entries are checked against."""

    path: Path
    size: int
    positions: list[int]
    base_offsets: list[int]
    last_offsets: list[int]
    running_max_timestamps: list[int]

    @classmethod
    def read(cls, log_path: Path, *, valid_prefix: bool = False) -> LogLayout:
        """Walk the batch headers: ``CorruptLogError`` for a damaged ``.log``, or with
        ``valid_prefix`` (an active segment, whose last batch may be mid-write) up to the damage."""
        positions, bases, lasts, running = [], [], [], []
        top = NO_TIMESTAMP
        size = 0
        for header in iter_batch_headers(Path(log_path), strict=not valid_prefix):
            positions.append(header.position)
            bases.append(header.base_offset)
            lasts.append(header.last_offset)
            top = max(top, header.max_timestamp)
            running.append(top)
            size = header.position + header.size_in_bytes
        return cls(Path(log_path), size, positions, bases, lasts, running)

    @property
    def last_offset(self) -> int | None:
        return self.last_offsets[-1] if self.last_offsets else None

    def batch_containing(self, offset: int) -> int | None:
        """Index of the batch whose [base, last] holds ``offset``, if any."""
        i = bisect_right(self.base_offsets, offset) - 1
        return i if i >= 0 and offset <= self.last_offsets[i] else None


def _offset_index_problem(
    entries: Sequence[OffsetIndexEntry], layout: LogLayout, is_active: bool
) -> tuple[int, str] | None:
    """(entry number, reason) of the first entry a lookup could be misled by, else None.

    An entry (offset o, position p) as any broker writes it: p is where a batch starts, o is an
    offset appended from there on (the batch's last offset, or a chunk's) and lies before the
    batch of the next entry. Entries beyond what the walk saw of an active segment were added
    after it and are not judged.
    """
    end = layout.last_offset
    for i, entry in enumerate(entries):
        if is_active and entry.position >= layout.size:
            break
        b = bisect_left(layout.positions, entry.position)
        if b == len(layout.positions) or layout.positions[b] != entry.position:
            return i, f"position {entry.position} is not the start of a batch"
        if entry.offset < layout.base_offsets[b]:
            first = layout.base_offsets[b]
            return i, f"offset {entry.offset} is below the first offset {first} of the batch at {entry.position}"
        if end is None or entry.offset > end:
            return i, f"offset {entry.offset} is beyond the segment's last offset {end}"
        if i + 1 < len(entries) and not (is_active and entries[i + 1].position >= layout.size):
            following = bisect_left(layout.positions, entries[i + 1].position)
            if following < len(layout.positions) and entry.offset >= layout.base_offsets[following]:
                return i, f"offset {entry.offset} reaches into the batch of the next entry"
    return None


def _time_index_problem(
    entries: Sequence[TimeIndexEntry], layout: LogLayout, is_active: bool
) -> tuple[int, str] | None:
    """(entry number, reason) of the first entry a time lookup could be misled by, else None.

    An entry (timestamp T, offset o) as any broker writes it: o lies in the first batch whose
    max timestamp reaches T, and T is the largest timestamp up to that batch; timestamps grow.
    """
    end = layout.last_offset
    previous = NO_TIMESTAMP
    for i, entry in enumerate(entries):
        if is_active and (end is None or entry.offset > end):
            break
        if entry.timestamp <= previous:
            return i, f"timestamp {entry.timestamp} does not grow past the previous entry's {previous}"
        previous = entry.timestamp
        b = layout.batch_containing(entry.offset)
        if b is None:
            return i, f"offset {entry.offset} is in no batch of the segment"
        if layout.running_max_timestamps[b] != entry.timestamp:
            return i, (
                f"timestamp {entry.timestamp} is not the largest timestamp up to offset {entry.offset} "
                f"({layout.running_max_timestamps[b]})"
            )
        if b > 0 and layout.running_max_timestamps[b - 1] >= entry.timestamp:
            return i, f"offset {entry.offset} is not in the first batch that reaches timestamp {entry.timestamp}"
    return None


def check_broker_index(
    kind: str,
    stored: bytes,
    rebuilt: bytes,
    layout: LogLayout | Path,
    base_offset: int,
    *,
    is_active: bool,
    path: Path = Path("<memory>"),
) -> IndexJudgement:
    """Judge a broker's offset index (``kind="offset"``) or time index (``kind="time"``) of one segment.

    ``rebuilt`` is ``rebuild_indexes``' bytes for the same kind (with the same ``is_active``);
    ``layout`` the segment's ``LogLayout``, or its ``.log`` path to read one only when the
    stored file differs from the rebuild. IDENTICAL: the stored entries (up to the zero-filled
    tail of a pre-allocated file) are the rebuilt ones. EQUIVALENT: they differ, but form a valid
    index for the log (see the module docstring for why brokers write such files). DAMAGED:
    unparseable, a zero-filled tail on a closed segment (the broker trims indexes at the roll),
    or an entry a lookup could be misled by; the detail names the entry and its byte.
    """
    if kind not in ("offset", "time"):
        raise ValueError(f"index kind {kind!r} is neither 'offset' nor 'time'")
    entry_size = OFFSET_ENTRY.size if kind == "offset" else TIME_ENTRY.size
    parse = parse_offset_index if kind == "offset" else parse_time_index
    try:
        entries: Sequence[OffsetIndexEntry | TimeIndexEntry] = parse(stored, base_offset, path)
    except CorruptLogError as exc:
        return IndexJudgement(IndexVerdict.DAMAGED, str(exc))
    expected = parse(rebuilt, base_offset)
    used = len(entries) * entry_size
    if not is_active and used < len(stored):
        return IndexJudgement(
            IndexVerdict.DAMAGED,
            f"{path}: at byte {used}: zero-filled entries after the last one on a closed segment "
            "(the broker trims its indexes when the segment rolls)",
        )
    if entries == expected:
        return IndexJudgement(IndexVerdict.IDENTICAL)
    if not isinstance(layout, LogLayout):
        try:
            layout = LogLayout.read(layout, valid_prefix=is_active)
        except CorruptLogError as exc:
            return IndexJudgement(IndexVerdict.DAMAGED, f"the log cannot be walked to judge the index: {exc}")
    if kind == "offset":
        problem = _offset_index_problem(entries, layout, is_active)  # type: ignore[arg-type]
    else:
        problem = _time_index_problem(entries, layout, is_active)  # type: ignore[arg-type]
    if problem is not None:
        number, reason = problem
        return IndexJudgement(
            IndexVerdict.DAMAGED, f"{path}: at byte {number * entry_size}: {kind} index entry {number}: {reason}"
        )
    detail = f"{len(entries)} entries stored, {len(expected)} rebuilt; a valid index for the log"
    if kind == "time" and not is_active and layout.running_max_timestamps:
        top = layout.running_max_timestamps[-1]
        if top > NO_TIMESTAMP and (not entries or entries[-1].timestamp != top):  # type: ignore[union-attr]
            detail += f" without the roll's final entry for timestamp {top}"
    return IndexJudgement(IndexVerdict.EQUIVALENT, detail)
