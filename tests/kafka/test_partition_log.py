"""Partition discovery, segments, offsets and the last stable offset of a broker partition directory."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from tiering_core.errors import CorruptLogError, InvalidTopicError, TieringError
from tiering_core.kafka.batch import iter_batch_headers
from tiering_core.kafka.checkpoints import (
    REPLICATION_OFFSET_CHECKPOINT,
    update_offset_checkpoint,
)
from tiering_core.kafka.epoch import EpochEntry
from tiering_core.kafka.index import lookup_offset, read_offset_index
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


def test_discovery_skips_krafts_metadata_log(log_dir: Path, make_writer) -> None:
    """``__cluster_metadata-0`` is KRaft's own Raft log: Kafka never tiers it, and neither does this."""
    make_writer("orders", 0).set_high_watermark()
    metadata = make_writer("__cluster_metadata", 0)
    metadata.append_records(5)
    metadata.set_high_watermark()
    make_writer("__consumer_offsets", 3).set_high_watermark()  # an internal topic, but an ordinary log
    assert [str(p.topic_partition) for p in discover_partitions([log_dir])] == ["__consumer_offsets-3", "orders-0"]


def _vanishing_partition(log_dir: Path, make_writer):  # type: ignore[no-untyped-def]
    w = make_writer("orders", 0, segment_bytes=1500)
    w.append_records(60)
    w.set_high_watermark()
    doomed = make_writer("doomed", 0)
    doomed.set_high_watermark()
    return w, doomed, w.path / "00000000000000000000.log"


def _broker_renames(first_log: Path, doomed: Path, log_dir: Path) -> None:
    if first_log.exists():
        first_log.rename(first_log.with_name(first_log.name + ".deleted"))
    if doomed.exists():
        doomed.rename(log_dir / "doomed-0.0123abc-delete")


