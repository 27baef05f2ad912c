"""Removing records from a closed segment by key, batch by batch as Kafka's log cleaner does.

Kafka's cleaner (``MemoryRecords.filterTo`` and ``buildRetainedRecordsInto``) never moves an
offset: it rewrites a v2 batch with only the records it keeps and leaves everything else alone.
An erasure of the tier follows the same rules, so a rewritten segment is one a broker could have
written itself:

- a batch holding no erased key stays byte for byte, and so does every control batch;
- the kept records of a batch go into one new batch with the original base offset, last offset
  delta, codec, timestamp type, producer id, epoch and base sequence, flags and leader epoch;
  each record keeps its offset delta, timestamp (in a LogAppendTime batch, the broker's time
  every reader sees), key, value and headers. As Kafka's
  ``MemoryRecordsBuilder``, the new base timestamp is the first kept record's (the delete
  horizon when the batch carries one), so a record's timestamp delta is re-expressed from it
  when the first record went; the record count, max timestamp and CRC-32C are recomputed;
- a batch left with no record is dropped, unless it is its producer's last data batch in the
  segment: then it stays as Kafka's empty batch (header only, no codec, record count 0), since
  producer state and the producer snapshot point at its last offset and sequence.

Only v2 batches are read (the batch reader refuses magic 0 and 1 naming the magic): Kafka 4
no longer writes the older formats, and a v0/v1 message set has no empty batch to keep a
producer's sequence with. Every batch's CRC is checked and decompression is capped as in
``records.decode_records``, so hostile bytes cost bounded memory and time.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.batch import (
    ATTR_CODEC_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    BATCH_HEADER,
    CODEC_NONE,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    RecordBatchHeader,
    iter_batch_data,
    iter_batch_headers,
    parse_header_at,
)
from tiering_core.kafka.compression import compress
from tiering_core.kafka.crc import crc32c
from tiering_core.kafka.index import DEFAULT_INDEX_INTERVAL_BYTES
from tiering_core.kafka.index_rebuild import IndexBuilder
from tiering_core.kafka.records import Record, RecordSpec, decode_batch, encode_record, read_batch_data

#: Kafka's ``RecordBatch.NO_TIMESTAMP``: the base timestamp of an empty batch.
NO_TIMESTAMP = -1
#: The attribute bits a batch builder writes (Kafka's ``DefaultRecordBatch.computeAttributes``).
_BUILT_ATTRIBUTES = ATTR_CODEC_MASK | ATTR_LOG_APPEND_TIME | ATTR_TRANSACTIONAL | ATTR_CONTROL | ATTR_DELETE_HORIZON
_CRC = struct.Struct(">I")

KeyPredicate = Callable[[bytes], bool]


@dataclass(frozen=True)
class CleanerResult:
    """What a filter did to a segment: enough to audit it and to rebuild what depends on positions."""

    records_removed: int
    batches_rewritten: int
    batches_dropped: int
    batches_kept_empty: int
    removed_offsets: tuple[int, ...]

    @property
    def changed(self) -> bool:
        return self.records_removed > 0


@dataclass(frozen=True)
class CleanedLog:
    """A segment's new ``.log`` bytes, what was done, and its offset and time indexes (closed segment)."""

    log: bytes
    result: CleanerResult
    offset_index: bytes
    time_index: bytes


@dataclass
class _Tally:
    """The counts while batches go by; frozen into a ``CleanerResult`` at the end."""

    rewritten: int = 0
    dropped: int = 0
    kept_empty: int = 0
    removed_offsets: list[int] = field(default_factory=list)

    def result(self) -> CleanerResult:
        return CleanerResult(
            records_removed=len(self.removed_offsets),
            batches_rewritten=self.rewritten,
            batches_dropped=self.dropped,
            batches_kept_empty=self.kept_empty,
            removed_offsets=tuple(self.removed_offsets),
        )


