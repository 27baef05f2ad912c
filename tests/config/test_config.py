from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.support import base_doc
from tiering_core.config import DEFAULT_TOPIC, load_config, parse_config
from tiering_core.errors import ConfigError


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


def test_index_cache_settings(tmp_path: Path) -> None:
    assert parse_config(base_doc(tmp_path)).index_cache_dir is None
    doc = {**base_doc(tmp_path), "index_cache_dir": "cache", "index_cache_bytes": 4096}
    config = parse_config(doc, base_dir=tmp_path / "conf")
    assert (config.index_cache_dir, config.index_cache_bytes) == (tmp_path / "conf" / "cache", 4096)
    with pytest.raises(ConfigError, match="index_cache_dir"):
        parse_config({**base_doc(tmp_path), "index_cache_dir": ""})
    with pytest.raises(ConfigError, match="index_cache_bytes"):
        parse_config({**base_doc(tmp_path), "index_cache_bytes": -1})


def test_the_index_cache_stays_apart_from_log_dirs_and_the_metadata_db(tmp_path: Path) -> None:
    """The cache evicts files in its directory: beside the config (where the metadata DB lies),
    in or above a log dir, it would delete what is not its own."""
    conf = tmp_path / "conf"
    doc = {**base_doc(tmp_path), "metadata": {"url": "sqlite:///meta.db"}}
    for where in (".", str(tmp_path), str(tmp_path / "kafka"), str(tmp_path / "kafka" / "orders-0")):
        with pytest.raises(ConfigError, match="index_cache_dir"):
            parse_config({**doc, "index_cache_dir": where}, base_dir=conf)
    with pytest.raises(ConfigError, match="index_cache_bytes"):
        parse_config({**base_doc(tmp_path), "index_cache_bytes": 0})
    assert parse_config({**doc, "index_cache_dir": "cache"}, base_dir=conf).index_cache_dir == conf / "cache"


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


# --- the cluster's topic configs ----------------------------------------------------------------


def test_cluster_topic_config_sits_between_the_topic_entry_and_the_default(tmp_path: Path) -> None:
    from tiering_core.config import BrokerTopicConfig

    config = parse_config(base_doc(tmp_path))
    broker = BrokerTopicConfig(
        topic_level={"retention.ms": "3600000", "retention.bytes": "1048576", "segment.bytes": "1024"},
        retention_ms=3600000,
        retention_bytes=1048576,
    )
    orders = config.topic_config("orders", broker)
    assert orders.retention_ms == 86400000  # the topic's own YAML entry wins over the cluster
    assert orders.retention_bytes == 1048576  # the cluster's topic-level value wins over "*"
    other = config.topic_config("other", broker)
    assert (other.retention_ms, other.retention_bytes) == (3600000, 1048576)
    # Broker defaults (not topic-level) never override the YAML "*" ...
    defaults = BrokerTopicConfig(topic_level={}, retention_ms=7, retention_bytes=-1)
    assert config.topic_config("other", defaults).retention_ms == 604800000
    # ... but are what the broker deletes by: the local-retention mirror when none is set.
    assert config.topic_config("other", defaults).effective_local_retention_ms() == 7
    assert config.topic_config("other").effective_local_retention_ms() is None


def test_cluster_local_retention_and_cleanup_policy(tmp_path: Path) -> None:
    from tiering_core.config import BrokerTopicConfig

    doc = base_doc(tmp_path)
    doc["topics"]["logs"] = {"local.retention.ms": 1000}
    config = parse_config(doc)
    levels = {"local.retention.ms": "5000", "local.retention.bytes": "-2"}
    broker = BrokerTopicConfig(topic_level=levels, retention_ms=9)
    assert config.topic_config("other", broker).effective_local_retention_ms() == 5000
    assert config.topic_config("other", broker).effective_local_retention_bytes() == -1  # -2: the total's
    assert config.topic_config("logs", broker).effective_local_retention_ms() == 1000
    compacted = BrokerTopicConfig(topic_level={"cleanup.policy": "compact"})
    assert config.topic_config("other", compacted).remote_storage_enable is False  # Kafka never tiers it
    doc["topics"]["logs"] = {"remote.storage.enable": True}
    with pytest.raises(ConfigError, match=r"topics\.logs"):
        parse_config(doc).topic_config("logs", compacted)
    assert config.topic_config("__consumer_offsets", broker).remote_storage_enable is False
