"""Record batch v2 headers: a walk over a ``.log`` that touches only the 61-byte headers.

Nothing here decodes records, so index rebuilds and CRC checks run near disk speed.

Files are read with ``pread`` into a reused buffer, never through ``mmap``: the broker may
truncate a segment while it is read (the active one, and after an unclean leader election the
closed one that holds the truncation offset becomes active and is cut too), and touching a
mapped page beyond the new end raises SIGBUS, which kills the process. A read is bounded by the
size seen when the file was opened, and a file that shrank meanwhile simply ends early: its
last batch is reported as truncated (or, for a lenient walk, the valid prefix ends there).
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.crc import crc32c, crc32c_raw
from tiering_core.kafka.files import open_regular

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset i64 + batchLength i32
MAGIC_V2 = 2
MAGIC_OFFSET = 16
CRC_START = 21
#: The smallest batch length any magic has (Kafka's ``LegacyRecord.RECORD_OVERHEAD_V0``).
MIN_RECORD_OVERHEAD = 14
_HEADER = struct.Struct(">qiibIhiqqqhii")
#: The 61-byte header's fields in order (``RecordBatchHeader``'s, its position aside), for loops
#: that work on the raw values.
BATCH_HEADER = _HEADER

ATTR_CODEC_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = 0, 1, 2, 3, 4
TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME = 0, 1
NO_PRODUCER_ID = -1

#: Bytes read per call while batches are small or their CRC is checked: large enough that the
#: system call is rare, small enough that the bytes are still in the CPU cache for the CRC.
READ_CHUNK = 1 << 20
#: From this batch size on, a header-only walk reads each 61-byte header by itself instead of
#: the bytes between headers (one system call costs about what copying ~10 KiB does).
HEADER_ONLY_FROM = 10 * 1024


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


Buffer = bytes | bytearray | memoryview | mmap.mmap


def header_problem(buf: Buffer, at: int, remaining: int) -> str | None:
    """Why the batch whose header starts at ``buf[at]`` is not a whole v2 batch, or None if it is.

    ``remaining`` is how many bytes of the file follow the batch start (``buf`` may hold fewer,
    but at least ``min(remaining, HEADER_SIZE)``). The order follows Kafka's
    ``FileLogInputStream``: a length no record of any magic can have, then the magic (so an
    old-format message is named as such, whatever its length), then what a v2 batch needs.
    """
    if remaining < LOG_OVERHEAD:
        return f"truncated batch: {remaining} trailing byte(s), less than a header"
    _base_offset, batch_length = struct.unpack_from(">qi", buf, at)
    if batch_length < MIN_RECORD_OVERHEAD:
        return f"batch length {batch_length} is smaller than a v2 batch header"
    if remaining > MAGIC_OFFSET:
        magic = buf[at + MAGIC_OFFSET]
        if magic != MAGIC_V2:
            return f"unknown magic {magic} in the batch header (only v2 record batches are supported)"
    if batch_length < HEADER_SIZE - LOG_OVERHEAD:
        return f"batch length {batch_length} is smaller than a v2 batch header"
    if remaining < HEADER_SIZE:
        return f"truncated batch: header needs {HEADER_SIZE} bytes, {remaining} left"
    if LOG_OVERHEAD + batch_length > remaining:
        return (
            f"batch length {batch_length} runs {LOG_OVERHEAD + batch_length - remaining} byte(s) "
            "beyond the end of the file (a truncated last batch, or a damaged length)"
        )
    return None


def parse_header(buf: Buffer, position: int, path: Path, file_size: int) -> RecordBatchHeader:
    """Parse and bounds-check the header at ``position``; errors name file and byte.

    ``file_size`` is the size of the file ``buf`` holds (``buf`` may hold only a prefix of it).
    """
    return parse_header_at(buf, position, path, position, file_size)


def parse_header_at(buf: Buffer, at: int, path: Path, position: int, file_size: int) -> RecordBatchHeader:
    """``parse_header`` for a header read into ``buf[at:]`` from ``position`` of a file of ``file_size`` bytes."""
    remaining = file_size - position
    if remaining >= HEADER_SIZE:
        values = _HEADER.unpack_from(buf, at)
        length = values[1]
        if length >= HEADER_SIZE - LOG_OVERHEAD and values[3] == MAGIC_V2 and LOG_OVERHEAD + length <= remaining:
            return _header(values, position)
    raise CorruptLogError(path, position, header_problem(buf, at, remaining) or "malformed batch header")


def crc_mismatch(header: RecordBatchHeader, computed: int, path: Path) -> CorruptLogError:
    return CorruptLogError(
        path,
        header.position,
        f"CRC mismatch in batch at offset {header.base_offset}: stored {header.crc:#010x}, computed {computed:#010x}",
    )


def verify_batch_crc(data: Buffer, header: RecordBatchHeader, path: Path) -> None:
    """Check one batch's CRC-32C (bytes 21..end of the batch) against its header.

    ``data`` holds the batch from its byte 0 (e.g. ``LogFile.batch_bytes``), so a caller never
    has to shift the header; a mismatch is reported at ``header.position``, where the batch is.
    """
    computed = crc32c(memoryview(data)[CRC_START : header.size_in_bytes])
    if computed != header.crc:
        raise crc_mismatch(header, computed, path)


class LogFile:
    """A ``.log`` opened for positioned reads, never read past the size it had when opened.

    ``read_at`` returns fewer bytes than asked only at that size or where the file has shrunk
    since (then ``size`` drops to what is really there, so every later check sees the new end).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.fd = open_regular(self.path)
        try:
            self.size = self.opened_size = os.fstat(self.fd).st_size
        except BaseException:
            os.close(self.fd)
            raise

    def __enter__(self) -> LogFile:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def read_at(self, position: int, n: int) -> bytes:
        want = max(0, min(n, self.size - position))
        data = os.pread(self.fd, want, position) if want else b""
        if len(data) < want:
            self.size = position + len(data)
        return data

    def read_into(self, view: memoryview, position: int) -> int:
        """Fill ``view`` (or up to the file's end) from ``position``; returns the byte count."""
        want = max(0, min(len(view), self.size - position))
        n = os.preadv(self.fd, [view[:want]], position) if want else 0
        if n < want:
            self.size = position + n
        return n

    def explain(self, exc: CorruptLogError) -> CorruptLogError:
        """``exc``, saying so if the file is now shorter than when it was opened (truncated meanwhile)."""
        try:
            now = min(self.size, os.fstat(self.fd).st_size)
        except OSError:
            now = self.size
        if now >= self.opened_size:
            return exc
        return CorruptLogError(
            exc.path,
            exc.position,
            f"{exc.reason} (the file shrank from {self.opened_size} to {now} bytes while being read: "
            "truncated meanwhile)",
        )

    def batch_bytes(self, header: RecordBatchHeader) -> bytes:
        """The whole batch ``header`` describes (``CorruptLogError`` if the file no longer holds it)."""
        data = self.read_at(header.position, header.size_in_bytes)
        if len(data) < header.size_in_bytes:
            raise CorruptLogError(
                self.path,
                header.position,
                f"batch at offset {header.base_offset} was cut short while being read "
                f"({len(data)} of {header.size_in_bytes} bytes left: the file was truncated)",
            )
        return data


