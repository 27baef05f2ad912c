"""A partition taken for a copy run: its lease held under the run's name until the run's stack
closes, a killed copy's leftover cleaned up first and counted, the plan read under the lease; and
nothing taken while another run holds the partition."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import replace

from tests.engine_support import TieringEnv, tip_of, write_segments
from tests.metadata.support import segment
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.runs.copy_lease import begin_copy_run
from tiering_core.runs.copy_plan import plan_before_lease, plan_copy


def closed_segments(env: TieringEnv) -> PartitionWriter:
    w = env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    return w


def test_the_run_holds_the_partition_under_its_name_until_its_stack_closes(fs_env: TieringEnv) -> None:
    w = closed_segments(fs_env)
    with fs_env.context() as ctx:
        before = plan_before_lease(ctx, w.tp)
        with ExitStack() as hold:
            taken = begin_copy_run(ctx, before, "run-1", hold)
            assert taken is not None
            held, plan, cleaned = taken
            assert held.holds and held.tip == tip_of(w)
            assert (held.lease.holder, held.lease.run_id) == ("copy:run-1", "run-1")
            assert ctx.metadata.current_lease(tip_of(w)) is not None
            assert cleaned == 0
            assert replace(plan, view=None) == replace(plan_copy(ctx, w.tp), view=None)
            assert [p.base_offset for p in plan.planned] == [0, 5, 10]
        assert not held.holds
        assert not ctx.metadata.is_lease_active(tip_of(w))


def test_nothing_is_taken_while_another_run_holds_the_partition(fs_env: TieringEnv) -> None:
    w = closed_segments(fs_env)
    with fs_env.context() as ctx:
        ctx.metadata.register_partition(tip_of(w))
        other = ctx.metadata.acquire_lease(tip_of(w), holder="copy:other")
        with ExitStack() as hold:
            assert begin_copy_run(ctx, plan_before_lease(ctx, w.tp), "run-2", hold) is None
        current = ctx.metadata.current_lease(tip_of(w))
        assert current is not None and current.holder == "copy:other"  # untouched
        ctx.metadata.release_lease(other)


def test_a_killed_copys_leftover_is_cleaned_up_and_counted_before_planning(fs_env: TieringEnv) -> None:
    """A run killed after recording its first segment's copy left it COPY_SEGMENT_STARTED: the
    next run cleans it up under its own lease, and plans that segment again."""
    w = closed_segments(fs_env)
    tip = tip_of(w)
    with fs_env.context() as ctx:
        ctx.metadata.register_partition(tip)
        killed = ctx.metadata.acquire_lease(tip, holder="copy:killed")
        ctx.metadata.add_segment(segment(tip, 0, 4), killed)
        ctx.metadata.release_lease(killed)
        with ExitStack() as hold:
            taken = begin_copy_run(ctx, plan_before_lease(ctx, w.tp), "run-3", hold)
            assert taken is not None
            _, plan, cleaned = taken
        assert cleaned == 1
        states = {s.state for s in ctx.metadata.list_segments(tip, include_deleted=True)}
        assert RemoteLogSegmentState.COPY_SEGMENT_STARTED not in states
        assert [p.base_offset for p in plan.planned] == [0, 5, 10]
