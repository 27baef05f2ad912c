"""The ``brokers:`` section (a cluster: each broker's log dirs, Airflow queue and own quotas), the single-broker
form's implicit broker, and the ``cluster:`` section of the replica choice.

A process reads only its own broker's disks, so no two brokers may share or nest a log dir."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiering_core.config.parsing import INTEGER, as_int, as_str, check_keys, require_mapping, shown
from tiering_core.config.quotas import parse_quotas
from tiering_core.errors import ConfigError
from tiering_core.storage.quota import QuotaConfig

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
    executor's default queue. ``metadata_log_dir`` is the broker's ``metadata.log.dir`` (where its
    KRaft metadata log, ``__cluster_metadata-0``, is) when it is none of ``log_dirs``; None: the
    one of ``log_dirs`` that holds it. ``quotas`` are the broker's own caps
    (``brokers.<id>.quotas`` over the top-level ``quotas:``); None: the top-level ones.
    """

    broker_id: int | None
    log_dirs: tuple[Path, ...]
    queue: str | None = None
    metadata_log_dir: Path | None = None
    quotas: QuotaConfig | None = None


def parse_observation_staleness_ms(raw: Any) -> int:
    """``cluster: {observation_staleness_ms: N}``: how old a replica observation may be and still
    count in the replica choice (default ``DEFAULT_OBSERVATION_STALENESS_MS``)."""
    section = require_mapping(raw if raw is not None else {}, "cluster")
    check_keys(section, {"observation_staleness_ms"}, "cluster")
    return as_int(
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
    return tuple(resolve(as_str(d, f"{key}[]")) for d in raw)


_QUEUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}", re.ASCII)


def parse_brokers(
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
        metadata_log_dir = _metadata_log_dir(doc, "metadata_log_dir", resolve)
        return {}, BrokerConfig(None, _log_dirs(doc["log_dirs"], "log_dirs", resolve), None, metadata_log_dir)
    if "metadata_log_dir" in doc:
        raise ConfigError(
            "metadata_log_dir: in the cluster form each broker names its own (brokers.<id>.metadata_log_dir)"
        )
    section = require_mapping(doc["brokers"], "brokers")
    if not section:
        raise ConfigError("brokers: expected at least one broker (broker id: {log_dirs: [...], queue: NAME})")
    brokers: dict[int, BrokerConfig] = {}
    queues: dict[str, int] = {}
    for key, value in section.items():
        broker_id = as_int(key, f"brokers.{shown(key)}", 0)
        where = f"brokers.{broker_id}"
        if broker_id in brokers:
            raise ConfigError(f"{where}: the broker is given twice")
        body = require_mapping(value, where)
        check_keys(body, {"log_dirs", "queue", "metadata_log_dir", "quotas"}, where)
        if "log_dirs" not in body:
            raise ConfigError(f"{where}.log_dirs: required key is missing")
        queue = as_str(body.get("queue", default_queue(broker_id)), f"{where}.queue")
        if not _QUEUE.fullmatch(queue):
            raise ConfigError(f"{where}.queue: {shown(queue)} is not a queue name (letters, digits, _ . : -)")
        if queue in queues:
            raise ConfigError(f"{where}.queue: {queue} is broker {queues[queue]}'s queue too")
        queues[queue] = broker_id
        log_dirs = _log_dirs(body["log_dirs"], f"{where}.log_dirs", resolve)
        metadata_log_dir = _metadata_log_dir(body, f"{where}.metadata_log_dir", resolve)
        quotas = (
            parse_quotas(body["quotas"], f"{where}.quotas", parse_quotas(doc.get("quotas"), "quotas"))
            if "quotas" in body
            else None
        )
        brokers[broker_id] = BrokerConfig(broker_id, log_dirs, queue, metadata_log_dir, quotas)
    _check_disjoint_log_dirs(brokers)
    return brokers, None


def _metadata_log_dir(section: Mapping[str, Any], key: str, resolve: Callable[[str], Path]) -> Path | None:
    """``metadata_log_dir``: the broker's ``metadata.log.dir``, when it is none of its log dirs."""
    if "metadata_log_dir" not in section:
        return None
    return resolve(as_str(section["metadata_log_dir"], key))


def _check_disjoint_log_dirs(brokers: Mapping[int, BrokerConfig]) -> None:
    seen: list[tuple[int, Path, Path]] = []
    for broker_id, broker in brokers.items():
        for log_dir in broker.log_dirs:
            real = Path(os.path.realpath(log_dir))
            for other_id, other, other_real in seen:
                if _overlap(real, other_real):
                    owner = "its own" if other_id == broker_id else f"broker {other_id}'s"
                    raise ConfigError(f"brokers.{broker_id}.log_dirs: {log_dir} overlaps {owner} log dir {other}")
            seen.append((broker_id, log_dir, real))
    for broker_id, broker in brokers.items():  # a broker's metadata log dir may be one of its own log dirs only
        if broker.metadata_log_dir is None:
            continue
        real = Path(os.path.realpath(broker.metadata_log_dir))
        for other_id, other, other_real in seen:
            if other_id != broker_id and _overlap(real, other_real):
                raise ConfigError(
                    f"brokers.{broker_id}.metadata_log_dir: {broker.metadata_log_dir} overlaps broker "
                    f"{other_id}'s log dir {other}"
                )


def _overlap(a: Path, b: Path) -> bool:
    return a == b or a.is_relative_to(b) or b.is_relative_to(a)


def broker_id_from_env(environ: Mapping[str, str] | None = None) -> int | None:
    """``TIERING_BROKER_ID``: this process's broker, as ``--broker`` names it; None when unset."""
    value = (os.environ if environ is None else environ).get(BROKER_ID_ENV, "").strip()
    if not value:
        return None
    if not INTEGER.fullmatch(value) or int(value) < 0:
        raise ConfigError(f"{BROKER_ID_ENV}: expected a broker id (a non-negative integer), got {shown(value)}")
    return int(value)
