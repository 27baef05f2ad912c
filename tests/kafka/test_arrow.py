"""Segments decoded into Arrow equal, record by record, kafka-python's independent reader, our
record decoder and the remote reader, at both isolation levels; damage is a clear error; a group
bounds memory."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from kafka.record import MemoryRecords

from tests.engine_support import TieringEnv
from tiering_core.errors import CorruptLogError
from tiering_core.kafka.arrow import SCHEMA, GroupBounds, decode_batches, read_segment
from tiering_core.kafka.batch import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD, CRC_START, HEADER_SIZE
from tiering_core.kafka.crc import crc32c
from tiering_core.kafka.isolation import IsolationLevel
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.records import RecordSpec, decode_batch, encode_batch, iter_batches
from tiering_core.kafka.topic import TopicPartition
from tiering_core.read.reader import open_reader
from tiering_core.runs.copy import run_copy

CODECS = {"none": CODEC_NONE, "gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY, "lz4": CODEC_LZ4, "zstd": CODEC_ZSTD}
COMMITTED, UNCOMMITTED = IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED
TP = TopicPartition("orders", 0)
_TXN_ENTRY = struct.Struct(">hqqqq")


def rows(n: int, tag: str) -> list[tuple]:
    """Records with headers (one a null value, one a non-ASCII key), a null key, a null value."""
    out: list[tuple] = []
    for i in range(n):
        key = None if i % 4 == 1 else f"{tag}-{i}".encode()
        value = None if i % 4 == 2 else f"value-{tag}-{i}".encode() * (1 + i % 3)
        headers = [("trace", f"{i}".encode()), ("n\u00e9", None)] if i % 3 == 0 else []
        out.append((key, value, headers))
    return out


def write_partition(make_writer: Callable[..., PartitionWriter], codec: int) -> PartitionWriter:
    """Three closed segments and an active one: an aborted transaction (7) whose marker lies in the
    next segment, a committed one (8) interleaved with it, idempotent and plain batches, an abort
    (9) within one segment, every data batch compressed with ``codec``."""
    w = make_writer(codec=codec, segment_bytes=10**9)
    w.append(rows(3, "plain"))
    w.begin_transaction(7, 0)
    w.begin_transaction(8, 0)
    w.append(rows(4, "abort7"), producer_id=7)
    w.append(rows(2, "commit8"), producer_id=8)
    w.append(rows(2, "idem"), producer_id=11, producer_epoch=0)
    w.roll()
    w.append(rows(3, "abort7"), producer_id=7)
    w.commit(8)
    w.abort(7)
    w.append(rows(5, "plain"))
    w.roll()
    w.begin_transaction(9, 0)
    w.append(rows(5, "abort9"), producer_id=9)
    w.append(rows(2, "plain"))
    w.abort(9)
    w.append(rows(1, "plain"))
    w.roll()
    w.append(rows(1, "plain"))
    w.set_high_watermark()
    return w


def aborted_ranges(w: PartitionWriter) -> list[tuple[int, int, int]]:
    """Every ``.txnindex`` entry of the partition, parsed here: (producer id, first, last)."""
    out = []
    for path in sorted(w.path.glob("*.txnindex")):
        data = path.read_bytes()
        for at in range(0, len(data), _TXN_ENTRY.size):
            _version, pid, first, last, _lso = _TXN_ENTRY.unpack_from(data, at)
            out.append((pid, first, last))
    return out


def kafka_python_view(log: Path, aborted: list[tuple[int, int, int]], committed: bool) -> list[tuple]:
    """A consumer's records of one segment decoded by kafka-python: control batches skipped and,
    at read_committed, the batches of aborted transactions."""
    out = []
    records = MemoryRecords(log.read_bytes())
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        if batch.is_control_batch:
            continue
        if (
            committed
            and batch.is_transactional
            and any(pid == batch.producer_id and first <= batch.base_offset <= last for pid, first, last in aborted)
        ):
            continue
        for r in batch:
            out.append(
                (
                    r.offset,
                    r.timestamp,
                    "LogAppendTime" if r.timestamp_type == 1 else "CreateTime",
                    r.key,
                    r.value,
                    [(k, v) for k, v in r.headers],
                    batch.producer_id,
                    batch.is_transactional,
                )
            )
    return out


def arrow_view(batches: list[pa.RecordBatch]) -> list[tuple]:
    out = []
    for batch in batches:
        assert batch.schema == SCHEMA
        d = batch.to_pydict()
        timestamps = batch.column("timestamp").cast(pa.int64()).to_pylist()
        for i in range(batch.num_rows):
            out.append(
                (
                    d["offset"][i],
                    timestamps[i],
                    d["timestamp_type"][i],
                    d["key"][i],
                    d["value"][i],
                    [(h["key"], h["value"]) for h in d["headers"][i]],
                    d["producer_id"][i],
                    d["is_transactional"][i],
                )
            )
    return out


def our_record_view(log: Path, aborted: list[tuple[int, int, int]], committed: bool) -> list[tuple]:
    """The same through our pure-Python record decoder."""
    out = []
    for h, records in iter_batches(log):
        if h.is_control or (
            committed
            and h.is_transactional
            and any(pid == h.producer_id and first <= h.base_offset <= last for pid, first, last in aborted)
        ):
            continue
        out += [
            (
                r.offset,
                r.timestamp,
                "LogAppendTime" if h.is_log_append_time else "CreateTime",
                r.key,
                r.value,
                list(r.headers),
                r.producer_id,
                r.is_transactional,
            )
            for r in records
        ]
    return out


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("isolation", [COMMITTED, UNCOMMITTED])
def test_segments_decode_as_kafka_python_and_our_record_decoder_read_them(
    make_writer: Callable[..., PartitionWriter], codec: str, isolation: IsolationLevel
) -> None:
    w = write_partition(make_writer, CODECS[codec])
    aborted = aborted_ranges(w)
    committed = isolation == COMMITTED
    assert {pid for pid, _f, _l in aborted} == {7, 9}
    for log in sorted(w.path.glob("*.log")):
        batches = list(read_segment(log, w.tp, isolation=isolation))
        got = arrow_view(batches)
        assert got == kafka_python_view(log, aborted, committed), log.name
        assert got == our_record_view(log, aborted, committed), log.name
        for batch in batches:
            d = batch.to_pydict()
            assert set(d["topic"]) == {"orders"} and set(d["partition"]) == {0}
            assert set(d["leader_epoch"]) == {0}
    every = [r for log in sorted(w.path.glob("*.log")) for r in arrow_view(list(read_segment(log, w.tp)))]
    keys = [r[3] for r in every]
    assert not [k for k in keys if k and k.startswith(b"abort")]  # read_committed is the default
    assert keys.count(b"commit8-0") == 1 and keys.count(None) > 0
    assert any(r[5] for r in every) and any(r[4] is None for r in every)


def test_log_append_time_batches_report_the_brokers_time_as_kafka_python_does() -> None:
    specs = [RecordSpec(b"k%d" % i, b"v", 1_700_000_000_000 + i) for i in range(5)]
    data = encode_batch(
        specs, base_offset=40, partition_leader_epoch=3, log_append_time=True, max_timestamp=1_800_000_000_000
    )
    got = arrow_view(list(decode_batches([(0, data)], Path("<memory>"), TP)))
    records = MemoryRecords(data).next_batch()
    assert got == [(r.offset, r.timestamp, "LogAppendTime", r.key, r.value, [], -1, False) for r in records]
    assert {r[1] for r in got} == {1_800_000_000_000}


def test_the_reader_returns_what_the_arrow_decoder_reads(fs_env: TieringEnv) -> None:
    """The remote tier's fetch, at both levels, against the decoded local segments it copied."""
    built = write_partition(lambda **kw: fs_env.writer("orders", 0, **kw), CODEC_ZSTD)
    logs = sorted(built.path.glob("*.log"))[:-1]  # the active segment is never remote
    with fs_env.context() as ctx:
        run_copy(ctx, built.tp)
        reader = open_reader(ctx, built.tp)
        for isolation in (COMMITTED, UNCOMMITTED):
            fetched = reader.read(0, 1000, isolation)
            decoded = [r for log in logs for r in arrow_view(list(read_segment(log, built.tp, isolation=isolation)))]
            assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in fetched] == [
                (r[0], r[1], r[3], r[4], r[5]) for r in decoded
            ]


