"""What ``export:`` says per topic (``export.topics``) and where its schemas are
(``export.schema_registry``).

A topic's value exports as the bytes Kafka holds (``bytes``, the default) or decoded with the
Schema Registry schema its Confluent wire-format header names (``avro``, ``json_schema``,
``protobuf``), as typed columns; its key likewise, as bytes or, decoded, as one more column (a
struct of its fields) beside its bytes. With ``subject_strategy`` set, a decoded key's or value's
schema must be a version of the subject it names (Confluent's subject name strategies); unset,
schemas are taken by id alone, as before strategies existed. A Protobuf key's or value's columns
are those of its file's first message unless ``key_message``/``value_message`` names another (its
full name, such as ``shop.Payment`` or a nested ``shop.Order.Line``).

The registry's password is never in the file: ``auth.password_env`` names the environment
variable holding it, or ``auth.password_file`` a file (a mounted secret, such as one an Airflow
secrets backend or Kubernetes provides), read only when an export opens the registry, so the
processes that parse the config and never export need not have it.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tiering_core.config.parsing import as_str, check_keys, optional_str, require_mapping, shown
from tiering_core.errors import ConfigError

#: How a key or value is exported: as Kafka's bytes, or decoded by its registry schema.
BYTES = "bytes"
AVRO = "avro"
JSON_SCHEMA = "json_schema"
PROTOBUF = "protobuf"
FORMATS = (BYTES, AVRO, JSON_SCHEMA, PROTOBUF)
#: Confluent's subject name strategies: which subject a topic's key or value schema is registered
#: under (``<topic>-key``/``-value``, the record's full name, or both joined by ``-``).
TOPIC_STRATEGY = "topic"
RECORD_STRATEGY = "record"
TOPIC_RECORD_STRATEGY = "topic_record"
SUBJECT_STRATEGIES = (TOPIC_STRATEGY, RECORD_STRATEGY, TOPIC_RECORD_STRATEGY)


@dataclass(frozen=True)
class TopicExport:
    """How one topic exports: its key's and value's format, its table's name (None: the topic's
    name) in the export's namespace, the subject name strategy its producers register their
    schemas by (None: not checked, ids alone), and the Protobuf message whose fields are the key's
    and the value's columns (None: the file's first)."""

    key: str = BYTES
    value: str = BYTES
    table: str | None = None
    subject_strategy: str | None = None
    key_message: str | None = None
    value_message: str | None = None

    @property
    def messages(self) -> tuple[str | None, str | None]:
        """The Protobuf messages named for the value and the key (as ``formats`` orders them)."""
        return self.value_message, self.key_message

    @property
    def typed(self) -> bool:
        """Whether the key or the value is decoded by a registry schema."""
        return (self.key, self.value) != (BYTES, BYTES)


@dataclass(frozen=True)
class SchemaRegistryConfig:
    """A Confluent-compatible Schema Registry: ``url``, and basic auth by ``username`` with the
    password in the environment variable ``password_env`` or the file ``password_file``."""

    url: str
    username: str | None = None
    password_env: str | None = None
    password_file: Path | None = None

    @property
    def password_source(self) -> str | None:
        """Where the password is, for messages (never the password)."""
        if self.password_env is not None:
            return f"export.schema_registry.auth.password_env ({self.password_env})"
        if self.password_file is not None:
            return f"export.schema_registry.auth.password_file ({self.password_file})"
        return None

    def password(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The password, read now (None without auth); a ConfigError naming its source, never
        its value, when it cannot be read."""
        if self.password_env is not None:
            value = (os.environ if environ is None else environ).get(self.password_env, "")
            if not value:
                raise ConfigError(f"{self.password_source}: the environment variable is not set")
            return value
        if self.password_file is not None:
            try:
                value = self.password_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigError(f"{self.password_source}: cannot read the password: {exc.strerror}") from None
            if not value:
                raise ConfigError(f"{self.password_source}: the file is empty")
            return value
        return None


def _format(section: Mapping[str, Any], name: str, where: str) -> str:
    value = section.get(name, BYTES)
    if value not in FORMATS:
        raise ConfigError(f"{where}.{name}: expected one of {', '.join(FORMATS)}, got {shown(value)}")
    return str(value)


