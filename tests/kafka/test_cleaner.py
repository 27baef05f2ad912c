"""The cleaner's batch filter removes records by key as Kafka's log cleaner rewrites batches.

Segments come from the broker-faithful writer; the rewritten bytes are read back by the
platform's reader and by kafka-python's (an independent CRC and record decoder), and their
indexes are compared with a rebuild of the written file.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest
import zstandard
from kafka.record import MemoryRecords

from tests.memory import run_measured
from tiering_core.errors import CorruptLogError
from tiering_core.kafka.batch import (
    ATTR_CODEC_MASK,
    ATTR_DELETE_HORIZON,
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    HEADER_SIZE,
    LOG_OVERHEAD,
    RecordBatchHeader,
    iter_batch_headers,
    verify_log_crc,
)
from tiering_core.kafka.cleaner import CleanedLog, clean_log, clean_segment, offsets_of_keys
from tiering_core.kafka.crc import crc32c
from tiering_core.kafka.index_rebuild import rebuild_indexes
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.records import Record, RecordSpec, decode_batch, encode_batch, read_batch_data

CODECS = {"none": CODEC_NONE, "gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY, "lz4": CODEC_LZ4, "zstd": CODEC_ZSTD}
INTERVAL = 300


def batches_of(data: bytes, where: str = "<test>") -> list[tuple[RecordBatchHeader, list[Record], bytes]]:
    import io

    return [
        (*decode_batch(batch, Path(where), position), batch)
        for position, batch in read_batch_data(io.BytesIO(data), Path(where), 0, len(data))
    ]


def records_by_offset(data: bytes) -> dict[int, Record]:
    return {r.offset: r for _h, records, _b in batches_of(data) for r in records}


def kafka_python_view(data: bytes) -> list[tuple[int, int, int, bytes | None, bytes | None, list]]:
    """(batch base offset, offset, timestamp, key, value, headers) as kafka-python decodes them, its CRC checked."""
    out = []
    records = MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        for r in batch:
            out.append((batch.base_offset, r.offset, r.timestamp, r.key, r.value, list(r.headers)))
    return out


def closed_segment(w: PartitionWriter) -> tuple[Path, int]:
    """Roll the writer; its first segment, now closed, and that segment's base offset."""
    w.roll()
    base = w.segment_bases()[0]
    return w.path / f"{base:020d}.log", base


def assert_cleaned_as_kafka(original: bytes, cleaned: CleanedLog, erased: set[bytes]) -> None:
    """Section 11, checked batch by batch against the original."""
    before = {h.base_offset: (h, recs, raw) for h, recs, raw in batches_of(original)}
    after = batches_of(cleaned.log)
    kept_records = records_by_offset(cleaned.log)
    removed = sorted(r.offset for h, recs, _ in before.values() if not h.is_control for r in recs if r.key in erased)
    assert list(cleaned.result.removed_offsets) == removed
    assert cleaned.result.records_removed == len(removed)
    for offset, record in records_by_offset(original).items():
        if offset in removed:
            assert offset not in kept_records
        else:
            assert kept_records[offset] == record  # key, value, headers, timestamp, producer facts
    assert not any(r.key in erased for r in kept_records.values() if not r.is_control)
    rewritten = empty = 0
    for header, records, raw in after:
        old, old_records, old_raw = before[header.base_offset]
        if not any(r.key in erased for r in old_records) or old.is_control:
            assert raw == old_raw  # untouched, byte for byte
            continue
        for name in (
            "base_offset",
            "last_offset_delta",
            "partition_leader_epoch",
            "producer_id",
            "producer_epoch",
            "base_sequence",
            "is_transactional",
            "is_control",
            "timestamp_type",
        ):
            assert getattr(header, name) == getattr(old, name), name
        assert header.records_count == len(records)
        if records:
            rewritten += 1
            assert header.codec == old.codec
            want_max = old.max_timestamp if old.is_log_append_time else max(r.timestamp for r in records)
            assert header.max_timestamp == want_max
        else:
            empty += 1
            assert header.size_in_bytes == HEADER_SIZE and header.max_timestamp == old.max_timestamp
    assert (cleaned.result.batches_rewritten, cleaned.result.batches_kept_empty) == (rewritten, empty)
    dropped = len(before) - len(after)
    assert cleaned.result.batches_dropped == dropped