def with_crc(batch: bytearray) -> bytes:
    """The batch with its CRC-32C recomputed: damage the CRC does not catch, as a buggy writer makes."""
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[CRC_START:])))
    return bytes(batch)


def plain_batch() -> bytes:
    """One record, its bytes after the batch header: 0 length (22), 1 attributes, 2 timestamp
    delta, 3 offset delta, 4 key length, 5-9 key, 10 value length, 11-17 value, 18 header count,
    19 header key length, 20 header key, 21 header value length, 22 header value."""
    return encode_batch(
        [RecordSpec(b"key-0", b"value-0", 1_700_000_000_000, (("h", b"x"),))], base_offset=100, partition_leader_epoch=0
    )


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda b: b.__setitem__(HEADER_SIZE, 0x7E), "record length 63 runs past the end of the records"),
        (
            lambda b: b.__setitem__(slice(HEADER_SIZE + 2, HEADER_SIZE + 12), b"\xff" * 10),
            "varint is longer than 10 bytes",
        ),
        (lambda b: b.__setitem__(HEADER_SIZE + 4, 0x7E), "key length 63 runs past the end of its record"),
        (lambda b: b.__setitem__(HEADER_SIZE + 10, 0x1E), "value length 15 runs past the end of its record"),
        (lambda b: b.__setitem__(HEADER_SIZE + 18, 0x7E), "header count 63 is more than the bytes left"),
        (lambda b: b.__setitem__(HEADER_SIZE + 19, 0x01), "header key length -1 (header keys cannot be null)"),
        (lambda b: b.__setitem__(HEADER_SIZE + 20, 0xFF), "a header key is not valid UTF-8"),
        (lambda b: b.__setitem__(HEADER_SIZE + 21, 0x7E), "header value length 63 runs past the end of its record"),
        (lambda b: b.__setitem__(slice(57, 61), struct.pack(">i", 2**31 - 1)), "record count 2147483647 cannot fit"),
        (lambda b: b.__setitem__(slice(57, 61), struct.pack(">i", 0)), "23 byte(s) left after the batch's records"),
    ],
)
def test_a_damaged_batch_names_the_segment_and_the_batch(damage: Callable[[bytearray], None], reason: str) -> None:
    data = bytearray(plain_batch())
    damage(data)
    batch = with_crc(data)
    where = Path("/data/orders-0/00000000000000000000.log")
    with pytest.raises(CorruptLogError) as caught:
        list(decode_batches([(4096, batch)], where, TP))
    assert caught.value.path == where and caught.value.position == 4096
    assert "batch at offset 100" in str(caught.value) and reason in str(caught.value), str(caught.value)
    with pytest.raises(CorruptLogError):  # the record decoder refuses it too
        decode_batch(batch, where, 4096)


