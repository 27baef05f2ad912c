"""TieringHook on a cluster config: a worker reads only the log dirs of its broker
(``TIERING_BROKER_ID``); DAG parsing and the page read none."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.engine_support import write_segments
from tiering_airflow.hooks.tiering import TieringHook, load_topics
from tiering_core.errors import ConfigError
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition


@pytest.fixture()
def cluster_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for broker_id, partition in ((1, 0), (2, 1)):
        w = PartitionWriter(tmp_path / f"b{broker_id}", TopicPartition("orders", partition), node_id=broker_id)
        write_segments(w, 1)
        w.set_high_watermark()
    path = tmp_path / "tiering.yaml"
    doc = {
        "brokers": {1: {"log_dirs": ["b1"]}, 2: {"log_dirs": ["b2"]}},
        "metadata": {"url": "sqlite:///m.db"},
        "remote": {"backend": "filesystem", "root": "tier"},
        "topics": {"orders": {}},
    }
    path.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("TIERING_CONFIG", str(path))
    monkeypatch.delenv("TIERING_BROKER_ID", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_AWS_DEFAULT", raising=False)
    return path


def test_a_worker_reads_only_its_broker_s_log_dirs(cluster_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_topics() == ["orders"]  # parsing reads only the config
    hook = TieringHook()
    config = hook.get_config()
    assert config.log_dirs == () and sorted(config.brokers) == [1, 2]
    with pytest.raises(ConfigError, match="brokers: 2 brokers are configured"):
        hook.partitions("orders")
    monkeypatch.setenv("TIERING_BROKER_ID", "2")
    assert hook.partitions("orders") == [1]
    monkeypatch.setenv("TIERING_BROKER_ID", "1")
    assert hook.partitions("orders") == [0] and hook.eligible("orders") == [0]


def test_a_task_s_broker_id_beats_the_worker_s_and_its_runs_record_under_it(
    cluster_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tiering_airflow.operators.tiering import TieringCopyOperator
    from tiering_airflow.sensors.tiering import EligibleSegmentSensor

    monkeypatch.setenv("TIERING_BROKER_ID", "2")  # the worker's default broker
    assert TieringHook(broker_id=1).partitions("orders") == [0]
    assert TieringHook(broker_id="1").partitions("orders") == [0]  # rendered from a template
    sensor = EligibleSegmentSensor(task_id="s", topic="orders", broker_id=1, deferrable=False)
    assert "broker_id" in sensor.template_fields and sensor.poke({}).xcom_value == [0]
    copy = TieringCopyOperator(task_id="c", topic="orders", partition=0, broker_id="{{ params.broker }}")
    assert "broker_id" in copy.template_fields and copy.broker_id == "{{ params.broker }}"
    result = TieringCopyOperator(task_id="c", topic="orders", partition=0, broker_id=1).execute({"run_id": "r"})
    assert result["segments_copied"] == 1
    with TieringHook(broker_id=1).get_conn() as ctx:
        (log,) = ctx.partitions("orders", 0)
        seen, _ = ctx.metadata.observations_of(TopicIdPartition(log.topic_id, log.topic_partition))
    assert sorted(seen) == [1]


@pytest.mark.parametrize(
    ("broker_id", "message"),
    [
        (3, "brokers.3: the task's broker is not in the config (configured: 1, 2)"),
        ("two", "broker_id: expected a broker id (a non-negative integer), got 'two'"),
        (-1, "broker_id: expected a broker id (a non-negative integer), got -1"),
    ],
)
def test_a_task_naming_an_unknown_broker_fails_without_retries_naming_it(
    cluster_config: Path, broker_id: int | str, message: str
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from tiering_airflow.operators.tiering import TieringCopyOperator, TieringRetentionOperator
    from tiering_airflow.sensors.tiering import EligibleSegmentSensor

    tasks = [
        TieringCopyOperator(task_id="c", topic="orders", partition=0, broker_id=broker_id),
        TieringRetentionOperator(task_id="r", topic="orders", partition=0, broker_id=broker_id),
    ]
    for task in tasks:
        with pytest.raises(AirflowFailException, match=re.escape(message)):
            task.execute({"run_id": "r"})
    sensor = EligibleSegmentSensor(task_id="s", topic="orders", broker_id=broker_id, deferrable=False)
    with pytest.raises(AirflowFailException, match=re.escape(message)):
        sensor.poke({})


def test_a_trigger_polls_its_task_s_broker_and_keeps_the_id_when_stored(cluster_config: Path) -> None:
    from tiering_airflow.triggers.tiering import EligibleSegmentTrigger

    trigger = EligibleSegmentTrigger(topic="orders", config_path=str(cluster_config), broker_id=2)
    _, kwargs = trigger.serialize()
    assert kwargs["broker_id"] == 2
    assert EligibleSegmentTrigger(**kwargs).eligible_partitions() == [1]
    assert "broker_id" not in EligibleSegmentTrigger(topic="orders", config_path="c.yaml").serialize()[1]
