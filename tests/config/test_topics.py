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
