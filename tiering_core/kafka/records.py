"""Record batch v2 encoding and full record decoding (keys, values, headers, timestamps).

Encoding follows the Java producer's ``MemoryRecordsBuilder``: the base timestamp is the first
record's, timestamp and offset deltas are zigzag varints, a null key/value/header value is
length -1, and the CRC-32C covers the batch from its attributes on. Control batches (commit and
abort markers) are written the way the transaction coordinator's markers land in the log.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import BinaryIO

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.batch import (
    ATTR_CONTROL,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    CODEC_NONE,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_RECORD_OVERHEAD,
    RecordBatchHeader,
    iter_batch_data,
    parse_header_at,
    verify_batch_crc,
)
from tiering_core.kafka.compression import (
    MAX_DECOMPRESSED_BATCH_BYTES,
    CompressionError,
    UnsupportedCodecError,
    compress,
    decompress,
)
from tiering_core.kafka.crc import crc32c

log = logging.getLogger(__name__)

Header = tuple[str, bytes | None]
NO_SEQUENCE = -1
CONTROL_RECORD_KEY_VERSION = 0
END_TXN_MARKER_VALUE_VERSION = 0
_AFTER_CRC = struct.Struct(">hiqqqhii")
_BEFORE_CRC = struct.Struct(">qiibI")


@dataclass(frozen=True)
class RecordSpec:
    """A record to write: its offset comes from its place in the batch."""

    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True)
class Record:
    """A decoded record with its absolute offset and the batch facts a reader needs."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    leader_epoch: int
    producer_id: int
    is_transactional: bool
    is_control: bool
    producer_epoch: int = -1


