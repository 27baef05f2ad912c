"""TieringHook on a cluster config: a worker reads only the log dirs of its broker
(``TIERING_BROKER_ID``); DAG parsing and the page read none."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.engine_support import write_segments
from tiering_airflow.hooks.tiering import TieringHook, load_topics
from tiering_core.demo.writer import PartitionWriter
from tiering_core.errors import ConfigError
from tiering_core.kafka.topic import TopicPartition


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