def test_damage_is_an_error_in_both_decoders_or_neither_and_both_agree() -> None:
    """Random damage inside the records (CRC recomputed): never a read outside the batch, and the
    Arrow decoder and the record decoder agree on every outcome."""
    specs = [
        RecordSpec(
            None if i % 5 == 0 else b"k%d" % i, b"v" * (i % 40), 1_700_000_000_000 + i, (("h\u00e9", b"x"),) * (i % 3)
        )
        for i in range(30)
    ]
    clean = encode_batch(specs, base_offset=7, partition_leader_epoch=1)
    rng = random.Random(21)
    outcomes = {"error": 0, "decoded": 0}
    for _ in range(600):
        data = bytearray(clean)
        for _flip in range(rng.randint(1, 3)):
            data[rng.randrange(HEADER_SIZE, len(data))] = rng.randrange(256)
        batch = with_crc(data)
        try:
            _header, records = decode_batch(batch)
        except CorruptLogError:
            with pytest.raises(CorruptLogError, match="batch at offset 7"):
                list(decode_batches([(0, batch)], Path("<memory>"), TP))
            outcomes["error"] += 1
            continue
        got = arrow_view(list(decode_batches([(0, batch)], Path("<memory>"), TP)))
        assert got == [
            (r.offset, r.timestamp, "CreateTime", r.key, r.value, list(r.headers), -1, False) for r in records
        ]
        outcomes["decoded"] += 1
    assert outcomes["error"] and outcomes["decoded"]


