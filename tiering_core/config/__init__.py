"""The platform configuration file (YAML), validated strictly.

Unknown keys and invalid values raise :class:`ConfigError` naming the key, so a typo never
silently falls back to a default.
"""

from __future__ import annotations

import os
import re
import reprlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from tiering_core.errors import ConfigError, InvalidTopicError
from tiering_core.kafka.topic import is_internal_topic, validate_topic_name
from tiering_core.storage.layout import validate_deployment_prefix

DEFAULT_TOPIC = "*"


@dataclass(frozen=True)
class TopicConfig:
    """A topic's tiering knobs, with Kafka's names and meanings (docs/kafka-rules.md section 9).

    ``retention_ms``/``retention_bytes`` are the total (remote) retention; ``-1`` means
    unlimited. ``local_retention_*`` mirror the broker's own local retention: ``-2`` means
    "same as total", ``None`` means unknown (no local-retention alarm).
    """

    remote_storage_enable: bool = True
    retention_ms: int = 604_800_000
    retention_bytes: int = -1
    local_retention_ms: int | None = None
    local_retention_bytes: int | None = None
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    index_interval_bytes: int = 4096
    cleanup_policy: tuple[str, ...] = ("delete",)

    def effective_local_retention_ms(self) -> int | None:
        if self.local_retention_ms == -2:
            return self.retention_ms
        return self.local_retention_ms

    def effective_local_retention_bytes(self) -> int | None:
        if self.local_retention_bytes == -2:
            return self.retention_bytes
        return self.local_retention_bytes


# Kafka config name -> (dataclass field, kind)
_TOPIC_KEYS: dict[str, tuple[str, str]] = {
    "remote.storage.enable": ("remote_storage_enable", "bool"),
    "retention.ms": ("retention_ms", "retention"),
    "retention.bytes": ("retention_bytes", "retention"),
    "local.retention.ms": ("local_retention_ms", "local_retention"),
    "local.retention.bytes": ("local_retention_bytes", "local_retention"),
    "remote.log.copy.disable": ("remote_log_copy_disable", "bool"),
    "remote.log.delete.on.disable": ("remote_log_delete_on_disable", "bool"),
    "index.interval.bytes": ("index_interval_bytes", "positive"),
    "cleanup.policy": ("cleanup_policy", "cleanup_policy"),
}


#: The topic configs Kafka owns: with a ``kafka:`` section their topic-level values come from the
#: cluster (DescribeConfigs), between the YAML's own entry for the topic and its ``"*"`` default.
BROKER_OWNED_TOPIC_KEYS = (
    "retention.ms",
    "retention.bytes",
    "local.retention.ms",
    "local.retention.bytes",
    "cleanup.policy",
    "remote.storage.enable",
)


@dataclass(frozen=True)
class BrokerTopicConfig:
    """A topic's configs as the cluster reports them (DescribeConfigs).

    ``topic_level`` holds the values set on the topic itself (config source
    DYNAMIC_TOPIC_CONFIG) of the keys in ``BROKER_OWNED_TOPIC_KEYS``; ``retention_ms`` and
    ``retention_bytes`` are the effective values whatever their source (broker defaults too):
    a broker that does not know the remote tier deletes its local segments by them.
    """

    topic_level: Mapping[str, str] = field(default_factory=dict)
    retention_ms: int | None = None
    retention_bytes: int | None = None


@dataclass(frozen=True)
class KafkaConfig:
    """The cluster the platform asks for live offsets, topic ids and topic configs (``kafka:``).

    The SASL password is never in the file: ``sasl_password_env`` names the environment variable
    that holds it, read when the client connects.
    """

    bootstrap_servers: tuple[str, ...]
    request_timeout_ms: int = 30_000
    client_id: str = "tiering"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_plain_username: str | None = None
    sasl_password_env: str | None = None
    ssl_cafile: Path | None = None


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class MetadataConfig:
    url: str
    lease_ms: int = 600_000

    def __repr__(self) -> str:  # the URL may hold the password (from the file, the environment)
        from tiering_core.metadata.engine import safe_url

        return f"MetadataConfig(url={safe_url(self.url)!r}, lease_ms={self.lease_ms})"

    def with_password(self, password: str, source: str) -> MetadataConfig:
        """The same store with the password from ``source`` (an environment variable, an Airflow
        connection), so the YAML file need not hold it; the URL must not carry one too."""
        from sqlalchemy.engine import make_url

        parsed = make_url(self.url)
        if parsed.password is not None:
            raise ConfigError(f"metadata.url: has a password and {source} gives one too: keep one of them")
        if not parsed.username:
            raise ConfigError(f"metadata.url: names no user for the password {source} gives")
        return replace(self, url=parsed.set(password=password).render_as_string(hide_password=False))


