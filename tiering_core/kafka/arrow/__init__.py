"""Record batches decoded straight into Arrow: a segment as ``pyarrow.RecordBatch`` es.

A segment is read in chunks of whole batches (one reused buffer for a file). A chunk's batch
headers are read in one compiled pass (``kernels.batch_headers``); each Kafka batch is then
checked in order as the record decoder checks it (header, CRC-32C, decompression within
``compression``'s bounds, record count against its bytes); then a group of batches' records
sections (in place in the chunk when uncompressed, else put back to back) is parsed by the
compiled loops of ``kernels`` and turned into Arrow columns from offset arrays, with no Python
object per record. One Arrow batch per group; a group holds at most ``GroupBounds`` Kafka
batches and decompressed bytes (a single larger batch alone), and the chunk is as large as a
group's bytes, so memory follows the group, not the segment.

Isolation (``tiering_core.kafka.isolation``): control batches are never returned; at
read_committed the data batches of aborted transactions are dropped too. Dropped batches are
still checked (a damaged one is an error at either level, as in the record decoder).

The columns are ``SCHEMA``'s: the record's topic and partition, offset, timestamp (the batch's
max timestamp for every record of a LogAppendTime batch, as Kafka's readers report it), the
timestamp type, key and value (null when absent), headers, and the batch's partition leader
epoch, producer id and transactional flag.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.arrow import kernels
from tiering_core.kafka.batch import (
    ATTR_CODEC_MASK,
    ATTR_CONTROL,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    CODEC_NONE,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    Buffer,
    LogFile,
    crc_mismatch,
    parse_header_at,
)
from tiering_core.kafka.compression import (
    MAX_DECOMPRESSED_BATCH_BYTES,
    CompressionError,
    UnsupportedCodecError,
    decompress,
)
from tiering_core.kafka.crc import crc32c_raw
from tiering_core.kafka.index import AbortedTxn
from tiering_core.kafka.isolation import AbortedTransactions, IsolationLevel, local_aborted_txns
from tiering_core.kafka.records import read_batch_data
from tiering_core.kafka.topic import TopicPartition

TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
HEADER_TYPE = pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("item", HEADER_TYPE, nullable=False))
SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("timestamp_type", pa.string(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE, nullable=False),
        pa.field("leader_epoch", pa.int32(), nullable=False),
        pa.field("producer_id", pa.int64(), nullable=False),
        pa.field("is_transactional", pa.bool_(), nullable=False),
    ]
)
_TIMESTAMP_TYPE_NAMES = pa.array(TIMESTAMP_TYPES, pa.string())
_I32 = struct.Struct(">i")
_BATCH_LENGTH_AT = 8
_RECORDS_COUNT_AT = 57

#: A group's bytes are addressed by Arrow's int32 offsets: a group (at most its bound plus one
#: batch) stays well below 2 GiB.
MAX_GROUP_BYTES = 1 << 30
#: A few MiB: the group's bytes stay in the CPU's caches between the read, the CRC, the parse and
#: the copy into Arrow, and the per-group Arrow work is still small beside them.
DEFAULT_GROUP_BYTES = 4 << 20
DEFAULT_GROUP_BATCHES = 1024


@dataclass(frozen=True)
class GroupBounds:
    """How much one Arrow batch holds: at most ``max_batches`` Kafka batches and ``max_bytes`` of
    decompressed records (a single batch larger than that makes a group of its own)."""

    max_batches: int = DEFAULT_GROUP_BATCHES
    max_bytes: int = DEFAULT_GROUP_BYTES

    def __post_init__(self) -> None:
        if self.max_batches < 1:
            raise ValueError(f"max_batches must be at least 1, got {self.max_batches}")
        if not 1 <= self.max_bytes <= MAX_GROUP_BYTES:
            raise ValueError(f"max_bytes must be between 1 and {MAX_GROUP_BYTES}, got {self.max_bytes}")


Section = tuple[Buffer, int, int]


# A batch header's fields (``BATCH_HEADER``) by index.
_BASE_OFFSET, _BATCH_LENGTH, _LEADER_EPOCH, _MAGIC, _CRC, _ATTRIBUTES = range(6)
_BASE_TIMESTAMP, _MAX_TIMESTAMP, _PRODUCER_ID, _RECORDS_COUNT = 7, 8, 9, 12


@dataclass
class _Group:
    """The batches of one Arrow batch being gathered: their rows in the chunk's header fields
    (``kernels.batch_headers``), positions, and where their records sections are (a buffer, start
    and end: the chunk itself for an uncompressed batch). Raw header values, not
    ``RecordBatchHeader`` objects: this runs once per batch."""

    fields: np.ndarray
    rows: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    size: int = 0

    def add(self, row: int, position: int, section: Section) -> None:
        self.rows.append(row)
        self.positions.append(position)
        self.sections.append(section)
        self.size += section[2] - section[1]

    @property
    def headers(self) -> np.ndarray:
        """The batches' header fields, one row each."""
        return self.fields[self.rows]


