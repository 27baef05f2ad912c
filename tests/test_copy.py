"""The copy engine (KAFKA_SEMANTICS 5 with 10) on real log dirs, S3 via moto, SQLite and PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.engine_support import TieringEnv, tip_of, write_segments
from tiering_core.copy import run_copy
from tiering_core.errors import TieringGapError
from tiering_core.kafka.epoch import parse_leader_epoch_checkpoint
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.status import collect_status
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef

ROOT = Path(__file__).resolve().parents[1]
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def finished_ranges(env: TieringEnv, writer) -> list[tuple[int, int]]:
    with env.context() as ctx:
        return [
            (s.start_offset, s.end_offset) for s in ctx.metadata.list_segments(tip_of(writer)) if s.state == FINISHED
        ]


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
    w.delete_records(22)  # DeleteRecords past uncopied segments
    w.set_high_watermark()
    third = copy(tiering_env, w)
    assert third.gaps == []
    assert finished_ranges(tiering_env, w)[-2:] == [(20, 24), (25, 29)]
    assert (15, 19) not in finished_ranges(tiering_env, w)


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
        from tiering_core.tier_state import load_tier_view

        view = load_tier_view(ctx.partitions("orders", 0)[0], ctx.metadata)
        assert view.highest_copied_offset == 149  # end(epoch 1) - 1, not the 199 remote holds
    copy(tiering_env, w)
    ranges = finished_ranges(tiering_env, w)
    assert ranges[-1][1] >= 209 and any(start <= 150 <= end for start, end in ranges[1:])


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
        with pytest.raises(Exception, match=r"segment 30 not copied.*CRC mismatch"):
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
    import tiering_core.copy as copy_mod
    from tiering_core.config import load_config
    from tiering_core.context import TieringContext
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.storage.layout import ObjectKind

    def upload_then_die(storage, upload):
        storage.copy_segment(upload.ref, {ObjectKind.LOG: upload.files[ObjectKind.LOG]})
        os.kill(os.getpid(), signal.SIGKILL)

    copy_mod.upload_segment = upload_then_die
    with TieringContext.open(load_config(sys.argv[1])) as ctx:
        copy_mod.run_copy(ctx, TopicPartition("orders", 0))
    """
)


def test_process_killed_mid_copy_is_repaired_by_the_next_run(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    cfg = tiering_env.write_config()
    doc = tiering_env.config_path.read_text().replace("lease_ms: 30000", "lease_ms: 1000")
    tiering_env.config_path.write_text(doc)
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
        assert ctx.storage.list_objects(tip_of(w))  # the .log object is there, no manifest
    time.sleep(1.2)  # the killed run's lease expires
    result = copy(tiering_env, w)
    assert result.segments_cleaned_up == 1 and result.segments_copied == 2
    with tiering_env.context() as ctx:
        segments = ctx.metadata.list_segments(tip_of(w))
        assert [(s.start_offset, s.state) for s in segments] == [(0, FINISHED), (5, FINISHED)]
        assert orphan.segment_id not in {s.segment_id for s in segments}
        referenced = {str(s.segment_id) for s in segments}
        for obj in ctx.storage.list_objects(tip_of(w)):
            assert any(sid in obj.key for sid in referenced), f"orphaned object {obj.key}"
    assert cfg is not None


SLOW_SCRIPT = textwrap.dedent(
    """
    import sys, time
    import tiering_core.copy as copy_mod
    from tiering_core.config import load_config
    from tiering_core.context import TieringContext
    from tiering_core.kafka.topic import TopicPartition

    original = copy_mod.upload_segment

    def slow_upload(storage, upload):
        print("uploading", flush=True)
        time.sleep(3)
        return original(storage, upload)

    copy_mod.upload_segment = slow_upload
    with TieringContext.open(load_config(sys.argv[1])) as ctx:
        result = copy_mod.run_copy(ctx, TopicPartition("orders", 0))
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
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "uploading"
    second = copy(tiering_env, w)
    assert second.fenced and second.segments_copied == 0
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "copied 2 fenced False" in out
    assert finished_ranges(tiering_env, w) == [(0, 4), (5, 9)]
    with tiering_env.context() as ctx:
        assert len(ctx.storage.list_objects(tip_of(w))) == 2 * 6  # log, 2 indexes, snapshot, epochs, manifest


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