@dataclass(frozen=True)
class RemoteConfig:
    """Where remote segments live. ``backend`` is ``s3`` or ``filesystem``."""

    backend: str
    bucket: str | None = None
    prefix: str = ""
    endpoint_url: str | None = None
    region: str | None = None
    root: Path | None = None
    multipart_threshold_bytes: int = 8 * 1024 * 1024
    multipart_part_size_bytes: int = 8 * 1024 * 1024
    max_concurrency: int = 4
    max_attempts: int = 5
    timeout_seconds: float = 60.0
    deadline_seconds: float | None = None  # one remote call with its retries; None: 3 x timeout_seconds


#: The environment variable naming this process's broker, as ``--broker`` does.
BROKER_ID_ENV = "TIERING_BROKER_ID"

#: The default copy schedule of the DAGs is every 10 minutes; an observation older than three of
#: them (``cluster.observation_staleness_ms``) no longer counts in the replica choice.
DEFAULT_OBSERVATION_STALENESS_MS = 3 * 10 * 60_000


def default_queue(broker_id: int) -> str:
    """The Airflow queue of a broker's tasks unless its config names one."""
    return f"tiering-broker-{broker_id}"


@dataclass(frozen=True)
class BrokerConfig:
    """One Kafka broker of the cluster: its log dirs (local disks of its host) and the Airflow
    queue whose worker runs on that host and alone reads them.

    ``broker_id`` is Kafka's ``node.id``; None for the implicit broker of the single-broker form
    (top-level ``log_dirs:``), whose id is not configured; its ``queue`` is then None: the
    executor's default queue.
    """

    broker_id: int | None
    log_dirs: tuple[Path, ...]
    queue: str | None = None


