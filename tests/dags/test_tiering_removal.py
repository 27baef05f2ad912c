"""The manual partition-removal DAG: Param validation at trigger time, the confirmation check,
dry runs that change nothing, and a real removal against moto's S3 server."""

from __future__ import annotations

import pytest

from tests.airflow_support import ROOT, task_runs
from tests.engine_support import TieringEnv, tip_of, write_segments
from tiering_core.copy import run_copy
from tiering_core.kafka.writer import PartitionWriter
from tiering_core.metadata.states import RemoteLogSegmentState

DAG_FILE = ROOT / "dags" / "tiering_removal.py"


@pytest.fixture()
def removal_dag(tiering: TieringEnv):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAG_FILE))
    assert bag.import_errors == {}
    return bag.dags["tiering_delete_partition"]


@pytest.fixture()
def copied(tiering: TieringEnv, s3_endpoint) -> list[PartitionWriter]:
    """orders-0 and orders-1, two segments each, copied to the bucket."""
    from plugins.hooks.tiering import TieringHook

    writers = []
    for p in range(2):
        w = tiering.writer("orders", p)
        write_segments(w, 2)
        w.set_high_watermark()
        writers.append(w)
    with TieringHook().get_conn() as ctx:  # endpoint and credentials from the aws_default connection
        for w in writers:
            assert run_copy(ctx, w.tp).segments_copied == 2
    return writers


def remote_state(tiering: TieringEnv, s3_endpoint, w: PartitionWriter) -> tuple[int, int]:
    """(finished segments in the metadata store, objects in the bucket) of one partition."""
    with tiering.context() as ctx:
        segments = [
            s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ]
    prefix = f"t/orders-{w.topic_id}/{w.tp.partition}/"
    listing = s3_endpoint.client().list_objects_v2(Bucket=tiering.remote["bucket"], Prefix=prefix)
    return len(segments), len(listing.get("Contents", []))


def test_dry_run_is_the_default_and_changes_nothing(removal_dag, copied, tiering: TieringEnv, s3_endpoint) -> None:
    before = [remote_state(tiering, s3_endpoint, w) for w in copied]
    assert all(segments == 2 and objects > 2 for segments, objects in before)
    run = removal_dag.test(run_conf={"topic": "orders", "partitions": [1, 0], "confirm": "orders"})
    assert run.state == "success"
    runs = task_runs(removal_dag.dag_id, run.run_id, "delete_partition")
    assert sorted(runs) == ["orders-0", "orders-1"]
    for task in runs.values():
        assert task.result["dry_run"] is True and len(task.result["planned"]) == 2
        assert task.result["segments_deleted"] == 0
    assert [remote_state(tiering, s3_endpoint, w) for w in copied] == before


def test_removal_deletes_the_partitions_data_and_only_theirs(
    removal_dag, copied, tiering: TieringEnv, s3_endpoint
) -> None:
    kept = remote_state(tiering, s3_endpoint, copied[0])
    run = removal_dag.test(run_conf={"topic": "orders", "partitions": [1], "confirm": "orders", "dry_run": False})
    assert run.state == "success"
    (task,) = task_runs(removal_dag.dag_id, run.run_id, "delete_partition").values()
    assert task.label == "orders-1" and task.result["segments_deleted"] == 2
    assert task.result["state"] == "DELETE_PARTITION_FINISHED" and task.result["bytes_deleted"] > 0
    assert remote_state(tiering, s3_endpoint, copied[1]) == (0, 0)
    assert remote_state(tiering, s3_endpoint, copied[0]) == kept


@pytest.mark.parametrize(
    ("conf", "reason"),
    [
        ({"topic": "orders", "partitions": [0], "confirm": "order", "dry_run": False}, "confirm must repeat"),
        ({"topic": "orders", "partitions": [0, 7], "confirm": "orders", "dry_run": False}, "[7] have no remote"),
    ],
)
def test_refused_requests_fail_in_the_first_task_and_delete_nothing(
    removal_dag, copied, tiering: TieringEnv, s3_endpoint, conf: dict, reason: str, capfd: pytest.CaptureFixture[str]
) -> None:
    before = [remote_state(tiering, s3_endpoint, w) for w in copied]
    run = removal_dag.test(run_conf=conf)
    assert run.state == "failed"
    (check,) = task_runs(removal_dag.dag_id, run.run_id, "validate_request").values()
    assert (check.state, check.try_number) == ("failed", 1)
    assert reason in "".join(capfd.readouterr())
    assert all(t.state != "success" for t in task_runs(removal_dag.dag_id, run.run_id, "delete_partition").values())
    assert [remote_state(tiering, s3_endpoint, w) for w in copied] == before


@pytest.mark.parametrize(
    "conf",
    [
        {"partitions": [0], "confirm": "orders"},  # no topic
        {"topic": "orders", "confirm": "orders"},  # no partitions
        {"topic": "orders", "partitions": [0]},  # no confirmation
        {"topic": "orders", "partitions": [], "confirm": "orders"},
        {"topic": "orders", "partitions": [-1], "confirm": "orders"},
        {"topic": "orders", "partitions": ["0"], "confirm": "orders"},
        {"topic": "orders", "partitions": [0, 0], "confirm": "orders"},
        {"topic": "bad topic!", "partitions": [0], "confirm": "bad topic!"},
        {"topic": "..", "partitions": [0], "confirm": ".."},
        {"topic": "t" * 250, "partitions": [0], "confirm": "t" * 250},
        {"topic": "orders", "partitions": [0], "confirm": "orders", "dry_run": "no"},
    ],
)
def test_invalid_params_are_rejected_before_a_run_exists(removal_dag, conf: dict) -> None:
    from airflow.exceptions import ParamValidationError
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    def runs() -> int:
        with create_session() as session:
            return session.scalar(select(func.count()).where(DagRun.dag_id == removal_dag.dag_id))

    before = runs()
    with pytest.raises(ParamValidationError):
        removal_dag.test(run_conf=conf)
    assert runs() == before