def assert_indexes_are_the_rebuilds(tmp_path: Path, cleaned: CleanedLog, base: int) -> Path:
    path = tmp_path / f"{base:020d}.log"
    path.write_bytes(cleaned.log)
    verify_log_crc(path)
    rebuilt = rebuild_indexes(path, base, index_interval_bytes=INTERVAL)
    assert (cleaned.offset_index, cleaned.time_index) == (rebuilt.offset_index, rebuilt.time_index)
    return path


@pytest.mark.parametrize("codec", list(CODECS.values()), ids=list(CODECS))
def test_each_codec_keeps_every_other_record_at_its_offset(make_writer, tmp_path: Path, codec: int) -> None:
    w = make_writer(codec=codec, segment_bytes=10**6, index_interval_bytes=INTERVAL)
    w.append_records(15, per_batch=5, key_prefix="a")  # batches with no erased key
    w.append([(b"user-1", b"x" * 50), (b"user-2", b"y" * 50, [("h", b"1"), ("n", None)]), (None, b"null key")])
    w.append([(b"user-1", b"first"), (b"keep", b"z")], timestamp=w.clock() + 1000)  # the first record goes
    w.append([(b"user-1", b"only")])  # every record goes: the batch is dropped (no producer id)
    w.append_records(20, per_batch=4, key_prefix="b")
    log_path, base = closed_segment(w)
    original = log_path.read_bytes()
    erased = {b"user-1", b"b-3", b"b-17"}
    cleaned = clean_log(original, erased, base, index_interval_bytes=INTERVAL)
    assert_cleaned_as_kafka(original, cleaned, erased)
    assert cleaned.result.batches_rewritten == 4 and cleaned.result.batches_dropped == 1
    assert cleaned.result.batches_kept_empty == 0
    path = assert_indexes_are_the_rebuilds(tmp_path, cleaned, base)
    theirs = kafka_python_view(cleaned.log)
    assert [(o, t, k, v) for _b, o, t, k, v, _h in theirs] == [
        (r.offset, r.timestamp, r.key, r.value) for _h, recs, _raw in batches_of(cleaned.log) for r in recs
    ]
    assert clean_segment(log_path, tmp_path / "copy.log", erased) == cleaned.result
    assert (tmp_path / "copy.log").read_bytes() == cleaned.log == path.read_bytes()


def test_a_segment_with_no_erased_key_is_byte_for_byte_the_same(make_writer) -> None:
    w = make_writer(codec=CODEC_LZ4, index_interval_bytes=INTERVAL)
    w.append_records(40, per_batch=7)
    log_path, base = closed_segment(w)
    original = log_path.read_bytes()
    cleaned = clean_log(original, {b"absent"}, base, index_interval_bytes=INTERVAL)
    assert cleaned.log == original and not cleaned.result.changed
    assert cleaned.offset_index == (w.path / f"{base:020d}.index").read_bytes()
    assert cleaned.time_index == (w.path / f"{base:020d}.timeindex").read_bytes()


def test_a_later_segment_keeps_its_base_in_the_indexes(make_writer, tmp_path: Path) -> None:
    w = make_writer(codec=CODEC_ZSTD, index_interval_bytes=INTERVAL)
    w.append_records(30, per_batch=3)
    w.roll()
    w.append_records(60, per_batch=3, key_prefix="later")
    w.roll()
    base = w.segment_bases()[1]
    original = (w.path / f"{base:020d}.log").read_bytes()
    erased = {f"later-{i}".encode() for i in range(0, 60, 2)}
    cleaned = clean_log(original, erased, base, index_interval_bytes=INTERVAL)
    assert base == 30 and cleaned.result.records_removed == 30
    assert_cleaned_as_kafka(original, cleaned, erased)
    assert_indexes_are_the_rebuilds(tmp_path, cleaned, base)


def test_a_predicate_decides_and_null_keys_are_never_asked(make_writer) -> None:
    w = make_writer()
    w.append([(None, b"v1"), (b"drop-me", b"v2"), (b"keep", b"v3")])
    log_path, base = closed_segment(w)
    asked: list[bytes] = []

    def erase(key: bytes) -> bool:
        asked.append(key)
        return key.startswith(b"drop")

    cleaned = clean_log(log_path.read_bytes(), erase, base)
    assert None not in asked and b"drop-me" in asked
    with pytest.raises(TypeError, match="not one key"):
        clean_log(log_path.read_bytes(), b"drop-me", base)
    assert [r.key for r in records_by_offset(cleaned.log).values()] == [None, b"keep"]
    assert cleaned.result.removed_offsets == (1,)