@dataclass(frozen=True)
class PlatformConfig:
    """The platform's configuration. ``log_dirs`` are this process's broker's (``broker``); in
    the cluster form (``brokers:``) they are empty until ``for_broker`` names the broker, and
    reading partitions then is an error naming ``--broker`` (a single broker configured is
    chosen at once)."""

    log_dirs: tuple[Path, ...]
    metadata: MetadataConfig
    remote: RemoteConfig
    topics: Mapping[str, TopicConfig] = field(default_factory=dict)
    index_cache_bytes: int = 1024 * 1024 * 1024
    index_cache_dir: Path | None = None  # remote index files kept across runs; None: in memory only
    source: Path | None = None
    kafka: KafkaConfig | None = None
    #: The Kafka config names each topic's own YAML entry sets (an entry missing here: all of them).
    topic_keys: Mapping[str, frozenset[str]] = field(default_factory=dict)
    brokers: Mapping[int, BrokerConfig] = field(default_factory=dict)  # the ``brokers:`` section, by id
    broker: BrokerConfig | None = None  # this process's broker; None: not chosen among ``brokers``
    #: ``cluster.observation_staleness_ms``: an older replica observation does not count.
    observation_staleness_ms: int = DEFAULT_OBSERVATION_STALENESS_MS

    @property
    def broker_id(self) -> int | None:
        """This process's broker id (``--broker``, ``TIERING_BROKER_ID`` or the only broker of
        ``brokers:``); None where it is unknown (the single-broker form without ``--broker``)."""
        return self.broker.broker_id if self.broker is not None else None

    @property
    def broker_ids(self) -> frozenset[int] | None:
        """The broker ids an observation may come from: the ``brokers:`` section's (None: any,
        the single-broker form knows no ids)."""
        return frozenset(self.brokers) if self.brokers else None

    def broker_configs(self) -> tuple[BrokerConfig, ...]:
        """Every broker of the config, by id: the ``brokers:`` section, or the implicit broker."""
        if self.brokers:
            return tuple(self.brokers[b] for b in sorted(self.brokers))
        return (self.broker,) if self.broker is not None else ()

    def all_log_dirs(self) -> tuple[Path, ...]:
        """Every broker's log dirs (a path the platform must never write into)."""
        return tuple(d for broker in self.broker_configs() for d in broker.log_dirs) or self.log_dirs

    def for_broker(self, broker_id: int | None) -> PlatformConfig:
        """The config of the process serving ``broker_id``: its ``log_dirs`` are that broker's.

        None picks the only broker; with several brokers configured it leaves the config without
        log dirs (a process that reads none, such as ``segments`` or the Airflow API server).
        The single-broker form takes any id for its implicit broker (``check_broker_log_dirs``
        then holds it to the log dirs' ``meta.properties``).
        """
        if broker_id is not None and (isinstance(broker_id, bool) or not isinstance(broker_id, int)):
            raise ConfigError(f"--broker: expected a broker id (an integer), got {_shown(broker_id)}")
        if not self.brokers:
            if broker_id is None or self.broker is None or self.broker.broker_id == broker_id:
                return self
            broker = BrokerConfig(broker_id, self.log_dirs, default_queue(broker_id))
            return replace(self, broker=broker)
        if broker_id is None:
            if len(self.brokers) != 1:
                return replace(self, log_dirs=(), broker=None)
            (broker_id,) = self.brokers
        if broker_id not in self.brokers:
            raise ConfigError(
                f"brokers.{broker_id}: no such broker in the config (configured: "
                f"{', '.join(map(str, sorted(self.brokers)))}); check --broker or {BROKER_ID_ENV}"
            )
        broker = self.brokers[broker_id]
        return replace(self, log_dirs=broker.log_dirs, broker=broker)

    def require_log_dirs(self) -> tuple[Path, ...]:
        """This process's log dirs; ConfigError naming ``--broker`` when the cluster form has
        several brokers and none was chosen (a process reads only its own broker's disks)."""
        if not self.log_dirs and len(self.brokers) > 1:
            raise ConfigError(
                f"brokers: {len(self.brokers)} brokers are configured "
                f"({', '.join(map(str, sorted(self.brokers)))}); name this process's broker with "
                f"--broker ID or {BROKER_ID_ENV}"
            )
        return self.log_dirs

    def topic_config(self, topic: str, broker: BrokerTopicConfig | None = None) -> TopicConfig:
        """The topic's config: its own entry over the ``"*"`` default over Kafka's defaults;
        Kafka's internal topics never have remote storage.

        With the cluster's view of the topic (``broker``), the precedence is: the YAML entry of
        the topic > the topic-level value on the cluster > the YAML ``"*"`` > Kafka's defaults;
        and when no ``local.retention.*`` is set either way, the broker's effective
        ``retention.ms``/``retention.bytes`` are the local-retention mirror (docs/kafka-rules.md
        section 10 item 4): a broker that does not know the remote tier deletes by them.
        """
        if broker is None:
            config = self.topics.get(topic) or self.topics.get(DEFAULT_TOPIC) or TopicConfig()
        else:
            config = self._with_broker(topic, broker)
        return replace(config, remote_storage_enable=False) if is_internal_topic(topic) else config

    def _with_broker(self, topic: str, broker: BrokerTopicConfig) -> TopicConfig:
        default = self.topics.get(DEFAULT_TOPIC) or TopicConfig()
        own = self.topics.get(topic)
        own_keys = self.topic_keys.get(topic, frozenset(_TOPIC_KEYS)) if own is not None else frozenset()
        live = {k: v for k, v in broker.topic_level.items() if k in BROKER_OWNED_TOPIC_KEYS}
        config = parse_topic_config(live, f"topic {topic} on the cluster", default, check_compact=False)
        if own is not None:
            config = replace(config, **{_TOPIC_KEYS[key][0]: getattr(own, _TOPIC_KEYS[key][0]) for key in own_keys})
        if "compact" in config.cleanup_policy and config.remote_storage_enable:
            if "remote.storage.enable" in own_keys:
                raise ConfigError(
                    f"topics.{topic}: remote.storage.enable true but the cluster's cleanup.policy is "
                    f"{','.join(config.cleanup_policy)}: Kafka refuses remote storage for a compacted topic"
                )
            config = replace(config, remote_storage_enable=False)  # compacted on the cluster: not tiered
        if config.local_retention_ms is None and broker.retention_ms is not None:
            config = replace(config, local_retention_ms=broker.retention_ms)
        if config.local_retention_bytes is None and broker.retention_bytes is not None:
            config = replace(config, local_retention_bytes=broker.retention_bytes)
        return config


