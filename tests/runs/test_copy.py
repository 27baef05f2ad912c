"""The copy engine (docs/kafka-rules.md section 5 with 10) on real log dirs, S3 via moto, SQLite and PostgreSQL."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.engine_support import (
    TieringEnv,
    assert_manifest_holds_the_segment,
    assert_partition_state_published,
    expire_lease,
    segment_objects,
    tip_of,
    wait_until,
    write_segments,
)
from tiering_core.errors import CorruptLogError, TieringError, TieringGapError
from tiering_core.events import RunEvent
from tiering_core.kafka.checkpoints import parse_leader_epoch_checkpoint
from tiering_core.kafka.epoch import EpochEntry
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.metadata.store import RemoteLogMetadataStore
from tiering_core.read.reader import open_reader
from tiering_core.report.lines import event_line
from tiering_core.runs.copy import run_copy
from tiering_core.runs.delete_records import apply_delete_records
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef
from tiering_core.storage.partition_state import partition_state_key
from tiering_core.tier.status import collect_status

ROOT = Path(__file__).resolve().parents[2]
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def finished_ranges(env: TieringEnv, writer) -> list[tuple[int, int]]:
    with env.context() as ctx:
        return [
            (s.start_offset, s.end_offset) for s in ctx.metadata.list_segments(tip_of(writer)) if s.state == FINISHED
        ]


def short_lease(env: TieringEnv) -> None:
    """Leases of 3 s, so a test can outlast one in a few seconds; renewed every second, a live
    run keeps it through stalls of a busy machine (a lease that must lapse is expired on purpose)."""
    env.config_path.write_text(env.config_path.read_text().replace("lease_ms: 30000", "lease_ms: 3000"))


def copy(env: TieringEnv, writer):
    with env.context() as ctx:
        return run_copy(ctx, writer.tp)


def test_only_segments_whose_next_base_is_at_or_below_lso(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    write_segments(w, 3)  # bases 0, 5, 10; active 15
    w.append_records(5)  # LEO 20
    w.delete_oldest_segments(1)  # bases 5, 10, 15 (15 active)
    w.set_high_watermark(20)
    result = copy(tiering_env, w)
    assert finished_ranges(tiering_env, w) == [(5, 9), (10, 14)]
    assert (result.segments_copied, result.highest_copied_offset) == (2, 14)
    assert result.gaps == []  # what the broker dropped before tiering began is history


def test_segment_straddling_the_lso_waits(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    write_segments(w, 4)  # 0, 5, 10, 15; active 20
    w.append_records(5)
    w.delete_oldest_segments(1)
    w.set_high_watermark(15)
    copy(tiering_env, w)
    assert finished_ranges(tiering_env, w) == [(5, 9), (10, 14)]


def test_lso_at_leo_copies_everything_but_the_active_segment(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    w.append_records(150)
    w.roll()
    w.set_high_watermark(150)
    copy(tiering_env, w)
    assert finished_ranges(tiering_env, w) == [(0, 149)]


def test_lso_zero_copies_nothing(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    write_segments(w, 3)
    w.set_high_watermark(0)
    assert copy(tiering_env, w).segments_copied == 0
    assert finished_ranges(tiering_env, w) == []


def test_segment_leader_epochs_and_epoch_index(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    w.append_records(100)
    w.become_leader(1)
    w.append_records(50)
    w.roll()  # segment [0..149]; active 150
    w.append_records(50)
    w.become_leader(2)
    w.append_records(50)
    w.set_high_watermark(250)
    copy(tiering_env, w)
    with tiering_env.context() as ctx:
        (segment,) = ctx.metadata.list_segments(tip_of(w))
        assert (segment.start_offset, segment.end_offset, segment.leader_epochs) == (0, 149, {0: 0, 1: 100})
        ref = RemoteSegmentRef(tip_of(w), 0, segment.segment_id)
        index = ctx.storage.fetch(ref, ObjectKind.LEADER_EPOCH_CHECKPOINT).decode()
    entries = parse_leader_epoch_checkpoint(index, Path("remote"))
    assert [(e.epoch, e.start_offset) for e in entries] == [(0, 0), (1, 100)]


def test_each_manifest_carries_its_segments_metadata_and_epoch_index(tiering_env: TieringEnv) -> None:
    """What the store's row of each segment says, its manifest says too: its end offset, max
    timestamp and leader epochs, and as its epoch index the leader-epoch checkpoint it uploaded
    (the lineage up to the next segment's base, which the store merged into its own)."""
    w = tiering_env.writer()
    w.append_records(100)
    w.become_leader(1)
    w.append_records(50)
    w.roll()  # [0..149]: epochs 0 and 1
    w.append_records(30)
    w.become_leader(3)
    w.append_records(20)
    w.roll()  # [150..199]: epochs 1 and 3
    w.append_records(5)
    w.set_high_watermark()
    copy(tiering_env, w)
    with tiering_env.context() as ctx:
        segments = sorted(ctx.metadata.list_segments(tip_of(w)), key=lambda s: s.start_offset)
        facts = [assert_manifest_holds_the_segment(ctx, s) for s in segments]
        lineage = ctx.metadata.get_recorded_lineage(tip_of(w))
    assert [(s.start_offset, s.end_offset) for s in segments] == [(0, 149), (150, 199)]
    assert [f.leader_epochs for f in facts] == [
        (EpochEntry(0, 0), EpochEntry(1, 100)),
        (EpochEntry(1, 150), EpochEntry(3, 180)),
    ]
    assert [f.epoch_index for f in facts] == [
        (EpochEntry(0, 0), EpochEntry(1, 100)),
        (EpochEntry(0, 0), EpochEntry(1, 100), EpochEntry(3, 180)),
    ]
    assert lineage == list(facts[-1].epoch_index)


def test_the_first_finished_copy_publishes_the_partitions_state(tiering_env: TieringEnv) -> None:
    """Its remote log start is set by the first segment copied: the state object says so from then
    on. Later copies change none of its values and do not write it again."""
    w = tiering_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    with tiering_env.context() as ctx:
        assert ctx.storage.read_partition_state(tip_of(w)) is None
    copy(tiering_env, w)
    with tiering_env.context() as ctx:
        first = assert_partition_state_published(ctx, tip_of(w))
    assert (first.remote_log_start_offset, first.delete_records_offset, first.gaps) == (0, None, ())
    write_segments(w, 1)
    w.set_high_watermark()
    assert copy(tiering_env, w).segments_copied == 1
    with tiering_env.context() as ctx:
        again = ctx.storage.read_partition_state(tip_of(w))
    assert again == first and again is not None and again.updated_at_ms == first.updated_at_ms


def test_open_transaction_holds_back_segments_until_it_ends(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    write_segments(w, 2)  # [0..4], [5..9]
    _first, _ = w.append([(b"t", b"1")], producer_id=42, transactional=True)  # offset 10
    w.append_records(4)
    w.roll()  # [10..14]
    write_segments(w, 1)  # [15..19]
    w.set_high_watermark()
    copy(tiering_env, w)
    assert finished_ranges(tiering_env, w) == [(0, 4), (5, 9)]
    w.commit(42)
    w.roll()
    w.set_high_watermark()
    copy(tiering_env, w)
    assert finished_ranges(tiering_env, w) == [(0, 4), (5, 9), (10, 14), (15, 19), (20, 20)]  # 20: the marker


def test_transaction_opened_mid_segment_and_aborted(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    write_segments(w, 2)  # [0..4], [5..9]
    w.append_records(2)  # 10, 11
    first, _ = w.append([(b"t", b"1")], producer_id=7, transactional=True)  # 12: opens a transaction
    w.append_records(2)
    w.roll()  # [10..14] holds the open transaction's first offset
    write_segments(w, 1)  # [15..19]
    w.set_high_watermark()
    with tiering_env.context() as ctx:
        assert ctx.partitions("orders", 0)[0].last_stable_offset == first == 12
    copy(tiering_env, w)
    assert finished_ranges(tiering_env, w) == [(0, 4), (5, 9)]  # [10..14] straddles the LSO: it waits
    w.abort(7)
    w.roll()
    w.set_high_watermark()
    copy(tiering_env, w)
    assert finished_ranges(tiering_env, w) == [(0, 4), (5, 9), (10, 14), (15, 19), (20, 20)]
    with tiering_env.context() as ctx:
        (segment,) = [s for s in ctx.metadata.list_segments(tip_of(w)) if s.start_offset == 20]
        txn = ctx.storage.fetch(RemoteSegmentRef(tip_of(w), 20, segment.segment_id), ObjectKind.TRANSACTION_INDEX)
    assert txn == (w.path / "00000000000000000020.txnindex").read_bytes() != b""


def test_reruns_new_rolls_and_delete_records(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    assert copy(tiering_env, w).segments_copied == 2
    assert copy(tiering_env, w).segments_copied == 0
    write_segments(w, 1)
    w.set_high_watermark()
    second = copy(tiering_env, w)
    assert second.segments_copied == 1 and finished_ranges(tiering_env, w)[-1] == (10, 14)
    write_segments(w, 3)  # [15..19], [20..24], [25..29]
    w.set_high_watermark()
    with tiering_env.context() as ctx:  # a DeleteRecords past uncopied segments, through the platform
        apply_delete_records(ctx, w.tp, 22)
    w.delete_records(22)  # which the cluster applies too
    third = copy(tiering_env, w)
    assert third.gaps == []
    assert finished_ranges(tiering_env, w)[-2:] == [(20, 24), (25, 29)]
    assert (15, 19) not in finished_ranges(tiering_env, w)


def test_copy_never_starts_below_a_delete_records_applied_through_the_platform(fs_env: TieringEnv) -> None:
    """Without a kafka: section the broker's files still hold the records below it: nothing there is
    tiered (it would only be deleted again), and no gap is recorded."""
    w = fs_env.writer()
    write_segments(w, 1)
    w.set_high_watermark()
    assert copy(fs_env, w).segments_copied == 1  # [0..4]
    write_segments(w, 3)  # [5..9], [10..14], [15..19]
    w.set_high_watermark()
    with fs_env.context() as ctx:
        assert apply_delete_records(ctx, w.tp, 12).log_start_offset == 12
    result = copy(fs_env, w)
    assert (result.segments_copied, result.gaps) == (2, [])
    assert finished_ranges(fs_env, w) == [(0, 4), (10, 14), (15, 19)]


def test_a_delete_records_made_on_the_cluster_past_uncopied_segments_is_a_tiering_gap(
    tiering_env: TieringEnv,
) -> None:
    """Made directly on the cluster, not through the platform, a DeleteRecords is only the broker's
    log start moving: what it removed before it was tiered is a gap, recorded and failing the run."""
    w = tiering_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    assert copy(tiering_env, w).segments_copied == 2
    write_segments(w, 3)  # [10..14], [15..19], [20..24]
    w.set_high_watermark()
    w.delete_records(17)
    with pytest.raises(TieringGapError, match=r"offsets 10\.\.16"):
        copy(tiering_env, w)
    assert finished_ranges(tiering_env, w) == [(0, 4), (5, 9), (15, 19), (20, 24)]
    with tiering_env.context() as ctx:
        (row,) = collect_status(ctx, "orders", 0)
        assert ctx.metadata.get_delete_records_offset(tip_of(w)) is None
        # [15..19] holds 15 and 16 in its .log but its epochs start at 17: reads skip the gap only.
        reader = open_reader(ctx, w.tp)
        assert [r.offset for r in reader.read(0, 100)] == [*range(10), *range(17, 25)]
        assert [r.offset for r in reader.read(12, 100)] == list(range(17, 25))
    assert row.gaps == [[10, 16]] and row.remote_log_start_offset == 0


def test_a_first_copy_after_a_delete_records_on_the_cluster_starts_the_tier_at_the_log_start(
    fs_env: TieringEnv,
) -> None:
    """Nothing tiered yet, the broker's log start moved inside a segment (and its epoch cache with it):
    the segment holding it is copied, with epochs from there, and the remote tier starts there too."""
    from tiering_core.read.reader import OffsetOutOfRangeError

    w = fs_env.writer()
    write_segments(w, 3)  # [0..4], [5..9], [10..14]
    w.append_records(2)
    w.set_high_watermark()
    w.delete_records(7)
    assert copy(fs_env, w).segments_copied == 2
    with fs_env.context() as ctx:
        segments = ctx.metadata.list_segments(tip_of(w))
        assert [(s.start_offset, s.leader_epochs) for s in segments] == [(5, {0: 7}), (10, {0: 10})]
        (row,) = collect_status(ctx, "orders", 0)
        assert (row.remote_log_start_offset, row.log_start_offset, row.gaps) == (7, 7, [])
        reader = open_reader(ctx, w.tp)
        assert [r.offset for r in reader.read(7, 100)] == list(range(7, 15))
        with pytest.raises(OffsetOutOfRangeError, match="offset 5 is below the log start offset 7"):
            reader.read(5, 100)


def test_a_segment_copied_after_a_delete_records_inside_it_has_epochs_from_the_log_start(
    fs_env: TieringEnv,
) -> None:
    """Kafka's epochEntriesInRange of the broker's cache as it is (truncated from the start at the
    new log start): {3: 158} for the segment [156..205], not {3: 156}; the recorded lineage keeps
    epoch 3 from 100, and reads and retention take the segment as within it."""
    from tiering_core.runs.retention import run_retention

    w = fs_env.writer()
    w.append_records(100)
    w.roll()  # [0..99] epoch 0
    w.become_leader(3)
    w.append_records(56)
    w.roll()  # [100..155] epoch 3
    w.set_high_watermark()
    assert copy(fs_env, w).segments_copied == 2
    w.append_records(50)
    w.roll()  # [156..205]
    w.append_records(3)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        apply_delete_records(ctx, w.tp, 158)
    w.delete_records(158)  # the broker's cache: {3: 158}
    assert [(e.epoch, e.start_offset) for e in w.epochs.entries] == [(3, 158)]
    assert copy(fs_env, w).segments_copied == 1
    with fs_env.context() as ctx:
        segments = ctx.metadata.list_segments(tip_of(w))
        assert [(s.start_offset, s.end_offset, s.leader_epochs) for s in segments] == [
            (0, 99, {0: 0}),
            (100, 155, {3: 100}),
            (156, 205, {3: 158}),
        ]
        assert [(e.epoch, e.start_offset) for e in ctx.metadata.get_recorded_lineage(tip_of(w))] == [(0, 0), (3, 100)]
        assert [r.offset for r in open_reader(ctx, w.tp).read(158, 100)] == list(range(158, 206))
        result = run_retention(ctx, w.tp)
    assert [(p["start_offset"], p["reason"]) for p in result.planned] == [
        (0, "epochs-older-than-lineage"),
        (100, "log-start-offset-breach"),
    ]
    assert finished_ranges(fs_env, w) == [(156, 205)]


def test_unclean_election_resumes_from_the_new_lineage(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    w.append_records(100)
    w.become_leader(1)
    w.append_records(100)
    w.roll()  # [0..199], epochs {0:0, 1:100}
    w.append_records(10)
    w.set_high_watermark()
    copy(tiering_env, w)
    assert finished_ranges(tiering_env, w) == [(0, 199)]
    # Unclean election: the new leader had epoch 1 only up to 149 and starts epoch 2 at 150.
    w.truncate_to(150)
    w.become_leader(2)
    w.append_records(60)
    w.roll()  # [150..209] under epoch 2
    w.append_records(5)
    w.set_high_watermark()
    with tiering_env.context() as ctx:
        from tiering_core.tier.view import load_tier_view

        view = load_tier_view(ctx.partitions("orders", 0)[0], ctx.metadata)
        assert view.highest_copied_offset == 149  # end(epoch 1) - 1, not the 199 remote holds
    copy(tiering_env, w)
    # The resume point 150 falls inside the new segment [0..209]: it is uploaded whole again.
    assert finished_ranges(tiering_env, w) == [(0, 199), (0, 209)]
    with tiering_env.context() as ctx:
        newest = ctx.metadata.list_segments(tip_of(w))[-1]
        assert newest.leader_epochs == {0: 0, 1: 100, 2: 150}
        assert ctx.metadata.segment_for(tip_of(w), 2, 160) == newest


def test_every_finished_segment_matches_manifest_and_local_files(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer(index_interval_bytes=128)
    w.append([(b"t", b"x")], producer_id=5, transactional=True)
    w.abort(5)
    write_segments(w, 3, records=40)
    w.set_high_watermark()
    copy(tiering_env, w)
    with tiering_env.context() as ctx:
        segments = ctx.metadata.list_segments(tip_of(w))
        assert len(segments) == 3
        for s in segments:
            ref = RemoteSegmentRef(tip_of(w), s.start_offset, s.segment_id)
            assert ctx.storage.verify_segment(ref) == []
            stem = w.path / f"{s.start_offset:020d}"
            assert ctx.storage.fetch(ref, ObjectKind.LOG) == stem.with_suffix(".log").read_bytes()
            assert ctx.storage.fetch(ref, ObjectKind.OFFSET_INDEX) == stem.with_suffix(".index").read_bytes()
            assert ctx.storage.fetch(ref, ObjectKind.TIME_INDEX) == stem.with_suffix(".timeindex").read_bytes()
            snapshot = w.path / f"{s.end_offset + 1:020d}.snapshot"
            assert ctx.storage.fetch(ref, ObjectKind.PRODUCER_SNAPSHOT) == snapshot.read_bytes()
        first = segments[0]
        txn = ctx.storage.fetch(RemoteSegmentRef(tip_of(w), 0, first.segment_id), ObjectKind.TRANSACTION_INDEX)
        assert txn == (w.path / "00000000000000000000.txnindex").read_bytes()


def test_missing_index_is_rebuilt_and_crc_failure_is_named(tiering_env: TieringEnv) -> None:
    tiering_env.write_config(orders={"index.interval.bytes": 64})
    w = tiering_env.writer(index_interval_bytes=64)
    write_segments(w, 2, records=30)
    w.set_high_watermark()
    original = (w.path / "00000000000000000000.index").read_bytes()
    (w.path / "00000000000000000000.index").unlink()
    log1 = w.path / "00000000000000000030.log"
    data = bytearray(log1.read_bytes())
    data[100] ^= 0xFF
    log1.write_bytes(bytes(data))
    with tiering_env.context() as ctx:
        with pytest.raises(CorruptLogError, match=r"segment 30 not copied.*CRC mismatch"):
            run_copy(ctx, w.tp)
        (segment,) = [s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED]
        ref = RemoteSegmentRef(tip_of(w), 0, segment.segment_id)
        assert ctx.storage.fetch(ref, ObjectKind.OFFSET_INDEX) == original
        keys = [o.key for o in ctx.storage.list_objects(tip_of(w))]
        assert all("00000000000000000030-" not in k for k in keys)


def test_broker_retention_after_copy_and_gap_before_copy(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    copy(tiering_env, w)
    w.delete_oldest_segments(2)  # already copied: harmless
    write_segments(w, 1)
    w.set_high_watermark()
    assert copy(tiering_env, w).segments_copied == 1
    write_segments(w, 3)  # [20..24], [25..29], [30..34]
    w.set_high_watermark()
    w.delete_oldest_segments(3)  # drops [10..14] (copied), [15..19] (copied) and [20..24] (NOT copied)
    with tiering_env.context() as ctx:
        (row,) = collect_status(ctx, "orders", 0)
        assert row.gaps == [[20, 24]]  # shown before any copy ran: a gap never waits to be seen
        assert ctx.metadata.list_gaps(tip_of(w)) == []  # status only reads
    with tiering_env.context() as ctx, pytest.raises(TieringGapError, match=r"20\.\.24") as err:
        run_copy(ctx, w.tp)
    assert err.value.result is not None and err.value.result.segments_copied == 2
    with tiering_env.context() as ctx:
        (row,) = collect_status(ctx, "orders", 0)
        assert row.gaps == [[20, 24]]
    assert finished_ranges(tiering_env, w)[-2:] == [(25, 29), (30, 34)]


KILL_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    import tiering_core.runs.copy as copy_mod
    from tiering_core.config import load_config
    from tiering_core.context import TieringContext
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.storage.layout import ObjectKind

    def upload_then_die(storage, upload):  # the .log is up, the rest (and the manifest) never comes
        storage.put_object(upload.ref.key(ObjectKind.LOG, storage.prefix), upload.files[ObjectKind.LOG])
        os.kill(os.getpid(), signal.SIGKILL)

    with TieringContext.open(load_config(sys.argv[1])) as ctx:
        copy_mod.run_copy(ctx, TopicPartition("orders", 0), uploader=upload_then_die)
    """
)


def test_process_killed_mid_copy_is_repaired_by_the_next_run(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    tiering_env.write_config()
    proc = subprocess.run(
        [sys.executable, "-c", KILL_SCRIPT, str(tiering_env.config_path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    with tiering_env.context() as ctx:
        (orphan,) = ctx.metadata.list_segments(tip_of(w))
        assert orphan.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED
        assert [o.key.rsplit(".", 1)[1] for o in ctx.storage.list_objects(tip_of(w))] == ["log"]  # nothing else
        expire_lease(ctx.metadata, tip_of(w))  # the killed run's lease lapses
    result = copy(tiering_env, w)
    assert result.segments_cleaned_up == 1 and result.segments_copied == 2
    with tiering_env.context() as ctx:
        segments = ctx.metadata.list_segments(tip_of(w))
        assert [(s.start_offset, s.state) for s in segments] == [(0, FINISHED), (5, FINISHED)]
        assert orphan.segment_id not in {s.segment_id for s in segments}
        referenced = {str(s.segment_id) for s in segments}
        for obj in segment_objects(ctx, tip_of(w)):
            assert any(sid in obj.key for sid in referenced), f"orphaned object {obj.key}"
        assert_partition_state_published(ctx, tip_of(w))


SLOW_SCRIPT = textwrap.dedent(
    """
    import sys
    import tiering_core.runs.copy as copy_mod
    from tiering_core.config import load_config
    from tiering_core.context import TieringContext
    from tiering_core.kafka.topic import TopicPartition

    original = copy_mod.upload_segment
    waited = []

    def slow_upload(storage, upload):  # the first upload goes on once the test says so (or its stdin ends)
        if not waited:
            print("uploading", flush=True)
            waited.append(sys.stdin.readline())
        return original(storage, upload)

    with TieringContext.open(load_config(sys.argv[1])) as ctx:
        result = copy_mod.run_copy(ctx, TopicPartition("orders", 0), uploader=slow_upload)
    print("copied", result.segments_copied, "fenced", result.fenced, flush=True)
    """
)


def test_concurrent_runs_one_copies_the_other_is_fenced(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_SCRIPT, str(tiering_env.config_path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "uploading"  # and it waits, holding the lease
    second = copy(tiering_env, w)
    assert second.fenced and second.segments_copied == 0
    out, _ = proc.communicate("go on\n", timeout=120)
    assert proc.returncode == 0 and "copied 2 fenced False" in out
    assert finished_ranges(tiering_env, w) == [(0, 4), (5, 9)]
    with tiering_env.context() as ctx:
        assert len(segment_objects(ctx, tip_of(w))) == 2 * 7  # log, 2 indexes, snapshot, epochs, key filter, manifest
        assert_partition_state_published(ctx, tip_of(w))


def test_filesystem_backend_copy(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    assert copy(fs_env, w).segments_copied == 2
    assert finished_ranges(fs_env, w) == [(0, 4), (5, 9)]


def test_dry_run_changes_nothing(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    with tiering_env.context() as ctx:
        result = run_copy(ctx, w.tp, dry_run=True)
        assert [p["base_offset"] for p in result.planned] == [0, 5]
        assert ctx.metadata.list_segments(tip_of(w)) == []
        assert ctx.storage.list_objects(tip_of(w)) == []


# --- crash windows, leases and faults around the finish step -------------------------------

FINISH_THEN_DIE = textwrap.dedent(
    """
    import os, signal, sys
    from tiering_core.config import load_config
    from tiering_core.context import TieringContext
    from tiering_core.runs.copy import run_copy
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.metadata.store import RemoteLogMetadataStore

    original = RemoteLogMetadataStore.finish_copied_segment

    def finish_then_die(self, *args, **kwargs):
        finished = original(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)  # right after the first segment's finish committed
        return finished

    RemoteLogMetadataStore.finish_copied_segment = finish_then_die
    with TieringContext.open(load_config(sys.argv[1])) as ctx:
        run_copy(ctx, TopicPartition("orders", 0))
    """
)


def test_killed_right_after_the_first_finish_loses_nothing_to_retention(tiering_env: TieringEnv) -> None:
    """FINISHED, the lineage and the remote log start land together: a kill after the first
    segment finished cannot leave it outside the lineage, where retention would delete it."""
    from tiering_core.runs.retention import run_retention
    from tiering_core.tier.view import is_in_lineage, load_tier_view

    w = tiering_env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    proc = subprocess.run(
        [sys.executable, "-c", FINISH_THEN_DIE, str(tiering_env.config_path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    assert finished_ranges(tiering_env, w) == [(0, 4)]
    with tiering_env.context() as ctx:
        expire_lease(ctx.metadata, tip_of(w))  # the killed run's lease lapses
    assert copy(tiering_env, w).segments_copied == 2
    with tiering_env.context() as ctx:
        assert ctx.metadata.get_remote_log_start_offset(tip_of(w)) == 0
        assert run_retention(ctx, w.tp).segments_deleted == 0  # unlimited retention: nothing goes
        view = load_tier_view(ctx.partitions("orders", 0)[0], ctx.metadata)
        assert all(is_in_lineage(view, s) for s in ctx.metadata.list_segments(tip_of(w)))
    assert finished_ranges(tiering_env, w) == [(0, 4), (5, 9), (10, 14)]


def test_unset_remote_log_start_is_repaired_to_the_first_finished_segment(tiering_env: TieringEnv) -> None:
    """A store written apart (FINISHED recorded, remote log start not) is repaired by the next
    copy run to the lowest finished start offset, never to the start of the segment it copies."""
    import sqlalchemy as sa

    from tiering_core.runs.retention import run_retention

    w = tiering_env.writer()
    write_segments(w, 1)
    w.set_high_watermark()
    copy(tiering_env, w)
    engine = sa.create_engine(tiering_env.metadata_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE tiering_partitions SET remote_log_start_offset = NULL"))
    engine.dispose()
    with tiering_env.context() as ctx:  # and, as that release, no partition-state.json
        ctx.storage.delete_keys([partition_state_key(tip_of(w), ctx.storage.prefix)])
    write_segments(w, 1)
    w.set_high_watermark()
    assert copy(tiering_env, w).segments_copied == 1
    with tiering_env.context() as ctx:
        assert ctx.metadata.get_remote_log_start_offset(tip_of(w)) == 0
        assert assert_partition_state_published(ctx, tip_of(w)).remote_log_start_offset == 0  # the repair's
        assert run_retention(ctx, w.tp).segments_deleted == 0
    assert finished_ranges(tiering_env, w) == [(0, 4), (5, 9)]


def _uploads_outliving_the_lease(store: RemoteLogMetadataStore, tip: TopicIdPartition):
    """Uploads slower than the lease's time to live: each ends only once the store's clock has
    passed the expiry the lease had when the upload began."""
    from tiering_core.runs.segment_copy import upload_segment

    def slow(storage, upload):
        lease = store.current_lease(tip)
        assert lease is not None
        wait_until(lambda: store.database_now_ms() > lease.expires_at_ms, what="the lease's time to live to pass")
        return upload_segment(storage, upload)

    return slow


def _uploads_losing_the_lease(store: RemoteLogMetadataStore, tip: TopicIdPartition):
    """Uploads under which the lease lapses (the run stalled longer than its time to live)."""
    from tiering_core.runs.segment_copy import upload_segment

    def lapsing(storage, upload):
        expire_lease(store, tip)
        return upload_segment(storage, upload)

    return lapsing


def test_the_lease_is_kept_alive_during_an_upload_longer_than_its_ttl(
    tiering_env: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = tiering_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    short_lease(tiering_env)
    with tiering_env.context() as ctx:
        result = run_copy(ctx, w.tp, uploader=_uploads_outliving_the_lease(ctx.metadata, tip_of(w)))
    assert (result.segments_copied, result.fenced) == (2, False)
    assert finished_ranges(tiering_env, w) == [(0, 4), (5, 9)]


def _stalled_heartbeat(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that stops renewing (a stalled process): the heartbeat never beats."""
    import tiering_core.engine.lease as lease_mod

    monkeypatch.setattr(lease_mod, "renew_interval", lambda lease_ms: 3600.0)


def test_a_lease_that_expires_under_a_stalled_run_fails_it_loudly(
    tiering_env: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tiering_core.runs.errors import CopyFailedError

    w = tiering_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    _stalled_heartbeat(monkeypatch)
    with tiering_env.context() as ctx, pytest.raises(CopyFailedError, match=r"lease expired while copying segment 0"):
        run_copy(ctx, w.tp, uploader=_uploads_losing_the_lease(ctx.metadata, tip_of(w)))
    with tiering_env.context() as ctx:
        assert [s.state for s in ctx.metadata.list_segments(tip_of(w))] == [RemoteLogSegmentState.COPY_SEGMENT_STARTED]
        assert ctx.storage.list_objects(tip_of(w)) == []  # the upload's objects were deleted
    monkeypatch.undo()
    result = copy(tiering_env, w)
    assert (result.segments_cleaned_up, result.segments_copied) == (1, 2)


def test_a_run_fenced_mid_copy_by_a_newer_run_stops_quietly(
    tiering_env: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tiering_core.runs.copy as copy_mod

    w = tiering_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    _stalled_heartbeat(monkeypatch)
    original = copy_mod.upload_segment
    newer: dict[str, object] = {}

    def upload_while_a_newer_run_takes_over(storage, upload):
        manifest = original(storage, upload)
        if "lease" not in newer:
            with tiering_env.context() as other:  # our lease lapses, and a newer run takes the partition
                expire_lease(other.metadata, tip_of(w))
                newer["lease"] = other.metadata.acquire_lease(tip_of(w), holder="copy:newer")
        return manifest

    with tiering_env.context() as ctx:
        result = run_copy(ctx, w.tp, uploader=upload_while_a_newer_run_takes_over)
    assert (result.fenced, result.segments_copied) == (True, 0)
    with tiering_env.context() as ctx:
        assert ctx.storage.list_objects(tip_of(w)) == []  # the fenced run deleted what it uploaded
        ctx.metadata.release_lease(newer["lease"])  # type: ignore[arg-type]
    monkeypatch.undo()
    result = copy(tiering_env, w)
    assert (result.segments_cleaned_up, result.segments_copied) == (1, 2)
    assert finished_ranges(tiering_env, w) == [(0, 4), (5, 9)]


def test_storage_down_during_cleanup_keeps_the_upload_error(
    tiering_env: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tiering_core.runs.errors import CopyFailedError
    from tiering_core.storage.errors import RemoteStorageError

    w = tiering_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()

    def failing_upload(storage, upload):
        raise RemoteStorageError("injected: upload refused (503)")

    def failing_delete(self, ref):
        raise RemoteStorageError("injected: delete refused (503)")

    with tiering_env.context() as ctx:
        monkeypatch.setattr(type(ctx.storage), "delete_segment", failing_delete)
        with pytest.raises(CopyFailedError, match=r"copying segment 0 failed.*upload refused"):
            run_copy(ctx, w.tp, uploader=failing_upload)
        assert [s.state for s in ctx.metadata.list_segments(tip_of(w))] == [
            RemoteLogSegmentState.DELETE_SEGMENT_STARTED
        ]
    monkeypatch.undo()
    result = copy(tiering_env, w)  # the next run finishes the deletion, then copies
    assert (result.segments_cleaned_up, result.segments_copied) == (1, 2)
    assert finished_ranges(tiering_env, w) == [(0, 4), (5, 9)]


def test_a_manifest_its_readers_would_refuse_is_never_written(
    tiering_env: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The readers' bound lowered for the test (as a 2 GiB log at 1 KiB chunks would meet it):
    the copy fails naming remote.chunk_size, and neither a finished segment nor an object stays."""
    import tiering_core.storage.remote as remote_storage
    from tiering_core.runs.errors import CopyFailedError

    tiering_env.remote.update(compression="zstd", chunk_size=8192)
    tiering_env.write_config()
    w = tiering_env.writer()
    write_segments(w, 2, records=200)
    w.set_high_watermark()
    monkeypatch.setattr(remote_storage, "MAX_MANIFEST_BYTES", 1000)
    with tiering_env.context() as ctx:
        with pytest.raises(CopyFailedError, match=r"copying segment 0 failed") as failed:
            run_copy(ctx, w.tp)
        assert re.search(
            r"segment 0 \(.*\): its manifest would be \d+ bytes, above the 1000 B readers accept: "
            r"raise remote.chunk_size \(now 8192\)",
            str(failed.value),
        )
        assert ctx.metadata.list_segments(tip_of(w)) == []  # abandoned: none listed, none finished
        assert ctx.storage.list_objects(tip_of(w)) == []


def test_broker_deleting_a_segment_while_it_is_copied_records_the_gap(
    tiering_env: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tiering_core.runs.copy as copy_mod

    w = tiering_env.writer()
    write_segments(w, 3)  # [0..4], [5..9], [10..14]
    w.set_high_watermark()
    original = copy_mod.upload_segment

    def upload_while_broker_retention_runs(storage, upload):
        manifest = original(storage, upload)
        if upload.metadata.start_offset == 0:
            w.delete_oldest_segments(2, async_delete=True)  # [0..4] (being copied) and [5..9] (not yet)
        return manifest

    with tiering_env.context() as ctx, pytest.raises(TieringGapError, match=r"5\.\.9") as err:
        run_copy(ctx, w.tp, uploader=upload_while_broker_retention_runs)
    assert err.value.result is not None and err.value.result.segments_copied == 1
    with tiering_env.context() as ctx:
        (row,) = collect_status(ctx, "orders", 0)
        assert row.gaps == [[5, 9]]
    monkeypatch.undo()
    with tiering_env.context() as ctx, pytest.raises(TieringGapError) as again:
        run_copy(ctx, w.tp)  # still behind the gap: loud again, and what remains is copied
    assert again.value.result is not None and again.value.result.segments_copied == 1  # [10..14]
    assert finished_ranges(tiering_env, w) == [(0, 4), (10, 14)]
    assert copy(tiering_env, w).segments_copied == 0  # past the gap now: a quiet run
    with tiering_env.context() as ctx:
        (row,) = collect_status(ctx, "orders", 0)
        assert row.gaps == [[5, 9]]  # recorded twice, shown once


def test_a_failed_upload_of_a_segment_the_broker_deleted_meanwhile_is_the_vanished_segment(
    tiering_env: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upload fails because the broker's retention took the file: not a plain upload failure
    but the vanished segment, cleaned up either way: the gap is recorded when data not yet tiered
    went, else the run fails naming the file."""
    import tiering_core.runs.copy as copy_mod
    from tiering_core.runs.errors import CopyFailedError
    from tiering_core.storage.errors import RemoteStorageError

    original = copy_mod.upload_segment
    writers = {}
    for partition in (0, 1):
        w = writers[partition] = tiering_env.writer("orders", partition)
        write_segments(w, 3)  # [0..4], [5..9], [10..14]
        w.set_high_watermark()
    lines: list[str] = []

    def say(event: RunEvent) -> None:
        lines.append(event_line(event))

    def upload_while_broker_retention_runs(storage, upload):
        meta = upload.metadata
        w = writers[meta.topic_id_partition.partition]
        if (meta.topic_id_partition.partition, meta.start_offset) in ((0, 5), (1, 0)):
            w.delete_oldest_segments(2 if meta.start_offset == 5 else 1)
            raise RemoteStorageError("injected: the file went away mid-upload")
        return original(storage, upload)

    with tiering_env.context() as ctx, pytest.raises(TieringGapError, match=r"5\.\.9") as err:
        # [0..4] copied, then [5..9] goes too
        run_copy(ctx, writers[0].tp, events=say, uploader=upload_while_broker_retention_runs)
    assert err.value.result is not None and err.value.result.segments_copied == 1
    assert "orders-0: the broker deleted segment 5 while it was being copied" in lines
    with tiering_env.context() as ctx, pytest.raises(CopyFailedError, match="segment 0 could not be read"):
        # nothing tiered yet: no gap
        run_copy(ctx, writers[1].tp, events=say, uploader=upload_while_broker_retention_runs)
    assert not any("cleaned up" in line for line in lines)
    assert finished_ranges(tiering_env, writers[0]) == [(0, 4)] and finished_ranges(tiering_env, writers[1]) == []
    with tiering_env.context() as ctx:
        assert [(g.start, g.end) for g in ctx.metadata.list_gaps(tip_of(writers[0]))] == [(5, 9)]
        assert assert_partition_state_published(ctx, tip_of(writers[0])).gaps == ((5, 9),)  # the gap published
        assert ctx.metadata.list_segments(tip_of(writers[1])) == []
        assert ctx.storage.list_objects(tip_of(writers[1])) == []  # nothing finished: no state object either


def test_leases_are_renewed_at_a_third_of_their_time_to_live() -> None:
    from tiering_core.engine.lease import renew_interval

    assert renew_interval(600_000) == 200.0
    assert renew_interval(30) == 0.05  # tiny test leases: no busy loop


def test_a_gap_is_recorded_even_when_the_high_watermark_is_unknown(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    write_segments(w, 1)
    w.set_high_watermark()
    copy(tiering_env, w)
    write_segments(w, 2)  # [5..9] and [10..14], not copied
    w.delete_oldest_segments(2)  # [0..4] (copied) and [5..9] (not)
    (tiering_env.log_dir / "replication-offset-checkpoint").unlink()
    # Nothing may be copied without a high watermark, but the gap fails the run all the same.
    with tiering_env.context() as ctx, pytest.raises(TieringError, match=r"tiering gap: offsets 5\.\.9"):
        run_copy(ctx, w.tp)
    with tiering_env.context() as ctx:
        assert [(g.start, g.end) for g in ctx.metadata.list_gaps(tip_of(w))] == [(5, 9)]


def test_copy_lag_and_local_retention_risk(tiering_env: TieringEnv) -> None:
    tiering_env.write_config(orders={"local.retention.ms": 60_000, "local.retention.bytes": 1_000_000_000})
    old = int(time.time() * 1000) - 55_000  # 55 s old: over 80 % of the 60 s local retention
    w = tiering_env.writer(clock=lambda: old)
    write_segments(w, 3)
    w.set_high_watermark(5)  # only [0..4] may be copied now
    copy(tiering_env, w)
    with tiering_env.context() as ctx:
        (row,) = collect_status(ctx, "orders", 0)
    local = sorted(w.path.glob("*.log"))
    assert (row.copy_lag_segments, row.copy_lag_bytes) == (2, local[1].stat().st_size + local[2].stat().st_size)
    risk = row.local_retention_risk
    assert risk is not None and risk["at_risk"] and risk["oldest_uncopied_base_offset"] == 5
    assert "local retention is 60000 ms" in risk["reason"]


def test_a_missing_producer_snapshot_is_rebuilt_not_emptied(tiering_env: TieringEnv) -> None:
    """The snapshot at the next base carries producer and open-transaction state; a lost one is
    rebuilt from the log (the same bytes the broker wrote), never uploaded empty."""
    w = tiering_env.writer()
    w.append([(b"t", b"1")], producer_id=42, transactional=True)  # open at offset 0 ...
    w.append([(b"i", b"1")], producer_id=43, transactional=False)
    w.roll()  # [0..1]
    w.commit(42)  # ... until 2
    w.append_records(3)
    w.roll()  # [2..5]
    w.append_records(1)
    w.set_high_watermark()
    written = {o: (w.path / f"{o:020d}.snapshot").read_bytes() for o in (2, 6)}
    for offset in written:
        (w.path / f"{offset:020d}.snapshot").unlink()
    copy(tiering_env, w)
    with tiering_env.context() as ctx:
        segments = ctx.metadata.list_segments(tip_of(w))
        assert [(s.start_offset, s.end_offset) for s in segments] == [(0, 1), (2, 5)]
        for s in segments:
            ref = RemoteSegmentRef(tip_of(w), s.start_offset, s.segment_id)
            assert ctx.storage.fetch(ref, ObjectKind.PRODUCER_SNAPSHOT) == written[s.end_offset + 1]


@pytest.mark.parametrize("topic", ["__consumer_offsets", "__transaction_state"])
def test_internal_topics_are_never_tiered_under_the_default(tiering_env: TieringEnv, topic: str) -> None:
    w = tiering_env.writer(topic)
    write_segments(w, 3)
    w.set_high_watermark()
    result = copy(tiering_env, w)
    assert result.segments_copied == 0 and result.skipped_reason == "internal topic (Kafka never tiers it)"
    assert finished_ranges(tiering_env, w) == []


@pytest.mark.parametrize("suffix", [".index", ".timeindex", ".snapshot"])
def test_an_index_or_snapshot_symlinked_elsewhere_is_never_uploaded(
    tiering_env: TieringEnv, tmp_path: Path, suffix: str
) -> None:
    """A symbolic link in the partition dir (say to a file only root may read) is not followed:
    the index or snapshot is rebuilt from the log instead, and the file it points at stays local."""
    tiering_env.write_config(orders={"index.interval.bytes": 128})
    w = tiering_env.writer(index_interval_bytes=128)
    write_segments(w, 2, records=40)
    w.set_high_watermark()
    name = "00000000000000000040.snapshot" if suffix == ".snapshot" else f"00000000000000000000{suffix}"
    original = (w.path / name).read_bytes()
    secret = tmp_path / "root-only"
    secret.write_bytes(b"SECRET: the password is hunter2".ljust(48, b"!"))
    (w.path / name).unlink()
    (w.path / name).symlink_to(secret)
    copy(tiering_env, w)
    kind = {".index": ObjectKind.OFFSET_INDEX, ".timeindex": ObjectKind.TIME_INDEX}.get(
        suffix, ObjectKind.PRODUCER_SNAPSHOT
    )
    with tiering_env.context() as ctx:
        first = min(ctx.metadata.list_segments(tip_of(w)), key=lambda s: s.start_offset)
        assert first.state == FINISHED
        uploaded = ctx.storage.fetch(RemoteSegmentRef(tip_of(w), 0, first.segment_id), kind)
        assert b"SECRET" not in uploaded and uploaded == original


def test_an_index_is_uploaded_as_its_validated_entries_only(tiering_env: TieringEnv) -> None:
    """Bytes after the zero entry that ends an index are not part of it, and are not uploaded;
    an entry pointing outside the segment makes the index unusable (rebuilt from the log)."""
    tiering_env.write_config(orders={"index.interval.bytes": 128})
    w = tiering_env.writer(index_interval_bytes=128)
    write_segments(w, 3, records=40)
    w.set_high_watermark()
    index0, index1 = w.path / "00000000000000000000.index", w.path / "00000000000000000040.index"
    original0, original1 = index0.read_bytes(), index1.read_bytes()
    index0.write_bytes(original0 + bytes(8) + b"SECRET!!" * 4)
    index1.write_bytes(original1 + (41).to_bytes(4, "big") + (10**9).to_bytes(4, "big"))  # past the .log's end
    copy(tiering_env, w)
    with tiering_env.context() as ctx:
        by_start = {s.start_offset: s for s in ctx.metadata.list_segments(tip_of(w))}
        for start, original in ((0, original0), (40, original1)):
            ref = RemoteSegmentRef(tip_of(w), start, by_start[start].segment_id)
            assert ctx.storage.fetch(ref, ObjectKind.OFFSET_INDEX) == original


def test_a_run_tells_what_it_does_as_events_in_the_words_it_always_used(fs_env: TieringEnv) -> None:
    """A dry run, a run, a run with nothing left, a topic Kafka would not tier and a partition
    another run holds: each tells what it does as events, which read as the lines always did."""
    import re

    from tiering_core.events.copy import CopyFinished, SegmentCopied
    from tiering_core.runs.copy import CopyRun

    fs_env.write_config(audit={"remote.storage.enable": False})
    w = fs_env.writer()
    write_segments(w, 2)
    w.append_records(2)
    w.set_high_watermark(12)
    audit = fs_env.writer("audit")
    write_segments(audit, 1)
    audit.set_high_watermark(5)
    events: list[RunEvent] = []
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp, dry_run=True, events=events.append)
        run_copy(ctx, w.tp, events=events.append)
        run_copy(ctx, w.tp, events=events.append)
        run_copy(ctx, audit.tp, events=events.append)
        run_copy(ctx, audit.tp, dry_run=True, events=events.append)
        holder = CopyRun.begin(ctx, w.tp, run_id="holder")
        try:
            run_copy(ctx, w.tp, events=events.append)
        finally:
            holder.release()
    copied = [e for e in events if isinstance(e, SegmentCopied)]
    assert [(e.base_offset, e.end_offset, e.index, e.total) for e in copied] == [(0, 4, 1, 2), (5, 9, 2, 2)]
    finished = [e for e in events if isinstance(e, CopyFinished)]
    assert [(e.segments_copied, e.highest_copied_offset) for e in finished] == [(2, 9), (0, 9)]
    assert finished[0].bytes_copied == sum(e.size_bytes for e in copied)
    timed = re.compile(r" in \d+\.\d\d s \(\d+(\.\d+)? [KMG]?i?B/s\)")
    size = re.compile(r"\] \d+(\.\d+)? [KMG]?i?B")
    # The lines the run printed before its events were values (the same runs, the same words).
    assert [size.sub("] <size>", timed.sub(" in <t>", event_line(e))) for e in events] == [
        "orders-0: would copy segment 0 [0..4] <size>",
        "orders-0: would copy segment 5 [5..9] <size>",
        "orders-0: dry run: 2 segment(s) would be copied",
        "orders-0: copied segment 0 [0..4] <size> in <t> [1/2]",
        "orders-0: copied segment 5 [5..9] <size> in <t> [2/2]",
        "orders-0: copied 2 segment(s), 742 B in <t>; highest copied offset 9, copy lag 0 segment(s) / 0 B",
        "orders-0: copied 0 segment(s), 0 B in <t>; highest copied offset 9, copy lag 0 segment(s) / 0 B",
        "audit-0: skipped (remote.storage.enable is false)",
        "audit-0: skipped (remote.storage.enable is false)",
        "orders-0: another copy run holds the partition; nothing done",
    ]


def test_a_delayed_segment_is_copied_only_once_its_lag_passes(tiering_env: TieringEnv) -> None:
    """``remote.copy.lag.ms`` from the YAML (KIP-1241): a run before the lag passes copies nothing
    and says why, the dry run plans nothing; the run after it copies the segment, and a later
    segment still short of the lag waits behind it. The clock is the runs' ``now_ms``."""
    t0 = 1_750_000_000_000
    clock = [t0]
    w = tiering_env.writer(clock=lambda: clock[0])
    write_segments(w, 1)  # [0..4] at t0
    clock[0] = t0 + 30_000
    write_segments(w, 1)  # [5..9] 30 s later
    w.append_records(1)
    w.set_high_watermark()
    tiering_env.write_config(orders={"remote.copy.lag.ms": 60_000})
    events: list[RunEvent] = []
    with tiering_env.context() as ctx:
        dry = run_copy(ctx, w.tp, dry_run=True, now_ms=t0 + 59_999)
        early = run_copy(ctx, w.tp, now_ms=t0 + 59_999, events=events.append)
    assert dry.planned == [] and dry.copy_delay is not None and dry.copy_delay["base_offset"] == 0
    assert (early.segments_copied, early.highest_copied_offset) == (0, -1)
    assert early.copy_delay is not None
    assert (early.copy_delay["waiting_segments"], early.copy_delay["segment_age_ms"]) == (2, 59_999)
    assert finished_ranges(tiering_env, w) == []
    assert any(
        event_line(e).startswith("orders-0: waiting: 2 segment(s) from 0 (")
        and "remote.copy.lag.ms 60000, segment 0 is 59s old" in event_line(e)
        for e in events
    )
    with tiering_env.context() as ctx:
        due = run_copy(ctx, w.tp, now_ms=t0 + 60_000)
    assert (due.segments_copied, due.highest_copied_offset) == (1, 4)
    assert due.copy_delay is not None and due.copy_delay["base_offset"] == 5
    assert finished_ranges(tiering_env, w) == [(0, 4)]
    with tiering_env.context() as ctx:
        rest = run_copy(ctx, w.tp, now_ms=t0 + 90_000)
    assert (rest.segments_copied, rest.copy_delay) == (1, None)
    assert finished_ranges(tiering_env, w) == [(0, 4), (5, 9)]
