"""Indexes checked against an independent reading of the broker's rule, not against our own code.

The batches are read by kafka-python's record reader; Kafka's per-batch index rule
(``LogSegment.append``/``recover``, ``ProducerStateManager`` for the transaction index) is
written out plainly here. Files written by ``PartitionWriter`` and bytes from
``rebuild_indexes`` must both equal it byte for byte. A hand-computed vector pins the rule
itself. (A model of what real brokers write on restarts and follower fetches, judged by
``check_broker_index``, is in test_index_check.py.)
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka.record import MemoryRecords

from tiering_core.kafka.batch import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD
from tiering_core.kafka.index_rebuild import rebuild_indexes
from tiering_core.kafka.partition_log import PartitionLog
from tiering_core.kafka.records import ControlRecordType, RecordSpec, encode_batch, encode_control_batch

ABORT = 0


@dataclass(frozen=True)
class Batch:
    """One batch as kafka-python reads it, with its place in the file."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    producer_id: int
    transactional: bool
    control_type: int | None  # the marker's type for a control batch


def kafka_python_batches(log: Path) -> list[Batch]:
    out, position = [], 0
    records = MemoryRecords(log.read_bytes())
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        control = None
        if batch.is_control_batch:
            (record,) = list(batch)
            _version, control = struct.unpack(">hh", record.key[:4])
        out.append(
            Batch(
                position,
                batch.size_in_bytes,
                batch.base_offset,
                batch.last_offset,
                batch.max_timestamp,
                batch.producer_id,
                batch.is_transactional,
                control,
            )
        )
        position += batch.size_in_bytes
    return out


def kafka_rule(
    batches: list[Batch], base_offset: int, interval: int, *, rolled: bool, open_txns: dict[int, int]
) -> tuple[bytes, bytes, bytes, dict[int, int]]:
    """Offset, time and transaction index bytes, batch by batch as a broker appends them."""
    offset_index, time_index, txn_index = b"", b"", b""
    bytes_since_last_entry = 0
    max_ts, max_ts_offset, last_time_entry_ts = -1, -1, -1
    ongoing = dict(open_txns)
    for b in batches:
        # LogSegment.append: the in-memory max timestamp first, then the index entry if due
        if b.max_timestamp > max_ts:
            max_ts, max_ts_offset = b.max_timestamp, b.last_offset
        if bytes_since_last_entry > interval:
            offset_index += struct.pack(">ii", b.last_offset - base_offset, b.position)
            if max_ts > last_time_entry_ts:
                time_index += struct.pack(">qi", max_ts, max_ts_offset - base_offset)
                last_time_entry_ts = max_ts
            bytes_since_last_entry = 0
        bytes_since_last_entry += b.size
        # ProducerStateManager: transactions open with their first data batch, end at a marker
        if b.transactional and b.control_type is None:
            ongoing.setdefault(b.producer_id, b.base_offset)
        elif b.transactional:
            first = ongoing.pop(b.producer_id, b.base_offset)
            if b.control_type == ABORT:
                others = [f for pid, f in ongoing.items() if pid != b.producer_id]
                lso = min(others) if others else b.base_offset + 1
                txn_index += struct.pack(">hqqqq", 0, b.producer_id, first, b.base_offset, lso)
    if rolled and max_ts > last_time_entry_ts:  # onBecomeInactiveSegment
        time_index += struct.pack(">qi", max_ts, max_ts_offset - base_offset)
    return offset_index, time_index, txn_index, ongoing


CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]


def random_partition(make_writer, seed: int, interval: int):  # type: ignore[no-untyped-def]
    rng = random.Random(seed)
    clock = {"t": 1_700_000_000_000}

    def tick() -> int:
        clock["t"] += rng.randint(-3_000, 5_000)  # timestamps go back and forth
        return clock["t"]

    w = make_writer(
        f"random{seed}-{interval}",
        segment_bytes=rng.choice([3_000, 9_000, 40_000]),
        index_interval_bytes=interval,
        codec=rng.choice(CODECS),
        clock=tick,
        preallocate_index_bytes=64 * 1024,
    )
    open_txns: set[int] = set()
    for _ in range(rng.randint(150, 260)):
        roll = rng.random()
        if roll < 0.12 and open_txns:
            pid = rng.choice(sorted(open_txns))
            (w.abort if rng.random() < 0.5 else w.commit)(pid)
            open_txns.discard(pid)
        elif roll < 0.15 and set(w.producers) - open_txns:
            # a marker with no transaction open (the coordinator aborting after a timeout): first offset = the marker
            w.abort(rng.choice(sorted(set(w.producers) - open_txns)))
        elif roll < 0.40:
            pid = rng.choice([7, 8, 9])
            open_txns.add(pid)
            w.append(
                [(b"t%d" % i, rng.randbytes(rng.randint(0, 300))) for i in range(rng.randint(1, 5))],
                producer_id=pid,
                transactional=True,
                codec=rng.choice(CODECS),
            )
        elif roll < 0.42:
            w.roll()
        else:
            w.append_records(rng.randint(1, 12), value_size=rng.randint(1, 900), per_batch=rng.randint(1, 6))
    w.set_high_watermark()
    return w