def _require_mapping(value: Any, key: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
    return value


def _check_keys(section: Mapping[str, Any], allowed: set[str], where: str) -> None:
    for key in section:
        if key not in allowed:
            name = f"{where}.{key}" if where else str(key)
            raise ConfigError(f"{name}: unknown key (allowed: {', '.join(sorted(allowed))})")


_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxdict, _SHOWN.maxstring, _SHOWN.maxother = 2, 4, 4, 80, 80


def _shown(value: Any) -> str:
    """A value for an error message, bounded: YAML aliases can nest one small list into billions
    of elements, which a plain ``repr`` would expand in full."""
    return _SHOWN.repr(value)


_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)


def _as_int(value: Any, key: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
            value = int(value.strip())
        else:
            raise ConfigError(f"{key}: expected an integer, got {_shown(value)}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{key}: {value} is below the minimum {minimum}")
    return int(value)


def _as_bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(f"{key}: expected true or false, got {_shown(value)}")


def _as_str(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key}: expected a non-empty string, got {_shown(value)}")
    return value


def _positive_number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"{key}: expected a positive number, got {_shown(value)}")
    return float(value)


def _optional_str(section: Mapping[str, Any], name: str, key: str) -> str | None:
    value = section.get(name)
    return None if value is None else _as_str(value, key)


def _endpoint_url(section: Mapping[str, Any]) -> str | None:
    url = _optional_str(section, "endpoint_url", "remote.endpoint_url")
    if url is not None and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
        raise ConfigError(f"remote.endpoint_url: {_shown(url)} is not an http:// or https:// URL")
    return url


def parse_topic_config(raw: Any, where: str, base: TopicConfig, *, check_compact: bool = True) -> TopicConfig:
    section = _require_mapping(raw if raw is not None else {}, where)
    _check_keys(section, set(_TOPIC_KEYS), where)
    values: dict[str, Any] = {}
    for key, value in section.items():
        attr, kind = _TOPIC_KEYS[key]
        name = f"{where}.{key}"
        if kind == "bool":
            values[attr] = _as_bool(value, name)
        elif kind == "positive":
            values[attr] = _as_int(value, name, 1)
        elif kind == "cleanup_policy":
            values[attr] = _cleanup_policy(value, name)
        elif kind == "retention":
            number = _as_int(value, name)
            if number < -1:
                raise ConfigError(f"{name}: {number} is invalid (use -1 for unlimited)")
            values[attr] = number
        else:
            number = _as_int(value, name)
            if number < -2:
                raise ConfigError(f"{name}: {number} is invalid (use -2 for 'same as total', -1 for unlimited)")
            values[attr] = number
    config = replace(base, **values)
    if check_compact and config.remote_storage_enable and "compact" in config.cleanup_policy:
        raise ConfigError(
            f"{where}: cleanup.policy {','.join(config.cleanup_policy)} with remote.storage.enable true: "
            "Kafka refuses remote storage for a compacted topic"
        )
    return config


