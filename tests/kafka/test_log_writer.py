"""The writer lays a partition out as a broker does; kafka-python reads every batch it writes."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from kafka.record import MemoryRecords

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.batch import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD, iter_batch_headers
from tiering_core.kafka.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from tiering_core.kafka.demo_log_dir import build_demo_log_dir
from tiering_core.kafka.epoch import EpochEntry
from tiering_core.kafka.index import AbortedTxn, read_offset_index, read_time_index, read_txn_index
from tiering_core.kafka.index_rebuild import rebuild_indexes
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.partition_log import PartitionLog, discover_partitions
from tiering_core.kafka.producer_snapshot import ProducerStateEntry, open_transactions, read_producer_snapshot
from tiering_core.kafka.records import (
    ControlRecordType,
    RecordSpec,
    decode_control_record,
    encode_control_batch,
    iter_batches,
)
from tiering_core.kafka.topic import TopicPartition

CODECS = {"none": CODEC_NONE, "gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY, "lz4": CODEC_LZ4, "zstd": CODEC_ZSTD}


def kafka_python_records(log: Path) -> list[tuple]:
    out = []
    records = MemoryRecords(log.read_bytes())
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value, list(r.headers), batch.is_control_batch))
    return out


def assert_indexes_equal_rebuild(w: PartitionWriter) -> None:
    log = PartitionLog(w.path)
    ongoing: dict[int, int] = {}
    for segment in log.segments:
        active = segment == log.active_segment
        snapshot = log.producer_snapshot_path(segment.base_offset)
        if snapshot is not None:
            assert open_transactions(read_producer_snapshot(snapshot)) == ongoing
        rebuilt = rebuild_indexes(
            segment.log_path,
            segment.base_offset,
            index_interval_bytes=w.index_interval_bytes,
            is_active=active,
            open_txn_first_offsets=ongoing,
        )
        ongoing = rebuilt.open_transactions
        index, times = segment.index_path.read_bytes(), segment.time_index_path.read_bytes()
        if active:
            assert len(index) == w.preallocate_index_bytes // 8 * 8 and not index[len(rebuilt.offset_index) :].strip(
                b"\0"
            )
            index, times = index[: len(rebuilt.offset_index)], times[: len(rebuilt.time_index)]
        assert (index, times) == (rebuilt.offset_index, rebuilt.time_index), segment
        assert (segment.txn_index_path.read_bytes() if segment.txn_index_path else b"") == rebuilt.txn_index
    assert ongoing == w.ongoing


@pytest.mark.parametrize("codec", list(CODECS.values()), ids=list(CODECS))
def test_every_batch_reads_back_in_kafka_python(make_writer, codec: int) -> None:
    w = make_writer(codec=codec, segment_bytes=1000, index_interval_bytes=200)
    w.append([RecordSpec(b"k1", b"v" * 300, 1000, (("trace", b"abc"), ("empty", None)))])
    w.append([(None, b"no key"), (b"no value", None), (b"k", b"", [("h", b"1")])])
    w.begin_transaction(7)
    w.append([(b"t1", b"x" * 500)], producer_id=7)
    w.commit(7)
    w.append([(b"t2", b"y")], producer_id=7, transactional=True)
    w.abort(7)
    w.append([(b"i", b"idempotent")] * 4, producer_id=8)
    w.append_records(40, value_size=90, per_batch=6)
    w.set_high_watermark()
    log = PartitionLog(w.path)
    assert len(log.segments) > 2
    expected_offsets = list(range(w.next_offset))
    ours, theirs = [], []
    for segment in log.segments:
        for header, records in iter_batches(segment.log_path):
            assert header.codec == (CODEC_NONE if header.is_control else codec)
            ours += [(r.offset, r.timestamp, r.key, r.value, list(r.headers), r.is_control) for r in records]
        theirs += kafka_python_records(segment.log_path)
    assert ours == theirs and [o[0] for o in ours] == expected_offsets
    assert ours[0] == (0, 1000, b"k1", b"v" * 300, [("trace", b"abc"), ("empty", None)], False)
    assert ours[1][2:5] == (None, b"no key", []) and ours[2][2:4] == (b"no value", None)
    assert [o[0] for o in ours if o[5]] == [5, 7]  # the commit and abort markers
    assert_indexes_equal_rebuild(w)


def test_producer_fields_and_sequences(make_writer) -> None:
    w = make_writer()
    w.append([(b"a", b"1")] * 3, producer_id=5)
    w.append([(b"b", b"2")] * 2, producer_id=5)
    w.append([(b"c", b"3")], producer_id=5, producer_epoch=2)  # a new epoch restarts sequences
    w.append([(b"d", b"4")])
    headers = list(iter_batch_headers(w.active_log_path, verify_crc=True))
    assert [(h.producer_id, h.producer_epoch, h.base_sequence) for h in headers] == [
        (5, 0, 0),
        (5, 0, 3),
        (5, 2, 0),
        (-1, -1, -1),
    ]
    assert [h.partition_leader_epoch for h in headers] == [0] * 4
    (entry,) = w.snapshot_entries()
    assert entry == ProducerStateEntry(5, 2, 0, 5, 0, headers[2].max_timestamp, -1, -1)
    with pytest.raises(ValueError, match="needs a producer id"):
        w.append([(b"x", b"y")], transactional=True)
    with pytest.raises(ValueError, match="no transaction to end"):
        w.commit(99)


def test_a_producer_is_in_no_snapshot_before_its_first_batch(make_writer) -> None:
    """As on a real broker: the batch that rolls the segment is appended after the roll's snapshot,
    so a producer whose first batch that is (or who only began a transaction) is not in it."""
    w = make_writer(segment_bytes=400)
    w.append([(b"k", b"v" * 100)], producer_id=1, producer_epoch=0)
    w.begin_transaction(2, producer_epoch=4)
    while w.segment_bases() == [0]:
        w.append([(b"k", b"v" * 100)], producer_id=3, producer_epoch=0)
    roll = w.segment_bases()[1]
    named = [e.producer_id for e in read_producer_snapshot(w.path / f"{roll:020d}.snapshot")]
    assert 2 not in named and named[0] == 1
    w.append([(b"t", b"x")], producer_id=2)
    assert [h.producer_epoch for h in iter_batch_headers(w.active_log_path)][-1] == 4


def test_roll_closes_the_segment_like_a_broker(make_writer) -> None:
    w = make_writer(segment_bytes=10**9, index_interval_bytes=100, preallocate_index_bytes=1200)
    w.begin_transaction(3)
    first, _ = w.append([(b"t", b"open")], producer_id=3)
    w.append_records(30, value_size=50, per_batch=3)
    closed_log = w.active_log_path
    new_base = w.roll()
    assert new_base == w.next_offset == 31
    stem = closed_log.with_suffix("")
    index = read_offset_index(stem.with_suffix(".index"), 0)
    times = read_time_index(stem.with_suffix(".timeindex"), 0)
    assert stem.with_suffix(".index").stat().st_size == 8 * len(index)  # trimmed
    assert stem.with_suffix(".timeindex").stat().st_size == 12 * len(times)
    last = list(iter_batch_headers(closed_log))[-1]
    assert times[-1].timestamp == last.max_timestamp and times[-1].offset == last.last_offset  # the roll entry
    snapshot = read_producer_snapshot(w.path / f"{new_base:020d}.snapshot")
    assert [(e.producer_id, e.current_txn_first_offset) for e in snapshot] == [(3, first)]
    active = w.path / f"{new_base:020d}"
    assert active.with_suffix(".index").read_bytes() == bytes(1200)
    assert active.with_suffix(".timeindex").read_bytes() == bytes(1200)
    assert not active.with_suffix(".txnindex").exists()
    assert w.roll() == new_base  # an empty active segment does not roll


def test_rolls_by_size_and_when_an_index_is_full(make_writer) -> None:
    w = make_writer(segment_bytes=3000)
    w.append_records(200, value_size=50, per_batch=4)
    sizes = [s.size_bytes for s in PartitionLog(w.path).segments]
    assert len(sizes) > 3 and max(sizes) <= 3000
    small = make_writer("small", segment_bytes=10**9, index_interval_bytes=0, preallocate_index_bytes=48)
    small.append_records(40, value_size=10, per_batch=1)
    log = PartitionLog(small.path)
    # 48 bytes hold 6 offset entries and 4 time entries; a time index is full at 3 (one kept for the roll).
    for segment in log.closed_segments:
        assert len(read_time_index(segment.time_index_path, segment.base_offset)) <= 4
        assert len(read_offset_index(segment.index_path, segment.base_offset)) == 3
    assert_indexes_equal_rebuild(small)


def test_transactions_across_segments_and_the_txn_index(make_writer) -> None:
    w = make_writer(segment_bytes=10**9, index_interval_bytes=64)
    a, _ = w.append([(b"a", b"1")], producer_id=1, transactional=True)
    b, _ = w.append([(b"b", b"2")], producer_id=2, transactional=True)
    w.roll()
    abort_b = w.abort(2)
    commit_a = w.commit(1)
    c, _ = w.append([(b"c", b"3")], producer_id=1, transactional=True)
    w.roll()
    abort_c = w.abort(1)
    w.set_high_watermark()
    log = PartitionLog(w.path)
    assert read_txn_index(log.segments[1].txn_index_path) == [AbortedTxn(2, b, abort_b, a)]
    assert read_txn_index(log.segments[2].txn_index_path) == [AbortedTxn(1, c, abort_c, abort_c + 1)]
    assert log.segments[0].txn_index_path is None
    markers = [
        decode_control_record(rs[0]).type for s in log.segments for h, rs in iter_batches(s.log_path) if h.is_control
    ]
    assert markers == [ControlRecordType.ABORT, ControlRecordType.COMMIT, ControlRecordType.ABORT]
    assert commit_a == abort_b + 1
    assert_indexes_equal_rebuild(w)


def test_leader_epochs(make_writer) -> None:
    w = make_writer(segment_bytes=2000)
    w.append_records(20)
    w.become_leader(3)
    w.append_records(20)
    w.become_leader(3)  # the same epoch again keeps its start
    w.become_leader(4)
    w.become_leader(5)  # epoch 4 stays empty
    w.append_records(5)
    assert read_leader_epoch_checkpoint(w.path / "leader-epoch-checkpoint") == [
        EpochEntry(0, 0),
        EpochEntry(3, 20),
        EpochEntry(5, 40),  # assigning 5 at 40 drops the empty epoch 4 (Kafka's non-monotonic truncation)
    ]
    epochs = {
        h.base_offset: h.partition_leader_epoch
        for s in PartitionLog(w.path).segments
        for h in iter_batch_headers(s.log_path)
    }
    assert {epochs[o] for o in epochs if o < 20} == {0} and {epochs[o] for o in epochs if 20 <= o < 40} == {3}
    assert {epochs[o] for o in epochs if o >= 40} == {5}


def test_checkpoints_merge_with_other_partitions(log_dir: Path, make_writer) -> None:
    write_offset_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT, {TopicPartition("other", 4): 99})
    w = make_writer(segment_bytes=2000)
    w.append_records(50)
    assert w.set_high_watermark(30) == 30
    assert read_offset_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT) == {
        TopicPartition("other", 4): 99,
        w.tp: 30,
    }
    assert read_offset_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT) == {w.tp: 50}
    assert read_offset_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT) == {}  # log start = first base: no entry
    with pytest.raises(ValueError, match="outside"):
        w.set_high_watermark(51)


def test_local_retention_and_delete_records(log_dir: Path, make_writer) -> None:
    w = make_writer(segment_bytes=1500)
    w.append_records(60)
    w.become_leader(1)
    w.append_records(60)
    w.set_high_watermark()
    bases = w.segment_bases()
    assert len(bases) > 6
    new_start = w.delete_oldest_segments(2, async_delete=True)
    assert new_start == bases[2] and w.segment_bases() == bases[2:]
    assert (w.path / f"{bases[0]:020d}.log.deleted").exists()  # renamed first, as the broker does
    assert not list(w.path.glob(f"{bases[1]:020d}.snapshot"))
    assert read_leader_epoch_checkpoint(w.path / "leader-epoch-checkpoint")[0] == EpochEntry(0, bases[2])
    assert read_offset_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT) == {}
    inside = bases[4] + 2
    w.delete_records(inside)
    assert w.segment_bases() == bases[4:]
    assert read_offset_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT) == {w.tp: inside}
    log = PartitionLog(w.path)
    assert (log.log_start_offset, log.local_log_start_offset) == (inside, bases[4])
    w.delete_records(bases[6])  # exactly a segment base: once that segment leads, the entry goes
    assert read_offset_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT) == {}
    assert PartitionLog(w.path).log_start_offset == bases[6]
    w.delete_records(3)  # below the log start: nothing moves back
    assert w.log_start_offset == bases[6]
    with pytest.raises(ValueError, match="beyond the log end offset"):
        w.delete_records(w.next_offset + 1)


def test_truncate_to_reloads_producer_state_and_indexes(make_writer) -> None:
    w = make_writer(segment_bytes=10**9, index_interval_bytes=150)
    w.append_records(30, per_batch=5)
    w.begin_transaction(4)
    t_first, _ = w.append([(b"t", b"1")], producer_id=4)
    w.append_records(20, per_batch=5)
    w.become_leader(1)
    cut = w.next_offset
    w.abort(4)
    w.roll()
    w.append_records(20, per_batch=5)
    w.set_high_watermark()
    with pytest.raises(ValueError, match="inside the batch"):
        w.truncate_to(cut + 3)
    w.truncate_to(cut)  # the abort marker is gone: the transaction is open again
    assert w.next_offset == cut and w.ongoing == {4: t_first} and w.segment_bases() == [0]
    assert w.epochs.entries == (EpochEntry(0, 0),)  # epoch 1 began at the cut: truncated from the end
    assert w.high_watermark == cut and not list(w.path.glob("*.snapshot"))
    log = PartitionLog(w.path)
    assert log.log_end_offset == cut and log.segments[0].txn_index_path is None
    assert_indexes_equal_rebuild(w)
    w.commit(4)
    w.append_records(7)
    assert_indexes_equal_rebuild(w)
    assert [o[0] for o in kafka_python_records(w.active_log_path)] == list(range(w.next_offset))


def test_truncate_to_a_segment_base_keeps_it_as_the_empty_active_segment(make_writer) -> None:
    w = make_writer(segment_bytes=10**9)
    w.append_records(10)
    second = w.roll()
    w.append_records(10)
    w.roll()
    w.append_records(10)
    w.truncate_to(second)
    assert w.segment_bases() == [0, second] and w.active_size == 0 and w.next_offset == second
    assert PartitionLog(w.path).log_end_offset == second
    w.append_records(3)
    assert_indexes_equal_rebuild(w)


def test_truncate_to_with_async_delete_leaves_deleted_files_as_a_real_broker_does(make_writer) -> None:
    """The old leader after an unclean election, as a real broker left it: the divergent
    segments renamed ``*.deleted`` (snapshots too), the refetched segment of the same base beside
    its predecessor's ``.log.deleted``; the partition reads as the new lineage."""
    w = make_writer(segment_bytes=10**9)
    w.append_records(10)
    w.roll()
    w.append_records(10, per_batch=5)  # [10..19]: offsets 15.. diverge
    divergent = w.roll()
    w.append_records(10)
    w.roll()
    w.truncate_to(15, async_delete=True)
    w.become_leader(1)  # the new lineage, as refetched: epoch 1 from 15
    w.append_records(5, key_prefix="new")
    assert w.roll() == divergent
    w.append_records(2, key_prefix="new")
    names = {p.name for p in w.path.iterdir()}
    assert {f"{divergent:020d}.log", f"{divergent:020d}.log.deleted", f"{divergent:020d}.snapshot.deleted"} <= names
    log = PartitionLog(w.path)
    assert [s.base_offset for s in log.segments] == [0, 10, divergent]
    assert log.log_end_offset == 22
    assert log.leader_epoch_entries == [EpochEntry(0, 0), EpochEntry(1, 15)]


