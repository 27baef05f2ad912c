"""The batch-header walk: fields, valid prefixes, and every kind of damage named by file and byte."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from kafka.record import MemoryRecords

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.batch import (
    CODEC_GZIP,
    CODEC_ZSTD,
    HEADER_SIZE,
    READ_CHUNK,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    LogFile,
    iter_batch_data,
    iter_batch_headers,
    scan_log,
    verify_batch_crc,
    verify_log_crc,
)
from tiering_core.kafka.records import ControlRecordType, RecordSpec, encode_batch, encode_control_batch


def _write_log(path: Path, batches: int = 5, per_batch: int = 4) -> list[bytes]:
    out = []
    offset = 0
    for b in range(batches):
        specs = [RecordSpec(b"k%d" % (offset + i), b"v" * (20 + b), 1000 + offset + i) for i in range(per_batch)]
        out.append(encode_batch(specs, base_offset=offset, partition_leader_epoch=b // 2, codec=CODEC_GZIP * (b % 2)))
        offset += per_batch
    path.write_bytes(b"".join(out))
    return out


def test_header_fields_agree_with_kafka_python(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    data = encode_batch(
        [RecordSpec(b"a", b"1", 500), RecordSpec(None, b"2", 400), RecordSpec(b"c", None, 900)],
        base_offset=77,
        partition_leader_epoch=4,
        codec=CODEC_ZSTD,
        producer_id=1234,
        producer_epoch=3,
        base_sequence=10,
        transactional=True,
    ) + encode_control_batch(
        ControlRecordType.COMMIT,
        base_offset=80,
        partition_leader_epoch=4,
        producer_id=1234,
        producer_epoch=3,
        coordinator_epoch=9,
        timestamp=950,
    )
    log.write_bytes(data)
    ours = list(iter_batch_headers(log, verify_crc=True))
    theirs = MemoryRecords(data)
    for header in ours:
        batch = theirs.next_batch()
        assert (header.base_offset, header.last_offset, header.partition_leader_epoch) == (
            batch.base_offset,
            batch.last_offset,
            batch.leader_epoch,
        )
        assert (header.crc, header.attributes, header.base_timestamp, header.max_timestamp) == (
            batch.crc,
            batch.attributes,
            batch.first_timestamp,
            batch.max_timestamp,
        )
        assert (header.producer_id, header.producer_epoch, header.base_sequence, header.records_count) == (
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            batch.records_count,
        )
        assert (header.is_transactional, header.is_control, header.codec, header.size_in_bytes) == (
            batch.is_transactional,
            batch.is_control_batch,
            batch.compression_type,
            batch.size_in_bytes,
        )
    first, marker = ours
    assert (first.position, marker.position) == (0, first.size_in_bytes)
    assert first.base_timestamp == 500 and first.max_timestamp == 900  # base = first record, not the minimum
    assert first.next_offset == 80 and first.has_producer_id and first.timestamp_type == TIMESTAMP_CREATE_TIME
    assert marker.is_control and marker.base_sequence == -1 and marker.codec == 0


def test_log_append_time_attribute(tmp_path: Path) -> None:
    data = encode_batch(
        [RecordSpec(b"a", b"1", 5)], base_offset=0, partition_leader_epoch=0, log_append_time=True, max_timestamp=99
    )
    log = tmp_path / "x.log"
    log.write_bytes(data)
    (header,) = iter_batch_headers(log)
    assert header.is_log_append_time and header.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    assert header.max_timestamp == 99 and not header.has_producer_id


def test_start_position_and_empty_file(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    batches = _write_log(log)
    start = len(batches[0]) + len(batches[1])
    assert [h.base_offset for h in iter_batch_headers(log, start)] == [8, 12, 16]
    empty = tmp_path / "00000000000000000020.log"
    empty.write_bytes(b"")
    assert list(iter_batch_headers(empty)) == [] and verify_log_crc(empty) == 0
    scan = scan_log(empty)
    assert scan.headers == [] and scan.valid_bytes == 0 and scan.error is None and scan.next_offset is None


def test_verify_log_crc_counts_every_byte(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    _write_log(log, batches=30)
    assert verify_log_crc(log) == log.stat().st_size
    scan = scan_log(log)
    assert scan.error is None and scan.valid_bytes == log.stat().st_size and scan.next_offset == 120


def _damaged(tmp_path: Path, edit) -> tuple[Path, list[int]]:  # type: ignore[no-untyped-def]
    log = tmp_path / "00000000000000000000.log"
    batches = _write_log(log)
    positions = [sum(len(b) for b in batches[:i]) for i in range(len(batches))]
    data = bytearray(log.read_bytes())
    edit(data, positions)
    log.write_bytes(bytes(data))
    return log, positions


def _assert_fails_everywhere(log: Path, position: int, reason: str, valid_batches: int) -> None:
    with pytest.raises(CorruptLogError, match=reason) as err:
        list(iter_batch_headers(log, verify_crc=True))
    assert err.value.path == log and err.value.position == position
    assert f"{log}: at byte {position}: " in str(err.value)
    with pytest.raises(CorruptLogError, match=reason) as err:
        verify_log_crc(log)
    assert err.value.position == position
    scan = scan_log(log)
    assert scan.error is not None and scan.error.position == position and len(scan.headers) == valid_batches
    assert scan.valid_bytes == position
    lenient = list(iter_batch_headers(log, verify_crc=True, strict=False))
    assert lenient == scan.headers


def test_truncated_last_batch_keeps_the_valid_prefix(tmp_path: Path) -> None:
    log, positions = _damaged(tmp_path, lambda data, _p: data.__delitem__(slice(len(data) - 7, None)))
    _assert_fails_everywhere(log, positions[-1], "beyond the end of the file", 4)
    assert scan_log(log).next_offset == 16


def test_truncated_inside_the_header(tmp_path: Path) -> None:
    log, positions = _damaged(tmp_path, lambda data, p: data.__delitem__(slice(p[-1] + 30, None)))
    _assert_fails_everywhere(log, positions[-1], f"header needs {HEADER_SIZE} bytes, 30 left", 4)
    log, positions = _damaged(tmp_path, lambda data, p: data.__delitem__(slice(p[-1] + 5, None)))
    _assert_fails_everywhere(log, positions[-1], "5 trailing byte", 4)


def test_crc_mismatch_names_stored_and_computed(tmp_path: Path) -> None:
    def flip(data: bytearray, p: list[int]) -> None:
        data[p[2] + 70] ^= 0xFF

    log, positions = _damaged(tmp_path, flip)
    _assert_fails_everywhere(log, positions[2], "CRC mismatch in batch at offset 8: stored 0x[0-9a-f]{8}, computed", 2)
    assert len(list(iter_batch_headers(log))) == 5  # without verification the walk does not look at record bytes


def test_verify_batch_crc_takes_the_batch_bytes_and_names_its_position(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    _write_log(log)
    header = list(iter_batch_headers(log))[2]
    assert header.position > 0
    with LogFile(log) as log_file:
        data = bytearray(log_file.batch_bytes(header))
    verify_batch_crc(data, header, log)  # the batch from its byte 0, the header as walked
    data[70] ^= 0xFF
    with pytest.raises(CorruptLogError, match="CRC mismatch in batch at offset 8") as err:
        verify_batch_crc(data, header, log)
    assert err.value.path == log and err.value.position == header.position


def test_iter_batch_data_names_a_batch_cut_while_read(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    batches = _write_log(log, batches=3)
    second = len(batches[0])
    walk = iter_batch_data(log)
    assert next(walk) == (0, batches[0])
    with log.open("r+b") as f:  # the broker cuts the segment after the walk read its headers
        f.truncate(second + 20)
    with pytest.raises(CorruptLogError, match=r"cut short while being read.*truncated meanwhile") as err:
        next(walk)
    assert err.value.path == log and err.value.position == second


def test_unknown_magic(tmp_path: Path) -> None:
    log, positions = _damaged(tmp_path, lambda data, p: data.__setitem__(p[1] + 16, 1))
    _assert_fails_everywhere(log, positions[1], "unknown magic 1", 1)


def test_batch_length_beyond_the_file_end(tmp_path: Path) -> None:
    def edit(data: bytearray, p: list[int]) -> None:
        data[p[3] + 8 : p[3] + 12] = struct.pack(">i", 10**6)

    log, positions = _damaged(tmp_path, edit)
    _assert_fails_everywhere(log, positions[3], "batch length 1000000 runs .* beyond the end of the file", 3)


@pytest.mark.parametrize("length", [-5, 0, 48])
def test_too_small_batch_length(tmp_path: Path, length: int) -> None:
    def edit(data: bytearray, p: list[int]) -> None:
        data[p[2] + 8 : p[2] + 12] = struct.pack(">i", length)

    log, positions = _damaged(tmp_path, edit)
    _assert_fails_everywhere(log, positions[2], f"batch length {length} is smaller than a v2 batch header", 2)


def _v1_message(offset: int, key: bytes, value: bytes, timestamp: int) -> bytes:
    """A magic-1 message as brokers before 0.11 wrote it: offset, size, crc32, magic 1, attributes,
    timestamp, key, value (36 bytes for a one-byte key and value)."""
    import zlib

    body = struct.pack(">bbq", 1, 0, timestamp) + struct.pack(">i", len(key)) + key
    body += struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message


def test_an_old_format_message_is_named_by_its_magic_everywhere(tmp_path: Path) -> None:
    """Kafka's FileLogInputStream reads the magic before any v2 length rule: a 36-byte v1
    message is 'unknown magic 1', not 'smaller than a v2 batch header'."""
    import io

    from tiering_core.kafka.index_rebuild import rebuild_indexes
    from tiering_core.kafka.records import decode_batch, iter_batches, read_batches

    v1 = _v1_message(0, b"k", b"v", 1_000)
    assert len(v1) == 36
    for name, data, at in (("alone", v1, 0), ("after-a-v2-batch", _batch(0) + _v1_message(1, b"k", b"v", 5), 1)):
        log = tmp_path / f"{name}.log"
        log.write_bytes(data)
        position = len(data) - 36 if at else 0
        for run in (
            lambda log: list(iter_batch_headers(log)),
            lambda log: verify_log_crc(log),
            lambda log: rebuild_indexes(log, 0),
            lambda log: list(iter_batches(log)),
            lambda log: list(read_batches(io.BytesIO(log.read_bytes()), log)),
        ):
            with pytest.raises(CorruptLogError, match="unknown magic 1") as err:
                run(log)
            assert err.value.position == position
        assert scan_log(log).error is not None and "unknown magic 1" in scan_log(log).error.reason
    with pytest.raises(CorruptLogError, match="unknown magic 1"):
        decode_batch(v1)


def _batch(offset: int, value_size: int = 10, records: int = 1) -> bytes:
    specs = [RecordSpec(b"k", b"v" * value_size, 1000 + offset + i) for i in range(records)]
    return encode_batch(specs, base_offset=offset, partition_leader_epoch=0)


def _big_log(path: Path, batches: int, value_size: int) -> list[int]:
    """``batches`` batches; returns their positions."""
    positions, data = [], bytearray()
    for i in range(batches):
        positions.append(len(data))
        data += _batch(i, value_size)
    path.write_bytes(bytes(data))
    return positions


_TRUNCATE_WHILE_WALKING = """
import os, sys
from pathlib import Path
from tiering_core.errors import CorruptLogError
from tiering_core.kafka.batch import iter_batch_headers

