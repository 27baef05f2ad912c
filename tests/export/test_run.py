"""The export driver (``tiering_core.export.run``) on any executor: a thread pool writes the same
table as one segment after the other, and the commits follow the plan's order whatever order the
tasks end in."""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import TypeVar

from tests.engine_support import TieringEnv
from tests.export.support import build_partition, sqlite_catalog, with_export
from tiering_core.engine.executor import InProcessExecutor, Task, TaskOutcome
from tiering_core.events import RunEvent
from tiering_core.events.export import ExportCommitted, ExportPlanned, SegmentExported
from tiering_core.export import exported_segments, load_catalog, run_export
from tiering_core.runs.copy import run_copy

T = TypeVar("T")
R = TypeVar("R")


def rows(ctx, table: str) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    scanned = load_catalog(ctx.config).load_table(table).scan().to_arrow()
    return scanned.sort_by([("partition", "ascending"), ("offset", "ascending")]).to_pylist()


class LastFirstExecutor:
    """Runs the items in this process from the last to the first, as tasks on a cluster may end
    in any order; each outcome keeps the index of its item in the list handed over."""

    def __init__(self, storage) -> None:  # type: ignore[no-untyped-def]
        self.inner = InProcessExecutor(storage)

    def run(
        self,
        items: Sequence[T],
        task: Task[T, R],
        *,
        describe: Callable[[T], str],
        on_wait: Callable[[], None] | None = None,
    ) -> Generator[TaskOutcome[R], None, None]:
        last = len(items) - 1
        for outcome in self.inner.run(list(reversed(items)), task, describe=describe, on_wait=on_wait):
            yield TaskOutcome(last - outcome.index, outcome.result, outcome.error)


def test_a_thread_pool_exports_the_same_table_as_one_segment_after_the_other(
    tiering_env: TieringEnv, tmp_path: Path
) -> None:
    writers = [build_partition(tiering_env, "orders", p) for p in range(2)]
    with_export(tiering_env, sqlite_catalog(tmp_path))
    events: list[RunEvent] = []
    with tiering_env.context() as ctx:
        for w in writers:
            run_copy(ctx, w.tp)
        serial = run_export(ctx, "orders", table="serial.orders")
        pooled = run_export(
            ctx,
            "orders",
            table="pooled.orders",
            executor=InProcessExecutor(ctx.storage, threads=2),
            events=events.append,
            commit_bytes=1,
        )
        assert not serial.failed and not pooled.failed
        assert [s.segment_id for s in pooled.exported] == [s.segment_id for s in serial.exported]
        assert (pooled.rows, pooled.files) == (serial.rows, serial.files) and serial.rows > 0
        assert rows(ctx, "pooled.orders") == rows(ctx, "serial.orders")
        pooled_table = load_catalog(ctx.config).load_table("pooled.orders")
        assert len(pooled.snapshots) == len(pooled.planned) == len(pooled_table.snapshots())
    planned = events[0]
    assert isinstance(planned, ExportPlanned)
    assert (planned.topic, planned.table, planned.segments) == ("orders", "pooled.orders", len(pooled.planned))
    written = [e for e in events if isinstance(e, SegmentExported)]
    assert sorted(e.done for e in written) == list(range(1, len(pooled.planned) + 1))
    assert sum(e.rows for e in written) == pooled.rows
    assert [e.snapshot_id for e in events if isinstance(e, ExportCommitted)] == pooled.snapshots


def test_commits_follow_the_plan_whatever_order_the_tasks_end_in(tiering_env: TieringEnv, tmp_path: Path) -> None:
    """A killed run leaves the table holding a prefix of its plan: each commit holds the segments
    whose turn has come, never a later one before an earlier one."""
    w = build_partition(tiering_env, "orders", 0)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        result = run_export(ctx, "orders", executor=LastFirstExecutor(ctx.storage), commit_bytes=1)
        planned = [s.segment_id for s in result.planned]
        assert len(planned) > 2 and not result.failed
        table = load_catalog(ctx.config).load_table("kafka.orders")
        assert [s.segment_id for s in exported_segments(table)] == planned  # oldest snapshot first
        assert [s.segment_id for s in result.exported] == planned
        # the last segment's task ended first, yet each segment has its own commit, in plan order
        assert len(result.snapshots) == len(planned) == len(table.snapshots())