def test_demo_log_dir(tmp_path: Path) -> None:
    made = build_demo_log_dir(tmp_path / "logs", seed=7)
    logs = {str(p.topic_partition): p for p in discover_partitions([tmp_path / "logs"])}
    assert sorted(logs) == sorted(str(tp) for tp in made) and len(made) == 6
    orders = logs["orders-0"]
    assert [e.epoch for e in orders.leader_epoch_entries] == [0, 1] and len(orders.segments) > 2
    open_txn = logs["payments-0"]
    assert open_txn.last_stable_offset < open_txn.high_watermark == open_txn.log_end_offset
    assert logs["payments-1"].last_stable_offset == logs["payments-1"].high_watermark
    assert any(s.txn_index_path for s in logs["payments-1"].segments)
    for log in logs.values():
        total = sum(len(kafka_python_records(s.log_path)) for s in log.segments)
        assert total == log.log_end_offset
    again = build_demo_log_dir(tmp_path / "again", seed=7)
    assert again == made
    first = (tmp_path / "logs" / "orders-0" / "00000000000000000000.log").read_bytes()
    second = (tmp_path / "again" / "orders-0" / "00000000000000000000.log").read_bytes()
    same_seed = [(r.key, r.value) for r in MemoryRecords(first).next_batch()]
    assert same_seed == [(r.key, r.value) for r in MemoryRecords(second).next_batch()]