def _malformed(chunk: memoryview, at: int, where: Path, position: int, chunk_end: int) -> CorruptLogError:
    """The error of the batch at ``chunk[at]``, where ``kernels.batch_headers`` stopped: not a whole
    v2 batch."""
    parse_header_at(chunk, at, where, position, chunk_end)  # raises, naming the problem
    return CorruptLogError(where, position, "malformed batch header")


def _rows(headers: np.ndarray, step: int = DEFAULT_GROUP_BATCHES) -> Iterator[list[int]]:
    """``headers.tolist()`` a slice at a time (a chunk of tiny batches has many rows)."""
    for start in range(0, len(headers), step):
        yield from headers[start : start + step].tolist()


def _records_section(
    header: list[int], position: int, chunk: memoryview, at: int, where: Path, max_decompressed: int
) -> Section:
    """Where the records of the batch at ``chunk[at]`` are: in the chunk, or decompressed (within
    ``max_decompressed`` bytes). The record count must fit them (a count no bytes can hold never
    sizes an allocation)."""
    start, end = at + HEADER_SIZE, at + LOG_OVERHEAD + header[_BATCH_LENGTH]
    codec, base_offset = header[_ATTRIBUTES] & ATTR_CODEC_MASK, header[_BASE_OFFSET]
    if codec == CODEC_NONE:
        section: Section = (chunk, start, end)
    else:
        try:
            data = decompress(codec, chunk[start:end], max_decompressed)
        except (CompressionError, UnsupportedCodecError) as exc:
            raise CorruptLogError(where, position, f"cannot decompress batch at offset {base_offset}: {exc}") from exc
        section = (data, 0, len(data))
    count, size = header[_RECORDS_COUNT], section[2] - section[1]
    if count < 0:
        raise CorruptLogError(where, position, f"batch at offset {base_offset} has record count {count}")
    if count * kernels.MIN_RECORD_BYTES > size:
        raise CorruptLogError(
            where,
            position,
            f"malformed record in batch at offset {base_offset}: record count {count} cannot fit in "
            f"{size} byte(s) of records",
        )
    return section


