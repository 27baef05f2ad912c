"""The manual partition-removal DAG: Param validation at trigger time, the confirmation check, the
refusal of live data (a topic id still in the broker's log dirs) unless ``force``, dry runs that
change nothing, retries of transient errors, and real removals against moto's S3 server."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from tests.airflow_support import ROOT, task_runs
from tests.engine_support import TieringEnv, kafka_deletes_topic, tip_of, write_segments
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.topic import TopicPartition
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.runs.copy import run_copy

DAG_FILE = ROOT / "dags" / "tiering_removal.py"


@pytest.fixture()
def removal_dag(tiering: TieringEnv):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAG_FILE))
    assert bag.import_errors == {}
    return bag.dags["tiering_delete_partition"]


def copy_partitions(tiering: TieringEnv, topic: str, partitions: list[int]) -> list[PartitionWriter]:
    """The partitions, two segments each, copied to the bucket through the aws_default connection."""
    from tiering_airflow.hooks.tiering import TieringHook

    writers = []
    for p in partitions:
        w = tiering.writer(topic, p)
        write_segments(w, 2)
        w.set_high_watermark()
        writers.append(w)
    with TieringHook().get_conn() as ctx:  # endpoint and credentials from the aws_default connection
        for w in writers:
            assert run_copy(ctx, w.tp).segments_copied == 2
    return writers


@pytest.fixture()
def on_broker(tiering: TieringEnv, s3_endpoint) -> list[PartitionWriter]:
    """orders-0 and orders-1, copied, and still in the broker's log dirs (live data)."""
    return copy_partitions(tiering, "orders", [0, 1])


@pytest.fixture()
def copied(on_broker: list[PartitionWriter]) -> list[PartitionWriter]:
    """The same partitions after they were removed from the broker: only their remote data is left."""
    for w in on_broker:
        kafka_deletes_topic(w)  # the controller's word; the broker renames it <topic>-<partition>.<uuid>-delete
    return on_broker


def remote_state(tiering: TieringEnv, s3_endpoint, w: PartitionWriter) -> tuple[int, int]:
    """(finished segments in the metadata store, objects in the bucket) of one partition's topic id."""
    with tiering.context() as ctx:
        segments = [
            s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ]
    prefix = f"t/{w.tp.topic}-{w.topic_id}/{w.tp.partition}/"
    listing = s3_endpoint.client().list_objects_v2(Bucket=tiering.remote["bucket"], Prefix=prefix)
    return len(segments), len(listing.get("Contents", []))