def key_predicate(erase: KeyPredicate | Collection[bytes]) -> KeyPredicate:
    """A callable from a predicate or a collection of erased keys (bytes)."""
    if callable(erase):
        return erase
    if isinstance(erase, (bytes, bytearray, memoryview, str)):  # one key given where keys are meant
        raise TypeError("erased keys are a collection of keys (e.g. {b'user-1'}), not one key")
    keys = frozenset(bytes(k) for k in erase)
    return keys.__contains__


def last_data_offsets(headers: Iterable[RecordBatchHeader]) -> dict[int, int]:
    """Producer id -> last offset of its last data batch (control batches aside), as the
    cleaner's ``lastRecordsOfActiveProducers`` names the batch whose sequence must survive."""
    last: dict[int, int] = {}
    for header in headers:
        if header.has_producer_id and not header.is_control:
            last[header.producer_id] = header.last_offset
    return last


def _encode(
    header: RecordBatchHeader, attributes: int, base_timestamp: int, max_timestamp: int, count: int, payload: bytes
) -> bytes:
    """A v2 batch with ``header``'s offsets, producer fields and leader epoch, its CRC-32C computed."""
    out = bytearray(
        BATCH_HEADER.pack(
            header.base_offset,
            HEADER_SIZE - LOG_OVERHEAD + len(payload),
            header.partition_leader_epoch,
            MAGIC_V2,
            0,
            attributes,
            header.last_offset_delta,
            base_timestamp,
            max_timestamp,
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            count,
        )
    )
    out += payload
    _CRC.pack_into(out, CRC_START - _CRC.size, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


def rewrite_batch(header: RecordBatchHeader, kept: list[Record]) -> bytes:
    """The batch ``header`` describes holding only ``kept`` (at least one of its records),
    as ``buildRetainedRecordsInto`` builds it: same codec, last offset delta and producer fields."""
    if not kept:
        raise ValueError("a rewritten batch keeps at least one record (an empty one is ``empty_batch``'s)")
    base_offset = header.base_offset
    has_horizon = bool(header.attributes & ATTR_DELETE_HORIZON)
    base_timestamp = header.base_timestamp if has_horizon else kept[0].timestamp
    raw = b"".join(
        encode_record(RecordSpec(r.key, r.value, r.timestamp, r.headers), r.offset - base_offset, base_timestamp)
        for r in kept
    )
    max_timestamp = header.max_timestamp if header.is_log_append_time else max(r.timestamp for r in kept)
    payload = compress(header.codec, raw)
    return _encode(header, header.attributes & _BUILT_ATTRIBUTES, base_timestamp, max_timestamp, len(kept), payload)


def empty_batch(header: RecordBatchHeader) -> bytes:
    """Kafka's ``DefaultRecordBatch.writeEmptyHeader`` for ``header``: no records, no codec, the
    original max timestamp, timestamp type, flags, producer fields and last offset delta."""
    attributes = header.attributes & (ATTR_LOG_APPEND_TIME | ATTR_TRANSACTIONAL | ATTR_CONTROL) | CODEC_NONE
    return _encode(header, attributes, NO_TIMESTAMP, header.max_timestamp, 0, b"")


def _clean_batches(
    frames: Iterable[tuple[int, bytes]],
    erase: KeyPredicate,
    last_data: Mapping[int, int],
    where: Path,
    tally: _Tally,
) -> Iterator[bytes]:
    """The new bytes of each batch that stays, from (position, whole batch) frames of a ``.log``.

    Every batch is decoded (CRC checked, decompression capped) before anything is decided, so a
    damaged segment raises ``CorruptLogError`` whatever its keys. ``last_data`` is
    ``last_data_offsets`` of the same segment.
    """
    for position, data in frames:
        header, records = decode_batch(data, where, position)
        if header.is_control:
            yield data
            continue
        kept: list[Record] = []
        removed: list[int] = []
        for record in records:
            if record.key is not None and erase(record.key):
                removed.append(record.offset)
            else:
                kept.append(record)
        if not removed:
            yield data
            continue
        tally.removed_offsets.extend(removed)
        if kept:
            tally.rewritten += 1
            yield rewrite_batch(header, kept)
        elif header.has_producer_id and last_data.get(header.producer_id) == header.last_offset:
            tally.kept_empty += 1
            yield empty_batch(header)
        else:
            tally.dropped += 1


def _frames_of(data: bytes, where: Path) -> Iterator[tuple[int, bytes]]:
    return read_batch_data(io.BytesIO(data), where, 0, len(data))


def _headers_of(data: bytes, where: Path) -> Iterator[RecordBatchHeader]:
    for position, batch in _frames_of(data, where):
        yield parse_header_at(batch, 0, where, position, position + len(batch))


def clean_log(
    data: bytes,
    erase: KeyPredicate | Collection[bytes],
    base_offset: int,
    *,
    where: Path = Path("<memory>"),
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
) -> CleanedLog:
    """A closed segment's ``.log`` bytes (base offset ``base_offset``) without the records whose
    key ``erase`` names, with its new offset and time indexes (positions change, offsets do not).

    Records with a null key are never erased; ``where`` names the segment in errors.
    """
    predicate = key_predicate(erase)
    last_data = last_data_offsets(_headers_of(data, where))
    tally = _Tally()
    builder = IndexBuilder(base_offset, index_interval_bytes)
    out = bytearray()
    for batch in _clean_batches(_frames_of(data, where), predicate, last_data, where, tally):
        builder.on_batch(parse_header_at(batch, 0, where, len(out), len(out) + len(batch)))
        out += batch
    builder.on_roll()
    return CleanedLog(bytes(out), tally.result(), builder.offset_index_bytes(), builder.time_index_bytes())


def clean_segment(
    source: Path,
    target: Path,
    erase: KeyPredicate | Collection[bytes],
    *,
    max_batch_bytes: int | None = None,
) -> CleanerResult:
    """``clean_log`` from file to file, one batch in memory at a time; ``target`` must not exist.

    ``max_batch_bytes`` refuses a larger batch before reading it (a log whose writer caps its
    batches). Indexes for ``target`` come from ``index_rebuild.rebuild_indexes``.
    """
    predicate = key_predicate(erase)
    last_data = last_data_offsets(iter_batch_headers(source, strict=True))
    tally = _Tally()
    target = Path(target)
    with target.open("xb") as out:
        try:
            frames = iter_batch_data(source, max_batch_bytes=max_batch_bytes)
            for batch in _clean_batches(frames, predicate, last_data, Path(source), tally):
                out.write(batch)
        except BaseException:
            target.unlink(missing_ok=True)  # never leave half a segment behind
            raise
    return tally.result()


def offsets_of_keys(
    source: Path,
    erase: KeyPredicate | Collection[bytes],
    *,
    max_batch_bytes: int | None = None,
    valid_prefix: bool = False,
) -> tuple[int, ...]:
    """The offsets of the records whose key ``erase`` names in the ``.log`` at ``source``: what
    ``clean_segment`` would remove, read-only (a broker's own segment, which the platform never
    writes), each batch decoded as the cleaner decodes it (CRC checked, decompression capped).

    ``valid_prefix`` stops quietly where a batch cannot be framed, as Kafka's recovery keeps a
    log's valid prefix: the active segment, whose last batch the broker may be writing.
    """
    predicate = key_predicate(erase)
    found: list[int] = []
    frames = iter_batch_data(source, max_batch_bytes=max_batch_bytes)
    while True:
        try:
            position, data = next(frames)
        except StopIteration:
            break
        except CorruptLogError:
            if valid_prefix:
                break
            raise
        header, records = decode_batch(data, Path(source), position)
        if not header.is_control:
            found.extend(r.offset for r in records if r.key is not None and predicate(r.key))
    return tuple(found)