def test_truncate_to_replays_the_coordinator_epoch_of_markers(make_writer) -> None:
    """``ProducerAppendInfo.appendEndTxnMarker`` keeps the marker's coordinator epoch: the producer
    state rebuilt by ``truncate_to`` (and the snapshots written after it) must carry it too."""

    def clock():  # type: ignore[no-untyped-def]
        ticks = iter(range(1_700_000_000_000, 1_800_000_000_000, 10))
        return lambda: next(ticks)

    def until_the_cut(w: PartitionWriter) -> int:
        w.append_records(5)
        w.begin_transaction(21)
        w.append([(b"t", b"1")], producer_id=21)
        w.commit(21, coordinator_epoch=7)
        w.append_records(5)
        return w.next_offset

    truncated = make_writer("truncated", segment_bytes=10**9, clock=clock())
    cut = until_the_cut(truncated)
    truncated.append_records(5)
    truncated.truncate_to(cut)  # replays the .log from offset 0 (no snapshot yet): the marker included
    straight = make_writer("straight", segment_bytes=10**9, clock=clock())
    assert until_the_cut(straight) == cut == truncated.next_offset
    (entry,) = truncated.snapshot_entries()
    assert entry.coordinator_epoch == 7
    assert truncated.snapshot_entries() == straight.snapshot_entries()
    truncated.roll()
    straight.roll()
    name = f"{cut:020d}.snapshot"
    assert (truncated.path / name).read_bytes() == (straight.path / name).read_bytes()