def test_transactions_keep_their_markers_and_a_producers_last_batch_stays_empty(make_writer, tmp_path: Path) -> None:
    w = make_writer(codec=CODEC_GZIP, index_interval_bytes=INTERVAL)
    w.append([(b"plain", b"p")])
    w.begin_transaction(7)
    w.append([(b"secret", b"t1"), (b"secret", b"t2")], producer_id=7)  # all erased, not 7's last: dropped
    w.append([(b"secret", b"t3"), (b"ok", b"t4")], producer_id=7)  # rewritten
    w.commit(7)
    w.begin_transaction(8)
    w.append([(b"secret", b"a1"), (b"fine", b"a2")], producer_id=8)  # aborted, rewritten
    w.append([(b"secret", b"a3")], producer_id=8)  # aborted, all erased, 8's last: kept empty
    w.abort(8)
    w.append([(b"secret", b"i1")], producer_id=9, producer_epoch=0)  # idempotent, dropped
    w.append([(b"secret", b"i2")], producer_id=9)  # idempotent, 9's last: kept empty
    w.append([(b"secret", b"tail")])  # no producer id: dropped
    log_path, base = closed_segment(w)
    original = log_path.read_bytes()
    cleaned = clean_log(original, {b"secret"}, base, index_interval_bytes=INTERVAL)
    assert_cleaned_as_kafka(original, cleaned, {b"secret"})
    result = cleaned.result
    assert (result.batches_rewritten, result.batches_dropped, result.batches_kept_empty) == (2, 3, 2)
    after = {h.base_offset: h for h, _r, _b in batches_of(cleaned.log)}
    before = {h.base_offset: h for h, _r, _b in batches_of(original)}
    empties = sorted(b for b, h in after.items() if h.records_count == 0)
    last_of = {
        pid: max(h.base_offset for h in before.values() if h.producer_id == pid and not h.is_control) for pid in (8, 9)
    }
    assert empties == sorted(last_of.values())
    for offset in empties:
        h = after[offset]
        assert h.codec == CODEC_NONE and h.base_timestamp == -1
        assert (h.last_offset, h.base_sequence, h.producer_epoch) == (
            before[offset].last_offset,
            before[offset].base_sequence,
            before[offset].producer_epoch,
        )
    markers = [h for h in after.values() if h.is_control]
    assert len(markers) == 2 and all(h.records_count == 1 for h in markers)
    assert max(after) < before[max(before)].base_offset  # the last, plain batch went
    assert_indexes_are_the_rebuilds(tmp_path, cleaned, base)
    assert [o for _b, o, *_ in kafka_python_view(cleaned.log)] == sorted(records_by_offset(cleaned.log))


def test_a_log_append_time_batch_keeps_the_brokers_time(tmp_path: Path) -> None:
    records = [RecordSpec(f"k{i}".encode(), f"v{i}".encode(), 1_000 + i * 10) for i in range(6)]
    first = encode_batch(
        records, base_offset=0, partition_leader_epoch=3, codec=CODEC_SNAPPY, log_append_time=True, max_timestamp=9_999
    )
    second = encode_batch(records[:2], base_offset=6, partition_leader_epoch=3, max_timestamp=None)
    original = first + second
    erased = {b"k0", b"k4"}
    cleaned = clean_log(original, erased, 0)
    assert_cleaned_as_kafka(original, cleaned, erased)
    header, kept, _raw = batches_of(cleaned.log)[0]
    assert header.is_log_append_time and header.max_timestamp == 9_999
    assert [r.timestamp for r in kept] == [9_999] * 4  # what a reader of the original saw
    assert [r.offset for r in kept] == [1, 2, 3, 5] and header.last_offset == 5
    assert_indexes_are_the_rebuilds(tmp_path, cleaned, 0)


