"""Remote retention (KAFKA_SEMANTICS 6 read with 10): size, time, log start, lineage, dry runs."""

from __future__ import annotations

import pytest

from tests.engine_support import TieringEnv, tip_of, write_segments
from tiering_core.copy import run_copy
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.retention import run_retention

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def remote_ranges(env: TieringEnv, writer, states=(FINISHED,)) -> list[tuple[int, int]]:
    with env.context() as ctx:
        return [(s.start_offset, s.end_offset) for s in ctx.metadata.list_segments(tip_of(writer)) if s.state in states]


def snapshot_state(env: TieringEnv, writer) -> tuple:
    with env.context() as ctx:
        rows = [
            (s.segment_id, s.state, s.start_offset)
            for s in ctx.metadata.list_segments(tip_of(writer), include_deleted=True)
        ]
        keys = sorted(o.key for o in ctx.storage.list_objects(tip_of(writer)))
        start = ctx.metadata.get_remote_log_start_offset(tip_of(writer))
    return rows, keys, start


def test_broker_local_retention_never_deletes_remote_data(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    write_segments(w, 2)
    w.become_leader(1)
    write_segments(w, 2)
    w.set_high_watermark()
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
    w.delete_oldest_segments(3)  # epoch 0 is gone from the broker's cache
    assert [e.epoch for e in w.epochs.entries] == [1]
    with tiering_env.context() as ctx:
        result = run_retention(ctx, w.tp)
        assert result.segments_deleted == 0
        from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef

        for s in ctx.metadata.list_segments(tip_of(w)):
            ref = RemoteSegmentRef(tip_of(w), s.start_offset, s.segment_id)
            assert ctx.storage.fetch(ref, ObjectKind.LOG)
    assert remote_ranges(tiering_env, w) == [(0, 4), (5, 9), (10, 14), (15, 19)]


@pytest.mark.parametrize("k", [0, 1, 17, 50])
def test_size_retention_deletes_exactly_the_first_k(fs_env: TieringEnv, k: int) -> None:
    w = fs_env.writer()
    write_segments(w, 50, records=2)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        segments = ctx.metadata.list_segments(tip_of(w))
        remote = sum(s.size_bytes for s in segments)
        local_active = 0  # the active segment is empty
        keep_bytes = sum(s.size_bytes for s in segments[k:]) + local_active
    fs_env.write_config(orders={"retention.bytes": keep_bytes})
    with fs_env.context() as ctx:
        result = run_retention(ctx, w.tp)
    assert result.segments_deleted == k
    assert remote_ranges(fs_env, w) == [(2 * i, 2 * i + 1) for i in range(k, 50)]
    if k:
        assert result.remote_log_start_offset == 2 * k
    assert remote >= keep_bytes


def test_time_retention(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    t = {"now": 1_000_000}
    w.clock = lambda: t["now"]
    for _ in range(4):
        w.append_records(3)
        w.roll()
        t["now"] += 1000
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
    fs_env.write_config(orders={"retention.ms": 1500})
    with fs_env.context() as ctx:
        result = run_retention(ctx, w.tp, now_ms=1_000_000 + 3000)  # limit 1_001_500: segments 0 and 1
    assert result.segments_deleted == 2
    assert remote_ranges(fs_env, w) == [(6, 8), (9, 11)]


def test_log_start_breach_after_delete_records(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    write_segments(w, 4)
    w.set_high_watermark()
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
    w.delete_records(12)
    with tiering_env.context() as ctx:
        result = run_retention(ctx, w.tp)
    assert result.segments_deleted == 2
    assert remote_ranges(tiering_env, w) == [(10, 14), (15, 19)]


def test_dangling_delete_is_finished_and_dry_run_changes_nothing(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        first = ctx.metadata.list_segments(tip_of(w))[0]
        lease = ctx.metadata.acquire_lease(tip_of(w), holder="crashed-retention")
        ctx.metadata.update_segment_state(first.segment_id, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, lease)
        ctx.metadata.release_lease(lease)
    before = snapshot_state(fs_env, w)
    with fs_env.context() as ctx:
        dry = run_retention(ctx, w.tp, dry_run=True)
    assert [p["reason"] for p in dry.planned] == ["dangling-delete"]
    assert snapshot_state(fs_env, w) == before
    with fs_env.context() as ctx:
        assert run_retention(ctx, w.tp).segments_deleted == 1
    assert remote_ranges(fs_env, w, states=tuple(RemoteLogSegmentState)) == [(5, 9), (10, 14)]


def test_copy_in_progress_counts_against_size_and_blocks_retention(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
    write_segments(w, 1)
    w.set_high_watermark()
    fs_env.write_config(orders={"retention.bytes": 0})
    with fs_env.context() as ctx:
        # A copy run holds the partition: retention waits for it.
        lease = ctx.metadata.acquire_lease(tip_of(w), holder="copy:busy")
        result = run_retention(ctx, w.tp)
        assert result.fenced and result.segments_deleted == 0
        ctx.metadata.release_lease(lease)
        run_copy(ctx, w.tp)
        assert run_retention(ctx, w.tp).segments_deleted == 4


def test_overlapping_reuploads_both_deleted_when_breached(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        # A re-upload of segment 0 (e.g. after a DeleteRecords resume inside it) overlaps the first.
        from tiering_core.copy import finish_segment, prepare_segment_upload, upload_segment
        from tiering_core.tier_state import load_tier_view

        view = load_tier_view(ctx.partitions("orders", 0)[0], ctx.metadata)
        segments = ctx.partitions("orders", 0)[0].segments
        from tiering_core.tier_state import CopyCandidate

        lease = ctx.metadata.acquire_lease(tip_of(w), holder="reupload")
        upload = prepare_segment_upload(
            view, CopyCandidate(segments[0], segments[1].base_offset), run_token=lease.token
        )
        ctx.metadata.add_segment(upload.metadata, lease)
        finish_segment(ctx.metadata, upload, upload_segment(ctx.storage, upload), lease)
        ctx.metadata.release_lease(lease)
        assert len(ctx.metadata.list_segments(tip_of(w))) == 3
    fs_env.write_config(orders={"retention.ms": 0})
    with fs_env.context() as ctx:
        result = run_retention(ctx, w.tp)
        assert result.segments_deleted == 3
        assert ctx.storage.list_objects(tip_of(w)) == []


def test_divergent_segment_is_kept_until_log_start_passes_it(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    w.append_records(100)
    w.become_leader(1)
    w.append_records(100)
    w.roll()  # [0..199] epochs {0:0,1:100}
    w.append_records(5)
    w.set_high_watermark()
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
    w.truncate_to(150)  # unclean election: epoch 1 ends at 149 on the new leader
    w.become_leader(2)
    w.append_records(60)
    w.roll()
    w.append_records(5)
    w.set_high_watermark()
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        from tiering_core.status import collect_status

        (row,) = collect_status(ctx, "orders", 0)
        divergent = next(s for s in ctx.metadata.list_segments(tip_of(w)) if s.end_offset == 199)
        assert row.remote_bytes == sum(
            s.size_bytes for s in ctx.metadata.list_segments(tip_of(w)) if s.segment_id != divergent.segment_id
        )
        assert run_retention(ctx, w.tp).segments_deleted == 0  # unlimited retention: kept
        seg = ctx.metadata.segment_for(tip_of(w), 2, 160)
        assert seg is not None and seg.segment_id != divergent.segment_id
    w.delete_records(215)
    with tiering_env.context() as ctx:
        run_retention(ctx, w.tp)
        remaining = ctx.metadata.list_segments(tip_of(w))
        assert divergent.segment_id not in {s.segment_id for s in remaining}


RETENTION_CRASH = """
import os, signal, sys
import tiering_core.remote_segments as rs
import tiering_core.retention as retention
from tiering_core.config import load_config
from tiering_core.context import TieringContext
from tiering_core.kafka.topic import TopicPartition

step, where = int(sys.argv[2]), sys.argv[3]
calls = {"n": 0}
original = rs.delete_remote_segment

def crashing(store, storage, segment, lease):
    calls["n"] += 1
    if calls["n"] == step:
        from tiering_core.metadata.states import RemoteLogSegmentState
        if where in ("after-started", "after-objects"):
            store.update_segment_state(segment.segment_id, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, lease)
        if where == "after-objects":
            storage.delete_segment(rs.segment_ref(segment))
        os.kill(os.getpid(), signal.SIGKILL)
    return original(store, storage, segment, lease)

retention.delete_remote_segment = crashing
with TieringContext.open(load_config(sys.argv[1])) as ctx:
    retention.run_retention(ctx, TopicPartition("orders", 0))
"""


@pytest.mark.parametrize(
    ("step", "where"), [(1, "before-started"), (1, "after-started"), (2, "after-objects"), (3, "after-started")]
)
def test_retention_killed_at_each_step_resumes_to_the_same_end(fs_env: TieringEnv, step: int, where: str) -> None:
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    w = fs_env.writer()
    write_segments(w, 5)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
    fs_env.write_config(orders={"retention.ms": 0})
    fs_env.config_path.write_text(fs_env.config_path.read_text().replace("lease_ms: 30000", "lease_ms: 500"))
    proc = subprocess.run(
        [sys.executable, "-c", RETENTION_CRASH, str(fs_env.config_path), str(step), where],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    with fs_env.context() as ctx:
        assert ctx.metadata.get_remote_log_start_offset(tip_of(w)) == 25  # recorded before any deletion
    time.sleep(0.6)
    with fs_env.context() as ctx:
        run_retention(ctx, w.tp)
        assert ctx.metadata.list_segments(tip_of(w)) == []
        assert ctx.storage.list_objects(tip_of(w)) == []
