"""Partition removal (KAFKA_SEMANTICS 7): full run, dry run, resume after a crash, no recopy."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.engine_support import TieringEnv, tip_of, write_segments
from tiering_core.copy import run_copy
from tiering_core.errors import TieringError
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.removal import delete_partition

ROOT = Path(__file__).resolve().parents[1]


def tiered_partition(env: TieringEnv):
    w = env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    with env.context() as ctx:
        run_copy(ctx, w.tp)
    return w


def test_removal_deletes_everything_and_forbids_recopy(tiering_env: TieringEnv) -> None:
    w = tiered_partition(tiering_env)
    with tiering_env.context() as ctx:
        result = delete_partition(ctx, w.tp)
        assert result.segments_deleted == 3 and result.state == "DELETE_PARTITION_FINISHED"
        assert ctx.storage.list_objects(tip_of(w)) == []
        assert ctx.metadata.list_segments(tip_of(w)) == []
        with pytest.raises(TieringError):
            run_copy(ctx, w.tp)


def test_dry_run_changes_nothing(tiering_env: TieringEnv) -> None:
    w = tiered_partition(tiering_env)
    with tiering_env.context() as ctx:
        before = (ctx.metadata.list_segments(tip_of(w)), sorted(o.key for o in ctx.storage.list_objects(tip_of(w))))
        result = delete_partition(ctx, w.tp, dry_run=True)
        assert len(result.planned) == 3
        after = (ctx.metadata.list_segments(tip_of(w)), sorted(o.key for o in ctx.storage.list_objects(tip_of(w))))
    assert before == after


CRASH = textwrap.dedent(
    """
    import os, signal, sys
    import tiering_core.remote_segments as rs
    import tiering_core.removal as removal
    from tiering_core.config import load_config
    from tiering_core.context import TieringContext
    from tiering_core.kafka.topic import TopicPartition

    step = int(sys.argv[2])
    calls = {"n": 0}
    original = rs.delete_remote_segment

    def crashing(store, storage, segment, lease):
        calls["n"] += 1
        if calls["n"] == step:
            from tiering_core.metadata.states import RemoteLogSegmentState
            store.update_segment_state(segment.segment_id, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, lease)
            storage.delete_segment(rs.segment_ref(segment))
            os.kill(os.getpid(), signal.SIGKILL)
        return original(store, storage, segment, lease)

    removal.delete_remote_segment = crashing
    with TieringContext.open(load_config(sys.argv[1])) as ctx:
        removal.delete_partition(ctx, TopicPartition("orders", 0))
    """
)


@pytest.mark.parametrize("step", [1, 3])
def test_removal_killed_midway_resumes_to_the_same_end(fs_env: TieringEnv, step: int) -> None:
    w = tiered_partition(fs_env)
    fs_env.config_path.write_text(fs_env.config_path.read_text().replace("lease_ms: 30000", "lease_ms: 500"))
    proc = subprocess.run(
        [sys.executable, "-c", CRASH, str(fs_env.config_path), str(step)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    with fs_env.context() as ctx:
        states = [s.state for s in ctx.metadata.list_segments(tip_of(w))]
        assert RemoteLogSegmentState.DELETE_SEGMENT_STARTED in states
        record = ctx.metadata.get_partition(tip_of(w))
        assert record is not None and record.delete_state is not None
    import time

    time.sleep(0.6)
    with fs_env.context() as ctx:
        result = delete_partition(ctx, w.tp)
        assert result.state == "DELETE_PARTITION_FINISHED"
        assert ctx.storage.list_objects(tip_of(w)) == []
        assert ctx.metadata.list_segments(tip_of(w)) == []
