from __future__ import annotations

from pathlib import Path

import pytest

from tiering_core.config import DEFAULT_TOPIC, TopicConfig, load_config, parse_config
from tiering_core.errors import ConfigError


def base_doc(tmp_path: Path) -> dict:
    return {
        "log_dirs": [str(tmp_path / "kafka")],
        "metadata": {"url": f"sqlite:///{tmp_path / 'meta.db'}"},
        "remote": {"backend": "s3", "bucket": "kafka-tiered", "prefix": "prod/", "endpoint_url": "http://127.0.0.1:9"},
        "topics": {
            "*": {"remote.storage.enable": True, "retention.ms": 604800000, "retention.bytes": -1},
            "orders": {"retention.ms": 86400000},
        },
    }


def test_contract_example_parses_and_topic_overrides_default(tmp_path: Path) -> None:
    config = parse_config(base_doc(tmp_path))
    assert config.log_dirs == (tmp_path / "kafka",)
    assert config.remote.bucket == "kafka-tiered"
    assert config.remote.prefix == "prod/"
    orders = config.topic_config("orders")
    assert orders.retention_ms == 86400000
    assert orders.retention_bytes == -1  # inherited from "*"
    assert config.topic_config("other") == config.topics[DEFAULT_TOPIC]
    assert config.topic_config("other").retention_ms == 604800000


