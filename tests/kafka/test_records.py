"""Record batches we write are what kafka-python writes and reads; what it writes we read."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.batch import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD, HEADER_SIZE
from tiering_core.kafka.records import (
    ControlRecordType,
    Record,
    RecordSpec,
    control_record,
    decode_batch,
    decode_control_record,
    encode_batch,
    encode_control_batch,
    iter_batches,
    iter_records,
)

CODECS = {"none": CODEC_NONE, "gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY, "lz4": CODEC_LZ4, "zstd": CODEC_ZSTD}

SPECS = [
    RecordSpec(b"k1", b"v" * 300, 1_700_000_000_500, (("trace", b"abc"), ("empty", None), ("utf8-\u00e9", b""))),
    RecordSpec(None, b"no key", 1_700_000_000_100),  # earlier than the first: a negative delta
    RecordSpec(b"no value", None, 1_700_000_009_999),
    RecordSpec(b"", b"", 1_700_000_000_000),
    *(RecordSpec(b"key-%d" % i, bytes(range(256)) * 3, 1_700_000_000_000 + i * 1000) for i in range(70)),
]


def kafka_python_view(data: bytes) -> list[tuple]:
    """Every record as kafka-python's reader sees it, after checking each batch's CRC."""
    out = []
    records = MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value, list(r.headers)))
    return out


def our_view(records: list[Record]) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


def kafka_python_build(specs: list[RecordSpec], codec: int, **producer: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=bool(producer.get("transactional", 0)),
        producer_id=producer.get("producer_id", -1),
        producer_epoch=producer.get("producer_epoch", -1),
        base_sequence=producer.get("base_sequence", -1),
        batch_size=1 << 30,
    )
    for i, spec in enumerate(specs):
        builder.append(i, timestamp=spec.timestamp, key=spec.key, value=spec.value, headers=list(spec.headers))
    return bytes(builder.build())


TXN_PRODUCER = {"producer_id": 42, "producer_epoch": 3, "base_sequence": 17, "transactional": 1}


@pytest.mark.parametrize("producer", [{}, TXN_PRODUCER])
def test_uncompressed_batches_are_byte_identical_to_kafka_pythons_producer(producer: dict) -> None:
    ours = encode_batch(
        SPECS,
        base_offset=0,
        partition_leader_epoch=0,
        producer_id=producer.get("producer_id", -1),
        producer_epoch=producer.get("producer_epoch", -1),
        base_sequence=producer.get("base_sequence", -1),
        transactional=bool(producer.get("transactional", 0)),
    )
    assert ours == kafka_python_build(SPECS, CODEC_NONE, **producer)


@pytest.mark.parametrize("codec", list(CODECS.values()), ids=list(CODECS))
def test_kafka_python_reads_ours(codec: int) -> None:
    data = encode_batch(
        SPECS, base_offset=1000, partition_leader_epoch=5, codec=codec, producer_id=9, producer_epoch=1, base_sequence=0
    )
    header, records = decode_batch(data)
    assert header.codec == codec and header.partition_leader_epoch == 5 and header.last_offset == 1000 + len(SPECS) - 1
    expected = [(1000 + i, s.timestamp, s.key, s.value, list(s.headers)) for i, s in enumerate(SPECS)]
    assert kafka_python_view(data) == our_view(records) == expected
    assert {(r.leader_epoch, r.producer_id, r.producer_epoch, r.is_transactional, r.is_control) for r in records} == {
        (5, 9, 1, False, False)
    }


@pytest.mark.parametrize("codec", list(CODECS.values()), ids=list(CODECS))
def test_we_read_kafka_pythons(codec: int, tmp_path: Path) -> None:
    data = kafka_python_build(SPECS, codec)
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(data * 2)  # the same batch twice: positions and CRC checks per batch
    batches = list(iter_batches(log))
    assert [h.position for h, _ in batches] == [0, len(data)]
    assert our_view(batches[0][1]) == kafka_python_view(data)
    assert len(list(iter_records(log))) == 2 * len(SPECS)
    assert next(iter_records(log, len(data))).offset == 0


def test_control_batches_read_by_kafka_python_as_markers(tmp_path: Path) -> None:
    data = b"".join(
        [
            encode_batch(
                [RecordSpec(b"a", b"1", 10)],
                base_offset=0,
                partition_leader_epoch=0,
                producer_id=3,
                producer_epoch=0,
                base_sequence=0,
                transactional=True,
            ),
            encode_control_batch(
                ControlRecordType.COMMIT,
                base_offset=1,
                partition_leader_epoch=0,
                producer_id=3,
                producer_epoch=0,
                coordinator_epoch=7,
                timestamp=20,
            ),
            encode_control_batch(
                ControlRecordType.ABORT,
                base_offset=2,
                partition_leader_epoch=0,
                producer_id=3,
                producer_epoch=0,
                coordinator_epoch=8,
                timestamp=30,
            ),
        ]
    )
    theirs = MemoryRecords(data)
    kinds = []
    while (batch := theirs.next_batch()) is not None:
        assert batch.validate_crc()
        if batch.is_control_batch:
            (marker,) = list(batch)
            kinds.append((marker.offset, "commit" if marker.commit else "abort" if marker.abort else "?"))
    assert kinds == [(1, "commit"), (2, "abort")]
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(data)
    markers = {h.base_offset: decode_control_record(rs[0]) for h, rs in iter_batches(log) if h.is_control}
    assert {o: (m.type, m.coordinator_epoch) for o, m in markers.items()} == {
        1: (ControlRecordType.COMMIT, 7),
        2: (ControlRecordType.ABORT, 8),
    }


def test_control_record_validation() -> None:
    def as_record(spec: RecordSpec) -> Record:
        return Record(5, spec.timestamp, spec.key, spec.value, (), 0, 1, True, True)

    assert decode_control_record(as_record(control_record(ControlRecordType.LEADER_CHANGE, 0, 1))).type == (
        ControlRecordType.LEADER_CHANGE
    )
    with pytest.raises(ValueError, match="unknown type 99"):
        decode_control_record(as_record(RecordSpec(struct.pack(">hh", 0, 99), b"", 1)))
    with pytest.raises(ValueError, match="no valid key"):
        decode_control_record(as_record(RecordSpec(None, b"", 1)))
    with pytest.raises(ValueError, match="no valid value"):
        decode_control_record(as_record(RecordSpec(struct.pack(">hh", 0, 1), b"\0", 1)))


def test_log_append_time_reports_the_broker_time_for_every_record() -> None:
    data = encode_batch(
        [RecordSpec(b"a", b"1", 10), RecordSpec(b"b", b"2", 20)],
        base_offset=0,
        partition_leader_epoch=0,
        log_append_time=True,
        max_timestamp=777,
    )
    _header, records = decode_batch(data)
    assert [r.timestamp for r in records] == [777, 777]
    assert [t for _o, t, *_ in kafka_python_view(data)] == [777, 777]


def test_round_trip_keeps_offsets_epoch_and_large_varints() -> None:
    specs = [RecordSpec(b"k" * 200, b"v" * 70_000, -5 + i * 10**9) for i in range(300)]  # multi-byte varints
    data = encode_batch(specs, base_offset=2**40, partition_leader_epoch=7, codec=CODEC_LZ4)
    header, records = decode_batch(data, Path("seg.log"), position=4096)
    assert header.position == 4096 and header.last_offset == 2**40 + 299
    assert [(r.offset, r.timestamp, len(r.value or b"")) for r in records] == [
        (2**40 + i, s.timestamp, 70_000) for i, s in enumerate(specs)
    ]


def test_encode_rejects_empty_batches_and_unknown_codecs() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        encode_batch([], base_offset=0, partition_leader_epoch=0)
    with pytest.raises(ValueError, match="codec id 6"):
        encode_batch(SPECS[:1], base_offset=0, partition_leader_epoch=0, codec=6)


def _rewrite(batch: bytes, body: bytes, records_count: int | None = None) -> bytes:
    """The batch with another records block (and count), its length and CRC fixed up."""
    from tiering_core.kafka.crc import crc32c

    head = bytearray(batch[:HEADER_SIZE])
    struct.pack_into(">i", head, 8, HEADER_SIZE - 12 + len(body))
    if records_count is not None:
        struct.pack_into(">i", head, 57, records_count)
    out = bytes(head) + body
    return out[:17] + struct.pack(">I", crc32c(out[21:])) + out[21:]


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda body: body + b"\0\0", "2 byte\\(s\\) left after its 1 record"),
        (lambda body: body[:-1], "runs past the end"),
        (lambda body: b"\x10" + body[1:], "does not match its fields"),
    ],
)
def test_malformed_records_name_file_and_batch(tmp_path: Path, edit, reason: str) -> None:
    batch = encode_batch([RecordSpec(b"key", b"value", 1)], base_offset=30, partition_leader_epoch=0)
    log = tmp_path / "00000000000000000000.log"
    good = encode_batch([RecordSpec(b"x", b"y", 1)], base_offset=29, partition_leader_epoch=0)
    log.write_bytes(good + _rewrite(batch, edit(batch[HEADER_SIZE:])))
    with pytest.raises(CorruptLogError, match=f"malformed record in batch at offset 30: .*{reason}") as err:
        list(iter_records(log))
    assert err.value.path == log and err.value.position == len(good)


def test_negative_record_count_and_damaged_compression(tmp_path: Path) -> None:
    batch = encode_batch([RecordSpec(b"key", b"value", 1)], base_offset=0, partition_leader_epoch=0)
    with pytest.raises(CorruptLogError, match="record count -1"):
        decode_batch(_rewrite(batch, batch[HEADER_SIZE:], records_count=-1))
    zipped = encode_batch(
        [RecordSpec(b"key", b"value" * 100, 1)], base_offset=0, partition_leader_epoch=0, codec=CODEC_GZIP
    )
    with pytest.raises(CorruptLogError, match="cannot decompress batch at offset 0: gzip") as err:
        decode_batch(_rewrite(zipped, zipped[HEADER_SIZE:-10]), Path("a.log"), position=123)
    assert err.value.position == 123 and err.value.path == Path("a.log")


def test_decode_batch_checks_the_crc_with_its_position() -> None:
    data = bytearray(encode_batch([RecordSpec(b"key", b"value", 1)], base_offset=0, partition_leader_epoch=0))
    data[-2] ^= 1  # the last byte of the value ("value" -> "valud")
    with pytest.raises(CorruptLogError, match="CRC mismatch") as err:
        decode_batch(bytes(data), Path("b.log"), position=640)
    assert err.value.position == 640
    _header, records = decode_batch(bytes(data), verify_crc=False)
    assert records[0].value == b"valud"


def _marker(kind: ControlRecordType, *, key_version: int, value_version: int, offset: int = 0) -> bytes:
    """An end-transaction marker whose key and value carry the given versions (a later version
    may append fields: one extra i16 each here)."""
    key = struct.pack(">hhh", key_version, int(kind), 0x7777)
    value = struct.pack(">hih", value_version, 9, 0x5555)
    return encode_batch(
        [RecordSpec(key, value, 1_000)],
        base_offset=offset,
        partition_leader_epoch=0,
        producer_id=4,
        producer_epoch=0,
        transactional=True,
        control=True,
    )


def test_a_later_control_record_version_is_read_as_version_0(caplog) -> None:
    """As ``ControlRecordType.parseTypeId`` and ``EndTransactionMarker``: forward compatible, debug-logged."""
    import logging

    (record,) = decode_batch(_marker(ControlRecordType.ABORT, key_version=1, value_version=2))[1]
    with caplog.at_level(logging.DEBUG, logger="tiering_core.kafka.records"):
        marker = decode_control_record(record)
    assert (marker.type, marker.coordinator_epoch) == (ControlRecordType.ABORT, 9)
    assert "key version 1; reading it as version 0" in caplog.text
    assert "value version 2; reading it as version 0" in caplog.text
    for key_version, value_version, reason in ((-1, 0, "key version -1"), (0, -3, "value version -3")):
        (bad,) = decode_batch(_marker(ControlRecordType.COMMIT, key_version=key_version, value_version=value_version))[
            1
        ]
        with pytest.raises(ValueError, match=reason):
            decode_control_record(bad)


def test_indexes_and_the_lso_accept_a_later_marker_version(tmp_path: Path) -> None:
    from tiering_core.kafka.index import AbortedTxn, parse_txn_index
    from tiering_core.kafka.index_rebuild import rebuild_indexes

    data = encode_batch(
        [RecordSpec(b"a", b"1", 900)],
        base_offset=0,
        partition_leader_epoch=0,
        producer_id=4,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    ) + _marker(ControlRecordType.ABORT, key_version=1, value_version=1, offset=1)
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(data)
    rebuilt = rebuild_indexes(log, 0)
    assert parse_txn_index(rebuilt.txn_index) == [AbortedTxn(4, 0, 1, 2)] and rebuilt.open_transactions == {}
