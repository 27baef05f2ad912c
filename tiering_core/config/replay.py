"""The ``replay:`` section: the clusters a replay may write to besides the ``kafka:`` one, each
with its own address and security settings, so that a cluster's credentials go only to the
servers they were configured for."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tiering_core.config.kafka import KafkaConfig, parse_kafka_config
from tiering_core.config.parsing import check_keys, require_mapping, shown
from tiering_core.errors import ConfigError

#: A replay target's name: letters, digits, ``_`` and ``-`` (never a host:port, never a dotted
#: host), as the CLI's ``--target`` and the replay DAG's ``target`` Param take it.
TARGET_NAME = r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}"


@dataclass(frozen=True)
class ReplayConfig:
    """``replay.targets``: a replay's clusters by name, each a ``kafka:``-like section."""

    targets: Mapping[str, KafkaConfig] = field(default_factory=dict)


def is_target_name(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(TARGET_NAME, value, re.ASCII) is not None


def parse_replay_config(raw: Any, resolve: Any) -> ReplayConfig:
    """The ``replay:`` section; each target parsed as the ``kafka:`` section is, its errors
    naming ``replay.targets.NAME.<key>``."""
    if raw is None:
        return ReplayConfig()
    section = require_mapping(raw, "replay")
    check_keys(section, {"targets"}, "replay")
    targets_raw = require_mapping(section.get("targets") or {}, "replay.targets")
    targets: dict[str, KafkaConfig] = {}
    for name, target in targets_raw.items():
        if not is_target_name(name):
            raise ConfigError(
                f"replay.targets: {shown(name)} is not a target name (letters, digits, _ and -, up to 64, "
                "never an address)"
            )
        targets[name] = parse_kafka_config(target, resolve, f"replay.targets.{name}")
    return ReplayConfig(targets)