def test_truncate_to_names_a_damaged_marker_at_its_position(make_writer) -> None:
    """Replaying the ``.log`` reads each marker where it lies: damage is reported at its batch."""
    w = make_writer(segment_bytes=10**9)
    w.append_records(5)
    w.begin_transaction(4)
    w.append([(b"t", b"1")], producer_id=4)
    marker = w.commit(4)
    w.append_records(5)
    (header,) = [h for h in iter_batch_headers(w.active_log_path) if h.base_offset == marker]
    assert header.position > 0
    bogus = encode_control_batch(
        ControlRecordType.LEADER_CHANGE,
        base_offset=marker,
        partition_leader_epoch=header.partition_leader_epoch,
        producer_id=4,
        producer_epoch=header.producer_epoch,
        coordinator_epoch=0,
        timestamp=header.max_timestamp,
    )
    assert len(bogus) == header.size_in_bytes
    with w.active_log_path.open("r+b") as f:
        f.seek(header.position)
        f.write(bogus)
    with pytest.raises(CorruptLogError, match="LEADER_CHANGE record, not a transaction marker") as err:
        w.truncate_to(w.next_offset)
    assert err.value.path == w.active_log_path and err.value.position == header.position


def _kafka_python_view(log: Path) -> list[tuple]:
    """Every record with its batch facts, as kafka-python's reader decodes them (CRC checked)."""
    out = []
    records = MemoryRecords(log.read_bytes())
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        for r in batch:
            out.append(
                (
                    r.offset,
                    r.timestamp,
                    r.key,
                    r.value,
                    [(k, v) for k, v in r.headers],
                    batch.producer_id,
                    batch.is_transactional,
                    batch.is_control_batch,
                )
            )
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_appended_record_reads_back_in_kafka_python(make_writer, seed: int) -> None:
    """A randomized ledger of appends (plain, idempotent, transactional, markers, every codec,
    null keys and values, headers, timestamps going back) against what kafka-python reads back."""
    import random

    rng = random.Random(seed)
    w = make_writer(f"ledger{seed}", segment_bytes=6000, index_interval_bytes=rng.choice([0, 1, 100, 4096]))
    expected: list[tuple] = []
    open_txns: set[int] = set()
    for _ in range(120):
        choice = rng.random()
        if choice < 0.15 and open_txns:
            pid = rng.choice(sorted(open_txns))
            kind = rng.choice([ControlRecordType.COMMIT, ControlRecordType.ABORT])
            marker = (w.commit if kind == ControlRecordType.COMMIT else w.abort)(
                pid, coordinator_epoch=rng.randint(0, 9)
            )
            key = struct.pack(">hh", 0, int(kind))
            expected.append((marker, None, key, None, [], pid, True, True))  # timestamp and value checked below
            open_txns.discard(pid)
            continue
        pid = -1
        if choice < 0.45:
            pid = rng.choice([100, 101, 102])
            if rng.random() < 0.6 and pid not in open_txns:
                w.begin_transaction(pid)
                open_txns.add(pid)
        specs = []
        for _i in range(rng.randint(1, 6)):
            key = None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 12))
            value = None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 400))
            headers = tuple(
                (f"h{j}-\u00e9", None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 5)))
                for j in range(rng.choice([0, 0, 1, 3]))
            )
            specs.append(RecordSpec(key, value, 1_700_000_000_000 + rng.randint(-5_000, 5_000), headers))
        base, last = w.append(specs, producer_id=pid, codec=rng.choice(list(CODECS.values())))
        assert last - base + 1 == len(specs)
        for i, spec in enumerate(specs):
            expected.append(
                (base + i, spec.timestamp, spec.key, spec.value, list(spec.headers), pid, pid in open_txns, False)
            )
    w.set_high_watermark()
    log = PartitionLog(w.path)
    theirs = [row for segment in log.segments for row in _kafka_python_view(segment.log_path)]
    assert len(theirs) == len(expected) == w.next_offset
    for mine, read in zip(expected, theirs, strict=True):
        if mine[7]:  # a marker: its value is version 0 and the coordinator epoch; its timestamp the clock's
            assert read[0] == mine[0] and read[2] == mine[2] and read[5:] == mine[5:]
            assert struct.unpack(">h", read[3][:2]) == (0,) and len(read[3]) == 6
        else:
            assert read == mine
    assert_indexes_equal_rebuild(w)