def _message(section: Mapping[str, Any], side: str, side_format: str, where: str) -> str | None:
    """``<side>_message``: a Protobuf message's full name, for a side whose format is protobuf."""
    name = optional_str(section, f"{side}_message", f"{where}.{side}_message")
    if name is None:
        return None
    if side_format != PROTOBUF:
        raise ConfigError(f"{where}.{side}_message: only a protobuf {side} names a message ({side} is {side_format})")
    name = name.removeprefix(".")
    if not name or any(c.isspace() for c in name) or "" in name.split("."):
        raise ConfigError(f"{where}.{side}_message: {shown(name)} is not a message's full name (such as shop.Payment)")
    return name


def parse_topic_exports(raw: Any) -> dict[str, TopicExport]:
    """``export.topics: {TOPIC: {key: FORMAT, value: FORMAT, table: NAME, subject_strategy: S,
    key_message: M, value_message: M}}``, a ``FORMAT`` one of bytes, avro, json_schema and
    protobuf, ``S`` one of topic, record and topic_record (unset: no subject check), ``M`` a
    Protobuf message's full name (unset: the file's first message)."""
    section = require_mapping(raw if raw is not None else {}, "export.topics")
    topics: dict[str, TopicExport] = {}
    for topic, entry in section.items():
        where = f"export.topics.{topic}"
        if not isinstance(topic, str) or not topic:
            raise ConfigError(f"{where}: a topic name must be a non-empty string")
        entry = require_mapping(entry if entry is not None else {}, where)
        check_keys(entry, {"key", "value", "table", "subject_strategy", "key_message", "value_message"}, where)
        table = optional_str(entry, "table", f"{where}.table")
        if table is not None and ("." in table or table.strip() != table):
            raise ConfigError(f"{where}.table: {shown(table)} must be one name without dots or spaces")
        key, value = _format(entry, "key", where), _format(entry, "value", where)
        strategy = entry.get("subject_strategy")
        if strategy is not None and strategy not in SUBJECT_STRATEGIES:
            raise ConfigError(
                f"{where}.subject_strategy: expected one of {', '.join(SUBJECT_STRATEGIES)}, got {shown(strategy)}"
            )
        messages = _message(entry, "key", key, where), _message(entry, "value", value, where)
        topics[topic] = TopicExport(key, value, table, strategy, *messages)
    return topics


def parse_schema_registry(raw: Any) -> SchemaRegistryConfig:
    """``export.schema_registry: {url: http(s)://..., auth: {username, password_env | password_file}}``."""
    where = "export.schema_registry"
    section = require_mapping(raw, where)
    check_keys(section, {"url", "auth"}, where)
    url = as_str(section.get("url"), f"{where}.url")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}.url: expected an http(s) URL, got {shown(parts.scheme + '://...')}")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(f"{where}.url: must not carry credentials: give them under {where}.auth")
    if "auth" not in section:
        return SchemaRegistryConfig(url)
    auth = require_mapping(section["auth"], f"{where}.auth")
    check_keys(auth, {"username", "password_env", "password_file"}, f"{where}.auth")
    username = as_str(auth.get("username"), f"{where}.auth.username")
    password_env = optional_str(auth, "password_env", f"{where}.auth.password_env")
    password_file = optional_str(auth, "password_file", f"{where}.auth.password_file")
    if (password_env is None) == (password_file is None):
        raise ConfigError(f"{where}.auth: give one of password_env and password_file")
    if password_file is not None and not Path(password_file).is_absolute():
        raise ConfigError(f"{where}.auth.password_file: {shown(password_file)} is not an absolute path")
    return SchemaRegistryConfig(url, username, password_env, Path(password_file) if password_file is not None else None)


@dataclass(frozen=True)
class TypedExportConfig:
    """The per-topic settings and the registry of an ``export:`` section."""

    topics: Mapping[str, TopicExport] = field(default_factory=dict)
    schema_registry: SchemaRegistryConfig | None = None


def parse_typed_export(section: Mapping[str, Any]) -> TypedExportConfig:
    """``export.topics`` and ``export.schema_registry``: a typed topic needs the registry."""
    topics = parse_topic_exports(section.get("topics"))
    registry = parse_schema_registry(section["schema_registry"]) if "schema_registry" in section else None
    typed = sorted(t for t, e in topics.items() if e.typed)
    if typed and registry is None:
        raise ConfigError(
            f"export.schema_registry: export.topics.{typed[0]} decodes by registry schemas: give the registry's url"
        )
    return TypedExportConfig(topics, registry)