def decode_chunks(
    chunks: Iterable[tuple[int, Buffer]],
    where: Path,
    tp: TopicPartition,
    *,
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
    aborted: Iterable[AbortedTxn] = (),
    bounds: GroupBounds = GroupBounds(),
    max_decompressed: int = MAX_DECOMPRESSED_BATCH_BYTES,
) -> Iterator[pa.RecordBatch]:
    """Arrow batches (``SCHEMA``) of ``chunks``: each the position in the ``.log`` of its first
    byte and whole batches back to back, as the file holds them (a chunk may be reused once the
    Arrow batches of the previous one are yielded: nothing yielded refers to it). ``where``
    names the segment in errors, which also give the batch's position and offset.

    ``aborted`` are the aborted transactions overlapping the batches (read_committed only).
    """
    committed = isolation == IsolationLevel.READ_COMMITTED
    aborts = AbortedTransactions(aborted if committed else ())
    for chunk_position, data in chunks:
        chunk = memoryview(data)
        chunk_end = chunk_position + len(chunk)
        at = 0
        buf = np.frombuffer(chunk, np.uint8)
        buf.flags.writeable = False  # one compiled signature, whichever buffer the chunk came in
        fields = kernels.batch_headers(buf)
        group = _Group(fields)
        for row, header in enumerate(_rows(fields)):
            position = chunk_position + at
            end = at + LOG_OVERHEAD + header[_BATCH_LENGTH]
            computed = crc32c_raw(chunk[at + CRC_START : end])
            if computed != header[_CRC]:
                raise crc_mismatch(parse_header_at(chunk, at, where, position, chunk_end), computed, where)
            section = _records_section(header, position, chunk, at, where, max_decompressed)
            at = end
            attributes = header[_ATTRIBUTES]
            if attributes & ATTR_CONTROL or (
                committed
                and attributes & ATTR_TRANSACTIONAL
                and aborts
                and aborts.aborts(header[_PRODUCER_ID], header[_BASE_OFFSET])
            ):
                _parse(where, fields[row : row + 1], [position], [section])  # checked, not returned
                continue
            if group.rows and (
                group.size + section[2] - section[1] > bounds.max_bytes or len(group.rows) >= bounds.max_batches
            ):
                yield _build(where, tp, group)
                group = _Group(fields)
            group.add(row, position, section)
        if at < len(chunk):
            raise _malformed(chunk, at, where, chunk_position + at, chunk_end)
        if group.rows:
            yield _build(where, tp, group)


def decode_batches(
    batches: Iterable[tuple[int, Buffer]],
    where: Path,
    tp: TopicPartition,
    *,
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
    aborted: Iterable[AbortedTxn] = (),
    bounds: GroupBounds = GroupBounds(),
    records_wanted: Callable[[], int] | None = None,
    max_decompressed: int = MAX_DECOMPRESSED_BATCH_BYTES,
) -> Iterator[pa.RecordBatch]:
    """``decode_chunks`` of consecutive whole batches given one at a time as (position, bytes),
    put together into chunks within ``bounds``.

    ``records_wanted``, when given, is asked before each chunk how many more records the caller
    needs; the chunk ends once its batches hold that many, so no batch past them is read.
    """
    return decode_chunks(
        _chunks(batches, bounds, records_wanted),
        where,
        tp,
        isolation=isolation,
        aborted=aborted,
        bounds=bounds,
        max_decompressed=max_decompressed,
    )


def _chunks(
    batches: Iterable[tuple[int, Buffer]], bounds: GroupBounds, records_wanted: Callable[[], int] | None
) -> Iterator[tuple[int, Buffer]]:
    parts: list[Buffer] = []
    first = size = records = 0
    wanted = records_wanted() if records_wanted is not None else None
    for position, data in batches:
        if not parts:
            first = position
        parts.append(data)
        size += len(data)
        if len(data) >= HEADER_SIZE:
            records += _I32.unpack_from(data, _RECORDS_COUNT_AT)[0]
        if size >= bounds.max_bytes or len(parts) >= bounds.max_batches or (wanted is not None and records >= wanted):
            yield first, parts[0] if len(parts) == 1 else b"".join(parts)
            parts, size, records = [], 0, 0
            wanted = records_wanted() if records_wanted is not None else None
    if parts:
        yield first, parts[0] if len(parts) == 1 else b"".join(parts)