def _walk(log: LogFile, position: int, verify_crc: bool) -> Iterator[tuple[tuple[int, ...], int]]:
    """(header fields, position) of each batch from ``position`` (a batch boundary) of ``log``.

    Reads a chunk at a time; between batches of ``HEADER_ONLY_FROM`` bytes or more, and when no
    CRC is checked, only each header. A CRC runs over the chunk in place (a memoryview slice, no
    copy) and continues across chunk ends for a batch that straddles one. The first bad batch
    raises ``CorruptLogError`` naming it.
    """
    try:
        yield from _walk_checked(log, position, verify_crc)
    except CorruptLogError as exc:
        raise log.explain(exc) from None


def _walk_checked(log: LogFile, position: int, verify_crc: bool) -> Iterator[tuple[tuple[int, ...], int]]:
    path = log.path
    buf = bytearray(READ_CHUNK)
    view = memoryview(buf)
    window: bytes | bytearray = buf
    window_start, window_len = position, 0
    batch_size = 0
    unpack = _HEADER.unpack_from
    crc = crc32c_raw
    min_length = HEADER_SIZE - LOG_OVERHEAD
    while position < log.size:
        at = position - window_start
        if at + HEADER_SIZE > window_len:
            if not verify_crc and batch_size >= HEADER_ONLY_FROM:
                window = log.read_at(position, HEADER_SIZE)
                window_len = len(window)
            else:
                window, window_len = buf, log.read_into(view, position)
            window_start, at = position, 0
            if window_len < HEADER_SIZE:
                parse_header_at(window, 0, path, position, log.size)  # raises: the file ends inside a header
        values = unpack(window, at)
        length = values[1]
        batch_size = LOG_OVERHEAD + length
        if values[3] != MAGIC_V2 or length < min_length or position + batch_size > log.size:
            parse_header_at(window, at, path, position, log.size)  # raises, naming the problem
        if verify_crc:
            end = at + batch_size
            if end <= window_len:
                computed = crc(view[at + CRC_START : end])
            else:
                computed, window_start, window_len = _crc_across_chunks(log, view, at, window_start, window_len, end)
                window = buf
            if computed != values[4]:
                raise crc_mismatch(_header(values, position), computed, path)
        yield values, position
        position += batch_size