path = Path(sys.argv[1])
for strict in (True, False):
    walk = iter_batch_headers(path, strict=strict)
    first = next(walk)
    os.truncate(path, int(sys.argv[2]))  # the broker cuts the segment (truncation after an unclean election)
    try:
        rest = list(walk)
        print("strict" if strict else "lenient", "walked", 1 + len(rest))
    except CorruptLogError as exc:
        print("strict" if strict else "lenient", "error", exc.reason)
    path.write_bytes(Path(sys.argv[3]).read_bytes())
"""


def test_a_segment_truncated_while_walked_ends_the_walk_instead_of_killing_the_process(tmp_path: Path) -> None:
    """Through an mmap, touching a page beyond the new end raises SIGBUS and kills the process;
    read by pread, the walk sees a shorter file: an error naming the cut batch, or the valid prefix."""
    import subprocess
    import sys

    log = tmp_path / "00000000000000000000.log"
    positions = _big_log(log, 200, 30_000)  # ~6 MiB: more than one read chunk, header-only reads
    original = tmp_path / "original"
    original.write_bytes(log.read_bytes())
    cut = positions[3] + 100
    done = subprocess.run(
        [sys.executable, "-c", _TRUNCATE_WHILE_WALKING, str(log), str(cut), str(original)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, (done.returncode, done.stderr)  # -7 (SIGBUS) through an mmap
    strict, lenient = done.stdout.splitlines()
    assert strict.startswith("strict error") and "shrank from" in strict and "truncated meanwhile" in strict
    # Headers read before the cut (the first chunk) are still walked: a view as of the read.
    assert lenient == f"lenient walked {sum(1 for p in positions if p + HEADER_SIZE <= READ_CHUNK)}"


def _truncate_on_read(monkeypatch: pytest.MonkeyPatch, path: Path, after_calls: int, size: int) -> None:
    """Fault injection: the broker truncates ``path`` to ``size`` after ``after_calls`` reads."""
    import os

    calls = {"n": 0}
    real_pread, real_preadv = os.pread, os.preadv

    def count() -> None:
        calls["n"] += 1
        if calls["n"] == after_calls + 1:
            os.truncate(path, size)

    def pread(fd: int, n: int, offset: int) -> bytes:
        count()
        return real_pread(fd, n, offset)

    def preadv(fd: int, buffers: list, offset: int) -> int:
        count()
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr(os, "pread", pread)
    monkeypatch.setattr(os, "preadv", preadv)


@pytest.mark.parametrize(("batches", "value_size"), [(8000, 300), (200, 30_000)], ids=["chunked", "header-only"])
def test_crc_check_and_rebuild_of_a_segment_truncated_meanwhile_name_the_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batches: int, value_size: int
) -> None:
    """The file is cut after the first read (fault injection): the error names the cut batch."""
    from tiering_core.kafka.index_rebuild import rebuild_indexes

    log = tmp_path / "00000000000000000000.log"
    positions = _big_log(log, batches, value_size)
    assert len(log.read_bytes()) > 2 * READ_CHUNK
    data = log.read_bytes()
    cut = positions[len(positions) // 2] + 20
    for run in (lambda: verify_log_crc(log), lambda: rebuild_indexes(log, 0)):
        log.write_bytes(data)
        with monkeypatch.context() as patch:
            _truncate_on_read(patch, log, 1, cut)
            with pytest.raises(CorruptLogError, match="truncated meanwhile") as err:
                run()
        assert err.value.position in positions and err.value.position <= cut
    log.write_bytes(data)
    with monkeypatch.context() as patch:
        _truncate_on_read(patch, log, 1, cut)
        lenient = list(iter_batch_headers(log, verify_crc=True, strict=False))
    assert [h.position for h in lenient] == [p for p in positions if p + len(_batch(0, value_size)) <= cut]


def test_no_reader_maps_a_segment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_writer) -> None:
    """Every reader of a broker's files works by pread: mmap is never called."""
    import mmap

    from tiering_core.kafka.index_rebuild import rebuild_indexes
    from tiering_core.kafka.partition_log import PartitionLog
    from tiering_core.kafka.records import iter_batches

    w = make_writer(segment_bytes=4000, index_interval_bytes=100)
    w.append_records(60, value_size=40)
    w.append([(b"t", b"x")], producer_id=3, transactional=True)
    w.abort(3)
    w.append_records(5)
    w.set_high_watermark()

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a segment was mapped")

    monkeypatch.setattr(mmap, "mmap", refuse)
    log = PartitionLog(w.path)
    assert log.log_end_offset == log.high_watermark == log.last_stable_offset == w.next_offset
    for segment in log.segments:
        assert verify_log_crc(segment.log_path) == segment.size_bytes
        assert scan_log(segment.log_path).error is None
        assert list(iter_batches(segment.log_path))
        rebuild_indexes(segment.log_path, segment.base_offset, index_interval_bytes=100)
        assert log.position_of(segment, segment.base_offset + 3) >= 0


