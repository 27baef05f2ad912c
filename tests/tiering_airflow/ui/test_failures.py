"""The failing runs come from Airflow's own database: a real copy DAG run whose lane failed on a
tiering gap is listed with that lane's try, its label and the gap's reason from the lane's XCom;
every text shown is one bounded line with anything that looks like a credential masked."""

from __future__ import annotations

import pytest

from tests.dags.test_tiering_dags import DAGS, dagbag, partitions_with_segments
from tests.engine_support import TieringEnv, write_segments
from tests.tiering_airflow.ui.test_metrics import stored_dag
from tiering_airflow.ui.failures import ERROR_CHARS, FailedTask, concerns, failed_tasks, lane_error, shown_error
from tiering_airflow.ui.view import task_log_url
from tiering_core.metadata.values import TaskAttempt


def test_a_lane_failed_on_a_gap_is_listed_with_its_reason_and_its_log(tiering: TieringEnv) -> None:
    tiering.write_config(orders={})
    writers = partitions_with_segments(tiering, "orders", 2, 1)
    dag = dagbag(DAGS / "tiering_dags.py").dags["tiering_copy__orders"]
    assert dag.test().state == "success"
    assert [f for f in failed_tasks() if f.attempt.dag_id == dag.dag_id] == []  # its latest run succeeded
    gap = writers[1]
    write_segments(gap, 2)
    gap.set_high_watermark()
    gap.delete_oldest_segments(2)  # offsets never copied are gone: a tiering gap
    run = dag.test()
    assert run.state == "failed"
    (failed,) = [f for f in failed_tasks() if f.attempt.dag_id == dag.dag_id]
    assert (failed.attempt.run_id, failed.attempt.task_id, failed.attempt.try_number) == (run.run_id, "copy", 1)
    assert failed.partitions == ("orders-1",) and failed.ended_ms is not None
    assert failed.error.startswith("orders-1: ") and "tiering gap" in failed.error.lower()
    assert "orders-1: orders-1" not in failed.error
    assert len(failed.error) <= ERROR_CHARS
    assert f"/runs/{run.run_id.replace(':', '%3A').replace('+', '%2B')}/tasks/copy" in task_log_url(failed.attempt)


def test_a_failure_without_a_lane_s_results_points_to_its_log_until_a_later_run_succeeds(
    tiering: TieringEnv,
) -> None:
    ours, theirs = stored_dag("tiering_page_failing", ["tiering"]), stored_dag("reports_failing", ["reports"])
    failing = ours.test(run_conf={"fail": True})
    assert failing.state == "failed" and theirs.test(run_conf={"fail": True}).state == "failed"
    listed = {f.attempt.dag_id: f for f in failed_tasks()}
    assert "reports_failing" not in listed  # another team's DAG is not the platform's
    failed = listed["tiering_page_failing"]
    assert (failed.attempt.run_id, failed.attempt.task_id, failed.partitions) == (failing.run_id, "tier", ())
    assert failed.error == "failed: the reason is in the task's log"
    assert ours.test().state == "success"
    assert "tiering_page_failing" not in {f.attempt.dag_id for f in failed_tasks()}


def test_lane_results_name_the_failed_partitions_and_a_few_reasons() -> None:
    results = [{"topic": "orders", "partition": p, "outcome": "failed", "detail": f"boom {p}"} for p in range(5)]
    results[1]["detail"] = "orders-1: boom 1"  # a detail that names its partition is not named twice
    results.append({"topic": "orders", "partition": 9, "outcome": "copied", "detail": ""})
    found = lane_error(results)
    assert found is not None
    names, reasons = found
    assert names == tuple(f"orders-{p}" for p in range(5))
    assert reasons == "orders-0: boom 0; orders-1: boom 1; orders-2: boom 2 (and 2 more)"
    assert lane_error(results[-1:]) is None and lane_error({"not": "a lane"}) is None


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("cannot reach postgresql://tiering:pg-Secret-1@db:5432/meta", "pg-Secret-1"),
        ("S3 said: aws_secret_access_key=AbCdEf123/xyz denied", "AbCdEf123/xyz"),
        ("request failed: Authorization: Bearer eyJhbGciOi.abc.def", "eyJhbGciOi.abc.def"),
        ("config password: 'hunter2 hunter2' refused", "hunter2"),
        ("?token=tok-9988&x=1 failed", "tok-9988"),
    ],
)
def test_a_credential_in_an_error_is_never_shown(text: str, secret: str) -> None:
    shown = shown_error(text)
    assert secret not in shown and "***" in shown


def test_an_error_is_one_line_and_bounded() -> None:
    shown = shown_error("line one\n  line two\t" + "x" * 1000)
    assert shown.startswith("line one line two x") and len(shown) == ERROR_CHARS and shown.endswith("…")
    assert shown_error("short") == "short"


def test_a_failure_concerns_the_topics_it_names_else_its_dag_s() -> None:
    lane = FailedTask(TaskAttempt("tiering_copy_default_topics", "r", "copy", 0, 1), None, None, ("a-b-10",), "x")
    assert concerns(lane, "a-b", ()) and not concerns(lane, "a", ()) and not concerns(lane, "a-b-1", ())
    unnamed = FailedTask(TaskAttempt("tiering_copy__orders", "r", "list_partitions"), None, None, (), "x")
    assert concerns(unnamed, "orders", ("tiering_copy__orders", "tiering_retention__orders"))
    assert not concerns(unnamed, "clicks", ("tiering_copy__clicks",))
