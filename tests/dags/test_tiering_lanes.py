"""Lanes in real Airflow runs (``dag.test()``, moto's S3, SQLite): with more partitions than
``[core] max_map_length`` (4 here), one run of a named topic's DAGs and of the catch-all DAGs tiers
every partition in at most that many task instances; a tiering gap fails only its lane, after the
others ran; the Tiering page links each partition to the lane that ran it; a killed lane's retry
takes over its leases and converges."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.airflow_support import task_runs
from tests.dags.test_tiering_dags import DAGS, bucket_keys, dagbag, finished, partitions_with_segments
from tests.engine_support import TieringEnv, counted_view_builds, tip_of, write_segments
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.metadata.store import TaskAttempt
from tiering_core.runs.lanes import lane_partitions
from tiering_core.storage.identity import IDENTITY_OBJECT
from tiering_core.storage.partition_state import partition_state_key

BOUND = 4
PARTITIONS = 10
#: 10 partitions dealt round robin into 4 lanes: 3, 3, 2 and 2 of them.
LANE_LABELS = ["lane-0 (3 partitions)", "lane-1 (3 partitions)", "lane-2 (2 partitions)", "lane-3 (2 partitions)"]


@pytest.fixture()
def max_map_length(monkeypatch: pytest.MonkeyPatch) -> int:
    """The scheduler's limit on a mapped task's list, set low: read at run time, not at parse."""
    monkeypatch.setenv("AIRFLOW__CORE__MAX_MAP_LENGTH", str(BOUND))
    return BOUND


def lane_results(tasks: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every partition's result in the lanes' XComs, by ``<topic>-<partition>``."""
    return {f"{r['topic']}-{r['partition']}": r for task in tasks.values() for r in task.result}


def test_a_named_topic_beyond_max_map_length_is_tiered_by_one_run_in_bounded_tasks(
    tiering: TieringEnv, s3_endpoint, max_map_length: int
) -> None:
    writers = partitions_with_segments(tiering, "payments", PARTITIONS, 2)  # retention.bytes = 0
    bag = dagbag(DAGS / "tiering_dags.py")
    dag = bag.dags["tiering_copy__payments"]
    run = dag.test()
    assert run.state == "success"
    copies = task_runs(dag.dag_id, run.run_id, "copy")
    assert sorted(copies) == LANE_LABELS and len(copies) == max_map_length
    assert all(t.state == "success" for t in copies.values())
    results = lane_results(copies)
    assert sorted(results) == sorted(f"payments-{p}" for p in range(PARTITIONS))
    assert all(
        (r["outcome"], r["segments_copied"], r["copy_lag_segments"]) == ("copied", 2, 0) for r in results.values()
    )
    assert [finished(tiering, w) for w in writers] == [[(0, 4), (5, 9)]] * PARTITIONS

    retention = bag.dags["tiering_retention__payments"]
    run = retention.test()
    assert run.state == "success"
    deletions = task_runs(retention.dag_id, run.run_id, "retention")
    assert sorted(deletions) == LANE_LABELS
    results = lane_results(deletions)
    assert len(results) == PARTITIONS and all(r["outcome"] == "deleted" for r in results.values())
    assert all(r["segments_deleted"] == 2 for r in results.values())
    assert [finished(tiering, w) for w in writers] == [[]] * PARTITIONS
    assert bucket_keys(s3_endpoint, tiering) == sorted(
        [*(partition_state_key(tip_of(w), "t/") for w in writers), f"t/{IDENTITY_OBJECT}"]
    )


def test_the_catch_all_dags_beyond_max_map_length_tier_every_partition_in_bounded_tasks(
    tiering: TieringEnv, max_map_length: int
) -> None:
    audit = partitions_with_segments(tiering, "audit", 6, 1)
    metrics = partitions_with_segments(tiering, "metrics", 4, 2)
    copy = dagbag(DAGS / "tiering_dags.py").dags["tiering_copy_default_topics"]
    run = copy.test()
    assert run.state == "success"
    copies = task_runs(copy.dag_id, run.run_id, "copy")
    assert sorted(copies) == LANE_LABELS
    results = lane_results(copies)
    assert len(results) == PARTITIONS and all(r["outcome"] == "copied" for r in results.values())
    # Most urgent first: every lane starts with one of metrics' partitions (twice audit's copy lag).
    (listing,) = task_runs(copy.dag_id, run.run_id, "list_partitions").values()
    assert [lane["partitions"][0][0] for lane in listing.result] == ["metrics"] * BOUND
    assert [finished(tiering, w) for w in audit] == [[(0, 4)]] * 6
    assert [finished(tiering, w) for w in metrics] == [[(0, 4), (5, 9)]] * 4