def file_chunks(
    path: Path, start_position: int = 0, chunk_bytes: int = DEFAULT_GROUP_BYTES
) -> Iterator[tuple[int, memoryview]]:
    """Chunks of whole batches of a ``.log`` from ``start_position`` (a batch boundary), read by
    ``pread`` into one reused buffer of ``chunk_bytes`` (a larger batch comes alone, in its own
    buffer). A malformed or truncated batch ends the chunk before it and is reported as
    ``iter_batch_headers`` reports it; a file shrinking while read is said so (``LogFile.explain``)."""
    with LogFile(Path(path)) as log:
        buf = bytearray(chunk_bytes)
        view = memoryview(buf)
        position = start_position
        try:
            while position < log.size:
                n = log.read_into(view, position)
                at = 0
                while at + LOG_OVERHEAD <= n:
                    (length,) = _I32.unpack_from(buf, at + _BATCH_LENGTH_AT)
                    if length < HEADER_SIZE - LOG_OVERHEAD or at + LOG_OVERHEAD + length > n:
                        break
                    at += LOG_OVERHEAD + length
                if at:
                    yield position, view[:at]
                    position += at
                    continue
                header = parse_header_at(view, 0, log.path, position, log.size)  # raises for a malformed batch
                yield position, memoryview(log.batch_bytes(header))  # larger than the buffer
                position += header.size_in_bytes
        except CorruptLogError as exc:
            raise log.explain(exc) from None


def read_segment(
    path: Path,
    tp: TopicPartition,
    *,
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
    aborted: Iterable[AbortedTxn] | None = None,
    start_position: int = 0,
    bounds: GroupBounds = GroupBounds(),
) -> Iterator[pa.RecordBatch]:
    """A ``.log`` file's records from ``start_position`` (a batch boundary) as Arrow batches.

    At read_committed, ``aborted`` defaults to what the partition directory's transaction
    indexes say: this segment's ``.txnindex`` and, as long as Kafka's stop rule leaves the
    search open, those of the later segments beside it (an ABORT marker, and so its entry, may
    lie in a later segment than the transaction's data).
    """
    path = Path(path)
    if aborted is None and isolation == IsolationLevel.READ_COMMITTED:
        aborted = sibling_aborted_txns(path)
    return decode_chunks(
        file_chunks(path, start_position, bounds.max_bytes),
        path,
        tp,
        isolation=isolation,
        aborted=aborted or (),
        bounds=bounds,
    )