class ControlRecordType(IntEnum):
    """Kafka's ``ControlRecordType``; only ABORT and COMMIT appear in a topic partition's log."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


@dataclass(frozen=True)
class ControlRecord:
    type: ControlRecordType
    coordinator_epoch: int


# --- varints (zigzag, as protobuf and Kafka's ByteUtils) ----------------------------------------


def _write_varint(out: bytearray, value: int) -> None:
    zigzag = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    byte = buf[pos]
    if byte < 0x80:  # one byte: most deltas, counts and short lengths
        return (byte >> 1) ^ -(byte & 1), pos + 1
    second = buf[pos + 1]
    if second < 0x80:  # two bytes: lengths up to 8 KiB
        value = (byte & 0x7F) | (second << 7)
        return (value >> 1) ^ -(value & 1), pos + 2
    result = (byte & 0x7F) | ((second & 0x7F) << 7)
    shift = 14
    pos += 2
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("varint is longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), pos


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out.append(1)  # zigzag(-1)
    else:
        _write_varint(out, len(data))
        out += data


# --- encoding --------------------------------------------------------------------------------


def encode_record(spec: RecordSpec, offset_delta: int, base_timestamp: int) -> bytes:
    """One record: length varint, attributes (0), deltas, key, value, headers."""
    body = bytearray(b"\0")
    _write_varint(body, spec.timestamp - base_timestamp)
    _write_varint(body, offset_delta)
    _write_bytes(body, spec.key)
    _write_bytes(body, spec.value)
    _write_varint(body, len(spec.headers))
    for name, value in spec.headers:
        _write_bytes(body, name.encode("utf-8"))
        _write_bytes(body, value)
    out = bytearray()
    _write_varint(out, len(body))
    out += body
    return bytes(out)


def encode_batch(
    records: Sequence[RecordSpec],
    *,
    base_offset: int,
    partition_leader_epoch: int,
    codec: int = CODEC_NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    log_append_time: bool = False,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
) -> bytes:
    """One v2 record batch with a real CRC-32C, byte for byte what a producer and broker store.

    ``base_timestamp`` defaults to the first record's timestamp and ``max_timestamp`` to the
    largest one; with ``log_append_time`` the broker's append time goes in ``max_timestamp``
    (readers then report it for every record).
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    if codec & ~0x07 or not 0 <= codec <= 4:
        raise UnsupportedCodecError(f"unknown compression codec id {codec} (Kafka defines 0-4)")
    base_ts = records[0].timestamp if base_timestamp is None else base_timestamp
    max_ts = max(r.timestamp for r in records) if max_timestamp is None else max_timestamp
    raw = b"".join(encode_record(r, i, base_ts) for i, r in enumerate(records))
    payload = compress(codec, raw)
    attributes = codec
    if log_append_time:
        attributes |= ATTR_LOG_APPEND_TIME
    if transactional:
        attributes |= ATTR_TRANSACTIONAL
    if control:
        attributes |= ATTR_CONTROL
    after_crc = (
        _AFTER_CRC.pack(
            attributes,
            len(records) - 1,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
        + payload
    )
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    head = _BEFORE_CRC.pack(base_offset, batch_length, partition_leader_epoch, MAGIC_V2, crc32c(after_crc))
    assert len(head) == CRC_START
    return head + after_crc


def control_record(kind: ControlRecordType, coordinator_epoch: int, timestamp: int) -> RecordSpec:
    """The single record of a control batch: key ``version:i16=0, type:i16``, value
    ``version:i16=0, coordinatorEpoch:i32`` (Kafka's ``EndTransactionMarker``)."""
    return RecordSpec(
        key=struct.pack(">hh", 0, int(kind)), value=struct.pack(">hi", 0, coordinator_epoch), timestamp=timestamp
    )


def encode_control_batch(
    kind: ControlRecordType,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
) -> bytes:
    """A commit or abort marker batch: transactional + control, uncompressed, no sequence."""
    return encode_batch(
        [control_record(kind, coordinator_epoch, timestamp)],
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        transactional=True,
        control=True,
    )


# --- decoding --------------------------------------------------------------------------------


def records_data(header: RecordBatchHeader, body: bytes | memoryview, path: Path, max_decompressed: int) -> bytes:
    """A batch's records as bytes (decompressed, refused past ``max_decompressed``), its record
    count checked; a failure names file and batch."""
    try:
        data = decompress(header.codec, body, max_decompressed)
    except (CompressionError, UnsupportedCodecError) as exc:
        raise CorruptLogError(
            path, header.position, f"cannot decompress batch at offset {header.base_offset}: {exc}"
        ) from exc
    count = header.records_count
    if count < 0:
        raise CorruptLogError(path, header.position, f"batch at offset {header.base_offset} has record count {count}")
    return data


def read_headers(data: bytes, pos: int) -> tuple[tuple[Header, ...], int]:
    """A record's headers from their count at ``pos`` (apart from ``decode_records``' loop: most
    records have none); ValueError or IndexError on a malformed one."""
    header_count, pos = _read_varint(data, pos)
    if header_count < 0:
        raise ValueError(f"negative header count {header_count}")
    items: list[Header] = []
    for _h in range(header_count):
        name_len, pos = _read_varint(data, pos)
        if name_len < 0:
            raise ValueError(f"header key length {name_len} (header keys cannot be null)")
        name = data[pos : pos + name_len].decode("utf-8")
        pos += name_len
        hvalue_len, pos = _read_varint(data, pos)
        if hvalue_len < 0:
            hvalue = None
        else:
            hvalue = data[pos : pos + hvalue_len]
            pos += hvalue_len
        items.append((name, hvalue))
    return tuple(items), pos


def decode_records(
    header: RecordBatchHeader,
    body: bytes | memoryview,
    path: Path,
    max_decompressed: int = MAX_DECOMPRESSED_BATCH_BYTES,
) -> list[Record]:
    """Decode the records of one batch (``body`` = the bytes after its 61-byte header).

    A compressed body expanding past ``max_decompressed`` bytes is refused before it is held.

    Every malformation (a bad varint, a field running past the end, a record whose length
    disagrees with its fields, bytes left over after the last record) names file and batch.
    """
    data = records_data(header, body, path, max_decompressed)
    count = header.records_count
    base_offset = header.base_offset
    log_append = header.is_log_append_time
    base_ts = header.max_timestamp if log_append else header.base_timestamp
    # Records are built without their generated __init__ (a frozen dataclass sets each field
    # through object.__setattr__, which would dominate decoding): same fields, same class.
    facts = {
        "leader_epoch": header.partition_leader_epoch,
        "producer_id": header.producer_id,
        "is_transactional": header.is_transactional,
        "is_control": header.is_control,
        "producer_epoch": header.producer_epoch,
    }
    new, set_dict = object.__new__, object.__setattr__
    size = len(data)
    read = _read_varint
    records: list[Record] = []
    append = records.append
    pos = 0
    try:
        for _ in range(count):
            length, pos = read(data, pos)
            end = pos + length
            if length <= 0 or end > size:
                raise ValueError(f"record length {length} runs past the end of the records")
            # attributes (unused in v2), then the varints: inline one-byte fast paths
            b = data[pos + 1]
            if b < 0x80:
                ts_delta, pos = (b >> 1) ^ -(b & 1), pos + 2
            else:
                ts_delta, pos = read(data, pos + 1)
            b = data[pos]
            if b < 0x80:
                offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                offset_delta, pos = read(data, pos)
            key_len, pos = read(data, pos)
            if key_len < 0:
                key = None
            else:
                key = data[pos : pos + key_len]
                pos += key_len
            value_len, pos = read(data, pos)
            if value_len < 0:
                value = None
            else:
                value = data[pos : pos + value_len]
                pos += value_len
            headers: tuple[Header, ...] = ()
            if data[pos] == 0:  # no headers: the common case
                pos += 1
            else:
                headers, pos = read_headers(data, pos)
            if pos != end:
                raise ValueError(f"record length {length} does not match its fields ({length + pos - end} bytes)")
            record = new(Record)
            set_dict(
                record,
                "__dict__",
                {
                    "offset": base_offset + offset_delta,
                    "timestamp": base_ts if log_append else base_ts + ts_delta,
                    "key": key,
                    "value": value,
                    "headers": headers,
                    **facts,
                },
            )
            append(record)
        if pos != size:
            raise ValueError(f"{size - pos} byte(s) left after its {count} record(s)")
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        reason = exc if not isinstance(exc, IndexError) else "a record runs past the end of the records"
        raise CorruptLogError(
            path, header.position, f"malformed record in batch at offset {header.base_offset}: {reason}"
        ) from exc
    return records


def decode_batch(
    buf: bytes | memoryview,
    path: Path = Path("<memory>"),
    position: int = 0,
    *,
    verify_crc: bool = True,
) -> tuple[RecordBatchHeader, list[Record]]:
    """The batch at the start of ``buf``; ``path`` and ``position`` say where it came from for errors."""
    path = path if isinstance(path, Path) else Path(path)
    view = memoryview(buf)
    header = parse_header_at(view, 0, path, position, position + len(view))
    if verify_crc:
        verify_batch_crc(view, header, path)
    return header, decode_records(header, bytes(view[HEADER_SIZE : header.size_in_bytes]), path)


def iter_batches(
    path: Path, start_position: int = 0, *, max_batch_bytes: int | None = None
) -> Iterator[tuple[RecordBatchHeader, list[Record]]]:
    """Every batch of a ``.log`` from ``start_position`` with its decoded records (CRC checked);
    ``max_batch_bytes`` as ``iter_batch_data``'s."""
    path = Path(path)
    for position, data in iter_batch_data(path, start_position, max_batch_bytes=max_batch_bytes):
        yield decode_batch(data, path, position)


def read_batches(
    stream: BinaryIO, where: Path, start_position: int = 0, object_size: int | None = None
) -> Iterator[tuple[RecordBatchHeader, list[Record]]]:
    """Batches read one at a time from a stream positioned at ``start_position`` of a ``.log``
    (e.g. a ranged read of a remote segment), CRC checked, framed by ``read_batch_data``."""
    for position, data in read_batch_data(stream, where, start_position, object_size):
        yield decode_batch(data, where, position)


def read_batch_data(
    stream: BinaryIO, where: Path, start_position: int = 0, object_size: int | None = None
) -> Iterator[tuple[int, bytes]]:
    """Each batch's position and whole bytes, read one at a time from a stream positioned at
    ``start_position`` of a ``.log``; ``where`` names it in errors. A batch cut short by the end
    of the stream is a ``CorruptLogError``, as in a file; with ``object_size`` (the object's
    size) a batch length running past it is one before anything is read, so a damaged length
    never sizes a read. No CRC check here: the decoder checks it on the bytes it decodes."""
    position = start_position
    while True:
        prefix = stream.read(LOG_OVERHEAD)
        if not prefix:
            return
        if len(prefix) < LOG_OVERHEAD:
            raise CorruptLogError(
                where, position, f"truncated batch: {len(prefix)} trailing byte(s), less than a header"
            )
        _base_offset, batch_length = struct.unpack(">qi", prefix)
        if batch_length < MIN_RECORD_OVERHEAD:  # below any magic's; the magic is checked next, as Kafka does
            raise CorruptLogError(where, position, f"batch length {batch_length} is smaller than a v2 batch header")
        if object_size is not None and position + LOG_OVERHEAD + batch_length > object_size:
            raise CorruptLogError(
                where,
                position,
                f"batch length {batch_length} runs {position + LOG_OVERHEAD + batch_length - object_size} byte(s) "
                f"beyond the end of the {object_size}-byte object (a truncated last batch, or a damaged length)",
            )
        rest = stream.read(batch_length)
        if len(rest) < batch_length:
            raise CorruptLogError(
                where,
                position,
                f"batch length {batch_length} runs {batch_length - len(rest)} byte(s) beyond the end of the "
                "object (a truncated last batch, or a damaged length)",
            )
        yield position, prefix + rest
        position += LOG_OVERHEAD + batch_length


def iter_records(path: Path, start_position: int = 0) -> Iterator[Record]:
    """Every record of a ``.log`` from ``start_position`` (a batch boundary), control records included."""
    for _header, records in iter_batches(path, start_position):
        yield from records


def decode_control_record(record: Record) -> ControlRecord:
    """The control record (commit/abort marker, or another control type) in a control batch.

    As Kafka's ``ControlRecordType.parseTypeId`` and ``EndTransactionMarker``: a negative key or
    value version is corruption; a version above 0 is read as version 0 (later versions only
    append fields), logged at debug level.
    """
    key, value = record.key, record.value
    if key is None or len(key) < 4:
        raise ValueError(f"control record at offset {record.offset} has no valid key")
    version, kind = struct.unpack_from(">hh", key)
    if version < 0:
        raise ValueError(f"control record at offset {record.offset} has key version {version} (negative)")
    if version > CONTROL_RECORD_KEY_VERSION:
        log.debug(
            "control record at offset %d has key version %d; reading it as version %d",
            record.offset,
            version,
            CONTROL_RECORD_KEY_VERSION,
        )
    try:
        control_type = ControlRecordType(kind)
    except ValueError:
        raise ValueError(f"control record at offset {record.offset} has unknown type {kind}") from None
    if control_type in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        if value is None or len(value) < 6:
            raise ValueError(f"end-transaction marker at offset {record.offset} has no valid value")
        value_version, coordinator_epoch = struct.unpack_from(">hi", value)
        if value_version < 0:
            raise ValueError(
                f"end-transaction marker at offset {record.offset} has value version {value_version} (negative)"
            )
        if value_version > END_TXN_MARKER_VALUE_VERSION:
            log.debug(
                "end-transaction marker at offset %d has value version %d; reading it as version %d",
                record.offset,
                value_version,
                END_TXN_MARKER_VALUE_VERSION,
            )
        return ControlRecord(control_type, coordinator_epoch)
    return ControlRecord(control_type, -1)