def test_partitions_that_fit_the_bound_keep_one_task_each_labelled_as_today(
    tiering: TieringEnv, max_map_length: int
) -> None:
    writers = partitions_with_segments(tiering, "orders", 3, 1)
    dag = dagbag(DAGS / "tiering_dags.py").dags["tiering_copy__orders"]
    run = dag.test()
    assert run.state == "success"
    copies = task_runs(dag.dag_id, run.run_id, "copy")
    assert sorted(copies) == ["orders-0", "orders-1", "orders-2"]
    for label, task in copies.items():
        (result,) = task.result
        assert f"{result['topic']}-{result['partition']}" == label and result["segments_copied"] == 1
    assert [finished(tiering, w) for w in writers] == [[(0, 4)]] * 3


def test_a_gap_fails_only_its_lane_after_the_lane_s_other_partitions_ran(
    tiering: TieringEnv, max_map_length: int
) -> None:
    writers = partitions_with_segments(tiering, "orders", PARTITIONS, 1)
    dag = dagbag(DAGS / "tiering_dags.py").dags["tiering_copy__orders"]
    assert dag.test().state == "success"
    gap = writers[5]
    write_segments(gap, 2)  # the active segment closes as [5..12]; then [13..17]
    gap.set_high_watermark()
    gap.delete_oldest_segments(2)  # drops [0..4] (copied) and [5..12] (never copied): a gap
    for w in writers[:5] + writers[6:]:
        write_segments(w, 1)
        w.set_high_watermark()
    run = dag.test()
    assert run.state == "failed"
    copies = task_runs(dag.dag_id, run.run_id, "copy")
    states = {label: (t.state, t.try_number) for label, t in copies.items()}
    failing = next(label for label, t in copies.items() if any(r["partition"] == 5 for r in t.result))
    assert states.pop(failing) == ("failed", 1)  # no retry hid the gap
    assert set(states.values()) == {("success", 1)}
    results = lane_results(copies)
    assert (results["orders-5"]["outcome"], results["orders-5"]["gaps"]) == ("gap", [[5, 12]])
    assert "tiering gap" in results["orders-5"]["detail"]
    others = [r for label, r in results.items() if label != "orders-5"]
    assert len(others) == PARTITIONS - 1 and all(r["outcome"] == "copied" for r in others)
    assert finished(tiering, gap)[-1:] == [(13, 17)]  # what remained was copied
    assert all(len(finished(tiering, w)) == 2 for w in writers[:5] + writers[6:])


def test_a_run_plans_once_building_each_partition_s_view_at_most_twice(
    tiering: TieringEnv, max_map_length: int
) -> None:
    """The sensor plans (one view per partition, its eligibility and urgency handed to the listing
    task); a lane reads a partition's view under its lease, and nothing else does."""
    writers = partitions_with_segments(tiering, "orders", PARTITIONS, 2)
    idle = tiering.writer("orders", PARTITIONS)
    idle.append_records(3)  # only the active segment: nothing to copy
    idle.set_high_watermark()
    dag = dagbag(DAGS / "tiering_dags.py").dags["tiering_copy__orders"]
    with counted_view_builds() as builds:
        run = dag.test()
    assert run.state == "success"
    assert sorted(builds) == sorted(w.path for w in [*writers, idle])
    assert max(builds.values()) <= 2, {path.name: count for path, count in builds.items()}
    results = lane_results(task_runs(dag.dag_id, run.run_id, "copy"))
    assert sorted(results) == sorted(f"orders-{p}" for p in range(PARTITIONS))  # the plan's: not the idle one
    assert all(r["segments_copied"] == 2 for r in results.values())
    assert [finished(tiering, w) for w in writers] == [[(0, 4), (5, 9)]] * PARTITIONS


