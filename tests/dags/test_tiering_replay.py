"""The manual replay DAG: Params refused before a run exists (a target that is not a name), the
confirmation, the target among the config's and the source checked before anything is written,
one mapped task per source partition replaying the tier (moto's S3 server, SQLite) into a real
Kafka topic named as a replay target, its results in XCom and in the metadata store for the
Tiering page, and a rerun that finds everything there."""

from __future__ import annotations

import uuid

import pytest

from tests.airflow_support import ROOT, task_runs
from tests.engine_support import TieringEnv
from tests.real_kafka import conftest as real_kafka
from tests.real_kafka.cluster import KafkaCluster
from tests.real_kafka.support import consume
from tiering_core.kafka.checkpoints import uuid_to_topic_id
from tiering_core.replay import SourceMark
from tiering_core.runs.copy import run_copy

DAG_FILE = ROOT / "dags" / "tiering_replay.py"
PARTITIONS = 2

# The real-Kafka fixtures, for this module too.
kafka_dist = real_kafka.kafka_dist
kafka = real_kafka.kafka


@pytest.fixture()
def replay_dag(tiering: TieringEnv, kafka: KafkaCluster):
    """The DAG, its config naming the test cluster as the replay target ``cluster``."""
    from airflow.dag_processing.dagbag import DagBag

    tiering.sections = {"replay": {"targets": {"cluster": {"bootstrap_servers": kafka.bootstrap_servers}}}}
    tiering.write_config()
    bag = DagBag(dag_folder=str(DAG_FILE))
    assert bag.import_errors == {}
    return bag.dags["tiering_replay"]


@pytest.fixture()
def tiered(tiering: TieringEnv, s3_endpoint) -> str:
    """orders-0 and orders-1 (one topic id): three segments of five records each (keys, values, a
    header) copied through the aws_default connection; the topic id."""
    from tiering_airflow.hooks.tiering import TieringHook

    topic_id = uuid_to_topic_id(uuid.uuid4())
    writers = [tiering.writer("orders", p, topic_id=topic_id) for p in range(PARTITIONS)]
    for w in writers:
        for s in range(3):
            w.append([(f"k{w.tp.partition}-{s}-{i}".encode(), f"v{s}-{i}".encode(), (("h", b"x"),)) for i in range(5)])
            w.roll()
        w.append([(b"active", b"not tiered")])
        w.set_high_watermark()
    with TieringHook().get_conn() as ctx:
        for w in writers:
            assert run_copy(ctx, w.tp).segments_copied == 3
    return topic_id


def conf(target: str, **extra: object) -> dict[str, object]:
    return {
        "topic": "orders",
        "from_offset": 0,
        "target_topic": target,
        "confirm": target,
        "target": "cluster",
        **extra,
    }


def test_a_replay_maps_a_task_per_partition_and_a_rerun_finds_it_done(
    replay_dag,
    tiered: str,
    tiering: TieringEnv,
    kafka: KafkaCluster,
) -> None:
    target = f"replayed-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(target, partitions=PARTITIONS, configs={"retention.ms": "-1"})
    run = replay_dag.test(run_conf=conf(target))
    assert run.state == "success"
    tasks = task_runs(replay_dag.dag_id, run.run_id, "replay")
    assert sorted(tasks) == ["orders-0", "orders-1"]
    for label, task in tasks.items():
        (result,) = task.result
        assert (f"orders-{result['partition']}", result["records"], result["outcome"]) == (label, 15, "replayed")
        assert result["topic_id"] == tiered
    for p in range(PARTITIONS):
        got = consume(kafka, target, p)
        assert [(r.key, r.value, r.headers[:-1]) for r in got] == [
            (f"k{p}-{s}-{i}".encode(), f"v{s}-{i}".encode(), (("h", b"x"),)) for s in range(3) for i in range(5)
        ]
        assert [SourceMark.of(r.headers) for r in got] == [SourceMark(tiered, p, o) for o in range(15)]

    again = replay_dag.test(run_conf=conf(target))
    assert again.state == "success"
    for task in task_runs(replay_dag.dag_id, again.run_id, "replay").values():
        (result,) = task.result
        assert (result["outcome"], result["records"], result["resumed_after"]) == ("up to date", 0, 14)
    assert [len(consume(kafka, target, p)) for p in range(PARTITIONS)] == [15, 15]
    with tiering.context() as ctx:
        recorded = ctx.metadata.recent_replays()
    assert sorted((r.partition, r.outcome, r.records) for r in recorded[:2]) == [
        (0, "up to date", 0),
        (1, "up to date", 0),
    ]
    assert sorted((r.partition, r.records) for r in recorded[2:]) == [(0, 15), (1, 15)]
    assert all(r.run and r.run.startswith("replay:tiering_replay/") for r in recorded)


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"confirm": "elsewhere"}, "confirm must repeat the target topic"),
        ({"from_offset": None}, "exactly one of a first offset and a first timestamp"),
        ({"partitions": [7]}, "has no remote data of partition(s) 7"),
        ({"topic": "payments"}, "topic payments has no remote data"),
        ({"target": "elsewhere"}, "replay target 'elsewhere': not a name of the config's replay.targets"),
        ({"target": None}, "a replay needs a cluster to write to"),  # no kafka: section either
        ({"bootstrap_servers": "127.0.0.1:9092"}, "bootstrap_servers: not taken"),
    ],
)
def test_refused_requests_fail_at_once_and_write_nothing(
    replay_dag,
    tiered: str,
    kafka: KafkaCluster,
    extra: dict,
    reason: str,
    capfd,
    caplog,
) -> None:
    target = f"refused-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(target, partitions=PARTITIONS)
    run = replay_dag.test(run_conf={**conf(target), **extra})
    assert run.state == "failed"
    (plan,) = task_runs(replay_dag.dag_id, run.run_id, "plan_replay").values()
    assert (plan.state, plan.try_number) == ("failed", 1)  # a refusal is not retried
    assert reason in "".join(capfd.readouterr()) + caplog.text
    assert [consume(kafka, target, p) for p in range(PARTITIONS)] == [[], []]


@pytest.mark.parametrize(
    "extra",
    [
        {"from_offset": -1},
        {"target_topic": "bad topic"},
        {"isolation": "serializable"},
        {"partitioning": "round"},
        {"target": "127.0.0.1:9092"},
        {"target": "kafka.example.com"},
        {"target": "cluster\n"},
    ],
)
def test_invalid_params_are_rejected_before_a_run_exists(replay_dag, kafka: KafkaCluster, extra: dict) -> None:
    from airflow.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError):
        replay_dag.test(run_conf={**conf("t"), **extra})
