"""Reads from the remote tier: records by offset, an offset by timestamp (the index cache: test_index_cache.py)."""

from __future__ import annotations

import logging
import shutil
from dataclasses import replace

import pytest

from tests.engine_support import TieringEnv, tip_of
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.errors import TieringError
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.records import Record, iter_records
from tiering_core.kafka.topic import TopicPartition
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.read.reader import OffsetOutOfRangeError, open_reader
from tiering_core.runs.copy import run_copy
from tiering_core.runs.delete_records import apply_delete_records
from tiering_core.storage.layout import ObjectKind

INTERVAL = 128  # dense offset/time indexes, so seeks really start mid-segment


def build(env: TieringEnv) -> PartitionWriter:
    """Four closed segments (epochs 0 then 2, a committed transaction inside) and an active one."""
    env.write_config(orders={"index.interval.bytes": INTERVAL})
    w = env.writer("orders", 0, index_interval_bytes=INTERVAL)
    w.append_records(25, value_size=40, per_batch=3)
    w.roll()
    w.append([(b"t1", b"in-txn", [("h", b"x"), ("n", None)])], producer_id=5, transactional=True)
    w.append_records(10, value_size=40, per_batch=2)
    w.commit(5)  # a control record in the middle of segment 1
    w.append([(None, b"no key")])
    w.roll()
    w.become_leader(2)
    w.append_records(20, value_size=40, per_batch=4)
    w.roll()
    w.append_records(12, value_size=40, per_batch=5)
    w.roll()
    w.append_records(6)  # active: never remote
    w.set_high_watermark()
    return w


def local_records(w: PartitionWriter) -> list[Record]:
    """What the broker has, data records only, every segment but the active one."""
    logs = sorted(w.path.glob("*.log"))[:-1]
    return [r for path in logs for r in iter_records(path) if not r.is_control]


def test_fetch_returns_the_records_the_broker_wrote_from_any_offset(tiering_env: TieringEnv) -> None:
    w = build(tiering_env)
    expected = local_records(w)
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        reader = open_reader(ctx, w.tp)
        assert (reader.log_start_offset, reader.highest_offset) == (0, expected[-1].offset)
        every = reader.read(0, 1000)
        assert [(r.offset, r.timestamp, r.key, r.value, r.headers, r.leader_epoch) for r in every] == [
            (r.offset, r.timestamp, r.key, r.value, r.headers, r.leader_epoch) for r in expected
        ]
        assert {r.leader_epoch for r in every} == {0, 2}
        control = next(r.offset for r in iter_records(sorted(w.path.glob("*.log"))[1]) if r.is_control)
        assert control not in {r.offset for r in every}  # the commit marker is not a record to consume
        for start in (1, 7, 24, 25, control, expected[-1].offset):  # mid-batch, segment edges, the marker
            got = reader.read(start, 9)
            want = [r for r in expected if r.offset >= start][:9]
            assert [(r.offset, r.value) for r in got] == [(r.offset, r.value) for r in want], start
        # Index objects were fetched once per segment and then served from the cache.
        assert reader.cache.misses <= 2 * 4 and reader.cache.hits > 0


def test_fetch_outside_the_remote_tier_names_the_bounds(fs_env: TieringEnv) -> None:
    w = build(fs_env)
    with fs_env.context() as ctx:
        with pytest.raises(OffsetOutOfRangeError, match="holds no data yet"):
            open_reader(ctx, w.tp).read(0, 1)
        run_copy(ctx, w.tp)
        top = open_reader(ctx, w.tp).highest_offset
        with pytest.raises(OffsetOutOfRangeError, match=f"above the remote tier \\(highest copied offset {top}\\)"):
            open_reader(ctx, w.tp).read(top + 1, 1)
        apply_delete_records(ctx, w.tp, 30)
        reader = open_reader(ctx, w.tp)
        with pytest.raises(OffsetOutOfRangeError, match="offset 29 is below the log start offset 30"):
            reader.read(29, 1)
        assert reader.read(30, 1)[0].offset == 30


def test_find_offset_by_timestamp(fs_env: TieringEnv) -> None:
    w = build(fs_env)
    expected = local_records(w)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        reader = open_reader(ctx, w.tp)
        for target in (
            expected[0].timestamp - 1,
            expected[3].timestamp,
            expected[40].timestamp + 1,
            expected[-1].timestamp,
        ):
            want = next(r for r in expected if r.timestamp >= target)
            found = reader.offset_for_timestamp(target)
            assert found is not None
            assert (found.offset, found.timestamp) == (want.offset, want.timestamp)
            assert found.leader_epoch == want.leader_epoch
        assert reader.offset_for_timestamp(expected[-1].timestamp + 1) is None  # only the broker has newer records
        # A starting offset bounds the answer from below, as ListOffsets' does.
        later = reader.offset_for_timestamp(expected[0].timestamp, starting_offset=50)
        assert later is not None and later.offset == 50


