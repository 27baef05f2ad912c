"""Delayed upload (KIP-1241) beside a real Kafka 4.4.0 broker: the broker takes
``remote.copy.lag.ms`` and ``remote.copy.lag.bytes`` as topic configs through the admin API and
refuses what Kafka refuses; the platform reads the values set on the topic from the cluster
(DescribeConfigs) and holds back the segments they delay, at their boundaries."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tests.real_kafka.cluster import KafkaCluster
from tests.real_kafka.support import BesideKafka
from tiering_core.config import load_config
from tiering_core.context import TieringContext
from tiering_core.kafka.partition_log import PartitionLog
from tiering_core.kafka.topic import TopicPartition
from tiering_core.runs.copy_plan import CopyPlan, plan_copy

Beside = Callable[..., BesideKafka]
TOPIC = "delayed-upload"
SEGMENT = 16 * 1024


def alter_topic(cluster: KafkaCluster, topic: str, configs: Mapping[str, str]) -> Any:
    """IncrementalAlterConfigs on the topic (kafka-python does not know these keys: no check of its own)."""
    from kafka.admin import ConfigResource, ConfigResourceType

    return cluster.admin().alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic, configs=dict(configs))],
        raise_on_unknown=False,
        incremental=True,
    )


def described(cluster: KafkaCluster, topic: str, key: str) -> str | None:
    from kafka.admin import ConfigResource, ConfigResourceType

    answer = cluster.admin().describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic, {key: None})], config_filter="all"
    )
    entry = (answer.get("topic", {}).get(topic) or {}).get(key) or {}
    return entry.get("value")


def plan_when_the_cluster_says(platform: BesideKafka, cluster: KafkaCluster, key: str, value: str) -> CopyPlan:
    """Set ``key`` = ``value`` on the topic; the read-only copy plan once the platform reads it there."""
    alter_topic(cluster, TOPIC, {key: value})
    cluster.wait_until(f"the broker describing {key}={value}", lambda: described(cluster, TOPIC, key) == value)
    with TieringContext.open(load_config(platform.config_path)) as ctx:
        assert str(getattr(ctx.topic_config(TOPIC), key.replace(".", "_"))) == value
        return plan_copy(ctx, TopicPartition(TOPIC, 0))


def test_copy_lags_set_on_the_topic_in_the_cluster_delay_the_upload_at_their_boundaries(
    kafka: KafkaCluster, beside: Beside
) -> None:
    kafka.create_topic(TOPIC, segment_bytes=SEGMENT, configs={"remote.copy.lag.ms": "600000"})
    producer = kafka.producer(linger_ms=5)
    try:
        for i in range(1500):
            producer.send(TOPIC, key=str(i).encode(), value=b"v" * 60)
        producer.flush()
    finally:
        producer.close()
    assert described(kafka, TOPIC, "remote.copy.lag.ms") == "600000"
    assert described(kafka, TOPIC, "remote.copy.lag.bytes") == "-1"  # Kafka 4.4's default
    platform = beside(kafka, 1, live=True)

    # Just written: every closed segment waits for its ten minutes; status and copy say so.
    delay = platform.status(TOPIC)["copy_delay"]
    assert (delay["base_offset"], delay["copy_lag_ms"], delay["copy_lag_bytes"]) == (0, 600_000, -1)
    assert 0 <= delay["segment_age_ms"] < 600_000 and delay["waiting_segments"] >= 3
    copied = platform.ok("copy", "--topic", TOPIC, "--json")
    assert copied.json()[0]["segments_copied"] == 0 and "waiting:" in copied.stderr
    assert platform.status(TOPIC)["highest_copied_offset"] == -1

    # The size lag set on the cluster, at its boundary: the local log after the first segment.
    segments = PartitionLog.open(kafka.partition_dir(1, TOPIC, 0)).segments
    after_first = sum(s.size_bytes for s in segments[1:])
    short = plan_when_the_cluster_says(platform, kafka, "remote.copy.lag.bytes", str(after_first + 1))
    assert short.candidates == () and short.delay is not None and short.delay.newer_bytes == after_first
    met = plan_when_the_cluster_says(platform, kafka, "remote.copy.lag.bytes", str(after_first))
    assert [c.base_offset for c in met.candidates] == [0] and met.delay is not None
    assert met.delay.base_offset == segments[1].base_offset

    # What Kafka refuses, the broker refuses: a lag below -1.
    refused = alter_topic(kafka, TOPIC, {"remote.copy.lag.ms": "-2"})
    assert "InvalidConfigurationError" in repr(refused) or "INVALID_CONFIG" in repr(refused).upper(), refused
    assert described(kafka, TOPIC, "remote.copy.lag.ms") == "600000"

    # No delay (0): the run copies every closed segment below the LSO.
    plan_when_the_cluster_says(platform, kafka, "remote.copy.lag.ms", "0")
    result = platform.ok("copy", "--topic", TOPIC, "--json").json()[0]
    assert result["segments_copied"] == len(segments) - 1 and result["copy_delay"] is None
    assert platform.status(TOPIC)["highest_copied_offset"] == segments[-1].base_offset - 1
