"""A topic's knobs in Kafka's names (``tiering_core/config/topics.py``): local retention and
compacted topics, which Kafka never tiers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.support import base_doc
from tiering_core.config import TopicConfig, parse_config
from tiering_core.errors import ConfigError


def test_local_retention_minus_two_means_same_as_total() -> None:
    topic = TopicConfig(retention_ms=1000, retention_bytes=50, local_retention_ms=-2, local_retention_bytes=-2)
    assert topic.effective_local_retention_ms() == 1000
    assert topic.effective_local_retention_bytes() == 50
    assert TopicConfig().effective_local_retention_ms() is None


@pytest.mark.parametrize("policy", ["compact", "compact,delete", ["delete", "compact"]])
def test_a_compacted_topic_inheriting_remote_storage_is_not_tiered_and_the_rest_are(
    tmp_path: Path, policy: object
) -> None:
    """``"*"`` enables remote storage and one topic's own entry is compacted: that topic is not
    tiered (Kafka refuses remote storage for it), every other topic is, and the config loads."""
    expected = tuple(policy) if isinstance(policy, list) else tuple(policy.split(","))  # type: ignore[attr-defined]
    doc = base_doc(tmp_path)
    doc["topics"]["*"] = {"remote.storage.enable": True}
    doc["topics"]["ledger"] = {"cleanup.policy": policy}
    config = parse_config(doc)
    ledger = config.topic_config("ledger")
    assert ledger.cleanup_policy == expected and not ledger.remote_storage_enable
    assert config.not_tiered_reason("ledger") == (
        f"cleanup.policy {','.join(expected)}: Kafka never tiers a compacted topic"
    )
    assert config.topic_config("orders").remote_storage_enable and config.not_tiered_reason("orders") is None
    assert config.topic_config("other").remote_storage_enable and config.not_tiered_reason("other") is None
    doc["topics"]["ledger"]["remote.storage.enable"] = False  # said outright: the same
    assert parse_config(doc).not_tiered_reason("ledger") == config.not_tiered_reason("ledger")
    # A compacted "*": its topics are not tiered, but one whose own policy is delete is.
    doc["topics"] = {"*": {"cleanup.policy": policy}, "orders": {"cleanup.policy": "delete"}}
    config = parse_config(doc)
    assert not config.topic_config("other").remote_storage_enable
    assert config.topic_config("orders").remote_storage_enable


@pytest.mark.parametrize(
    ("topics", "key"),
    [
        ({"ledger": {"cleanup.policy": "compact", "remote.storage.enable": True}}, "topics.ledger"),
        ({"*": {"cleanup.policy": "compact,delete", "remote.storage.enable": True}}, "topics.*"),
        ({"*": {"cleanup.policy": "compact"}, "ledger": {"remote.storage.enable": True}}, "topics.ledger"),
    ],
)
def test_remote_storage_enabled_outright_on_a_compacted_topic_is_an_error_naming_the_key(
    tmp_path: Path, topics: dict[str, object], key: str
) -> None:
    doc = base_doc(tmp_path)
    doc["topics"] = topics
    with pytest.raises(ConfigError) as err:
        parse_config(doc)
    assert str(err.value).startswith(f"{key}.remote.storage.enable: true, but cleanup.policy is compact")
    assert "Kafka refuses remote storage for a compacted topic" in str(err.value)


# --- delayed upload (KIP-1241) ------------------------------------------------------------------


def test_the_copy_lags_read_from_yaml_with_kafka_s_defaults(tmp_path: Path) -> None:
    """``remote.copy.lag.ms`` (default 0: no delay) and ``remote.copy.lag.bytes`` (default -1: the
    local retention) in a topic's entry and in ``"*"``, as Kafka 4.4 names and defaults them."""
    assert (TopicConfig().remote_copy_lag_ms, TopicConfig().remote_copy_lag_bytes) == (0, -1)
    doc = base_doc(tmp_path)
    doc["topics"]["*"]["remote.copy.lag.bytes"] = 1_048_576
    doc["topics"]["orders"]["remote.copy.lag.ms"] = "600000"
    config = parse_config(doc)
    orders = config.topic_config("orders")
    assert (orders.remote_copy_lag_ms, orders.remote_copy_lag_bytes) == (600_000, 1_048_576)
    assert (config.topic_config("other").remote_copy_lag_ms, config.topic_config("other").remote_copy_lag_bytes) == (
        0,
        1_048_576,
    )