def test_the_tiering_page_links_each_partition_to_the_lane_that_ran_it(
    tiering: TieringEnv, max_map_length: int
) -> None:
    from tiering_airflow.ui.view import task_log_url
    from tiering_core.monitoring.collect import collect_metrics

    partitions_with_segments(tiering, "orders", PARTITIONS, 1)
    dag = dagbag(DAGS / "tiering_dags.py").dags["tiering_copy__orders"]
    run = dag.test()
    assert run.state == "success"
    copies = task_runs(dag.dag_id, run.run_id, "copy")
    (listing,) = task_runs(dag.dag_id, run.run_id, "list_partitions").values()
    lane_of = {
        str(tp): index for index, lane in enumerate(listing.result) for tp in lane_partitions(lane["partitions"])
    }
    assert sorted(set(lane_of.values())) == list(range(BOUND)) and len(copies) == BOUND
    with tiering.context() as ctx:
        snapshot = collect_metrics(ctx, "orders")
    linked = {f"{p.topic}-{p.partition}": p.last_task for p in snapshot.partitions}
    assert sorted(linked) == sorted(lane_of)
    for label, task in linked.items():
        assert task == TaskAttempt(dag.dag_id, run.run_id, "copy", lane_of[label], 1), label
        assert task_log_url(task).endswith(f"/tasks/copy/mapped/{lane_of[label]}?try_number=1")


class ProcessKilled(Exception):
    """The injected fault: the worker dies after a segment's upload, before its FINISHED."""


@pytest.fixture()
def first_try_killed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The first commit dies as a killed process would: the lane stops mid-copy and nothing gives
    its leases up (no release, no more renewals). Yields the holders whose release was lost."""
    from tiering_core.engine.lease import HeldPartition
    from tiering_core.runs.copy import CopyRun

    real_commit, real_release = CopyRun.commit_finished_segment, HeldPartition._release
    killed: list[str] = []

    def commit(run: CopyRun, *args: Any, **kwargs: Any) -> bool:
        if not killed:
            killed.append("commit")
            raise ProcessKilled("SIGKILL")
        return real_commit(run, *args, **kwargs)

    def release(held: HeldPartition) -> None:
        if killed and killed[0] == "commit" and len(killed) < 3:  # the dead process's two leases stay
            killed.append(held.lease.holder)
            held._stop.set()
            if held._thread is not None:
                held._thread.join()
            return
        real_release(held)

    monkeypatch.setattr(CopyRun, "commit_finished_segment", commit)
    monkeypatch.setattr(HeldPartition, "_release", release)
    yield killed


def one_lane_dag(dag_id: str, retries: int = 1) -> Any:
    """A DAG of one copy lane of two partitions, retried at once after a failed try (``retries``),
    written to Airflow's database as the DAG processor would (``dag.test()`` runs only stored DAGs)."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.sdk import DAG

    from tiering_airflow.operators.tiering import TieringCopyLaneOperator

    with DAG(dag_id, schedule=None, start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC)) as dag:
        TieringCopyLaneOperator(
            task_id="lane",
            partitions=[["orders", 0], ["orders", 1]],
            lane="lane-0 (2 partitions)",
            retries=retries,
            retry_delay=dt.timedelta(0),
        )
    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(collect_dags=False)
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)
    return dag


def test_the_retry_of_a_killed_lane_takes_over_its_leases_and_converges(
    tiering: TieringEnv, first_try_killed: list[str]
) -> None:
    writers = partitions_with_segments(tiering, "orders", 2, 2)
    dag = one_lane_dag("tiering_lane_retry_takes_over")
    run = dag.test()
    assert run.state == "success"
    (task,) = task_runs(dag.dag_id, run.run_id, "lane").values()
    assert (task.state, task.try_number) == ("success", 2)
    first = TaskAttempt(dag.dag_id, run.run_id, "lane", -1, 1)
    assert first_try_killed[:2] == ["commit", first.holder("copy")]  # try 1 died holding its leases
    results = {r["partition"]: r for r in task.result}
    assert all(r["outcome"] == "copied" and not r["fenced"] for r in results.values())
    assert sum(r["segments_cleaned_up"] for r in results.values()) >= 1  # the killed try's upload
    with tiering.context() as ctx:
        for w in writers:
            segments = ctx.metadata.list_segments(tip_of(w), include_deleted=True)
            done = [
                (s.start_offset, s.end_offset)
                for s in segments
                if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
            ]
            assert done == [(0, 4), (5, 9)]
            record = ctx.metadata.get_partition(tip_of(w))
            assert record is not None and record.lease_holder is None  # try 2 released what it took over