def test_yaml_file_relative_paths_resolve_beside_the_file(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "tiering.yaml"
    path.parent.mkdir()
    path.write_text(
        "log_dirs: [data]\nmetadata: {url: 'sqlite:///meta.db'}\nremote: {backend: filesystem, root: tier}\n"
    )
    config = load_config(path)
    assert config.log_dirs == (tmp_path / "conf" / "data",)
    assert config.metadata.url == f"sqlite:///{tmp_path / 'conf' / 'meta.db'}"
    assert config.remote.root == tmp_path / "conf" / "tier"


@pytest.mark.parametrize(
    ("mutate", "named"),
    [
        (lambda d: d.update(colour="blue"), "colour"),
        (lambda d: d["remote"].update(bucket_name="x"), "remote.bucket_name"),
        (lambda d: d["metadata"].update(uri="x"), "metadata.uri"),
        (lambda d: d["topics"]["orders"].update({"retention.msec": 5}), "topics.orders.retention.msec"),
        (lambda d: d["topics"]["orders"].update({"retention.ms": "soon"}), "topics.orders.retention.ms"),
        (lambda d: d["topics"]["orders"].update({"retention.bytes": -7}), "topics.orders.retention.bytes"),
        (lambda d: d["topics"]["*"].update({"remote.storage.enable": "maybe"}), "topics.*.remote.storage.enable"),
        (lambda d: d["topics"].update({"bad/topic": {}}), "topics.bad/topic"),
        (lambda d: d["remote"].update(backend="ftp"), "remote.backend"),
        (lambda d: d["remote"].update(bucket="ab"), "remote.bucket"),
        (lambda d: d["remote"].update(prefix="../escape/"), "remote.prefix"),
        (lambda d: d["remote"].update(prefix=False), "remote.prefix"),
        (lambda d: d["remote"].update(deadline_seconds=0), "remote.deadline_seconds"),
        (lambda d: d["remote"].update(timeout_seconds=30, deadline_seconds=10), "remote.deadline_seconds"),
        (lambda d: d["remote"].update(region=[1, 2]), "remote.region"),
        (lambda d: d["remote"].update(endpoint_url=5), "remote.endpoint_url"),
        (lambda d: d["remote"].update(endpoint_url="127.0.0.1:9000"), "remote.endpoint_url"),
        (lambda d: d["topics"]["orders"].update({"retention.ms": "--5"}), "topics.orders.retention.ms"),
        (lambda d: d["topics"]["orders"].update({"retention.ms": "\u00b2"}), "topics.orders.retention.ms"),
        (lambda d: d.pop("log_dirs"), "log_dirs"),
        (lambda d: d["metadata"].pop("url"), "metadata.url"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, mutate, named: str) -> None:
    doc = base_doc(tmp_path)
    mutate(doc)
    with pytest.raises(ConfigError) as err:
        parse_config(doc)
    assert named in str(err.value)


def test_missing_and_unparsable_files_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("log_dirs: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_local_retention_minus_two_means_same_as_total() -> None:
    topic = TopicConfig(retention_ms=1000, retention_bytes=50, local_retention_ms=-2, local_retention_bytes=-2)
    assert topic.effective_local_retention_ms() == 1000
    assert topic.effective_local_retention_bytes() == 50
    assert TopicConfig().effective_local_retention_ms() is None


def test_index_cache_settings(tmp_path: Path) -> None:
    assert parse_config(base_doc(tmp_path)).index_cache_dir is None
    doc = {**base_doc(tmp_path), "index_cache_dir": "cache", "index_cache_bytes": 4096}
    config = parse_config(doc, base_dir=tmp_path / "conf")
    assert (config.index_cache_dir, config.index_cache_bytes) == (tmp_path / "conf" / "cache", 4096)
    with pytest.raises(ConfigError, match="index_cache_dir"):
        parse_config({**base_doc(tmp_path), "index_cache_dir": ""})
    with pytest.raises(ConfigError, match="index_cache_bytes"):
        parse_config({**base_doc(tmp_path), "index_cache_bytes": -1})


def test_a_key_given_twice_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "tiering.yaml"
    path.write_text(
        "log_dirs: [data]\nmetadata: {url: 'sqlite:///meta.db'}\nremote: {backend: filesystem, root: tier}\n"
        "topics:\n  orders: {retention.ms: 1000}\n  orders: {retention.ms: 2000}\n"
    )
    with pytest.raises(ConfigError, match=r"duplicate key 'orders'"):
        load_config(path)


def test_merge_keys_may_be_overridden_and_an_unhashable_key_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "tiering.yaml"
    head = "log_dirs: [data]\nmetadata: {url: 'sqlite:///meta.db'}\nremote: {backend: filesystem, root: tier}\n"
    path.write_text(
        head + "topics:\n  payments: &short {retention.ms: 1000, retention.bytes: 10}\n"
        "  orders: {<<: *short, retention.ms: 2000}\n"
    )
    orders = load_config(path).topic_config("orders")
    assert (orders.retention_ms, orders.retention_bytes) == (2000, 10)
    path.write_text(head + "topics:\n  ? [orders, payments]\n  : {retention.ms: 1000}\n")
    with pytest.raises(ConfigError, match="unhashable key"):
        load_config(path)


def test_string_integers_are_accepted_only_when_they_are_integers(tmp_path: Path) -> None:
    doc = base_doc(tmp_path)
    doc["topics"]["orders"]["retention.ms"] = " -1 "
    assert parse_config(doc).topic_config("orders").retention_ms == -1


def test_deadline_defaults_to_the_backends_and_can_be_set(tmp_path: Path) -> None:
    from tiering_core.storage.factory import create_remote_storage

    doc = base_doc(tmp_path)
    assert parse_config(doc).remote.deadline_seconds is None
    doc["remote"].update(timeout_seconds=5, deadline_seconds=12.5)
    remote = parse_config(doc).remote
    assert remote.deadline_seconds == 12.5
    storage = create_remote_storage(remote)
    try:
        assert storage.policy.deadline_seconds == 12.5  # type: ignore[attr-defined]
    finally:
        storage.close()


def test_internal_topics_never_have_remote_storage(tmp_path: Path) -> None:
    config = parse_config(base_doc(tmp_path))
    assert config.topic_config("orders").remote_storage_enable
    for topic in ("__consumer_offsets", "__transaction_state"):
        assert not config.topic_config(topic).remote_storage_enable
    doc = base_doc(tmp_path)
    doc["topics"]["__consumer_offsets"] = {"remote.storage.enable": True}
    with pytest.raises(ConfigError, match=r"topics.__consumer_offsets: an internal topic cannot enable remote storage"):
        parse_config(doc)


@pytest.mark.parametrize("policy", ["compact", "compact,delete", ["delete", "compact"]])
def test_a_compacted_topic_with_remote_storage_is_an_error_naming_it(tmp_path: Path, policy: object) -> None:
    doc = base_doc(tmp_path)
    doc["topics"]["payments"] = {"cleanup.policy": policy}
    with pytest.raises(ConfigError, match=r"topics.payments: cleanup.policy .*compact.* remote.storage.enable"):
        parse_config(doc)
    doc["topics"]["payments"]["remote.storage.enable"] = False
    assert parse_config(doc).topic_config("payments").cleanup_policy == (
        tuple(policy) if isinstance(policy, list) else tuple(policy.split(","))  # type: ignore[attr-defined]
    )
    doc["topics"]["payments"] = {"cleanup.policy": "delete"}
    assert parse_config(doc).topic_config("payments").remote_storage_enable