def test_a_create_time_batch_losing_its_first_record_keeps_every_timestamp() -> None:
    records = [RecordSpec(f"k{i}".encode(), b"v", 5_000 - i * 100) for i in range(4)]  # out of order, as allowed
    original = encode_batch(records, base_offset=10, partition_leader_epoch=0, codec=CODEC_ZSTD)
    cleaned = clean_log(original, {b"k0"}, 10)
    header, kept, _raw = batches_of(cleaned.log)[0]
    assert [r.timestamp for r in kept] == [4_900, 4_800, 4_700]
    assert header.base_timestamp == 4_900 and header.max_timestamp == 4_900  # of the kept records


def with_delete_horizon(batch: bytes) -> bytes:
    """``batch`` marked as a compacted topic's cleaner marks it: its base timestamp is the delete horizon."""
    out = bytearray(batch)
    (attributes,) = struct.unpack_from(">h", out, 21)
    struct.pack_into(">h", out, 21, attributes | ATTR_DELETE_HORIZON)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def test_a_batch_with_a_delete_horizon_keeps_it_as_its_base_timestamp() -> None:
    records = [RecordSpec(f"k{i}".encode(), b"v", 7_000 + i) for i in range(3)]
    original = with_delete_horizon(
        encode_batch(records, base_offset=0, partition_leader_epoch=0, codec=CODEC_LZ4, base_timestamp=6_000)
    )
    cleaned = clean_log(original, {b"k0"}, 0)
    assert_cleaned_as_kafka(original, cleaned, {b"k0"})
    header, kept, _raw = batches_of(cleaned.log)[0]
    assert header.attributes & ATTR_DELETE_HORIZON and header.base_timestamp == 6_000
    assert [r.timestamp for r in kept] == [7_001, 7_002]


def test_many_random_erasures_agree_with_a_plain_filter(make_writer, tmp_path: Path) -> None:
    rng = random.Random(20261129)
    w = make_writer(index_interval_bytes=INTERVAL)
    keys = [f"user-{i}".encode() for i in range(25)]
    for _ in range(120):
        codec = rng.choice(list(CODECS.values()))
        pid = rng.choice([-1, -1, 3, 4])
        batch = [(rng.choice([*keys, None]), rng.randbytes(rng.randint(0, 40))) for _ in range(rng.randint(1, 6))]
        w.append(batch, codec=codec, producer_id=pid, producer_epoch=0 if pid >= 0 and pid not in w.producers else -1)
    log_path, base = closed_segment(w)
    original = log_path.read_bytes()
    erased = set(rng.sample(keys, 6))
    cleaned = clean_log(original, erased, base, index_interval_bytes=INTERVAL)
    assert_cleaned_as_kafka(original, cleaned, erased)
    assert cleaned.result.records_removed > 0
    expected = {o: r for o, r in records_by_offset(original).items() if r.key not in erased}
    assert records_by_offset(cleaned.log) == expected
    assert_indexes_are_the_rebuilds(tmp_path, cleaned, base)


@pytest.mark.parametrize("codec", list(CODECS.values()), ids=list(CODECS))
def test_the_read_only_scan_finds_what_the_cleaner_removes_and_writes_nothing(
    make_writer, tmp_path: Path, codec: int
) -> None:
    """``offsets_of_keys`` names the records ``clean_segment`` removes, in every codec's batches,
    control batches and null keys aside; the segment's bytes and time stay as they were."""
    w = make_writer(codec=codec, segment_bytes=10**6)
    w.append_records(12, per_batch=4, key_prefix="a")
    w.append([(b"user-1", b"x"), (None, b"null key"), (b"user-2", b"y")])
    w.begin_transaction(5)
    w.append([(b"user-1", b"in a transaction")], producer_id=5, producer_epoch=0)
    w.commit(5)
    w.append_records(8, per_batch=3, key_prefix="b")
    log_path, _base = closed_segment(w)
    before = (log_path.read_bytes(), log_path.stat().st_mtime_ns)
    erased = {b"user-1", b"b-4"}
    found = offsets_of_keys(log_path, erased)
    assert (log_path.read_bytes(), log_path.stat().st_mtime_ns) == before
    removed = clean_segment(log_path, tmp_path / "cleaned.log", erased).removed_offsets
    assert found == removed and len(found) == 3
    assert offsets_of_keys(log_path, {b"absent"}) == ()