def _cleanup_policy(value: Any, key: str) -> tuple[str, ...]:
    """Kafka's list of ``delete`` and ``compact`` (a comma-separated string or a YAML list)."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{key}: expected delete, compact or both, got {value!r}")
    policies = tuple(_as_str(item, key).strip() for item in items)
    if any(p not in ("delete", "compact") for p in policies):
        raise ConfigError(f"{key}: expected delete, compact or both, got {value!r}")
    return policies


def parse_config(raw: Any, source: Path | None = None, base_dir: Path | None = None) -> PlatformConfig:
    """Validate a decoded YAML document into a :class:`PlatformConfig`."""
    doc = _require_mapping(raw, "config")
    _check_keys(
        doc,
        {
            "log_dirs",
            "brokers",
            "cluster",
            "metadata",
            "remote",
            "topics",
            "index_cache_bytes",
            "index_cache_dir",
            "kafka",
        },
        "",
    )
    base = base_dir or Path.cwd()

    def resolve(p: str) -> Path:
        path = Path(p).expanduser()
        return path if path.is_absolute() else (base / path)

    brokers, implicit = _parse_brokers(doc, resolve)
    # One broker is this process's by implication; among several, ``for_broker`` chooses.
    chosen = implicit or (next(iter(brokers.values())) if len(brokers) == 1 else None)
    log_dirs = chosen.log_dirs if chosen is not None else ()

    meta_raw = _require_mapping(doc.get("metadata"), "metadata")
    _check_keys(meta_raw, {"url", "lease_ms", "password_env"}, "metadata")
    url = _as_str(meta_raw.get("url"), "metadata.url")
    sqlite_path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else ""
    # A relative file resolves beside the config; in-memory databases and URI forms stay as
    # written, for the store to judge (it refuses in-memory ones).
    if sqlite_path and not sqlite_path.startswith(("/", ":memory:", "file:")):
        url = "sqlite:///" + str(resolve(sqlite_path))
    metadata = MetadataConfig(url=url, lease_ms=_as_int(meta_raw.get("lease_ms", 600_000), "metadata.lease_ms", 1))
    password_env = _optional_str(meta_raw, "password_env", "metadata.password_env")
    if password_env is not None:
        password = os.environ.get(password_env)
        if not password:
            raise ConfigError(f"metadata.password_env: the environment variable {password_env} is not set")
        metadata = metadata.with_password(password, f"metadata.password_env ({password_env})")

    remote_raw = _require_mapping(doc.get("remote"), "remote")
    _check_keys(
        remote_raw,
        {
            "backend",
            "bucket",
            "prefix",
            "endpoint_url",
            "region",
            "root",
            "multipart_threshold_bytes",
            "multipart_part_size_bytes",
            "max_concurrency",
            "max_attempts",
            "timeout_seconds",
            "deadline_seconds",
        },
        "remote",
    )
    backend = _as_str(remote_raw.get("backend"), "remote.backend")
    if backend not in ("s3", "filesystem"):
        raise ConfigError(f"remote.backend: {_shown(backend)} is not one of s3, filesystem")
    prefix = remote_raw.get("prefix")
    if prefix is None:
        prefix = ""
    if not isinstance(prefix, str) or ".." in prefix.split("/") or prefix.startswith("/"):
        raise ConfigError(f"remote.prefix: {_shown(prefix)} is not a relative key prefix")
    validate_deployment_prefix(prefix)
    bucket = remote_raw.get("bucket")
    root = remote_raw.get("root")
    if backend == "s3":
        bucket = _as_str(bucket, "remote.bucket")
        if len(bucket) < 3:
            raise ConfigError(f"remote.bucket: {_shown(bucket)} is shorter than 3 characters")
    else:
        root = resolve(_as_str(root, "remote.root"))
    timeout = _positive_number(remote_raw.get("timeout_seconds", 60.0), "remote.timeout_seconds")
    deadline = remote_raw.get("deadline_seconds")
    if deadline is not None:
        deadline = _positive_number(deadline, "remote.deadline_seconds")
        if deadline < timeout:
            raise ConfigError(
                f"remote.deadline_seconds: {deadline} is shorter than remote.timeout_seconds {timeout} "
                "(a single attempt could not finish)"
            )
    remote = RemoteConfig(
        backend=backend,
        bucket=bucket if backend == "s3" else None,
        prefix=prefix,
        endpoint_url=_endpoint_url(remote_raw),
        region=_optional_str(remote_raw, "region", "remote.region"),
        root=root if isinstance(root, Path) else None,
        multipart_threshold_bytes=_as_int(
            remote_raw.get("multipart_threshold_bytes", 8 * 1024 * 1024),
            "remote.multipart_threshold_bytes",
            5 * 1024 * 1024,
        ),
        multipart_part_size_bytes=_as_int(
            remote_raw.get("multipart_part_size_bytes", 8 * 1024 * 1024),
            "remote.multipart_part_size_bytes",
            5 * 1024 * 1024,
        ),
        max_concurrency=_as_int(remote_raw.get("max_concurrency", 4), "remote.max_concurrency", 1),
        max_attempts=_as_int(remote_raw.get("max_attempts", 5), "remote.max_attempts", 1),
        timeout_seconds=timeout,
        deadline_seconds=deadline,
    )

    topics_raw = _require_mapping(doc.get("topics") or {}, "topics")
    default = parse_topic_config(topics_raw.get(DEFAULT_TOPIC), f"topics.{DEFAULT_TOPIC}", TopicConfig())
    topics: dict[str, TopicConfig] = {DEFAULT_TOPIC: default}
    topic_keys: dict[str, frozenset[str]] = {}
    for name, section in topics_raw.items():
        if name == DEFAULT_TOPIC:
            continue
        try:
            validate_topic_name(str(name))
        except InvalidTopicError as exc:
            raise ConfigError(f"topics.{name}: {exc}") from exc
        topics[str(name)] = parse_topic_config(section, f"topics.{name}", default)
        topic_keys[str(name)] = frozenset(str(key) for key in (section or {}))
        if (
            is_internal_topic(str(name))
            and "remote.storage.enable" in (section or {})
            and topics[str(name)].remote_storage_enable
        ):
            raise ConfigError(f"topics.{name}: an internal topic cannot enable remote storage (Kafka refuses it)")

    return PlatformConfig(
        log_dirs=log_dirs,
        metadata=metadata,
        remote=remote,
        topics=topics,
        index_cache_bytes=_as_int(doc.get("index_cache_bytes", 1024**3), "index_cache_bytes", 1),
        index_cache_dir=(
            _index_cache_dir(
                resolve(_as_str(doc["index_cache_dir"], "index_cache_dir")),
                tuple(d for b in ([implicit] if implicit else brokers.values()) for d in b.log_dirs),
                url,
            )
            if "index_cache_dir" in doc
            else None
        ),
        source=source,
        kafka=_kafka_config(doc["kafka"], resolve) if "kafka" in doc else None,
        topic_keys=topic_keys,
        brokers=brokers,
        broker=chosen,
        observation_staleness_ms=_observation_staleness_ms(doc.get("cluster")),
    )


def _observation_staleness_ms(raw: Any) -> int:
    """``cluster: {observation_staleness_ms: N}``: how old a replica observation may be and still
    count in the replica choice (default ``DEFAULT_OBSERVATION_STALENESS_MS``)."""
    section = _require_mapping(raw if raw is not None else {}, "cluster")
    _check_keys(section, {"observation_staleness_ms"}, "cluster")
    return _as_int(
        section.get("observation_staleness_ms", DEFAULT_OBSERVATION_STALENESS_MS),
        "cluster.observation_staleness_ms",
        1,
    )


def _kafka_config(raw: Any, resolve: Any) -> KafkaConfig:
    """The ``kafka:`` section; the SASL password only by the name of its environment variable."""
    section = _require_mapping(raw, "kafka")
    _check_keys(
        section,
        {
            "bootstrap_servers",
            "request_timeout_ms",
            "client_id",
            "security_protocol",
            "sasl_mechanism",
            "sasl_plain_username",
            "sasl_password_env",
            "ssl_cafile",
        },
        "kafka",
    )
    if "bootstrap_servers" not in section:
        raise ConfigError("kafka.bootstrap_servers: required key is missing")
    servers_raw = section["bootstrap_servers"]
    if isinstance(servers_raw, str):
        servers_raw = [s.strip() for s in servers_raw.split(",") if s.strip()]
    if not isinstance(servers_raw, list) or not servers_raw:
        raise ConfigError(f"kafka.bootstrap_servers: expected host:port or a list of them, got {_shown(servers_raw)}")
    servers = tuple(_as_str(s, "kafka.bootstrap_servers[]") for s in servers_raw)
    for server in servers:
        if not re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}", server):
            raise ConfigError(f"kafka.bootstrap_servers: {_shown(server)} is not host:port")
    protocol = _as_str(section.get("security_protocol", "PLAINTEXT"), "kafka.security_protocol").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(f"kafka.security_protocol: {_shown(protocol)} is not one of {', '.join(SECURITY_PROTOCOLS)}")
    mechanism = _optional_str(section, "sasl_mechanism", "kafka.sasl_mechanism")
    if mechanism is not None:
        mechanism = mechanism.upper()
        if mechanism not in SASL_MECHANISMS:
            raise ConfigError(f"kafka.sasl_mechanism: {_shown(mechanism)} is not one of {', '.join(SASL_MECHANISMS)}")
    sasl = protocol.startswith("SASL_")
    if sasl and mechanism is None:
        raise ConfigError(f"kafka.sasl_mechanism: required with security_protocol {protocol}")
    if not sasl and mechanism is not None:
        raise ConfigError(f"kafka.sasl_mechanism: set, but security_protocol {protocol} uses no SASL")
    username = _optional_str(section, "sasl_plain_username", "kafka.sasl_plain_username")
    password_env = _optional_str(section, "sasl_password_env", "kafka.sasl_password_env")
    if sasl and (username is None or password_env is None):
        missing = "kafka.sasl_plain_username" if username is None else "kafka.sasl_password_env"
        raise ConfigError(f"{missing}: required with security_protocol {protocol}")
    if password_env is not None and not os.environ.get(password_env):
        raise ConfigError(f"kafka.sasl_password_env: the environment variable {password_env} is not set")
    cafile = _optional_str(section, "ssl_cafile", "kafka.ssl_cafile")
    return KafkaConfig(
        bootstrap_servers=servers,
        request_timeout_ms=_as_int(section.get("request_timeout_ms", 30_000), "kafka.request_timeout_ms", 1),
        client_id=_as_str(section.get("client_id", "tiering"), "kafka.client_id"),
        security_protocol=protocol,
        sasl_mechanism=mechanism,
        sasl_plain_username=username,
        sasl_password_env=password_env,
        ssl_cafile=resolve(cafile) if cafile is not None else None,
    )


def _log_dirs(raw: Any, key: str, resolve: Callable[[str], Path]) -> tuple[Path, ...]:
    """A broker's ``log.dirs``: a YAML list, or Kafka's comma-separated string."""
    if isinstance(raw, str):
        raw = [d for d in raw.split(",") if d]
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{key}: expected a non-empty list of directories")
    return tuple(resolve(_as_str(d, f"{key}[]")) for d in raw)


_QUEUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}", re.ASCII)


def _parse_brokers(
    doc: Mapping[str, Any], resolve: Callable[[str], Path]
) -> tuple[dict[int, BrokerConfig], BrokerConfig | None]:
    """The ``brokers:`` section (broker id -> ``{log_dirs, queue}``), or the single-broker form's
    implicit broker (top-level ``log_dirs:``, no id): exactly one of the two forms.

    No two brokers may share a log dir, nor hold one inside another's: each broker's worker
    reads only its own disks, and a partition must never be read under two broker ids."""
    if "brokers" in doc and "log_dirs" in doc:
        raise ConfigError("brokers: give either log_dirs (one broker) or brokers (a cluster), not both")
    if "brokers" not in doc:
        if "log_dirs" not in doc:
            raise ConfigError("log_dirs: required key is missing (or brokers: for a cluster)")
        return {}, BrokerConfig(None, _log_dirs(doc["log_dirs"], "log_dirs", resolve))
    section = _require_mapping(doc["brokers"], "brokers")
    if not section:
        raise ConfigError("brokers: expected at least one broker (broker id: {log_dirs: [...], queue: NAME})")
    brokers: dict[int, BrokerConfig] = {}
    queues: dict[str, int] = {}
    for key, value in section.items():
        broker_id = _as_int(key, f"brokers.{_shown(key)}", 0)
        where = f"brokers.{broker_id}"
        if broker_id in brokers:
            raise ConfigError(f"{where}: the broker is given twice")
        body = _require_mapping(value, where)
        _check_keys(body, {"log_dirs", "queue"}, where)
        if "log_dirs" not in body:
            raise ConfigError(f"{where}.log_dirs: required key is missing")
        queue = _as_str(body.get("queue", default_queue(broker_id)), f"{where}.queue")
        if not _QUEUE.fullmatch(queue):
            raise ConfigError(f"{where}.queue: {_shown(queue)} is not a queue name (letters, digits, _ . : -)")
        if queue in queues:
            raise ConfigError(f"{where}.queue: {queue} is broker {queues[queue]}'s queue too")
        queues[queue] = broker_id
        brokers[broker_id] = BrokerConfig(broker_id, _log_dirs(body["log_dirs"], f"{where}.log_dirs", resolve), queue)
    _check_disjoint_log_dirs(brokers)
    return brokers, None


def _check_disjoint_log_dirs(brokers: Mapping[int, BrokerConfig]) -> None:
    seen: list[tuple[int, Path, Path]] = []
    for broker_id, broker in brokers.items():
        for log_dir in broker.log_dirs:
            real = Path(os.path.realpath(log_dir))
            for other_id, other, other_real in seen:
                if real == other_real or real.is_relative_to(other_real) or other_real.is_relative_to(real):
                    owner = "its own" if other_id == broker_id else f"broker {other_id}'s"
                    raise ConfigError(f"brokers.{broker_id}.log_dirs: {log_dir} overlaps {owner} log dir {other}")
            seen.append((broker_id, log_dir, real))


def _index_cache_dir(path: Path, log_dirs: tuple[Path, ...], url: str) -> Path:
    """The index cache's directory, apart from the broker's log dirs and the metadata DB: the
    cache evicts files there, and Kafka takes every directory in a log dir for a partition."""
    cache = Path(os.path.realpath(path))
    for log_dir in log_dirs:
        real = Path(os.path.realpath(log_dir))
        if cache == real or cache.is_relative_to(real) or real.is_relative_to(cache):
            raise ConfigError(f"index_cache_dir: {path} overlaps the log dir {log_dir}")
    if url.startswith("sqlite:///") and url[len("sqlite:///") :].startswith("/"):
        db = Path(os.path.realpath(url[len("sqlite:///") :].split("?", 1)[0]))
        if db == cache or db.is_relative_to(cache):
            raise ConfigError(f"index_cache_dir: {path} holds the metadata DB {db}")
    return path


def load_config(path: Path | str) -> PlatformConfig:
    """Read and validate the YAML config at ``path``; relative paths resolve beside it."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {_yaml_problem(exc)}") from None
    return parse_config(raw, source=path, base_dir=path.parent.resolve())