@pytest.mark.parametrize("key", ["remote.copy.lag.ms", "remote.copy.lag.bytes"])
@pytest.mark.parametrize("value", [-2, "ten", True, 1.5])
def test_a_copy_lag_below_minus_one_or_not_a_number_is_an_error_naming_the_key(
    tmp_path: Path, key: str, value: object
) -> None:
    doc = base_doc(tmp_path)
    doc["topics"]["orders"][key] = value
    with pytest.raises(ConfigError, match=rf"^topics\.orders\.{key}: "):
        parse_config(doc)


@pytest.mark.parametrize(
    ("lag_key", "retention_key", "retention"),
    [
        ("remote.copy.lag.ms", "local.retention.ms", {"local.retention.ms": 60_000}),
        ("remote.copy.lag.bytes", "local.retention.bytes", {"local.retention.bytes": 60_000}),
        ("remote.copy.lag.ms", "local.retention.ms", {"local.retention.ms": -2, "retention.ms": 60_000}),
    ],
)
def test_a_copy_lag_longer_than_the_local_retention_is_refused_as_kafka_does(
    tmp_path: Path, lag_key: str, retention_key: str, retention: dict[str, int]
) -> None:
    """Kafka's ``validateRemoteCopyLag*``: a positive lag at most the effective local retention;
    beyond it the broker would delete segments before their delayed upload."""
    doc = base_doc(tmp_path)
    doc["topics"]["orders"] = {**retention, lag_key: 60_000}
    assert getattr(parse_config(doc).topic_config("orders"), lag_key.replace(".", "_")) == 60_000  # exactly met
    doc["topics"]["orders"][lag_key] = 60_001
    with pytest.raises(ConfigError) as err:
        parse_config(doc)
    assert str(err.value) == (
        f"topics.orders.{lag_key}: 60001 exceeds {retention_key} (effective value: 60000); "
        "Kafka refuses a copy lag longer than the local retention"
    )
    doc["topics"]["orders"] = {retention_key: -1, lag_key: 10**12}  # unlimited local retention: any lag
    parse_config(doc)


def test_the_cluster_s_copy_lags_sit_between_the_topic_entry_and_the_default(tmp_path: Path) -> None:
    """Set on the topic in the cluster (DYNAMIC_TOPIC_CONFIG), the copy lags take the place of the
    YAML ``"*"``, and the topic's own YAML entry takes the place of theirs, as every key Kafka owns."""
    from tiering_core.config import BROKER_OWNED_TOPIC_KEYS, BrokerTopicConfig

    assert {"remote.copy.lag.ms", "remote.copy.lag.bytes"} <= set(BROKER_OWNED_TOPIC_KEYS)
    doc = base_doc(tmp_path)
    doc["topics"]["*"]["remote.copy.lag.bytes"] = 4096
    doc["topics"]["orders"]["remote.copy.lag.ms"] = 1000
    config = parse_config(doc)
    broker = BrokerTopicConfig(
        topic_level={"remote.copy.lag.ms": "600000", "remote.copy.lag.bytes": "1048576"}, retention_ms=-1
    )
    other = config.topic_config("other", broker)
    assert (other.remote_copy_lag_ms, other.remote_copy_lag_bytes) == (600_000, 1_048_576)
    orders = config.topic_config("orders", broker)
    assert (orders.remote_copy_lag_ms, orders.remote_copy_lag_bytes) == (1000, 1_048_576)
    # The cluster's effective retention.ms is the broker's local retention: a longer lag is refused.
    short = BrokerTopicConfig(topic_level={"remote.copy.lag.ms": "600000"}, retention_ms=599_999)
    with pytest.raises(
        ConfigError, match=r"^topics\.other\.remote\.copy\.lag\.ms: 600000 exceeds local\.retention\.ms"
    ):
        config.topic_config("other", short)