def test_damaged_stored_indexes_are_not_used_and_reads_stay_correct(
    fs_env: TieringEnv, caplog: pytest.LogCaptureFixture
) -> None:
    w = build(fs_env)
    expected = local_records(w)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        segments = [s for s in ctx.metadata.list_segments(tip_of(w)) if s.state.name == "COPY_SEGMENT_FINISHED"]
        storage = ctx.storage
        storage.delete_keys([segment_ref(segments[0]).key(ObjectKind.OFFSET_INDEX, storage.prefix)])
        index_key = segment_ref(segments[2]).key(ObjectKind.OFFSET_INDEX, storage.prefix)
        damaged = bytearray(storage.fetch(segment_ref(segments[2]), ObjectKind.OFFSET_INDEX))
        damaged[7] ^= 0x40  # a wrong position would seek into the middle of a batch
        storage.put_object(index_key, bytes(damaged))
        with caplog.at_level(logging.WARNING, logger="tiering_core.read.reader"):
            reader = open_reader(ctx, w.tp)
            for start in (5, segments[2].start_offset + 9):
                got = reader.read(start, 5)
                assert [r.offset for r in got] == [r.offset for r in expected if r.offset >= start][:5]
    assert f"stored index of segment {segments[0].segment_id} is missing" in caplog.text
    assert f"({segments[2].segment_id}): index chunk 0: crc32c" in caplog.text


def test_after_an_unclean_election_reads_follow_the_new_lineage(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    w.append_records(100)
    w.become_leader(1)
    w.append_records(100)
    w.roll()  # [0..199] epochs {0:0, 1:100}, copied below
    w.append_records(5)
    w.set_high_watermark()
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
    w.truncate_to(150)  # unclean election: the new leader's epoch 1 ends at 149
    w.become_leader(2)
    w.append_records(60, key_prefix="new")
    w.roll()
    w.append_records(5)
    w.set_high_watermark()
    expected = local_records(w)
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        reader = open_reader(ctx, w.tp)
        divergent = next(s for s in ctx.metadata.list_segments(tip_of(w)) if s.end_offset == 199)
        assert divergent.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED  # still stored, never served
        got = reader.read(140, 30)
        assert [(r.offset, r.key, r.leader_epoch) for r in got] == [
            (r.offset, r.key, r.leader_epoch) for r in expected if r.offset >= 140
        ][:30]
        assert got[10].key == b"new-0" and got[10].leader_epoch == 2
        found = reader.offset_for_timestamp(next(r.timestamp for r in expected if r.offset == 150))
        assert found is not None and (found.offset, found.leader_epoch) == (150, 2)


def test_a_replica_behind_the_lineage_reads_the_recorded_lineage_and_copies_nothing(tiering_env: TieringEnv) -> None:
    """A killed old leader's files (as a real cluster leaves them) still run epoch 1 on past the
    point where an unclean election cut it: its cache is behind the recorded lineage, so the
    platform beside that node reads the recorded lineage, never the divergent records, and copies
    nothing from it (the cache alone once won from its first start on, serving them)."""
    w = tiering_env.writer()
    w.append_records(100)
    w.become_leader(1)
    w.append_records(100)
    w.roll()
    w.append_records(100)
    w.roll()  # [0..199] {0:0, 1:100}, [200..299] {1:200}
    w.append_records(5)
    w.set_high_watermark()
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
    stale = replace(tiering_env, log_dir=tiering_env.root / "stale-logs", config_path=tiering_env.root / "stale.yaml")
    shutil.copytree(tiering_env.log_dir, stale.log_dir)  # the killed old leader's node
    stale.write_config()
    w.truncate_to(150)  # the out-of-sync replica elected uncleanly: epoch 1 ends at 149
    w.become_leader(2)
    w.append_records(60, key_prefix="new")
    w.roll()
    w.append_records(5)
    w.set_high_watermark()
    expected = local_records(w)
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        lineage = ctx.metadata.get_recorded_lineage(tip_of(w))
    with stale.context() as ctx:
        got = open_reader(ctx, w.tp).read(140, 30)
        assert [(r.offset, r.key, r.leader_epoch) for r in got] == [
            (r.offset, r.key, r.leader_epoch) for r in expected if r.offset >= 140
        ][:30]
        result = run_copy(ctx, w.tp)
        assert result.segments_copied == 0 and "behind the recorded lineage" in (result.skipped_reason or "")
        assert run_copy(ctx, w.tp, dry_run=True).skipped_reason == result.skipped_reason
        assert ctx.metadata.get_recorded_lineage(tip_of(w)) == lineage


def test_a_partition_whose_broker_directory_is_gone_is_read_from_the_tier_alone(fs_env: TieringEnv) -> None:
    """The broker deleted or moved the directory: what was tiered of it is still served (as replay
    serves a deleted topic), and a partition the tier never held is still refused by name."""
    w = build(fs_env)
    expected = local_records(w)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        before = open_reader(ctx, w.tp).read(0, 1000)
        found = open_reader(ctx, w.tp).offset_for_timestamp(expected[3].timestamp)
    shutil.rmtree(w.path)
    with fs_env.context() as ctx:
        reader = open_reader(ctx, w.tp)
        assert reader.read(0, 1000) == before and [r.offset for r in before] == [r.offset for r in expected]
        assert reader.offset_for_timestamp(expected[3].timestamp) == found
        with pytest.raises(TieringError, match="partition orders-7 is not in the log dirs"):
            open_reader(ctx, TopicPartition("orders", 7))