@pytest.mark.parametrize("interval", [0, 1, 100, 4096])
@pytest.mark.parametrize("seed", [11, 12, 13])
def test_written_and_rebuilt_indexes_equal_kafkas_rule(make_writer, seed: int, interval: int) -> None:
    w = random_partition(make_writer, seed, interval)
    log = PartitionLog(w.path)
    assert len(log.segments) >= 2
    ours_open: dict[int, int] = {}
    theirs_open: dict[int, int] = {}
    aborted_seen = 0
    for segment in log.segments:
        active = segment == log.active_segment
        batches = kafka_python_batches(segment.log_path)
        offset_index, time_index, txn_index, theirs_open = kafka_rule(
            batches, segment.base_offset, interval, rolled=not active, open_txns=theirs_open
        )
        rebuilt = rebuild_indexes(
            segment.log_path,
            segment.base_offset,
            index_interval_bytes=interval,
            is_active=active,
            open_txn_first_offsets=ours_open,
        )
        ours_open = rebuilt.open_transactions
        assert (rebuilt.offset_index, rebuilt.time_index, rebuilt.txn_index) == (offset_index, time_index, txn_index)
        assert ours_open == theirs_open
        stored_offsets = segment.index_path.read_bytes()
        stored_times = segment.time_index_path.read_bytes()
        stored_txns = segment.txn_index_path.read_bytes() if segment.txn_index_path else b""
        if active:  # pre-allocated: the entries, then zeros
            assert not stored_offsets[len(offset_index) :].strip(b"\0")
            assert not stored_times[len(time_index) :].strip(b"\0")
            stored_offsets, stored_times = stored_offsets[: len(offset_index)], stored_times[: len(time_index)]
        assert (stored_offsets, stored_times, stored_txns) == (offset_index, time_index, txn_index), segment
        aborted_seen += len(txn_index) // 34
        if interval <= 100:
            assert offset_index or len(batches) < 2
    assert aborted_seen > 0


def test_hand_computed_offset_and_time_index() -> None:
    """Six batches, interval 100. Sizes: 61-byte header + 18 bytes per record (key 'k', ten-byte value).

    batch  offsets   position size max-ts | bytes before  entry?
    B0     100        0        79   1000  |   0            no
    B1     101-102    79       97   1000  |  79            no
    B2     103        176      79    900  | 176 > 100      (3, 176); time (1000, 0)
    B3     104        255      79   2000  |  79            no
    B4     105        334      79   1500  | 158 > 100      (5, 334); time (2000, 4)
    B5     106        413      79   3000  |  79            no; the roll adds (3000, 6)
    """
    import tempfile

    def batch(offset: int, stamps: list[int]) -> bytes:
        specs = [RecordSpec(b"k", b"0123456789", ts) for ts in stamps]
        return encode_batch(specs, base_offset=offset, partition_leader_epoch=0)

    parts = [
        batch(100, [1000]),
        batch(101, [1000, 1000]),
        batch(103, [900]),
        batch(104, [2000]),
        batch(105, [1500]),
        batch(106, [3000]),
    ]
    assert [len(p) for p in parts] == [79, 97, 79, 79, 79, 79]
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "00000000000000000100.log"
        log.write_bytes(b"".join(parts))
        closed = rebuild_indexes(log, 100, index_interval_bytes=100)
        active = rebuild_indexes(log, 100, index_interval_bytes=100, is_active=True)
    assert closed.offset_index == bytes.fromhex("00000003 000000b0 00000005 0000014e")
    assert closed.time_index == bytes.fromhex(
        "00000000000003e8 00000000  00000000000007d0 00000004  0000000000000bb8 00000006"
    )
    assert active.offset_index == closed.offset_index
    assert active.time_index == closed.time_index[:24]  # no roll entry while the segment is active
    assert closed.txn_index == b""


def test_hand_computed_transaction_index(tmp_path: Path) -> None:
    """pid 7 and 8 open transactions at 0 and 1; 7 aborts at 2 (LSO then: 8's first offset, 1);
    8 commits at 3 (no entry); 9 aborts at 4 with nothing open (first = last = 4, LSO 5)."""

    def data(offset: int, pid: int) -> bytes:
        return encode_batch(
            [RecordSpec(b"k", b"v", 10)],
            base_offset=offset,
            partition_leader_epoch=0,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        )

    def marker(offset: int, pid: int, kind: ControlRecordType) -> bytes:
        return encode_control_batch(
            kind,
            base_offset=offset,
            partition_leader_epoch=0,
            producer_id=pid,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp=11,
        )

    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(
        data(0, 7)
        + data(1, 8)
        + marker(2, 7, ControlRecordType.ABORT)
        + marker(3, 8, ControlRecordType.COMMIT)
        + marker(4, 9, ControlRecordType.ABORT)
    )
    rebuilt = rebuild_indexes(log, 0)
    assert rebuilt.txn_index == bytes.fromhex(
        "0000 0000000000000007 0000000000000000 0000000000000002 0000000000000001"
        "0000 0000000000000009 0000000000000004 0000000000000004 0000000000000005"
    )
    assert rebuilt.open_transactions == {}