def test_a_segment_decodes_in_groups_no_bigger_than_the_bound(make_writer: Callable[..., PartitionWriter]) -> None:
    w = make_writer(segment_bytes=10**9, codec=CODEC_LZ4)
    w.append_records(2000, value_size=200, per_batch=10)
    log = w.active_log_path
    whole = arrow_view(list(read_segment(log, w.tp, bounds=GroupBounds(max_batches=10**6, max_bytes=1 << 30))))
    assert len(whole) == 2000
    by_batches = list(read_segment(log, w.tp, bounds=GroupBounds(max_batches=16)))
    assert len(by_batches) == 200 // 16 + 1 and all(b.num_rows <= 16 * 10 for b in by_batches)
    assert arrow_view(by_batches) == whole
    bound = 20_000
    by_bytes = list(read_segment(log, w.tp, bounds=GroupBounds(max_bytes=bound)))
    assert len(by_bytes) > 10
    for batch in by_bytes:
        payload = sum(
            len(k) + len(v) for k, v in zip(batch["key"].to_pylist(), batch["value"].to_pylist(), strict=True)
        )
        assert payload <= bound and batch.num_rows < bound // 200
    assert arrow_view(by_bytes) == whole


def test_batches_larger_than_a_chunk_and_a_truncated_last_batch(make_writer: Callable[..., PartitionWriter]) -> None:
    w = make_writer(segment_bytes=10**9)
    w.append_records(60, value_size=300, per_batch=6)
    log = w.active_log_path
    whole = arrow_view(list(read_segment(log, w.tp)))
    one_by_one = list(read_segment(log, w.tp, bounds=GroupBounds(max_bytes=100)))  # every batch is larger
    assert len(one_by_one) == 10 and arrow_view(one_by_one) == whole
    data = log.read_bytes()
    log.write_bytes(data[:-5])
    with pytest.raises(CorruptLogError, match="beyond the end of the file") as caught:
        list(read_segment(log, w.tp))
    assert caught.value.path == log and caught.value.position > 0


def test_a_read_stops_at_the_records_wanted(make_writer: Callable[..., PartitionWriter]) -> None:
    """Batches past the records a caller still wants are never read: here they are damaged."""
    w = make_writer(segment_bytes=10**9)
    w.append_records(30, value_size=20, per_batch=5)
    data = bytearray(w.active_log_path.read_bytes())
    data[-3] ^= 0xFF  # the last batch's CRC no longer matches
    batches = [(position, bytes(data[position : position + size])) for position, size in _framing(bytes(data))]
    got = decode_batches(iter(batches), Path("<memory>"), TP, records_wanted=lambda: 12)
    assert [r[0] for r in arrow_view([next(got)])] == list(range(15))  # three batches hold the 12 wanted
    with pytest.raises(CorruptLogError, match="CRC mismatch"):
        list(decode_batches(iter(batches), Path("<memory>"), TP))


def _framing(data: bytes) -> list[tuple[int, int]]:
    out, position = [], 0
    while position < len(data):
        (length,) = struct.unpack_from(">i", data, position + 8)
        out.append((position, 12 + length))
        position += 12 + length
    return out


def test_without_a_writable_cache_location_the_kernels_compile_in_each_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """numba refuses ``cache=True`` at decoration when no cache location is writable (a read-only
    install and no user cache directory); the decoder then compiles without a cache."""
    from tiering_core.kafka.arrow import kernels

    real = kernels.njit

    def no_cache_location(*args: object, **kwargs: object) -> object:
        if kwargs.get("cache"):
            raise RuntimeError("cannot cache function 'f': no locator available for file '/ro/kernels.py'")
        return real(*args, **kwargs)

    monkeypatch.setattr(kernels, "njit", no_cache_location)

    def add_one(x: int) -> int:
        return x + 1

    assert kernels.compiled(add_one)(41) == 42


def test_the_compiled_parse_refuses_a_layout_outside_its_buffer() -> None:
    """The kernel checks its caller's layout before reading: a section past the buffer or more
    records than slots is an error, never a read or write out of bounds."""
    import numpy as np

    from tiering_core.kafka.arrow import kernels

    buf = np.zeros(10, np.uint8)
    buf.flags.writeable = False
    slots = [np.empty(1, t) for t in (np.int64, np.int64, np.int64, np.int32, np.int64, np.int32, np.int32)]
    for ends, counts, reason in (([20], [1], "outside the buffer"), ([10], [5], "smaller than the record counts")):
        with pytest.raises(IndexError, match=reason):
            kernels.parse_records(buf, np.array([0]), np.array(ends), np.array(counts), *slots, np.zeros(4, np.int64))
