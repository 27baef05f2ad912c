"""Real Airflow (``dag.test()``) retries of the partition operators: a retry takes over the lease
its killed previous try left and finishes the work at once, on SQLite and PostgreSQL; a run of
another DAG run still finds the partition held."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest

from tests.airflow_support import task_runs
from tests.engine_support import TieringEnv, tip_of, write_segments
from tiering_airflow.operators.tiering import TieringCopyOperator
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.metadata.store import TaskAttempt

S = RemoteLogSegmentState


@pytest.fixture()
def tiering(tiering_env: TieringEnv, monkeypatch: pytest.MonkeyPatch) -> TieringEnv:
    """A log dir, the metadata store on each real backend and moto's S3, named by ``TIERING_CONFIG``."""
    monkeypatch.setenv("TIERING_CONFIG", str(tiering_env.config_path))
    monkeypatch.delenv("AIRFLOW_CONN_AWS_DEFAULT", raising=False)
    return tiering_env


class ProcessKilled(Exception):
    """The injected fault: the worker process dies in the middle of an upload."""


@pytest.fixture()
def first_try_killed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The first upload dies as a killed process would: the run stops mid-copy and nothing gives
    its lease up (no release, no more renewals). Yields the holders whose release was lost."""
    import tiering_core.runs.copy as copy_module
    from tiering_core.engine.lease import HeldPartition

    real_upload, real_release = copy_module.upload_segment, HeldPartition._release
    killed: list[str] = []

    def upload(*args: Any, **kwargs: Any) -> Any:
        if not killed:
            killed.append("upload")
            raise ProcessKilled("SIGKILL")
        return real_upload(*args, **kwargs)

    def release(held: HeldPartition) -> None:
        if killed == ["upload"]:  # the dead process: its heartbeat stops, its lease stays
            killed.append(held.lease.holder)
            held._stop.set()
            if held._thread is not None:
                held._thread.join()
            return
        real_release(held)

    monkeypatch.setattr(copy_module, "upload_segment", upload)
    monkeypatch.setattr(HeldPartition, "_release", release)
    yield killed


def one_task_dag(dag_id: str) -> Any:
    """A DAG of one copy task that Airflow retries at once after a failed try, written to
    Airflow's database as the DAG processor would (``dag.test()`` runs only stored DAGs)."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.sdk import DAG

    with DAG(dag_id, schedule=None, start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC)) as dag:
        TieringCopyOperator(task_id="tier", topic="orders", partition=0, retries=1, retry_delay=dt.timedelta(0))
    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(collect_dags=False)
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)
    return dag


def test_a_retry_takes_over_its_killed_try_lease_and_copies_at_once(
    tiering: TieringEnv, first_try_killed: list[str]
) -> None:
    w = tiering.writer("orders", 0)
    write_segments(w, 2)
    w.set_high_watermark()
    dag = one_task_dag("tiering_retry_takes_over")
    run = dag.test()
    assert run.state == "success"
    (task,) = task_runs(dag.dag_id, run.run_id, "tier").values()
    assert (task.state, task.try_number) == ("success", 2)
    first = TaskAttempt(dag.dag_id, run.run_id, "tier", -1, 1)
    assert first_try_killed == ["upload", first.holder("copy")]  # try 1 died holding the lease
    result = task.result
    assert (result["fenced"], result["segments_copied"], result["segments_cleaned_up"]) == (False, 2, 1)
    with tiering.context() as ctx:
        segments = ctx.metadata.list_segments(tip_of(w), include_deleted=True)
        record = ctx.metadata.get_partition(tip_of(w))
    finished = [(s.start_offset, s.end_offset) for s in segments if s.state == S.COPY_SEGMENT_FINISHED]
    assert finished == [(0, 4), (5, 9)]  # the killed try's started copy was cleaned up, not finished
    assert record is not None and record.lease_holder is None  # try 2 released the lease it took over


def test_a_run_of_another_dag_run_still_finds_the_partition_held(tiering: TieringEnv) -> None:
    w = tiering.writer("orders", 0)
    write_segments(w, 2)
    w.set_high_watermark()
    dag = one_task_dag("tiering_retry_stranger")
    other_run = TaskAttempt(dag.dag_id, "manual__another-run", "tier", -1, 1)
    with tiering.context() as ctx:
        ctx.metadata.register_partition(tip_of(w))
        held = ctx.metadata.acquire_lease(tip_of(w), other_run.holder("copy"), ttl_ms=600_000, attempt=other_run)
    run = dag.test()
    (task,) = task_runs(dag.dag_id, run.run_id, "tier").values()
    assert (task.state, task.try_number) == ("success", 1)
    assert (task.result["fenced"], task.result["segments_copied"]) == (True, 0)
    with tiering.context() as ctx:
        current = ctx.metadata.current_lease(tip_of(w))
        assert ctx.metadata.list_segments(tip_of(w)) == []
    assert current is not None and (current.holder, current.token) == (held.holder, held.token)
