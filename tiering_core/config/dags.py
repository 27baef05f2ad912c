"""The ``dags:`` section: each DAG's schedule and the queue its tasks run on.

The DAGs are Airflow's (``tiering_airflow.dags``), but what a deployment sets about them lives in
the one config file, validated here like every other section, with errors naming the key.
Defaults are the schedules the DAGs always had. A copy or retention lane's time budget stays in
the ``copy:`` section (``budget_seconds``, ``retention_budget_seconds``); the DAG factory checks
it against the schedule set here. A cron expression's fields are checked here by their shape
only; the factory, which has Airflow's cron parser, refuses one that cannot fire.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tiering_core.config.parsing import check_keys, require_mapping, shown
from tiering_core.errors import ConfigError

#: Airflow's schedule presets with a period (``@once`` and ``@continuous`` have none), as cron.
PRESETS: Mapping[str, str] = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@quarterly": "0 0 1 */3 *",
    "@yearly": "0 0 1 1 *",
}
_CRON_FIELD = re.compile(r"[0-9A-Za-z*/,?#-]+", re.ASCII)
_QUEUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}", re.ASCII)

#: The DAGs that run on a schedule, with the one they always had (None: triggered by hand only,
#: unless the config gives one).
SCHEDULED: Mapping[str, str | None] = {
    "copy": "*/10 * * * *",
    "retention": "@hourly",
    "spark_bulk_upload": None,
    "spark_rebuild_indexes": "@weekly",
    "spark_verify": "@weekly",
    "export": "@daily",
}
#: The DAGs an operator triggers by hand, with Params every run must give: a queue (and for
#: ``erase`` the directory its key files are read from).
MANUAL = ("delete_partition", "delete_records", "rewrite", "replay", "erase")
#: Settings of one DAG beyond its schedule and queue.
EXTRA_KEYS: Mapping[str, frozenset[str]] = {"erase": frozenset({"key_dir"})}
#: The DAGs whose lanes run on each broker's own queue in the cluster form (``brokers.<id>.queue``).
PER_BROKER = ("copy", "retention")


@dataclass(frozen=True)
class DagConfig:
    """One DAG's ``schedule`` (a cron expression or preset; None: manual only) and ``queue`` (None:
    the executor's default queue); ``key_dir``, the erase DAG's only: the directory under which its
    runs may name key files (None: a run gives its keys as a list)."""

    schedule: str | None = None
    queue: str | None = None
    key_dir: str | None = None


def _defaults() -> Mapping[str, DagConfig]:
    return {**{name: DagConfig(schedule) for name, schedule in SCHEDULED.items()}, **{n: DagConfig() for n in MANUAL}}


@dataclass(frozen=True)
class DagsConfig:
    """``dags.<name>``: every DAG's settings by the name the section gives it."""

    dags: Mapping[str, DagConfig] = field(default_factory=_defaults)

    def __getitem__(self, name: str) -> DagConfig:
        return self.dags[name]


def parse_schedule(value: Any, key: str) -> str | None:
    """A preset of ``PRESETS``, a cron expression of five fields, or null (manual only)."""
    if value is None:
        return None
    if isinstance(value, str):
        text = " ".join(value.split())
        if text in PRESETS:
            return text
        fields = text.split(" ")
        if len(fields) == 5 and all(_CRON_FIELD.fullmatch(f) for f in fields):
            return text
    raise ConfigError(
        f"{key}: expected a cron expression of five fields (e.g. '*/10 * * * *'), one of "
        f"{', '.join(PRESETS)}, or null, got {shown(value)}"
    )


def parse_queue(value: Any, key: str) -> str | None:
    """A Celery queue name, or null (the executor's default queue)."""
    if value is None or (isinstance(value, str) and _QUEUE.fullmatch(value)):
        return value
    raise ConfigError(f"{key}: expected a queue name (letters, digits and . _ : @ -) or null, got {shown(value)}")


def parse_key_dir(value: Any, key: str) -> str | None:
    """An absolute directory path, or null."""
    if value is None or (isinstance(value, str) and value.startswith("/") and "\0" not in value):
        return value
    raise ConfigError(f"{key}: expected an absolute directory path or null, got {shown(value)}")


def parse_dag_config(raw: Any, name: str, cluster: bool) -> DagConfig:
    """``dags.<name>``: ``{schedule, queue}`` for a scheduled DAG, ``{queue}`` for a manual one
    (``{queue, key_dir}`` for erase)."""
    key = f"dags.{name}"
    section = require_mapping(raw if raw is not None else {}, key)
    allowed = {"schedule", "queue"} if name in SCHEDULED else {"queue"}
    check_keys(section, allowed | EXTRA_KEYS.get(name, frozenset()), key)
    schedule = parse_schedule(section["schedule"], f"{key}.schedule") if "schedule" in section else SCHEDULED.get(name)
    if name in PER_BROKER and schedule is None:
        raise ConfigError(f"{key}.schedule: {name} runs on a schedule; null would never run it")
    queue = parse_queue(section.get("queue"), f"{key}.queue")
    if cluster and name in PER_BROKER and queue is not None:
        raise ConfigError(
            f"{key}.queue: the cluster form runs each broker's {name} lanes on that broker's queue "
            "(brokers.<id>.queue), on the host whose disks they read"
        )
    return DagConfig(schedule, queue, parse_key_dir(section.get("key_dir"), f"{key}.key_dir"))


def parse_dags_config(raw: Any, *, cluster: bool = False) -> DagsConfig:
    """``dags: {copy: {schedule: '*/10 * * * *'}, replay: {queue: tiering-replay}, ...}``, every
    key optional; ``cluster``: the config has a ``brokers:`` section."""
    section = require_mapping(raw if raw is not None else {}, "dags")
    check_keys(section, {*SCHEDULED, *MANUAL}, "dags")
    return DagsConfig({name: parse_dag_config(section.get(name), name, cluster) for name in (*SCHEDULED, *MANUAL)})
