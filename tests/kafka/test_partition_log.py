"""Partition discovery, segments, offsets and the last stable offset of a broker partition directory."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from tiering_core.errors import CorruptLogError, InvalidTopicError, TieringError
from tiering_core.kafka.checkpoints import REPLICATION_OFFSET_CHECKPOINT, update_offset_checkpoint
from tiering_core.kafka.epoch import EpochEntry
from tiering_core.kafka.partition_log import HighWatermarkUnavailableError, PartitionLog, discover_partitions
from tiering_core.kafka.records import ControlRecordType, encode_control_batch
from tiering_core.kafka.topic import TopicPartition


def test_no_transactions_lso_equals_hw(make_writer) -> None:
    w = make_writer(segment_bytes=3000)
    w.append_records(100)
    w.set_high_watermark(80)
    log = PartitionLog(w.path)
    assert (log.log_end_offset, log.high_watermark, log.last_stable_offset) == (100, 80, 80)


def test_open_transaction_at_hw_holds_lso_at_its_first_offset(make_writer) -> None:
    w = make_writer(segment_bytes=3000)
    w.append_records(50)
    first, _ = w.append([(b"a", b"1")], producer_id=11, transactional=True)
    w.append_records(60)  # rolls segments: the open transaction is carried by snapshots
    w.set_high_watermark()
    log = PartitionLog(w.path)
    assert len(log.segments) > 2 and log.snapshots()
    assert log.last_stable_offset == first == 50
    w.commit(11)
    w.set_high_watermark()
    assert PartitionLog(w.path).last_stable_offset == w.next_offset


def test_transaction_started_before_the_latest_snapshot_and_its_segment_deleted(make_writer) -> None:
    w = make_writer(segment_bytes=10**9)
    w.append_records(10)
    first, _ = w.append([(b"a", b"1")], producer_id=5, transactional=True)
    w.roll()
    w.append_records(10)
    w.roll()
    w.append_records(10)
    w.set_high_watermark()
    w.delete_oldest_segments(2)  # the transaction's first batch is gone; only the snapshot knows it
    log = PartitionLog(w.path)
    assert log.local_log_start_offset > first
    assert log.last_stable_offset == first


def test_committed_and_aborted_transactions_leave_lso_at_hw(make_writer) -> None:
    w = make_writer(segment_bytes=1500)
    w.append([(b"a", b"1")], producer_id=1, transactional=True)
    w.append_records(20)
    w.commit(1)
    w.append([(b"b", b"2")], producer_id=2, transactional=True)
    w.append_records(20)
    w.abort(2)
    w.append_records(5)
    hw = w.set_high_watermark()
    log = PartitionLog(w.path)
    assert len(log.segments) > 2 and log.last_stable_offset == hw


def test_marker_at_or_above_hw_keeps_the_transaction_open(make_writer) -> None:
    w = make_writer()
    w.append_records(4)
    first, _ = w.append([(b"a", b"1")], producer_id=1, transactional=True)
    w.append_records(4)
    marker = w.commit(1)
    w.set_high_watermark(marker)  # the marker itself is not replicated yet
    assert PartitionLog(w.path).last_stable_offset == first
    w.set_high_watermark(marker + 1)
    assert PartitionLog(w.path).last_stable_offset == marker + 1


def test_earliest_of_several_open_transactions(make_writer) -> None:
    w = make_writer()
    a, _ = w.append([(b"a", b"1")], producer_id=1, transactional=True)
    b, _ = w.append([(b"b", b"1")], producer_id=2, transactional=True)
    w.append([(b"a", b"2")], producer_id=1, transactional=True)
    w.commit(1)
    w.set_high_watermark()
    assert PartitionLog(w.path).last_stable_offset == b
    w.set_high_watermark(b)
    assert PartitionLog(w.path).last_stable_offset == a


def test_transaction_opened_above_hw_does_not_hold_lso(make_writer) -> None:
    w = make_writer()
    w.append_records(10)
    w.set_high_watermark()
    w.append([(b"a", b"1")], producer_id=1, transactional=True)
    assert PartitionLog(w.path).last_stable_offset == 10


def test_partial_batch_at_the_tail(make_writer) -> None:
    w = make_writer()
    w.append_records(30)
    w.set_high_watermark()
    with w.active_log_path.open("ab") as out:  # a batch being written: only part of it is there
        out.write(w.active_log_path.read_bytes()[:100])
    log = PartitionLog(w.path)
    assert (log.log_end_offset, log.high_watermark, log.last_stable_offset) == (30, 30, 30)


def test_missing_hw_is_a_clear_error(log_dir: Path, make_writer) -> None:
    w = make_writer()
    w.append_records(3)
    with pytest.raises(HighWatermarkUnavailableError, match="replication-offset-checkpoint does not exist"):
        PartitionLog(w.path).high_watermark  # noqa: B018
    update_offset_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT, TopicPartition("other", 0), 5)
    with pytest.raises(HighWatermarkUnavailableError, match="has no entry for orders-0"):
        PartitionLog(w.path).last_stable_offset  # noqa: B018
    update_offset_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT, w.tp, 500)
    assert PartitionLog(w.path).high_watermark == 3  # capped at the log end offset


def test_log_end_offset_with_empty_and_damaged_index(make_writer) -> None:
    w = make_writer(segment_bytes=10**9, index_interval_bytes=50)
    w.append_records(40)
    assert PartitionLog(w.path).log_end_offset == 40
    active = PartitionLog(w.path).active_segment
    data = bytearray(active.index_path.read_bytes())
    data[4:8] = (7).to_bytes(4, "big")  # the first entry now points into the middle of a batch
    data[12:16] = (9).to_bytes(4, "big")
    active.index_path.write_bytes(bytes(data))
    assert PartitionLog(w.path).log_end_offset == 40
    active.index_path.unlink()
    assert PartitionLog(w.path).log_end_offset == 40
    base = w.roll()
    log = PartitionLog(w.path)
    assert log.active_segment.is_empty and log.log_end_offset == base == 40


def test_segments_offsets_and_snapshots(log_dir: Path, make_writer) -> None:
    w = make_writer(segment_bytes=1500)
    w.append_records(60)
    w.become_leader(2)
    w.append_records(10)
    w.set_high_watermark()
    log = PartitionLog.open(w.path, log_dir)
    bases = [s.base_offset for s in log.segments]
    assert bases == sorted(bases) and bases[0] == 0 and log.active_segment.base_offset == bases[-1]
    assert [s.base_offset for s in log.closed_segments] == bases[:-1]
    assert [log.next_base_offset(s) for s in log.segments] == [*bases[1:], None]
    assert log.segment_containing(bases[1]) == log.segments[1] and log.segment_containing(10**6) == log.active_segment
    assert all(s.has_index and s.has_time_index and not s.has_txn_index for s in log.segments)
    assert [o for o, _ in log.snapshots()] == bases[1:]
    assert log.producer_snapshot_path(bases[1]) == w.path / f"{bases[1]:020d}.snapshot"
    assert log.producer_snapshot_path(bases[1] + 1) is None
    assert log.leader_epoch_entries == [EpochEntry(0, 0), EpochEntry(2, 60)]
    assert log.topic_id == w.topic_id and log.log_start_offset_checkpoint is None
    assert log.log_start_offset == log.local_log_start_offset == 0
    assert log.segments[0].last_modified > 0 and log.segments[0].size_bytes == log.segments[0].log_path.stat().st_size


def test_delete_records_moves_log_start_inside_a_segment(make_writer) -> None:
    w = make_writer(segment_bytes=2000)
    w.append_records(100)
    w.set_high_watermark()
    first_bases = [s.base_offset for s in PartitionLog(w.path).segments]
    target = first_bases[2] + 3
    w.delete_records(target)
    log = PartitionLog(w.path)
    assert (log.log_start_offset, log.log_start_offset_checkpoint) == (target, target)
    assert log.local_log_start_offset == first_bases[2]
    assert log.leader_epoch_entries[0] == EpochEntry(0, target)


def test_discovery_skips_transient_dirs_and_files(log_dir: Path, make_writer, caplog) -> None:
    w = make_writer("orders", 0, segment_bytes=2000)
    w.append_records(60)
    w.set_high_watermark()
    make_writer("orders", 1).set_high_watermark()
    make_writer("orders", 10).set_high_watermark()
    for name in ("orders-2.abc123-delete", "orders-3.abc-future", "orders-4.def-stray", ".hidden-0"):
        shutil.copytree(w.path, log_dir / name)
    (log_dir / "not_a_partition").mkdir()
    (log_dir / "meta.properties").write_text("version=1\n")
    (w.path / "00000000000000099999.log.deleted").write_bytes(b"x")
    (w.path / "00000000000000088888.log.swap").write_bytes(b"x")
    (w.path / "00000000000000077777.log.cleaned").write_bytes(b"x")
    (w.path / "00000000000000066666.snapshot.deleted").write_bytes(b"x")
    with caplog.at_level(logging.WARNING, logger="tiering_core.kafka.partition_log"):
        logs = discover_partitions([log_dir])
    assert [str(p.topic_partition) for p in logs] == ["orders-0", "orders-1", "orders-10"]
    assert "not_a_partition" in caplog.text and "delete" not in caplog.text
    bases = [s.base_offset for s in logs[0].segments]
    assert not {99999, 88888, 77777} & set(bases)
    assert 66666 not in [o for o, _ in logs[0].snapshots()]
    assert logs[0].log_dir == log_dir


def test_bad_partition_dirs(log_dir: Path) -> None:
    (log_dir / "nopartition").mkdir()
    with pytest.raises(InvalidTopicError, match="not <topic>-<partition>"):
        PartitionLog(log_dir / "nopartition")
    (log_dir / "orders-01").mkdir()
    with pytest.raises(InvalidTopicError):
        PartitionLog(log_dir / "orders-01")
    with pytest.raises(TieringError, match="does not exist"):
        PartitionLog(log_dir / "orders-7")
    (log_dir / "orders-8").mkdir()
    with pytest.raises(TieringError, match="no log segments"):
        PartitionLog(log_dir / "orders-8").segments  # noqa: B018


def test_missing_partition_metadata_names_the_file(make_writer) -> None:
    w = make_writer()
    (w.path / "partition.metadata").unlink()
    with pytest.raises(CorruptLogError, match=r"partition\.metadata is missing") as err:
        PartitionLog(w.path).topic_id  # noqa: B018
    assert err.value.path == w.path / "partition.metadata"


def test_a_control_batch_that_is_no_marker_names_file_and_batch(log_dir: Path, make_writer) -> None:
    w = make_writer()
    w.append([(b"a", b"1")], producer_id=1, transactional=True)
    position = w.active_size
    bogus = encode_control_batch(
        ControlRecordType.LEADER_CHANGE,
        base_offset=w.next_offset,
        partition_leader_epoch=0,
        producer_id=1,
        producer_epoch=0,
        coordinator_epoch=0,
        timestamp=1,
    )
    with w.active_log_path.open("ab") as out:
        out.write(bogus)
    update_offset_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT, w.tp, 2)
    with pytest.raises(CorruptLogError, match="LEADER_CHANGE record, not a transaction marker") as err:
        PartitionLog(w.path).last_stable_offset  # noqa: B018
    assert err.value.path == w.active_log_path and err.value.position == position