def stopped_at_partition_1(monkeypatch: pytest.MonkeyPatch, stop: Callable[[], None]) -> list[int]:
    """The injected fault: ``stop`` (how Airflow stops the task) runs in the lane's driver as
    partition 1's first segment commits, once partition 0 has ended. One upload at a time, so
    partition 0's segments commit before partition 1 begins. Returns the partitions of the commits."""
    from tiering_core.runs.copy import CopyRun

    real_commit = CopyRun.commit_finished_segment
    seen: list[int] = []

    def commit(run: CopyRun, *args: Any, **kwargs: Any) -> bool:
        seen.append(run.tp.partition)
        if run.tp.partition == 1 and seen.count(1) == 1:
            stop()
        return real_commit(run, *args, **kwargs)

    monkeypatch.setattr(CopyRun, "commit_finished_segment", commit)
    return seen


def one_upload_at_a_time(tiering: TieringEnv) -> None:
    tiering.sections["copy"] = {"concurrency": 1}
    tiering.write_config()


def test_a_lane_stopped_by_its_execution_timeout_leaves_the_partitions_it_finished_in_its_xcom(
    tiering: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.sdk.exceptions import AirflowTaskTimeout

    def timeout() -> None:  # what Airflow's execution_timeout raises in the task's main thread
        raise AirflowTaskTimeout("Timeout, PID: 1")

    one_upload_at_a_time(tiering)
    writers = partitions_with_segments(tiering, "orders", 2, 2)
    commits = stopped_at_partition_1(monkeypatch, timeout)
    dag = one_lane_dag("tiering_lane_timed_out", retries=0)
    run = dag.test()
    assert run.state == "failed"
    (task,) = task_runs(dag.dag_id, run.run_id, "lane").values()
    assert (task.state, commits) == ("failed", [0, 0, 1])
    (result,) = task.result  # partition 0 ended; partition 1 was stopped with it
    assert (result["partition"], result["outcome"], result["segments_copied"]) == (0, "copied", 2)
    assert [finished(tiering, w) for w in writers] == [[(0, 4), (5, 9)], []]


def test_a_lane_killed_by_sigterm_starts_nothing_new_and_its_xcom_lists_every_partition(
    tiering: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import signal

    one_upload_at_a_time(tiering)
    writers = partitions_with_segments(tiering, "orders", 2, 2)
    commits = stopped_at_partition_1(monkeypatch, lambda: os.kill(os.getpid(), signal.SIGTERM))
    dag = one_lane_dag("tiering_lane_killed", retries=0)
    run = dag.test()
    (task,) = task_runs(dag.dag_id, run.run_id, "lane").values()
    assert commits == [0, 0, 1]  # on_kill: partition 1's segment in flight committed, none started after
    results = {r["partition"]: (r["outcome"], r["segments_copied"]) for r in task.result}
    assert results == {0: ("copied", 2), 1: ("deferred", 1)}
    assert [finished(tiering, w) for w in writers] == [[(0, 4), (5, 9)], [(0, 4)]]


def test_a_copy_budget_not_shorter_than_the_dag_s_period_is_an_import_error_naming_it(tiering: TieringEnv) -> None:
    import yaml

    doc = yaml.safe_load(tiering.config_path.read_text())
    doc["copy"] = {"budget_seconds": 600}
    tiering.config_path.write_text(yaml.safe_dump(doc))
    bag = dagbag(DAGS / "tiering_dags.py")
    (error,) = bag.import_errors.values()
    assert "copy.budget_seconds: 600 s is not shorter than the DAG's period of 600 s" in error
