"""Record batch v2 headers: a walk over a ``.log`` that touches only the 61-byte headers.

Nothing here decodes records, so index rebuilds and CRC checks run at disk speed.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.crc import crc32c
from tiering_core.kafka.crc import crc32c_raw as _crc32c_raw

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset i64 + batchLength i32
MAGIC_V2 = 2
CRC_START = 21
_HEADER = struct.Struct(">qiibIhiqqqhii")

ATTR_CODEC_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = 0, 1, 2, 3, 4
TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME = 0, 1
NO_PRODUCER_ID = -1


@dataclass(frozen=True)
class RecordBatchHeader:
    """The fixed header of one v2 record batch and where it sits in its file."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def size_in_bytes(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def codec(self) -> int:
        return self.attributes & ATTR_CODEC_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & ATTR_LOG_APPEND_TIME)

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime (the producer's), 1 = LogAppendTime (the broker's, in ``max_timestamp``)."""
        return TIMESTAMP_LOG_APPEND_TIME if self.attributes & ATTR_LOG_APPEND_TIME else TIMESTAMP_CREATE_TIME

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID


_FIELD_NAMES = (
    "base_offset",
    "batch_length",
    "partition_leader_epoch",
    "magic",
    "crc",
    "attributes",
    "last_offset_delta",
    "base_timestamp",
    "max_timestamp",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "records_count",
)
_new, _set_dict = object.__new__, object.__setattr__


def _header(values: tuple[int, ...], position: int) -> RecordBatchHeader:
    """A ``RecordBatchHeader`` without its generated ``__init__`` (a frozen dataclass sets each
    field through ``object.__setattr__``, which would dominate a header walk): same class, same fields."""
    header = _new(RecordBatchHeader)
    fields = dict(zip(_FIELD_NAMES, values, strict=True))
    fields["position"] = position
    _set_dict(header, "__dict__", fields)
    return header


def parse_header(buf: bytes | memoryview | mmap.mmap, position: int, path: Path, file_size: int) -> RecordBatchHeader:
    """Parse and bounds-check the header at ``position``; errors name file and byte.

    ``file_size`` is the size of the file ``buf`` holds (``buf`` may hold only a prefix of it).
    """
    remaining = file_size - position
    if remaining >= HEADER_SIZE:
        values = _HEADER.unpack_from(buf, position)
        length = values[1]
        if length >= HEADER_SIZE - LOG_OVERHEAD and values[3] == MAGIC_V2 and LOG_OVERHEAD + length <= remaining:
            return _header(values, position)
    if remaining < LOG_OVERHEAD:
        raise CorruptLogError(path, position, f"truncated batch: {remaining} trailing byte(s), less than a header")
    _base_offset, batch_length = struct.unpack_from(">qi", buf, position)
    if batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptLogError(path, position, f"batch length {batch_length} is smaller than a v2 batch header")
    if remaining < HEADER_SIZE:
        raise CorruptLogError(path, position, f"truncated batch: header needs {HEADER_SIZE} bytes, {remaining} left")
    magic = _HEADER.unpack_from(buf, position)[3]
    if magic != MAGIC_V2:
        raise CorruptLogError(
            path, position, f"unknown magic {magic} in the batch header (only v2 record batches are supported)"
        )
    raise CorruptLogError(
        path,
        position,
        f"batch length {batch_length} runs {LOG_OVERHEAD + batch_length - remaining} byte(s) "
        "beyond the end of the file (a truncated last batch, or a damaged length)",
    )


def verify_batch_crc(buf: bytes | memoryview | mmap.mmap, header: RecordBatchHeader, path: Path) -> None:
    """Check one batch's CRC-32C (bytes 21..end of the batch) against its header; ``buf`` holds the file."""
    start = header.position + CRC_START
    end = header.position + header.size_in_bytes
    computed = crc32c(memoryview(buf)[start:end])
    if computed != header.crc:
        raise CorruptLogError(
            path,
            header.position,
            f"CRC mismatch in batch at offset {header.base_offset}: "
            f"stored {header.crc:#010x}, computed {computed:#010x}",
        )


def iter_batch_headers(
    path: Path, start_position: int = 0, *, verify_crc: bool = False, strict: bool = True
) -> Iterator[RecordBatchHeader]:
    """Yield every batch header from ``start_position`` (a batch boundary) over an mmap of the file.

    ``strict=False`` stops quietly at the first bad batch (the valid prefix, as Kafka's log
    recovery keeps); ``strict=True`` raises ``CorruptLogError`` for it.
    """
    path = Path(path)
    size = path.stat().st_size
    if size == 0 or start_position >= size:
        return
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        yield from walk_headers(mm, size, path, start_position, verify_crc=verify_crc, strict=strict)


def walk_headers(
    buf: bytes | mmap.mmap,
    size: int,
    path: Path,
    start_position: int = 0,
    *,
    verify_crc: bool = False,
    strict: bool = True,
) -> Iterator[RecordBatchHeader]:
    """The header walk of ``iter_batch_headers`` over bytes the caller already holds."""
    position = start_position
    while position < size:
        try:
            header = parse_header(buf, position, path, size)
            if verify_crc:
                verify_batch_crc(buf, header, path)
        except CorruptLogError:
            if strict:
                raise
            return
        yield header
        position += LOG_OVERHEAD + header.batch_length


@dataclass
class LogScan:
    """The valid prefix of a ``.log`` and the first problem after it, if any."""

    path: Path
    headers: list[RecordBatchHeader] = field(default_factory=list)
    valid_bytes: int = 0
    error: CorruptLogError | None = None

    @property
    def next_offset(self) -> int | None:
        return self.headers[-1].next_offset if self.headers else None


def scan_log(path: Path, *, verify_crc: bool = True, start_position: int = 0) -> LogScan:
    """Walk a ``.log`` as Kafka's recovery does: keep the valid prefix, report what stopped it."""
    scan = LogScan(Path(path), valid_bytes=start_position)
    try:
        for header in iter_batch_headers(path, start_position, verify_crc=verify_crc, strict=True):
            scan.headers.append(header)
            scan.valid_bytes = header.position + header.size_in_bytes
    except CorruptLogError as exc:
        scan.error = exc
    return scan


# baseOffset, batchLength, partitionLeaderEpoch, magic, crc: everything before the CRC'd bytes
_UP_TO_CRC = struct.Struct(">qiibI")


def verify_log_crc(path: Path) -> int:
    """Verify every batch's CRC-32C; returns the bytes verified or raises naming the batch.

    A lean loop over the mmap (one unpack per batch, no header objects) so it runs near the
    CRC's own speed; a batch failing any check is re-parsed by the full checks for a precise error.
    """
    path = Path(path)
    size = path.stat().st_size
    if size == 0:
        return 0
    min_length = HEADER_SIZE - LOG_OVERHEAD
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        try:
            position = 0
            unpack = _UP_TO_CRC.unpack_from
            crc = _crc32c_raw
            while position < size:
                if size - position < HEADER_SIZE:
                    parse_header(mm, position, path, size)
                _base, length, _epoch, magic, stored = unpack(mm, position)
                end = position + LOG_OVERHEAD + length
                if length < min_length or end > size or magic != MAGIC_V2:
                    parse_header(mm, position, path, size)
                if crc(view[position + CRC_START : end]) != stored:
                    verify_batch_crc(mm, parse_header(mm, position, path, size), path)
                position = end
        finally:
            view.release()
    return size