def logged(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> str:
    return "".join(capfd.readouterr()) + caplog.text


def test_dry_run_is_the_default_and_changes_nothing(removal_dag, copied, tiering: TieringEnv, s3_endpoint) -> None:
    before = [remote_state(tiering, s3_endpoint, w) for w in copied]
    assert all(segments == 2 and objects > 2 for segments, objects in before)
    run = removal_dag.test(run_conf={"topic": "orders", "partitions": [1, 0], "confirm": "orders"})
    assert run.state == "success"
    runs = task_runs(removal_dag.dag_id, run.run_id, "delete_partition")
    assert sorted(runs) == ["orders-0", "orders-1"]
    for label, task in runs.items():
        w = copied[int(label[-1])]
        assert task.result["dry_run"] is True and len(task.result["planned"]) == 2
        assert task.result["topic_ids"] == [w.topic_id] and task.result["segments_deleted"] == 0
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
    # Run again: already removed, reported finished, nothing else touched.
    again = removal_dag.test(run_conf={"topic": "orders", "partitions": [1], "confirm": "orders", "dry_run": False})
    assert again.state == "success"
    (task,) = task_runs(removal_dag.dag_id, again.run_id, "delete_partition").values()
    assert task.result["state"] == "DELETE_PARTITION_FINISHED" and task.result["segments_deleted"] == 0
    assert remote_state(tiering, s3_endpoint, copied[0]) == kept


@pytest.mark.parametrize(
    ("conf", "reason"),
    [
        ({"topic": "orders", "partitions": [0], "confirm": "order", "dry_run": False}, "confirm must repeat"),
        (
            {"topic": "orders", "partitions": [0, 7], "confirm": "orders", "dry_run": False},
            "partition(s) orders-7 have no remote data",
        ),
    ],
)
def test_refused_requests_fail_in_the_first_task_and_delete_nothing(
    removal_dag, copied, tiering: TieringEnv, s3_endpoint, conf: dict, reason: str, capfd, caplog
) -> None:
    before = [remote_state(tiering, s3_endpoint, w) for w in copied]
    run = removal_dag.test(run_conf=conf)
    assert run.state == "failed"
    (check,) = task_runs(removal_dag.dag_id, run.run_id, "validate_request").values()
    assert (check.state, check.try_number) == ("failed", 1)  # a refusal is not retried
    assert reason in logged(capfd, caplog)
    assert all(t.state != "success" for t in task_runs(removal_dag.dag_id, run.run_id, "delete_partition").values())
    assert [remote_state(tiering, s3_endpoint, w) for w in copied] == before


def test_a_partition_still_on_the_broker_is_refused_without_force(
    removal_dag, on_broker, tiering: TieringEnv, s3_endpoint, capfd, caplog
) -> None:
    """orders-1 was removed from the broker, orders-0 was not: the request for both deletes nothing."""
    kafka_deletes_topic(on_broker[1])
    before = [remote_state(tiering, s3_endpoint, w) for w in on_broker]
    conf = {"topic": "orders", "partitions": [0, 1], "confirm": "orders", "dry_run": False}
    run = removal_dag.test(run_conf=conf)
    assert run.state == "failed"
    (check,) = task_runs(removal_dag.dag_id, run.run_id, "validate_request").values()
    assert (check.state, check.try_number) == ("failed", 1)
    text = logged(capfd, caplog)
    assert (
        f"still in the broker's log dirs, so their remote data is live: orders-0 (topic id {on_broker[0].topic_id})"
        in text
    )
    assert "Set force to delete it anyway" in text and "nothing deleted" in text
    deletes = task_runs(removal_dag.dag_id, run.run_id, "delete_partition").values()
    assert [t.state for t in deletes] == ["upstream_failed"]  # never expanded, never ran
    assert [remote_state(tiering, s3_endpoint, w) for w in on_broker] == before


def test_a_dry_run_of_live_data_passes_and_says_a_real_run_needs_force(
    removal_dag, on_broker, tiering: TieringEnv, s3_endpoint, capfd, caplog
) -> None:
    before = [remote_state(tiering, s3_endpoint, w) for w in on_broker]
    conf = {"topic": "orders", "partitions": [0], "confirm": "orders", "dry_run": True}
    run = removal_dag.test(run_conf=conf)
    assert run.state == "success"
    assert "dry run: a real run would be refused: still in the broker's log dirs" in logged(capfd, caplog)
    (task,) = task_runs(removal_dag.dag_id, run.run_id, "delete_partition").values()
    assert (task.result["dry_run"], task.result["planned"], task.result["topic_ids"]) == (True, [], [])
    forced = removal_dag.test(run_conf={**conf, "force": True})
    assert forced.state == "success"
    (task,) = task_runs(removal_dag.dag_id, forced.run_id, "delete_partition").values()
    assert task.result["topic_ids"] == [on_broker[0].topic_id] and len(task.result["planned"]) == 2
    assert [remote_state(tiering, s3_endpoint, w) for w in on_broker] == before


def test_force_deletes_a_partition_still_on_the_broker(
    removal_dag, on_broker, tiering: TieringEnv, s3_endpoint
) -> None:
    kept = remote_state(tiering, s3_endpoint, on_broker[1])
    conf = {"topic": "orders", "partitions": [0], "confirm": "orders", "dry_run": False, "force": True}
    run = removal_dag.test(run_conf=conf)
    assert run.state == "success"
    (task,) = task_runs(removal_dag.dag_id, run.run_id, "delete_partition").values()
    assert (task.label, task.result["segments_deleted"], task.result["state"]) == (
        "orders-0",
        2,
        "DELETE_PARTITION_FINISHED",
    )
    assert remote_state(tiering, s3_endpoint, on_broker[0]) == (0, 0)
    assert remote_state(tiering, s3_endpoint, on_broker[1]) == kept


@pytest.fixture()
def recreated(tiering: TieringEnv, s3_endpoint) -> tuple[PartitionWriter, PartitionWriter]:
    """orders-0 tiered, the topic deleted and recreated (a new topic id), the new one tiered too."""
    (old,) = copy_partitions(tiering, "orders", [0])
    kafka_deletes_topic(old)
    (new,) = copy_partitions(tiering, "orders", [0])
    assert new.topic_id != old.topic_id
    return old, new


def test_a_recreated_topic_keeps_its_live_data(
    removal_dag, recreated, tiering: TieringEnv, s3_endpoint, capfd, caplog
) -> None:
    old, new = recreated
    live = remote_state(tiering, s3_endpoint, new)
    run = removal_dag.test(run_conf={"topic": "orders", "partitions": [0], "confirm": "orders", "dry_run": False})
    assert run.state == "success"
    (task,) = task_runs(removal_dag.dag_id, run.run_id, "delete_partition").values()
    assert task.result["topic_ids"] == [old.topic_id] and task.result["segments_deleted"] == 2
    assert f"topic id(s) ['{new.topic_id}'] are still in the broker's log dirs: kept" in logged(capfd, caplog)
    assert remote_state(tiering, s3_endpoint, old) == (0, 0)
    assert remote_state(tiering, s3_endpoint, new) == live


def test_force_on_a_recreated_topic_deletes_both_topic_ids_as_one_result(
    removal_dag, recreated, tiering: TieringEnv, s3_endpoint
) -> None:
    old, new = recreated
    conf = {"topic": "orders", "partitions": [0], "confirm": "orders", "dry_run": False, "force": True}
    run = removal_dag.test(run_conf=conf)
    assert run.state == "success"
    (task,) = task_runs(removal_dag.dag_id, run.run_id, "delete_partition").values()
    assert task.label == "orders-0" and task.result["topic_ids"] == [old.topic_id, new.topic_id]
    assert task.result["segments_deleted"] == 4 and task.result["state"] == "DELETE_PARTITION_FINISHED"
    assert remote_state(tiering, s3_endpoint, old) == remote_state(tiering, s3_endpoint, new) == (0, 0)


def test_validation_retries_a_transient_store_error(
    removal_dag, copied, tiering: TieringEnv, s3_endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tiering_core.runs.removal as removal
    from tiering_core.metadata.errors import MetadataStoreError

    real = removal.removal_targets
    calls: list[TopicPartition] = []

    def flaky(ctx, tp, topic_id=None):  # the store is unreachable for the first call only
        calls.append(tp)
        if len(calls) == 1:
            raise MetadataStoreError("metadata store unreachable (injected)")
        return real(ctx, tp, topic_id)

    monkeypatch.setattr(removal, "removal_targets", flaky)
    check = removal_dag.get_task("validate_request")
    assert check.retries >= 1
    check.retry_delay = timedelta(0)  # retry at once in the test
    run = removal_dag.test(run_conf={"topic": "orders", "partitions": [1], "confirm": "orders", "dry_run": False})
    assert run.state == "success"
    (validated,) = task_runs(removal_dag.dag_id, run.run_id, "validate_request").values()
    assert (validated.state, validated.try_number) == ("success", 2)
    assert remote_state(tiering, s3_endpoint, copied[1]) == (0, 0)


def test_a_store_outage_while_live_data_is_validated_is_retried_not_refused(
    removal_dag, on_broker, tiering: TieringEnv, s3_endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both partitions are still on the broker (force): the store fails once, right after the first
    partition's live topic id was found. That is a transient error (the task retries), never "no
    such topic id", which would refuse the request without a retry."""
    from tiering_core.metadata.errors import MetadataStoreError
    from tiering_core.metadata.store import RemoteLogMetadataStore

    real = RemoteLogMetadataStore.list_partitions
    calls: list[int] = []

    def flaky(self: RemoteLogMetadataStore) -> list:
        calls.append(len(calls))
        if len(calls) == 2:
            raise MetadataStoreError("metadata store unreachable (injected)")
        return real(self)

    monkeypatch.setattr(RemoteLogMetadataStore, "list_partitions", flaky)
    check = removal_dag.get_task("validate_request")
    check.retry_delay = timedelta(0)  # retry at once in the test
    conf = {"topic": "orders", "partitions": [0, 1], "confirm": "orders", "dry_run": False, "force": True}
    run = removal_dag.test(run_conf=conf)
    assert run.state == "success"
    (validated,) = task_runs(removal_dag.dag_id, run.run_id, "validate_request").values()
    assert (validated.state, validated.try_number) == ("success", 2)
    deletes = task_runs(removal_dag.dag_id, run.run_id, "delete_partition")
    for label, task in deletes.items():
        w = on_broker[int(label[-1])]
        assert task.result["topic_ids"] == [w.topic_id] and task.result["state"] == "DELETE_PARTITION_FINISHED"
    assert sorted(deletes) == ["orders-0", "orders-1"]
    assert [remote_state(tiering, s3_endpoint, w) for w in on_broker] == [(0, 0), (0, 0)]


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
        {"topic": "orders\n", "partitions": [0], "confirm": "orders\n"},
        {"topic": "t" * 250, "partitions": [0], "confirm": "t" * 250},
        {"topic": "orders", "partitions": [0], "confirm": "orders", "dry_run": "no"},
        {"topic": "orders", "partitions": [0], "confirm": "orders", "force": "yes"},
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


NAMES = [
    "orders",
    "a",
    "A.b_c-9",
    "." * 3,
    "x" * 249,
    "x" * 250,
    "",
    ".",
    "..",
    "orders\n",
    "\norders",
    "ord ers",
    "ördérs",
    "orders/../x",
    "orders\x00",
]


def test_the_topic_param_accepts_exactly_the_names_kafka_accepts(removal_dag) -> None:
    """The Param's JSON-schema pattern (Python's search, as Airflow validates) and the core's
    validate_topic_name agree on every name, the newline-ended ones included."""
    from tiering_core.errors import InvalidTopicError
    from tiering_core.kafka.topic import validate_topic_name

    pattern = removal_dag.params.get_param("topic").schema["pattern"]
    assert pattern.startswith("^")
    for name in NAMES:
        try:
            validate_topic_name(name)
            legal = True
        except InvalidTopicError:
            legal = False
        assert (re.search(pattern, name) is not None) == legal, repr(name)


NUMERIC_LOOKING = ["123", "1_0", "True", "1e3", "1.00"]


def test_topics_whose_names_look_like_numbers_or_booleans_are_removed_by_their_exact_name(
    removal_dag, tiering: TieringEnv, s3_endpoint
) -> None:
    """The topic reaches the removal task as the string that was validated, never re-parsed as a
    Python literal (``123`` an int, ``1e3`` the float 1000.0, ``True`` a bool)."""
    writers = [copy_partitions(tiering, topic, [0])[0] for topic in NUMERIC_LOOKING]
    for w in writers:
        kafka_deletes_topic(w)  # Kafka deletes the topic: the controller's word is the evidence
    for topic, w in zip(NUMERIC_LOOKING, writers, strict=True):
        conf = {"topic": topic, "partitions": [0], "confirm": topic, "dry_run": False}
        run = removal_dag.test(run_conf=conf)
        assert run.state == "success", topic
        (task,) = task_runs(removal_dag.dag_id, run.run_id, "delete_partition").values()
        assert task.label == f"{topic}-0" and task.result["segments_deleted"] == 2
        assert remote_state(tiering, s3_endpoint, w) == (0, 0)