def test_the_scan_of_a_segment_being_written_stops_at_its_valid_prefix(make_writer, tmp_path: Path) -> None:
    """The active segment's last batch may be half written: ``valid_prefix`` reads what precedes
    it, as Kafka's recovery keeps a log's valid prefix; a closed segment cut short is refused."""
    w = make_writer(codec=CODEC_ZSTD)
    w.append([(b"user-1", b"whole")])
    w.append([(b"user-1", b"being written"), (b"other", b"z")])
    log_path, _base = closed_segment(w)
    headers = list(iter_batch_headers(log_path))
    cut = tmp_path / "00000000000000000000.log"
    cut.write_bytes(log_path.read_bytes()[: headers[-1].position + HEADER_SIZE + 3])
    assert offsets_of_keys(cut, {b"user-1"}, valid_prefix=True) == (headers[0].base_offset,)
    with pytest.raises(CorruptLogError):
        offsets_of_keys(cut, {b"user-1"})


# --- hostile input ---------------------------------------------------------------------------


def _segment(make_writer) -> tuple[bytes, list[RecordBatchHeader]]:
    w = make_writer(codec=CODEC_GZIP)
    w.append_records(12, per_batch=4)
    log_path, _base = closed_segment(w)
    return log_path.read_bytes(), list(iter_batch_headers(log_path))


def test_a_truncated_batch_is_refused_naming_its_position(make_writer, tmp_path: Path) -> None:
    data, headers = _segment(make_writer)
    cut = data[: headers[-1].position + HEADER_SIZE + 3]
    with pytest.raises(CorruptLogError, match="beyond the end") as caught:
        clean_log(cut, {b"key-0"}, 0)
    assert caught.value.position == headers[-1].position
    source = tmp_path / "00000000000000000000.log"
    source.write_bytes(cut)
    with pytest.raises(CorruptLogError):
        clean_segment(source, tmp_path / "out.log", {b"key-0"})
    assert not (tmp_path / "out.log").exists()


def test_a_bad_crc_is_refused_even_in_a_batch_without_erased_keys(make_writer) -> None:
    data, headers = _segment(make_writer)
    damaged = bytearray(data)
    damaged[headers[1].position + HEADER_SIZE + 2] ^= 0xFF
    with pytest.raises(CorruptLogError, match="CRC mismatch") as caught:
        clean_log(bytes(damaged), {b"key-0"}, 0)
    assert caught.value.position == headers[1].position


def test_an_old_message_format_is_refused_by_name() -> None:
    legacy = bytearray(encode_batch([RecordSpec(b"k", b"v", 1)], base_offset=0, partition_leader_epoch=0))
    legacy[16] = 1  # magic 1: a v1 message set
    with pytest.raises(CorruptLogError, match="unknown magic 1"):
        clean_log(bytes(legacy), {b"k"}, 0)


_BOMB = """
import sys
from pathlib import Path
from tiering_core.errors import CorruptLogError
from tiering_core.kafka.cleaner import clean_segment
try:
    clean_segment(Path(sys.argv[1]), Path(sys.argv[2]), {b"k"})
except CorruptLogError as exc:
    print(exc)
else:
    print("no error")
"""


def test_a_decompression_bomb_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    compressor = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    chunk = bytes(1 << 20)
    body = b"".join(compressor.compress(chunk) for _ in range(512)) + compressor.flush()  # 512 MiB of zeros
    first = encode_batch([RecordSpec(b"k", b"v", 1)], base_offset=0, partition_leader_epoch=0)
    head = bytearray(encode_batch([RecordSpec(b"k", b"v", 2)], base_offset=1, partition_leader_epoch=0)[:HEADER_SIZE])
    struct.pack_into(">i", head, 8, HEADER_SIZE - LOG_OVERHEAD + len(body))
    (attributes,) = struct.unpack_from(">h", head, 21)
    struct.pack_into(">h", head, 21, (attributes & ~ATTR_CODEC_MASK) | CODEC_ZSTD)
    struct.pack_into(">I", head, 17, crc32c(bytes(head[21:]) + body))
    source = tmp_path / "00000000000000000000.log"
    source.write_bytes(first + bytes(head) + body)
    message, peak_mb = run_measured(_BOMB, str(source), str(tmp_path / "out.log"), timeout=300)
    assert peak_mb < 256, f"peak RSS {peak_mb} MB"
    assert "decompresses to more than" in message and f"at byte {len(first)}" in message, message
    assert not (tmp_path / "out.log").exists()
