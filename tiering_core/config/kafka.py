"""The ``kafka:`` section: the cluster the platform asks for live offsets, topic ids and topic
configs (tiering_core/live), and the topic configs Kafka owns there."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tiering_core.config.parsing import as_int, as_str, check_keys, optional_str, require_mapping, shown
from tiering_core.errors import ConfigError

#: The topic configs Kafka owns: with a ``kafka:`` section their topic-level values come from the
#: cluster (DescribeConfigs), between the YAML's own entry for the topic and its ``"*"`` default.
BROKER_OWNED_TOPIC_KEYS = (
    "retention.ms",
    "retention.bytes",
    "local.retention.ms",
    "local.retention.bytes",
    "cleanup.policy",
    "remote.storage.enable",
    "remote.copy.lag.ms",
    "remote.copy.lag.bytes",
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
    that holds it, read only when the client connects (``live.source``), so that processes that
    parse the config but never talk to Kafka (the DAG processor, the scheduler, the API server)
    need not have it.
    """

    bootstrap_servers: tuple[str, ...]
    request_timeout_ms: int = 30_000
    client_id: str = "tiering"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_plain_username: str | None = None
    sasl_password_env: str | None = None
    ssl_cafile: Path | None = None
    #: The cluster's id (``kafka-storage format -t``): with it the platform takes the word only of
    #: the cluster that answers with this id; a process that serves no broker has no log dir's
    #: ``meta.properties`` to learn it from and needs it for removal (``live.identity``).
    cluster_id: str | None = None
    #: The config key of this cluster's section (``kafka`` or ``replay.targets.NAME``), for messages.
    section: str = "kafka"


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def parse_kafka_config(raw: Any, resolve: Any, where: str = "kafka") -> KafkaConfig:
    """The ``kafka:`` section, or another cluster's section of the same keys at ``where`` (a
    replay target); the SASL password only by the name of its environment variable."""
    section = require_mapping(raw, where)
    check_keys(
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
            "cluster_id",
        },
        where,
    )
    if "bootstrap_servers" not in section:
        raise ConfigError(f"{where}.bootstrap_servers: required key is missing")
    servers_raw = section["bootstrap_servers"]
    if isinstance(servers_raw, str):
        servers_raw = [s.strip() for s in servers_raw.split(",") if s.strip()]
    if not isinstance(servers_raw, list) or not servers_raw:
        raise ConfigError(f"{where}.bootstrap_servers: expected host:port or a list of them, got {shown(servers_raw)}")
    servers = tuple(as_str(s, f"{where}.bootstrap_servers[]") for s in servers_raw)
    for server in servers:
        if not re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}", server):
            raise ConfigError(f"{where}.bootstrap_servers: {shown(server)} is not host:port")
    protocol = as_str(section.get("security_protocol", "PLAINTEXT"), f"{where}.security_protocol").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(f"{where}.security_protocol: {shown(protocol)} is not one of {', '.join(SECURITY_PROTOCOLS)}")
    mechanism = optional_str(section, "sasl_mechanism", f"{where}.sasl_mechanism")
    if mechanism is not None:
        mechanism = mechanism.upper()
        if mechanism not in SASL_MECHANISMS:
            raise ConfigError(f"{where}.sasl_mechanism: {shown(mechanism)} is not one of {', '.join(SASL_MECHANISMS)}")
    sasl = protocol.startswith("SASL_")
    if sasl and mechanism is None:
        raise ConfigError(f"{where}.sasl_mechanism: required with security_protocol {protocol}")
    if not sasl and mechanism is not None:
        raise ConfigError(f"{where}.sasl_mechanism: set, but security_protocol {protocol} uses no SASL")
    username = optional_str(section, "sasl_plain_username", f"{where}.sasl_plain_username")
    password_env = optional_str(section, "sasl_password_env", f"{where}.sasl_password_env")
    if sasl and (username is None or password_env is None):
        missing = f"{where}.sasl_plain_username" if username is None else f"{where}.sasl_password_env"
        raise ConfigError(f"{missing}: required with security_protocol {protocol}")
    cafile = optional_str(section, "ssl_cafile", f"{where}.ssl_cafile")
    cluster_id = optional_str(section, "cluster_id", f"{where}.cluster_id")
    if cluster_id is not None and not re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id):
        raise ConfigError(
            f"{where}.cluster_id: {shown(cluster_id)} is not a Kafka cluster id (22 URL-safe base64 characters)"
        )
    return KafkaConfig(
        bootstrap_servers=servers,
        request_timeout_ms=as_int(section.get("request_timeout_ms", 30_000), f"{where}.request_timeout_ms", 1),
        client_id=as_str(section.get("client_id", "tiering"), f"{where}.client_id"),
        security_protocol=protocol,
        sasl_mechanism=mechanism,
        sasl_plain_username=username,
        sasl_password_env=password_env,
        ssl_cafile=resolve(cafile) if cafile is not None else None,
        cluster_id=cluster_id,
        section=where,
    )
