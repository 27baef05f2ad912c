"""The platform configuration file (YAML), validated strictly.

Unknown keys and invalid values raise :class:`ConfigError` naming the key, so a typo never
silently falls back to a default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from tiering_core.config.brokers import (
    BROKER_ID_ENV,
    DEFAULT_OBSERVATION_STALENESS_MS,
    BrokerConfig,
    broker_id_from_env,
    default_queue,
    parse_brokers,
    parse_observation_staleness_ms,
)
from tiering_core.config.copy import CopyConfig, parse_copy_config
from tiering_core.config.dags import DagConfig, DagsConfig, parse_dags_config
from tiering_core.config.export import ExportConfig, parse_export_config
from tiering_core.config.kafka import (
    BROKER_OWNED_TOPIC_KEYS,
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    BrokerTopicConfig,
    KafkaConfig,
    parse_kafka_config,
)
from tiering_core.config.metadata import DatabaseTimeouts, MetadataConfig, parse_metadata_config
from tiering_core.config.metrics import MetricsConfig, parse_metrics_config
from tiering_core.config.parsing import (
    MAX_MAPPING_ENTRIES,
    UniqueKeyLoader,
    as_int,
    as_str,
    check_keys,
    require_mapping,
    shown,
    yaml_problem,
)
from tiering_core.config.quotas import parse_quotas
from tiering_core.config.remote import parse_remote_config
from tiering_core.config.replay import ReplayConfig, parse_replay_config
from tiering_core.config.topics import (
    TOPIC_KEYS,
    TopicConfig,
    check_copy_lag,
    not_tiered_reason,
    parse_topic_config,
    without_remote_storage_if_compacted,
)
from tiering_core.errors import ConfigError, InvalidTopicError
from tiering_core.kafka.topic import is_internal_topic, validate_topic_name
from tiering_core.storage.config import RemoteConfig
from tiering_core.storage.quota import QuotaConfig

__all__ = [
    "BROKER_ID_ENV",
    "BROKER_OWNED_TOPIC_KEYS",
    "DEFAULT_OBSERVATION_STALENESS_MS",
    "DEFAULT_TOPIC",
    "MAX_MAPPING_ENTRIES",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "BrokerConfig",
    "BrokerTopicConfig",
    "ConfigError",
    "CopyConfig",
    "DagConfig",
    "DagsConfig",
    "DatabaseTimeouts",
    "ExportConfig",
    "KafkaConfig",
    "MetadataConfig",
    "MetricsConfig",
    "PlatformConfig",
    "QuotaConfig",
    "RemoteConfig",
    "ReplayConfig",
    "TopicConfig",
    "broker_id_from_env",
    "check_broker_log_dirs",
    "default_queue",
    "implied_broker_id",
    "load_config",
    "not_tiered_reason",
    "parse_config",
    "parse_topic_config",
    "select_broker",
]

DEFAULT_TOPIC = "*"


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
    #: ``metrics:``: the scrapers' bearer token for ``/tiering/metrics``.
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    #: ``export:``: the Iceberg catalog ``tiering export`` writes tables to (None: not configured).
    export: ExportConfig | None = None
    #: ``copy:``: lanes per broker, threads per lane and the lanes' time budgets.
    copy: CopyConfig = field(default_factory=CopyConfig)
    #: ``quotas:``: every broker's upload and fetch caps (``BrokerConfig.quotas`` overrides them).
    quotas: QuotaConfig = field(default_factory=QuotaConfig)
    #: ``replay:``: the clusters a replay may write to by name, besides ``kafka:``.
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    #: ``dags:``: each DAG's schedule and queue.
    dags: DagsConfig = field(default_factory=DagsConfig)

    @property
    def quota_config(self) -> QuotaConfig:
        """This process's broker's caps: its own ``brokers.<id>.quotas``, else ``quotas:``."""
        if self.broker is not None and self.broker.quotas is not None:
            return self.broker.quotas
        return self.quotas

    @property
    def broker_id(self) -> int | None:
        """This process's broker id (``--broker``, ``TIERING_BROKER_ID``, the only broker of
        ``brokers:``, or the single-broker form's log dirs by their ``meta.properties``, once
        ``select_broker`` chose it); None where it is unknown."""
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
            raise ConfigError(f"--broker: expected a broker id (an integer), got {shown(broker_id)}")
        if not self.brokers:
            if broker_id is None or self.broker is None or self.broker.broker_id == broker_id:
                return self
            metadata_log_dir = self.broker.metadata_log_dir if self.broker is not None else None
            broker = BrokerConfig(broker_id, self.log_dirs, default_queue(broker_id), metadata_log_dir)
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

    @property
    def serves_no_broker(self) -> bool:
        """Several brokers are configured and this process serves none of them (the scheduler's or
        the API server's host, a command run without ``--broker``): it reads no log dir, only the
        metadata store and the remote tier."""
        return not self.log_dirs and len(self.brokers) > 1

    @property
    def metadata_log_dir(self) -> Path | None:
        """This process's broker's ``metadata_log_dir`` (Kafka's ``metadata.log.dir``) if configured;
        None: the one of its log dirs that holds ``__cluster_metadata-0``."""
        return self.broker.metadata_log_dir if self.broker is not None else None

    @property
    def metadata_log_dir_key(self) -> str:
        """The config key naming this process's broker's metadata log dir, for messages."""
        broker_id = self.broker_id
        return f"brokers.{broker_id}.metadata_log_dir" if self.brokers and broker_id is not None else "metadata_log_dir"

    def require_log_dirs(self) -> tuple[Path, ...]:
        """This process's log dirs; ConfigError naming ``--broker`` when the cluster form has
        several brokers and none was chosen (a process reads only its own broker's disks)."""
        if self.serves_no_broker:
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
            # Written out beside compact, it was refused when the file was parsed.
            config = without_remote_storage_if_compacted(config, f"topics.{topic}", explicit=False)
        else:
            config = self._with_broker(topic, broker)
        return replace(config, remote_storage_enable=False) if is_internal_topic(topic) else config

    def not_tiered_reason(self, topic: str) -> str | None:
        """Why the config alone says ``topic`` is not tiered (``config.topics.not_tiered_reason``);
        None where it is, or where only the cluster's topic configs could say otherwise."""
        return not_tiered_reason(topic, self.topic_config(topic))

    def _with_broker(self, topic: str, broker: BrokerTopicConfig) -> TopicConfig:
        default = self.topics.get(DEFAULT_TOPIC) or TopicConfig()
        own = self.topics.get(topic)
        own_keys = self.topic_keys.get(topic, frozenset(TOPIC_KEYS)) if own is not None else frozenset()
        live = {k: v for k, v in broker.topic_level.items() if k in BROKER_OWNED_TOPIC_KEYS}
        config = parse_topic_config(live, f"topic {topic} on the cluster", default, check_compact=False)
        if own is not None:
            config = replace(config, **{TOPIC_KEYS[key][0]: getattr(own, TOPIC_KEYS[key][0]) for key in own_keys})
        config = without_remote_storage_if_compacted(
            config, f"topics.{topic}", explicit="remote.storage.enable" in own_keys
        )
        if config.local_retention_ms is None and broker.retention_ms is not None:
            config = replace(config, local_retention_ms=broker.retention_ms)
        if config.local_retention_bytes is None and broker.retention_bytes is not None:
            config = replace(config, local_retention_bytes=broker.retention_bytes)
        return check_copy_lag(config, f"topics.{topic}")


def parse_config(raw: Any, source: Path | None = None, base_dir: Path | None = None) -> PlatformConfig:
    """Validate a decoded YAML document into a :class:`PlatformConfig`."""
    doc = require_mapping(raw, "config")
    check_keys(
        doc,
        {
            "log_dirs",
            "metadata_log_dir",
            "brokers",
            "cluster",
            "metadata",
            "remote",
            "topics",
            "index_cache_bytes",
            "index_cache_dir",
            "kafka",
            "metrics",
            "export",
            "copy",
            "quotas",
            "replay",
            "dags",
        },
        "",
    )
    base = base_dir or Path.cwd()

    def resolve(p: str) -> Path:
        path = Path(p).expanduser()
        return path if path.is_absolute() else (base / path)

    brokers, implicit = parse_brokers(doc, resolve)
    # One broker is this process's by implication; among several, ``for_broker`` chooses.
    chosen = implicit or (next(iter(brokers.values())) if len(brokers) == 1 else None)
    log_dirs = chosen.log_dirs if chosen is not None else ()

    metadata = parse_metadata_config(doc.get("metadata"), resolve)
    url = metadata.url

    remote = parse_remote_config(doc.get("remote"), resolve)

    topics_raw = require_mapping(doc.get("topics") or {}, "topics")
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
        index_cache_bytes=as_int(doc.get("index_cache_bytes", 1024**3), "index_cache_bytes", 1),
        index_cache_dir=(
            _index_cache_dir(
                resolve(as_str(doc["index_cache_dir"], "index_cache_dir")),
                tuple(d for b in ([implicit] if implicit else brokers.values()) for d in b.log_dirs),
                url,
            )
            if "index_cache_dir" in doc
            else None
        ),
        source=source,
        kafka=parse_kafka_config(doc["kafka"], resolve) if "kafka" in doc else None,
        topic_keys=topic_keys,
        brokers=brokers,
        broker=chosen,
        observation_staleness_ms=parse_observation_staleness_ms(doc.get("cluster")),
        metrics=parse_metrics_config(doc.get("metrics"), resolve),
        export=parse_export_config(doc["export"]) if "export" in doc else None,
        copy=parse_copy_config(doc.get("copy")),
        quotas=parse_quotas(doc.get("quotas"), "quotas"),
        replay=parse_replay_config(doc.get("replay"), resolve),
        dags=parse_dags_config(doc.get("dags"), cluster=bool(brokers)),
    )


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
        raw = yaml.load(text, Loader=UniqueKeyLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {yaml_problem(exc)}") from None
    return parse_config(raw, source=path, base_dir=path.parent.resolve())


def select_broker(
    config: PlatformConfig,
    broker_id: int | None = None,
    *,
    required: bool = False,
    environ: Mapping[str, str] | None = None,
) -> PlatformConfig:
    """The config of this process's broker: ``broker_id`` (``--broker``), else
    ``TIERING_BROKER_ID``, else the only broker configured (``PlatformConfig.for_broker``).

    The single-broker form without either takes the id its log dirs name
    (``implied_broker_id``), so its runs record what they saw as a cluster's broker does.

    ``required``: the process reads log dirs, so with several brokers and none named it is an
    error naming ``--broker``. A chosen broker's log dirs must be its own by their
    ``meta.properties`` (``check_broker_log_dirs``)."""
    if broker_id is None:
        broker_id = broker_id_from_env(environ)
    if broker_id is None and not config.brokers:
        broker_id = implied_broker_id(config)
    selected = config.for_broker(broker_id)
    if required:
        selected.require_log_dirs()
    check_broker_log_dirs(selected)
    return selected


def implied_broker_id(config: PlatformConfig) -> int | None:
    """The single-broker form's broker id: the ``node.id`` (``broker.id``) the ``meta.properties`` of
    its log dirs name (a KRaft broker writes one into each); None when no log dir has one yet (a new
    or unmounted disk, or a host that does not mount them: the implicit broker stays without an id).
    Log dirs naming different brokers are an error naming their files: one broker owns them all."""
    from tiering_core.kafka.log_dirs import META_PROPERTIES, read_log_dir_identity

    owners: dict[int, list[Path]] = {}
    for log_dir in config.log_dirs:
        if os.path.lexists(log_dir / META_PROPERTIES):
            owners.setdefault(read_log_dir_identity(log_dir).node_id, []).append(log_dir / META_PROPERTIES)
    if len(owners) > 1:
        named = "; ".join(f"{', '.join(map(str, files))}: broker {node}" for node, files in sorted(owners.items()))
        raise ConfigError(
            f"log_dirs: the log dirs belong to different brokers by their {META_PROPERTIES} ({named}): "
            "one broker's log.dirs all name it"
        )
    return next(iter(owners), None)


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