def _crc_across_chunks(
    log: LogFile, view: memoryview, at: int, window_start: int, window_len: int, end: int
) -> tuple[int, int, int]:
    """CRC of a batch from ``view[at + CRC_START]`` to ``end`` (relative to ``window_start``), reading
    on past the chunk; returns it and the chunk now in ``view`` (start, length)."""
    computed = crc32c_raw(view[at + CRC_START : window_len])
    left = end - window_len
    chunk_start = window_start + window_len
    while left > 0:
        n = log.read_into(view, chunk_start)
        if n == 0:
            raise CorruptLogError(
                log.path,
                window_start + at,
                f"batch was cut short while being read ({left} byte(s) missing: the file was truncated)",
            )
        computed = crc32c_raw(view[: min(n, left)], computed)
        left -= n
        window_start, window_len = chunk_start, n
        chunk_start += n
    return computed, window_start, window_len


def iter_batch_headers(
    path: Path, start_position: int = 0, *, verify_crc: bool = False, strict: bool = True
) -> Iterator[RecordBatchHeader]:
    """Yield every batch header from ``start_position`` (a batch boundary), reading the file by ``pread``.

    ``strict=False`` stops quietly at the first bad batch (the valid prefix, as Kafka's log
    recovery keeps); ``strict=True`` raises ``CorruptLogError`` for it. Safe on a segment the
    broker is appending to or truncating: see the module docstring.
    """
    with LogFile(Path(path)) as log:
        try:
            for values, position in _walk(log, start_position, verify_crc):
                yield _header(values, position)
        except CorruptLogError:
            if strict:
                raise


def iter_batch_data(
    path: Path, start_position: int = 0, *, max_batch_bytes: int | None = None
) -> Iterator[tuple[int, bytes]]:
    """Each batch's position and whole bytes, from ``start_position`` (no CRC check here: the
    decoder checks it on the bytes it decodes). A batch larger than ``max_batch_bytes`` (a log
    whose writer caps its batches) is a ``CorruptLogError`` before its bytes are read."""
    with LogFile(Path(path)) as log:
        for values, position in _walk(log, start_position, False):
            size = LOG_OVERHEAD + values[1]
            if max_batch_bytes is not None and size > max_batch_bytes:
                raise CorruptLogError(
                    log.path,
                    position,
                    f"batch at offset {values[0]} is {size} bytes, more than the {max_batch_bytes} its writer allows",
                )
            try:
                data = log.batch_bytes(_header(values, position))
            except CorruptLogError as exc:
                raise log.explain(exc) from None
            yield position, data


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


# batchLength, magic, crc: what the CRC loop needs (baseOffset and the leader epoch skipped)
_UP_TO_CRC = struct.Struct(">8xi4xbI")


def verify_log_crc(path: Path) -> int:
    """Verify every batch's CRC-32C; returns the bytes verified or raises naming the batch.

    A lean loop (one unpack and one CRC call per batch over the chunk in place, no header
    objects) runs near the CRC's own speed; from the first batch it finds wrong, the full
    checks of ``iter_batch_headers`` take over and name the problem.
    """
    with LogFile(Path(path)) as log:
        position = _verify_crc_fast(log)
        for _ in _walk(log, position, True):
            pass
        return log.size


def _verify_crc_fast(log: LogFile) -> int:
    """Check batches while all is well; returns where the first doubtful batch starts (or the end)."""
    size, fd = log.size, log.fd
    buf = bytearray(READ_CHUNK)
    view = memoryview(buf)
    unpack = _UP_TO_CRC.unpack_from
    crc = crc32c_raw
    preadv = os.preadv
    min_length = HEADER_SIZE - LOG_OVERHEAD
    position = 0
    while position < size:
        want = min(READ_CHUNK, size - position)
        window_len = preadv(fd, [view[:want]], position)
        if window_len < want or window_len < HEADER_SIZE:
            return position  # the file shrank, or ends inside a header
        at = 0
        limit = window_len - HEADER_SIZE
        while at <= limit:  # literals, not the module's names: this loop runs once per batch
            length, magic, stored = unpack(buf, at)
            end = at + 12 + length  # LOG_OVERHEAD
            if end > window_len:
                break
            if magic != 2 or length < min_length or crc(view[at + 21 : end]) != stored:  # MAGIC_V2, CRC_START
                return position + at
            at = end
        else:  # the next header starts too close to the chunk's end: read on from it
            position += at
            continue
        if magic != MAGIC_V2 or length < min_length or position + end > size:
            return position + at
        computed = crc(view[at + CRC_START : window_len])  # the batch runs past the chunk: continue its CRC
        left = end - window_len
        next_read = position + window_len
        while left > 0:
            n = preadv(fd, [view[: min(READ_CHUNK, left)]], next_read)
            if n == 0:
                return position + at
            computed = crc(view[:n], computed)
            left -= n
            next_read += n
        if computed != stored:
            return position + at
        position += end
    return position
