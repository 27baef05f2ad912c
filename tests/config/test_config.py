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


def _alias_bomb(levels: int = 9) -> str:
    """Nine lists of nine aliases of the list before: a few hundred bytes that stand for 9**9
    strings once anything walks them."""
    lines = ["    - &l0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"    - &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _merge_bomb(levels: int = 9) -> str:
    lines = ["    m0: &m0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8, i: 9}"]
    for i in range(1, levels):
        lines.append(f"    m{i}: &m{i} {{<<: [" + ", ".join([f"*m{i - 1}"] * 9) + "]}")
    return "\n".join(lines) + "\n"


HEAD = "log_dirs: [data]\nmetadata: {url: 'sqlite:///meta.db'}\n"
BOMBS = {
    "alias in a value": HEAD + "remote:\n  backend: filesystem\n  root: tier\n  region:\n" + _alias_bomb(),
    "nested merge keys": HEAD + "remote: {backend: filesystem, root: tier}\ntopics:\n  orders:\n" + _merge_bomb(),
}


@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_yaml_alias_expansion_is_refused_in_bounded_memory(tmp_path: Path, bomb: str) -> None:
    """A config of a few hundred bytes whose aliases stand for billions of values is an error,
    found without expanding it: measured in a subprocess (peak RSS), with its address space
    capped so that a failure cannot take the machine's memory."""
    from tests.memory import run_measured

    path = tmp_path / "tiering.yaml"
    path.write_text(BOMBS[bomb])
    assert path.stat().st_size < 1000
    probe = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "from tiering_core.config import load_config\n"
        "from tiering_core.errors import ConfigError\n"
        "try:\n"
        "    load_config(sys.argv[1])\n"
        "except ConfigError as exc:\n"
        "    print(len(str(exc)))\n"
    )
    printed, peak_mib = run_measured(probe, str(path))
    message_length, peak_kib = int(printed), peak_mib * 1024
    assert message_length < 1000
    assert peak_kib < 256 * 1024