def broker_id_from_env(environ: Mapping[str, str] | None = None) -> int | None:
    """``TIERING_BROKER_ID``: this process's broker, as ``--broker`` names it; None when unset."""
    value = (os.environ if environ is None else environ).get(BROKER_ID_ENV, "").strip()
    if not value:
        return None
    if not _INTEGER.fullmatch(value) or int(value) < 0:
        raise ConfigError(f"{BROKER_ID_ENV}: expected a broker id (a non-negative integer), got {_shown(value)}")
    return int(value)


def select_broker(
    config: PlatformConfig,
    broker_id: int | None = None,
    *,
    required: bool = False,
    environ: Mapping[str, str] | None = None,
) -> PlatformConfig:
    """The config of this process's broker: ``broker_id`` (``--broker``), else
    ``TIERING_BROKER_ID``, else the only broker configured (``PlatformConfig.for_broker``).

    ``required``: the process reads log dirs, so with several brokers and none named it is an
    error naming ``--broker``. A chosen broker's log dirs must be its own by their
    ``meta.properties`` (``check_broker_log_dirs``)."""
    if broker_id is None:
        broker_id = broker_id_from_env(environ)
    selected = config.for_broker(broker_id)
    if required:
        selected.require_log_dirs()
    check_broker_log_dirs(selected)
    return selected


