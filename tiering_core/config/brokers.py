"""The ``brokers:`` section (a cluster: each broker's log dirs and Airflow queue), the single-broker
form's implicit broker, and the ``cluster:`` section of the replica choice.

A process reads only its own broker's disks, so no two brokers may share or nest a log dir."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiering_core.config.parsing import _INTEGER, _as_int, _as_str, _check_keys, _require_mapping, _shown
from tiering_core.errors import ConfigError

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


def broker_id_from_env(environ: Mapping[str, str] | None = None) -> int | None:
    """``TIERING_BROKER_ID``: this process's broker, as ``--broker`` names it; None when unset."""
    value = (os.environ if environ is None else environ).get(BROKER_ID_ENV, "").strip()
    if not value:
        return None
    if not _INTEGER.fullmatch(value) or int(value) < 0:
        raise ConfigError(f"{BROKER_ID_ENV}: expected a broker id (a non-negative integer), got {_shown(value)}")
    return int(value)