def test_a_yaml_error_names_line_and_column_but_never_shows_the_line(tmp_path: Path) -> None:
    """PyYAML's message quotes the offending line, which may be the DB URL with its password."""
    path = tmp_path / "tiering.yaml"
    path.write_text(
        "log_dirs: [data]\nmetadata: {url: 'postgresql+psycopg://tiering:s3cret-pw@db/meta', lease_ms: [1}\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert "s3cret-pw" not in message and "postgresql" not in message
    assert "not valid YAML: line 2, column " in message
    assert err.value.__cause__ is None and err.value.__suppress_context__  # no traceback shows it either


def test_the_metadata_store_timeouts_have_defaults_and_name_their_key(tmp_path: Path) -> None:
    from tiering_core.config import DatabaseTimeouts

    doc = base_doc(tmp_path)
    doc["metadata"] = {"url": "postgresql+psycopg://tiering@db:5432/meta"}
    timeouts = parse_config(doc).metadata.timeouts
    assert timeouts == DatabaseTimeouts()
    assert (timeouts.connect_timeout_seconds, timeouts.statement_timeout_ms, timeouts.dead_peer_ms) == (
        10,
        60_000,
        30_000,
    )
    doc["metadata"].update(
        connect_timeout_seconds=3,
        statement_timeout_ms=0,  # no limit
        keepalives_idle_seconds=4,
        keepalives_interval_seconds=2,
        keepalives_count=5,
    )
    assert parse_config(doc).metadata.timeouts == DatabaseTimeouts(3, 0, 4, 2, 5)
    assert parse_config(doc).metadata.timeouts.dead_peer_ms == 14_000
    for key, bad in (
        ("connect_timeout_seconds", 1),  # libpq waits at least 2 s
        ("statement_timeout_ms", -1),
        ("keepalives_idle_seconds", 0),
        ("keepalives_interval_seconds", "soon"),
        ("keepalives_count", 0),
    ):
        broken = {**doc["metadata"], key: bad}
        with pytest.raises(ConfigError, match=rf"^metadata\.{key}: "):
            parse_config({**doc, "metadata": broken})
    # The same libpq parameters in the URL: one place for them, the key named.
    for query, key in (
        ("connect_timeout=5", "connect_timeout_seconds"),
        ("keepalives_idle=9", "keepalives_idle_seconds"),
        ("tcp_user_timeout=1000", "keepalives_idle_seconds"),
    ):
        url = f"postgresql+psycopg://tiering@db:5432/meta?{query}"
        with pytest.raises(
            ConfigError, match=rf"metadata\.url: sets {query.split('=')[0]}; set metadata\.{key} instead"
        ):
            parse_config({**doc, "metadata": {"url": url}})
    assert parse_config({**doc, "metadata": {"url": "postgresql+psycopg://t@db/meta?sslmode=require"}})


def test_the_metadata_password_can_come_from_an_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy.engine import make_url

    doc = base_doc(tmp_path)
    doc["metadata"] = {"url": "postgresql+psycopg://tiering@db:5432/meta", "password_env": "META_PW"}
    monkeypatch.setenv("META_PW", "p@ss:w/rd")
    url = make_url(parse_config(doc).metadata.url)
    assert (url.username, url.password, url.host, url.database) == ("tiering", "p@ss:w/rd", "db", "meta")
    assert "p@ss" not in repr(parse_config(doc)) and "tiering:***@db" in repr(parse_config(doc))
    monkeypatch.delenv("META_PW")
    with pytest.raises(ConfigError, match=r"metadata\.password_env: the environment variable META_PW is not set"):
        parse_config(doc)
    monkeypatch.setenv("META_PW", "x")
    doc["metadata"]["url"] = "postgresql+psycopg://tiering:inline@db:5432/meta"
    with pytest.raises(ConfigError, match="keep one of them") as err:
        parse_config(doc)
    assert "inline" not in str(err.value)
    doc["metadata"]["url"] = f"sqlite:///{tmp_path / 'meta.db'}"
    with pytest.raises(ConfigError, match="names no user"):
        parse_config(doc)


def test_a_mapping_without_merge_keys_may_be_large(tmp_path: Path) -> None:
    path = tmp_path / "tiering.yaml"
    topics = "".join(f"  t{i}: {{}}\n" for i in range(10_001))
    path.write_text(HEAD + "remote: {backend: filesystem, root: tier}\ntopics:\n" + topics)
    assert len(load_config(path).topics) == 10_002


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


# --- the kafka: section and the cluster's topic configs -------------------------------------------


def test_kafka_section_parses_servers_as_string_or_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = base_doc(tmp_path)
    assert parse_config(doc).kafka is None
    doc["kafka"] = {"bootstrap_servers": "a:9092, b:9093"}
    kafka = parse_config(doc).kafka
    assert kafka is not None
    assert kafka.bootstrap_servers == ("a:9092", "b:9093")
    assert (kafka.request_timeout_ms, kafka.client_id, kafka.security_protocol) == (30_000, "tiering", "PLAINTEXT")
    monkeypatch.setenv("TIERING_TEST_KAFKA_PASSWORD", "s3cret")
    doc["kafka"] = {
        "bootstrap_servers": ["[::1]:9092"],
        "request_timeout_ms": 5000,
        "client_id": "tier-7",
        "security_protocol": "sasl_ssl",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "tier",
        "sasl_password_env": "TIERING_TEST_KAFKA_PASSWORD",
        "ssl_cafile": "ca.pem",
    }
    config = parse_config(doc, base_dir=tmp_path)
    assert config.kafka is not None
    assert config.kafka.security_protocol == "SASL_SSL"
    assert config.kafka.ssl_cafile == tmp_path / "ca.pem"
    assert "s3cret" not in repr(config)
    # The password is read when the client connects, not here: a process that never asks the
    # cluster (scheduler, API server) parses the same file without it.
    monkeypatch.delenv("TIERING_TEST_KAFKA_PASSWORD")
    assert parse_config(doc, base_dir=tmp_path).kafka == config.kafka


@pytest.mark.parametrize(
    ("section", "named"),
    [
        ({}, "kafka.bootstrap_servers"),
        ({"bootstrap_servers": []}, "kafka.bootstrap_servers"),
        ({"bootstrap_servers": "no-port"}, "kafka.bootstrap_servers"),
        ({"bootstrap_servers": "a:1", "bootstrap": "a:1"}, "kafka.bootstrap"),
        ({"bootstrap_servers": "a:1", "sasl_plain_password": "x"}, "kafka.sasl_plain_password"),
        ({"bootstrap_servers": "a:1", "request_timeout_ms": 0}, "kafka.request_timeout_ms"),
        ({"bootstrap_servers": "a:1", "security_protocol": "TLS"}, "kafka.security_protocol"),
        ({"bootstrap_servers": "a:1", "security_protocol": "SASL_SSL"}, "kafka.sasl_mechanism"),
        ({"bootstrap_servers": "a:1", "sasl_mechanism": "PLAIN"}, "kafka.sasl_mechanism"),
        (
            {"bootstrap_servers": "a:1", "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "GSSAPI"},
            "kafka.sasl_mechanism",
        ),
        (
            {"bootstrap_servers": "a:1", "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"},
            "kafka.sasl_plain_username",
        ),
        (
            {
                "bootstrap_servers": "a:1",
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "PLAIN",
                "sasl_plain_username": "u",
            },
            "kafka.sasl_password_env",
        ),
        ("a:1", "kafka"),
    ],
)
def test_bad_kafka_section_names_the_key(tmp_path: Path, section: object, named: str) -> None:
    doc = base_doc(tmp_path)
    doc["kafka"] = section
    with pytest.raises(ConfigError) as err:
        parse_config(doc)
    assert named in str(err.value)


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