def test_files_and_partitions_vanishing_after_the_listing_are_skipped(
    log_dir: Path, make_writer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker renames a segment to ``.deleted`` (or a partition to ``-delete``) right after our
    listing (fault injected there): the listing goes on without it."""
    w, doomed, first_log = _vanishing_partition(log_dir, make_writer)
    real_iterdir = Path.iterdir

    def iterdir_then_broker_deletes(self: Path):  # type: ignore[no-untyped-def]
        entries = list(real_iterdir(self))
        if self in (w.path, log_dir):
            _broker_renames(first_log, doomed.path, log_dir)
        return iter(entries)

    monkeypatch.setattr(Path, "iterdir", iterdir_then_broker_deletes)
    logs = discover_partitions([log_dir])
    assert [str(p.topic_partition) for p in logs] == ["orders-0"]
    bases = [s.base_offset for s in logs[0].segments]
    assert bases and 0 not in bases and logs[0].log_end_offset == 60


def test_files_and_partitions_vanishing_after_their_first_look_do_not_crash_the_listing(
    log_dir: Path, make_writer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Renamed right after the first ``stat`` of the segment or partition directory (fault injected
    there): no ``FileNotFoundError`` or missing-directory error escapes the listing."""
    import os

    _w, doomed, first_log = _vanishing_partition(log_dir, make_writer)
    real_stat = os.stat
    renames = {
        str(first_log): first_log.with_name(first_log.name + ".deleted"),
        str(doomed.path): log_dir / "doomed-0.0123abc-delete",
    }

    def stat_then_broker_deletes(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        result = real_stat(path, *args, **kwargs)
        target = renames.pop(str(path), None)
        if target is not None:
            Path(path).rename(target)
        return result

    monkeypatch.setattr(os, "stat", stat_then_broker_deletes)
    logs = discover_partitions([log_dir])
    assert [str(p.topic_partition) for p in logs] == ["orders-0"]
    assert logs[0].segments and logs[0].log_end_offset == 60


def test_a_corrupt_newest_snapshot_falls_back_to_an_older_one(make_writer, caplog) -> None:
    """Kafka's loadFromSnapshot skips a corrupt snapshot for the next older one."""
    w = make_writer(segment_bytes=10**9)
    w.append_records(10)
    first, _ = w.append([(b"a", b"1")], producer_id=5, transactional=True)
    w.roll()
    w.append_records(10)
    w.roll()
    w.append_records(10)
    w.set_high_watermark()
    w.delete_oldest_segments(1)  # the transaction's first batch is gone: only the snapshots know it
    log = PartitionLog(w.path)
    (older, _), (newest, newest_path) = log.snapshots()
    assert log.local_log_start_offset <= older < newest
    data = bytearray(newest_path.read_bytes())
    data[-3] ^= 0xFF
    newest_path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="tiering_core.kafka.partition_log"):
        assert PartitionLog(w.path).last_stable_offset == first
    assert f"{newest_path}: at byte 2: producer snapshot CRC mismatch" in caplog.text
    assert "skipping a corrupt producer snapshot" in caplog.text
    assert newest_path.read_bytes() == bytes(data)  # read-only: the broker's file is left as it is


def test_without_a_usable_snapshot_the_whole_local_log_is_replayed(make_writer, caplog) -> None:
    w = make_writer(segment_bytes=10**9)
    w.append_records(10)
    w.roll()
    first, _ = w.append([(b"a", b"1")], producer_id=5, transactional=True)
    w.roll()
    w.append_records(10)
    w.roll()
    w.append_records(3)
    w.set_high_watermark()
    snapshots = PartitionLog(w.path).snapshots()
    assert len(snapshots) == 3
    for _, path in snapshots:
        path.write_bytes(b"\x00\x07" + path.read_bytes()[2:])  # an unknown version
    with caplog.at_level(logging.WARNING, logger="tiering_core.kafka.partition_log"):
        assert PartitionLog(w.path).last_stable_offset == first  # found again by the scan from offset 0
    assert caplog.text.count("producer snapshot version 7") == 3
    assert "no usable producer snapshot at or below offset" in caplog.text
    assert "replaying the log from its local start 0" in caplog.text


def _rchar() -> int:
    """Bytes this process has read through read system calls (Linux ``/proc/self/io``)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_offsets_read_only_a_few_entries_of_a_preallocated_index(make_writer) -> None:
    """The active segment's 10 MiB index is binary-searched, not read whole, for the LEO and lookups."""
    w = make_writer(segment_bytes=10**9, index_interval_bytes=64, preallocate_index_bytes=10 << 20)
    w.append_records(3000, value_size=40, per_batch=3)
    w.set_high_watermark()
    log = PartitionLog(w.path)
    active = log.active_segment
    entries = read_offset_index(active.index_path, active.base_offset)
    assert active.index_path.stat().st_size == 10 << 20 and len(entries) > 500
    before = _rchar()
    assert log.log_end_offset == 3000
    positions = {target: log.position_of(active, target) for target in range(0, 3000, 7)}
    spent = _rchar() - before
    assert spent < 1 << 20, spent  # reading the index whole even once is 10 MiB
    for target, position in positions.items():
        assert position == lookup_offset(entries, active.base_offset, target).position
    assert PartitionLog(w.path).position_of(active, 10**9) == entries[-1].position


def test_position_of_never_trusts_a_damaged_entry(make_writer) -> None:
    w = make_writer(segment_bytes=10**9, index_interval_bytes=100)
    w.append_records(200, value_size=30, per_batch=4)
    w.roll()
    log = PartitionLog(w.path)
    segment = log.segments[0]
    entries = read_offset_index(segment.index_path, 0)
    data = bytearray(segment.index_path.read_bytes())
    k = len(entries) // 2
    data[8 * k + 4 : 8 * k + 8] = (entries[k].position + 9).to_bytes(4, "big")  # inside a batch
    segment.index_path.write_bytes(bytes(data))
    assert log.position_of(segment, entries[k].offset) == 0  # a longer walk, never a wrong place
    assert log.position_of(segment, entries[k - 1].offset) == entries[k - 1].position
    data[8 * k : 8 * k + 4] = (entries[k].offset - 1000).to_bytes(4, "big", signed=True)  # out of order
    segment.index_path.write_bytes(bytes(data))
    for target in range(0, 200, 3):
        position = PartitionLog(w.path).position_of(segment, target)
        holder = next(h for h in iter_batch_headers(segment.log_path) if h.last_offset >= target)
        assert position <= holder.position


def test_position_of_never_trusts_an_entry_whose_batch_fails_its_crc(make_writer) -> None:
    w = make_writer(segment_bytes=10**9, index_interval_bytes=100)
    w.append_records(200, value_size=30, per_batch=4)
    w.roll()
    segment = PartitionLog(w.path).segments[0]
    entries = read_offset_index(segment.index_path, 0)
    k = len(entries) // 2
    data = bytearray(segment.log_path.read_bytes())
    data[entries[k].position + 70] ^= 0xFF  # a record byte: the header still parses
    segment.log_path.write_bytes(bytes(data))
    log = PartitionLog(w.path)
    assert log.position_of(segment, entries[k].offset) == 0
    assert log.position_of(segment, entries[k - 1].offset) == entries[k - 1].position
