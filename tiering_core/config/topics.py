"""A topic's tiering knobs in Kafka's names, and their parsing from a ``topics:`` entry."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tiering_core.config.parsing import as_bool, as_int, as_str, check_keys, require_mapping
from tiering_core.errors import ConfigError
from tiering_core.kafka.topic import is_internal_topic


@dataclass(frozen=True)
class TopicConfig:
    """A topic's tiering knobs, with Kafka's names and meanings (docs/kafka-rules.md section 9).

    ``retention_ms``/``retention_bytes`` are the total (remote) retention; ``-1`` means
    unlimited. ``local_retention_*`` mirror the broker's own local retention: ``-2`` means
    "same as total", ``None`` means unknown (no local-retention alarm). ``remote_copy_lag_*`` delay
    the upload of a closed segment (KIP-1241, docs/kafka-rules.md section 5, "Delayed upload"):
    ``0`` no delay, ``-1`` the effective local retention.
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
    remote_copy_lag_ms: int = 0
    remote_copy_lag_bytes: int = -1

    def effective_local_retention_ms(self) -> int | None:
        if self.local_retention_ms == -2:
            return self.retention_ms
        return self.local_retention_ms

    def effective_local_retention_bytes(self) -> int | None:
        if self.local_retention_bytes == -2:
            return self.retention_bytes
        return self.local_retention_bytes

    def effective_remote_copy_lag_ms(self) -> int:
        """Kafka's ``LogConfig.remoteCopyLagMs``: ``-1`` is the effective local retention time,
        itself ``-1`` (the time check is not applied) when unlimited or unknown here."""
        return _resolved_copy_lag(self.remote_copy_lag_ms, self.effective_local_retention_ms())

    def effective_remote_copy_lag_bytes(self) -> int:
        """Kafka's ``LogConfig.remoteCopyLagBytes``, as ``effective_remote_copy_lag_ms`` for size."""
        return _resolved_copy_lag(self.remote_copy_lag_bytes, self.effective_local_retention_bytes())


def _resolved_copy_lag(lag: int, local_retention: int | None) -> int:
    if lag != -1:
        return lag
    return -1 if local_retention is None else local_retention


# Kafka config name -> (dataclass field, kind)
TOPIC_KEYS: dict[str, tuple[str, str]] = {
    "remote.storage.enable": ("remote_storage_enable", "bool"),
    "retention.ms": ("retention_ms", "retention"),
    "retention.bytes": ("retention_bytes", "retention"),
    "local.retention.ms": ("local_retention_ms", "local_retention"),
    "local.retention.bytes": ("local_retention_bytes", "local_retention"),
    "remote.log.copy.disable": ("remote_log_copy_disable", "bool"),
    "remote.log.delete.on.disable": ("remote_log_delete_on_disable", "bool"),
    "index.interval.bytes": ("index_interval_bytes", "positive"),
    "cleanup.policy": ("cleanup_policy", "cleanup_policy"),
    "remote.copy.lag.ms": ("remote_copy_lag_ms", "copy_lag"),
    "remote.copy.lag.bytes": ("remote_copy_lag_bytes", "copy_lag"),
}


def parse_topic_config(raw: Any, where: str, base: TopicConfig, *, check_compact: bool = True) -> TopicConfig:
    section = require_mapping(raw if raw is not None else {}, where)
    check_keys(section, set(TOPIC_KEYS), where)
    values: dict[str, Any] = {}
    for key, value in section.items():
        attr, kind = TOPIC_KEYS[key]
        name = f"{where}.{key}"
        if kind == "bool":
            values[attr] = as_bool(value, name)
        elif kind == "positive":
            values[attr] = as_int(value, name, 1)
        elif kind == "cleanup_policy":
            values[attr] = _cleanup_policy(value, name)
        elif kind == "retention":
            number = as_int(value, name)
            if number < -1:
                raise ConfigError(f"{name}: {number} is invalid (use -1 for unlimited)")
            values[attr] = number
        elif kind == "copy_lag":
            number = as_int(value, name)
            if number < -1:
                raise ConfigError(f"{name}: {number} is invalid (use 0 for no delay, -1 for the local retention)")
            values[attr] = number
        else:
            number = as_int(value, name)
            if number < -2:
                raise ConfigError(f"{name}: {number} is invalid (use -2 for 'same as total', -1 for unlimited)")
            values[attr] = number
    config = replace(base, **values)
    check_copy_lag(config, where)
    if check_compact:  # refuse the contradiction written here; an inherited one is judged at lookup
        without_remote_storage_if_compacted(config, where, explicit="remote.storage.enable" in section)
    return config


def check_copy_lag(config: TopicConfig, where: str) -> TopicConfig:
    """Kafka's bound on a delayed upload (``LogConfig.validateRemoteCopyLagTime``/``Size``): a
    positive copy lag never exceeds the effective local retention unless that is unlimited (or,
    here, unknown). A longer delay would leave the broker deleting segments not yet tiered."""
    bounds = (
        ("remote.copy.lag.ms", config.remote_copy_lag_ms, "local.retention.ms", config.effective_local_retention_ms()),
        (
            "remote.copy.lag.bytes",
            config.remote_copy_lag_bytes,
            "local.retention.bytes",
            config.effective_local_retention_bytes(),
        ),
    )
    for lag_key, lag, retention_key, retention in bounds:
        if lag > 0 and retention is not None and retention >= 0 and lag > retention:
            raise ConfigError(
                f"{where}.{lag_key}: {lag} exceeds {retention_key} (effective value: {retention}); "
                "Kafka refuses a copy lag longer than the local retention"
            )
    return config


def without_remote_storage_if_compacted(config: TopicConfig, where: str, *, explicit: bool) -> TopicConfig:
    """Kafka refuses remote storage for a compacted topic (docs/kafka-rules.md section 9), whether
    the policy is in the YAML or on the cluster: written out beside a ``compact`` policy
    (``explicit``: the entry ``where`` sets ``remote.storage.enable: true``) it is an error naming
    the key; inherited (from ``"*"``), the topic is not tiered and the others are, as when the
    cluster says the topic is compacted."""
    if "compact" not in config.cleanup_policy or not config.remote_storage_enable:
        return config
    if explicit:
        raise ConfigError(
            f"{where}.remote.storage.enable: true, but cleanup.policy is {','.join(config.cleanup_policy)}: "
            "Kafka refuses remote storage for a compacted topic (set it false or leave it out)"
        )
    return replace(config, remote_storage_enable=False)


def not_tiered_reason(topic: str, config: TopicConfig) -> str | None:
    """Why Kafka would not tier ``topic`` with ``config`` at all (None: it would): what copy says
    when it skips the topic, and what status, the DAGs and the Tiering page show."""
    if is_internal_topic(topic):
        return "internal topic (Kafka never tiers it)"
    if "compact" in config.cleanup_policy and not config.remote_storage_enable:
        return f"cleanup.policy {','.join(config.cleanup_policy)}: Kafka never tiers a compacted topic"
    if not config.remote_storage_enable:
        return "remote.storage.enable is false"
    if config.remote_log_copy_disable:
        return "remote.log.copy.disable is true"
    return None


def _cleanup_policy(value: Any, key: str) -> tuple[str, ...]:
    """Kafka's list of ``delete`` and ``compact`` (a comma-separated string or a YAML list)."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{key}: expected delete, compact or both, got {value!r}")
    policies = tuple(as_str(item, key).strip() for item in items)
    if any(p not in ("delete", "compact") for p in policies):
        raise ConfigError(f"{key}: expected delete, compact or both, got {value!r}")
    return policies