def check_broker_log_dirs(config: PlatformConfig) -> None:
    """Refuse a chosen broker's log dir whose ``meta.properties`` names another broker: a worker
    on the wrong host must never tier another broker's disk under the wrong id. A log dir with no
    ``meta.properties`` yet (a new or unmounted disk) is judged where it is read."""
    from tiering_core.kafka.log_dirs import META_PROPERTIES, read_log_dir_identity

    broker = config.broker
    if broker is None or broker.broker_id is None:
        return
    key = f"brokers.{broker.broker_id}.log_dirs" if config.brokers else "log_dirs"
    for log_dir in broker.log_dirs:
        if not os.path.lexists(log_dir / META_PROPERTIES):
            continue
        identity = read_log_dir_identity(log_dir)
        if identity.node_id != broker.broker_id:
            raise ConfigError(
                f"{key}: {log_dir} belongs to broker {identity.node_id} by its {META_PROPERTIES}, not to broker "
                f"{broker.broker_id}: refusing to read it (a worker on the wrong host, or a wrong --broker?)"
            )


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """Where and what, never PyYAML's snippet of the line: it may hold the DB URL's password, and
    the message reaches logs, the page and DAG import errors."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return type(exc).__name__
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + (exc.problem or exc.context or "syntax error")


#: Entries of one mapping after merge keys are expanded: a config has a few dozen; nested merges of
#: aliases multiply them (``<<: [*a, *a, ...]`` at every level).
MAX_MAPPING_ENTRIES = 10_000


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but a key given twice in one mapping is an error naming it:
    silently keeping the last value would let a typo'd override go unnoticed. Merge keys
    (``<<: *defaults``) may be overridden, as in YAML itself, up to ``MAX_MAPPING_ENTRIES``."""

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        merges = any(key_node.tag == "tag:yaml.org,2002:merge" for key_node, _ in node.value)
        super().flatten_mapping(node)
        if merges and len(node.value) > MAX_MAPPING_ENTRIES:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"merge keys expand it to more than {MAX_MAPPING_ENTRIES} entries",
                node.start_mark,
            )

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: the safe loader names it below
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {_shown(key)}",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)
