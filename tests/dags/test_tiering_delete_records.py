"""The manual DeleteRecords DAG: Param validation at trigger time, the confirmation, dry runs that
change nothing, refusals that are not retried, a partition held by another run retried, and real
DeleteRecords applied to the remote tier (moto's S3 server, SQLite) that retention then acts on."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.airflow_support import ROOT, task_runs
from tests.engine_support import TieringEnv, tip_of, write_segments
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.runs.copy import run_copy
from tiering_core.runs.retention import run_retention

DAG_FILE = ROOT / "dags" / "tiering_delete_records.py"


@pytest.fixture()
def delete_records_dag(tiering: TieringEnv):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAG_FILE))
    assert bag.import_errors == {}
    return bag.dags["tiering_delete_records"]


@pytest.fixture()
def copied(tiering: TieringEnv, s3_endpoint) -> PartitionWriter:
    """orders-0: [0..4], [5..9], [10..14] copied to the bucket through the aws_default connection, HW 17."""
    from tiering_airflow.hooks.tiering import TieringHook

    w = tiering.writer("orders", 0)
    write_segments(w, 3)
    w.append_records(2)
    w.set_high_watermark()
    with TieringHook().get_conn() as ctx:
        assert run_copy(ctx, w.tp).segments_copied == 3
    return w


def state(tiering: TieringEnv, w: PartitionWriter) -> tuple[list[tuple[int, int]], int | None, list[int]]:
    """(finished segments, the applied DeleteRecords offset, every DeleteRecords row's offset)."""
    with tiering.context() as ctx:
        tip = tip_of(w)
        finished = [
            (s.start_offset, s.end_offset)
            for s in ctx.metadata.list_segments(tip)
            if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ]
        rows = [o.offset for o in ctx.metadata.delete_records_observations(tip)]
        return finished, ctx.metadata.get_delete_records_offset(tip), rows


def test_dry_run_is_the_default_and_changes_nothing(delete_records_dag, copied, tiering: TieringEnv) -> None:
    before = state(tiering, copied)
    run = delete_records_dag.test(run_conf={"topic": "orders", "partition": 0, "before_offset": 7, "confirm": "orders"})
    assert run.state == "success"
    (task,) = task_runs(delete_records_dag.dag_id, run.run_id, "delete_records").values()
    assert (task.result["dry_run"], task.result["log_start_offset"], task.result["high_watermark"]) == (True, 7, 17)
    assert task.result["sent_to_cluster"] is False
    assert state(tiering, copied) == before


def test_a_delete_records_is_applied_once_and_retention_acts_on_it(
    delete_records_dag, copied, tiering: TieringEnv
) -> None:
    conf = {"topic": "orders", "partition": 0, "before_offset": 7, "confirm": "orders", "dry_run": False}
    for _ in range(2):  # run again: the same answer, nothing more recorded
        run = delete_records_dag.test(run_conf=conf)
        assert run.state == "success"
        (task,) = task_runs(delete_records_dag.dag_id, run.run_id, "delete_records").values()
        assert (task.state, task.try_number, task.result["dry_run"]) == ("success", 1, False)
        assert (task.result["log_start_offset"], task.result["topic_id"]) == (7, copied.topic_id)
        assert state(tiering, copied) == ([(0, 4), (5, 9), (10, 14)], 7, [7])
    from tiering_airflow.hooks.tiering import TieringHook

    with TieringHook().get_conn() as ctx:  # the bucket's endpoint is the aws_default connection's
        assert run_retention(ctx, copied.tp).segments_deleted == 1
    assert state(tiering, copied)[0] == [(5, 9), (10, 14)]


@pytest.mark.parametrize(
    ("conf", "reason"),
    [
        ({"before_offset": 7, "confirm": "order"}, "confirm must repeat the topic name 'orders'"),
        ({"before_offset": 18, "confirm": "orders"}, "offset 18 is beyond the high watermark 17"),
        ({"before_offset": 3, "confirm": "orders", "partition": 1}, "partition orders-1 is not in the log dirs"),
    ],
)
def test_refused_requests_fail_at_once_and_apply_nothing(
    delete_records_dag, copied, tiering: TieringEnv, conf: dict, reason: str, capfd, caplog
) -> None:
    before = state(tiering, copied)
    run = delete_records_dag.test(run_conf={"topic": "orders", "partition": 0, "dry_run": False, **conf})
    assert run.state == "failed"
    (task,) = task_runs(delete_records_dag.dag_id, run.run_id, "delete_records").values()
    assert (task.state, task.try_number) == ("failed", 1)  # a refusal is not retried
    assert reason in "".join(capfd.readouterr()) + caplog.text
    assert state(tiering, copied) == before


def test_an_untiered_partition_is_refused(delete_records_dag, tiering: TieringEnv, capfd, caplog) -> None:
    w = tiering.writer("orders", 0)
    write_segments(w, 2)
    w.set_high_watermark()
    conf = {"topic": "orders", "partition": 0, "before_offset": 3, "confirm": "orders", "dry_run": False}
    run = delete_records_dag.test(run_conf=conf)
    assert run.state == "failed"
    (task,) = task_runs(delete_records_dag.dag_id, run.run_id, "delete_records").values()
    assert (task.state, task.try_number) == ("failed", 1)
    assert "nothing tiered" in "".join(capfd.readouterr()) + caplog.text
    with tiering.context() as ctx:
        assert ctx.metadata.list_partitions() == []


def test_a_partition_held_by_another_run_is_retried(
    delete_records_dag, copied, tiering: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another run holds the partition's lease when the first try starts (a real lease in the store)
    and lets it go right after: the try fails with nothing applied, the retry applies it."""
    from contextlib import contextmanager

    import tiering_core.runs.delete_records as delete_records
    from tiering_core.metadata.errors import LeaseHeldError
    from tiering_core.metadata.store import RemoteLogMetadataStore

    store = RemoteLogMetadataStore(tiering.metadata_url)
    other = store.acquire_lease(tip_of(copied), holder="copy:elsewhere")
    real = delete_records.held_partition
    refused: list[str] = []

    @contextmanager
    def then_released(*args, **kwargs):
        try:
            with real(*args, **kwargs) as held:
                yield held
        except LeaseHeldError as exc:
            refused.append(str(exc))
            store.release_lease(other)  # the other run ends
            raise

    monkeypatch.setattr(delete_records, "held_partition", then_released)
    task = delete_records_dag.get_task("delete_records")
    task.retry_delay = timedelta(0)  # retry at once in the test
    conf = {"topic": "orders", "partition": 0, "before_offset": 7, "confirm": "orders", "dry_run": False}
    try:
        run = delete_records_dag.test(run_conf=conf)
    finally:
        store.close()
    assert run.state == "success" and len(refused) == 1 and "copy:elsewhere" in refused[0]
    (done,) = task_runs(delete_records_dag.dag_id, run.run_id, "delete_records").values()
    assert (done.state, done.try_number, done.result["log_start_offset"]) == ("success", 2, 7)
    assert state(tiering, copied)[1:] == (7, [7])


@pytest.mark.parametrize(
    "conf",
    [
        {"topic": "orders", "partition": 0, "before_offset": -1, "confirm": "orders"},
        {"topic": "orders", "partition": -1, "before_offset": 7, "confirm": "orders"},
        {"topic": "orders", "partition": 0, "confirm": "orders"},
        {"topic": "bad topic", "partition": 0, "before_offset": 7, "confirm": "bad topic"},
        {"topic": "orders", "partition": 0, "before_offset": "7", "confirm": "orders"},
        {"topic": "orders", "partition": 0, "before_offset": 7, "confirm": "orders", "dry_run": "no"},
    ],
)
def test_invalid_params_are_rejected_before_a_run_exists(delete_records_dag, conf: dict) -> None:
    from airflow.exceptions import ParamValidationError
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    def runs() -> int:
        with create_session() as session:
            return session.scalar(select(func.count()).where(DagRun.dag_id == delete_records_dag.dag_id))

    before = runs()
    with pytest.raises(ParamValidationError):
        delete_records_dag.test(run_conf=conf)
    assert runs() == before