@pytest.mark.parametrize("value_size", [40, 3_000, 40_000, 1_500_000], ids=["tiny", "small", "large", "over-a-chunk"])
def test_walks_across_read_chunks_agree_with_kafka_python(tmp_path: Path, value_size: int) -> None:
    """Batches straddling the read chunk, header-only reads and CRCs continued across chunks."""
    log = tmp_path / "00000000000000000000.log"
    rng = __import__("random").Random(value_size)
    data = bytearray()
    offset = 0
    while len(data) < 3 * (1 << 20) + 12345:
        n = rng.randint(1, 4)
        specs = [RecordSpec(b"k%d" % i, rng.randbytes(rng.randint(1, value_size)), 7 + offset + i) for i in range(n)]
        data += encode_batch(specs, base_offset=offset, partition_leader_epoch=1, codec=CODEC_GZIP * (offset % 3 == 0))
        offset += n
    log.write_bytes(bytes(data))
    theirs, sizes, records = [], [], MemoryRecords(bytes(data))
    position = 0
    while (batch := records.next_batch()) is not None:
        theirs.append((position, batch.base_offset, batch.last_offset, batch.crc))
        sizes.append(batch.size_in_bytes)
        position += batch.size_in_bytes
    for verify in (False, True):
        ours = [(h.position, h.base_offset, h.last_offset, h.crc) for h in iter_batch_headers(log, verify_crc=verify)]
        assert ours == theirs
    assert verify_log_crc(log) == len(data)
    data[theirs[-2][0] + HEADER_SIZE + (sizes[-2] - HEADER_SIZE) // 2] ^= 0x01  # a late batch, past chunk ends
    log.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError, match="CRC mismatch") as err:
        verify_log_crc(log)
    assert err.value.position == theirs[-2][0]