def test_the_log_dir_has_the_brokers_meta_properties_and_deletion_renames_the_partition(tmp_path: Path) -> None:
    """As a KRaft broker: meta.properties (version, node.id, directory.id, cluster.id) in the log
    dir, kept when there is one; a deleted partition's directory becomes <topic>-<p>.<uuid>-delete,
    which discovery skips and whose partition.metadata still names the topic id."""
    from tiering_core.kafka.log_dirs import deleted_topic_ids, parse_properties, read_log_dir_identity

    w = PartitionWriter(tmp_path, TopicPartition("orders", 3), node_id=7)
    props = parse_properties((tmp_path / "meta.properties").read_text())
    assert set(props) == {"version", "node.id", "directory.id", "cluster.id"} and props["version"] == "1"
    identity = read_log_dir_identity(tmp_path)
    assert (identity.node_id, identity.cluster_id, identity.directory_id) == (
        7,
        props["cluster.id"],
        props["directory.id"],
    )
    PartitionWriter(tmp_path, TopicPartition("orders", 4), node_id=9)
    assert read_log_dir_identity(tmp_path) == identity  # a broker writes it once

    w.append_records(3)
    trace = w.delete()
    assert trace.parent == tmp_path and trace.name.startswith("orders-3.") and trace.name.endswith("-delete")
    assert len(trace.name) == len("orders-3.") + 32 + len("-delete") and not (tmp_path / "orders-3").exists()
    assert [p.topic_partition for p in discover_partitions([tmp_path])] == [TopicPartition("orders", 4)]
    assert deleted_topic_ids(tmp_path, TopicPartition("orders", 3)) == {w.topic_id: trace}
    assert deleted_topic_ids(tmp_path, TopicPartition("orders", 4)) == {}
    long = PartitionWriter(tmp_path, TopicPartition("t" * 249, 0))  # the name is cut to 255 characters
    cut = long.delete()
    assert len(cut.name) == 255 and deleted_topic_ids(tmp_path, TopicPartition("t" * 249, 0)) == {long.topic_id: cut}