def read_stream(
    stream: BinaryIO,
    where: Path,
    tp: TopicPartition,
    *,
    start_position: int = 0,
    object_size: int | None = None,
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
    aborted: Iterable[AbortedTxn] = (),
    bounds: GroupBounds = GroupBounds(),
    records_wanted: Callable[[], int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """``decode_batches`` over a stream positioned at ``start_position`` of a ``.log`` (a ranged
    read of a remote segment), framed by ``read_batch_data``."""
    return decode_batches(
        read_batch_data(stream, where, start_position, object_size),
        where,
        tp,
        isolation=isolation,
        aborted=aborted,
        bounds=bounds,
        records_wanted=records_wanted,
    )


def sibling_aborted_txns(path: Path) -> set[AbortedTxn]:
    """The aborted transactions overlapping the segment ``path`` (``<base:020d>.log``), from its
    own and the later segments' ``.txnindex`` files in its directory."""
    path = Path(path)
    base = int(path.stem)
    later = sorted(p for p in path.parent.glob("*.log") if p.stem.isdigit() and int(p.stem) >= base)
    upper = int(later[1].stem) if len(later) > 1 else 2**63 - 1
    return local_aborted_txns([p.with_suffix(".txnindex") for p in later], base, upper)


def _parse(
    where: Path, headers: np.ndarray, positions: list[int], sections: list[Section]
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """The group's records parsed by ``kernels.parse_records`` (``headers``: one row of header
    fields per batch): the buffer, the record counts, the per-record arrays and the header
    arrays; damage raises ``CorruptLogError`` naming the batch.

    Sections that all lie in one buffer (uncompressed batches of one chunk) are parsed in place;
    others are put back to back first."""
    first = sections[0][0]
    if all(section[0] is first for section in sections):
        buf = np.frombuffer(first, np.uint8)
        starts = np.fromiter((s[1] for s in sections), np.int64, len(sections))
        ends = np.fromiter((s[2] for s in sections), np.int64, len(sections))
    else:
        buf = np.frombuffer(b"".join(memoryview(b)[s:e] for b, s, e in sections), np.uint8)
        ends = np.cumsum(np.fromiter((e - s for _b, s, e in sections), np.int64, len(sections)))
        starts = np.concatenate(([0], ends[:-1]))
    buf.flags.writeable = False  # one compiled signature, whichever buffer the bytes came in
    counts = np.ascontiguousarray(headers[:, _RECORDS_COUNT])
    n = int(counts.sum())
    per_record = (
        np.empty(n, np.int64),  # timestamp delta
        np.empty(n, np.int64),  # offset delta
        np.empty(n, np.int64),  # key start
        np.empty(n, np.int32),  # key length
        np.empty(n, np.int64),  # value start
        np.empty(n, np.int32),  # value length
        np.empty(n, np.int32),  # header count
    )
    error = np.zeros(4, np.int64)
    used, *header_arrays = kernels.parse_records(buf, starts, ends, counts, *per_record, error)
    if error[0]:
        batch = int(error[1])
        reason = kernels.ERROR_REASONS[int(error[0])].format(value=int(error[3]))
        raise CorruptLogError(
            where,
            positions[batch],
            f"malformed record in batch at offset {int(headers[batch, _BASE_OFFSET])}: record {int(error[2])}: "
            f"{reason}",
        )
    return buf, counts, per_record, tuple(a[:used] for a in header_arrays)


def _binary(buf: np.ndarray, start: np.ndarray, length: np.ndarray, type_: pa.DataType) -> pa.Array:
    """An Arrow binary (or string) array of ``buf``'s slices; length -1 is null."""
    offsets, data = kernels.gather(buf, start, length)
    valid = length >= 0
    nulls = len(length) - int(np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(
        type_, len(length), [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
    )


def _build(where: Path, tp: TopicPartition, group: _Group) -> pa.RecordBatch:
    headers = group.headers
    buf, counts, per_record, header_arrays = _parse(where, headers, group.positions, group.sections)
    ts_delta, offset_delta, key_start, key_length, value_start, value_length, header_count = per_record
    n = len(ts_delta)

    def per_batch(values: np.ndarray, dtype: type[np.generic]) -> np.ndarray:
        return np.repeat(values.astype(dtype), counts)

    attributes = headers[:, _ATTRIBUTES]
    log_append = per_batch(attributes & ATTR_LOG_APPEND_TIME != 0, np.int8)
    timestamps = np.where(
        log_append != 0,
        per_batch(headers[:, _MAX_TIMESTAMP], np.int64),
        per_batch(headers[:, _BASE_TIMESTAMP], np.int64) + ts_delta,
    )
    list_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(header_count, out=list_offsets[1:])
    hk_start, hk_length, hv_start, hv_length = header_arrays
    header_items = pa.StructArray.from_arrays(
        [_binary(buf, hk_start, hk_length, pa.string()), _binary(buf, hv_start, hv_length, pa.binary())],
        fields=list(HEADER_TYPE),
    )
    columns = [
        pa.repeat(pa.scalar(tp.topic, pa.string()), n),
        pa.array(np.full(n, tp.partition, np.int32)),
        pa.array(per_batch(headers[:, _BASE_OFFSET], np.int64) + offset_delta),
        pa.Array.from_buffers(SCHEMA.field("timestamp").type, n, [None, pa.py_buffer(timestamps)]),
        pc.take(_TIMESTAMP_TYPE_NAMES, pa.array(log_append)),
        _binary(buf, key_start, key_length, pa.binary()),
        _binary(buf, value_start, value_length, pa.binary()),
        pa.ListArray.from_arrays(pa.array(list_offsets), header_items, type=HEADERS_TYPE),
        pa.array(per_batch(headers[:, _LEADER_EPOCH], np.int32)),
        pa.array(per_batch(headers[:, _PRODUCER_ID], np.int64)),
        pa.array(per_batch(attributes & ATTR_TRANSACTIONAL != 0, np.bool_)),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)
