"""Offset, time and transaction indexes: codecs and lookups (the rebuild is in ``index_rebuild``,
the checks of a broker's own files in ``index_check``)."""

from __future__ import annotations

import os
import struct
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.files import INDEX_READ_LIMIT, open_regular, read_regular

DEFAULT_INDEX_INTERVAL_BYTES = 4096
NO_TIMESTAMP = -1
TXN_INDEX_VERSION = 0
OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
TXN_ENTRY = struct.Struct(">hqqqq")
MAX_RELATIVE_OFFSET = 2**31 - 1


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
    return parse_offset_index(read_regular(Path(path), INDEX_READ_LIMIT, "offset index"), base_offset, Path(path))


def read_time_index(path: Path, base_offset: int) -> list[TimeIndexEntry]:
    return parse_time_index(read_regular(Path(path), INDEX_READ_LIMIT, "time index"), base_offset, Path(path))


def read_txn_index(path: Path) -> list[AbortedTxn]:
    return parse_txn_index(read_regular(Path(path), INDEX_READ_LIMIT, "transaction index"), Path(path))


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
    fd = open_regular(Path(path))
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
    fd = open_regular(Path(path))
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


@dataclass(frozen=True)
class TxnIndexSearchResult:
    """Kafka's ``TxnIndexSearchResult``: the aborted transactions of one index overlapping a range,
    and whether the search is complete (no later index can hold another one)."""

    aborted: tuple[AbortedTxn, ...]
    is_complete: bool


def collect_aborted_txns(entries: Sequence[AbortedTxn], fetch_offset: int, upper_offset: int) -> TxnIndexSearchResult:
    """Kafka's ``TransactionIndex.collectAbortedTxns`` with its stop rule: entries come in marker
    order, and an entry whose last stable offset reaches ``upper_offset`` proves that every
    transaction with data below ``upper_offset`` had ended by then, so later markers (in this
    index or a later segment's) cannot abort anything in [fetch_offset, upper_offset)."""
    found = []
    for e in entries:
        if e.last_offset >= fetch_offset and e.first_offset < upper_offset:
            found.append(e)
        if e.last_stable_offset >= upper_offset:
            return TxnIndexSearchResult(tuple(found), True)
    return TxnIndexSearchResult(tuple(found), False)


# --- rebuild ---------------------------------------------------------------------------------

# --- broker files against the log -----------------------------------------------------------
