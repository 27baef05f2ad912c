"""``tiering_dags()``: the platform's DAGs by id, for a DAG file to put into its globals.

The DAGs fall into groups, each its own module here, so that a dags folder may hold them in one
file or in several (the repository's ``dags/`` has one per group). The copy and retention DAGs
(``topics``) need the config: a missing or invalid one is the building file's import error and
names the problem. The other groups take only their schedule and queue from it; built without
``topics``, they fall back to the defaults when the config cannot be read, so that the file of
the manual DAGs loads even then (every task reads the config again when it runs, and fails on
the same error), and only the topics' file shows the error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from tiering_airflow.hooks.tiering import resolve_config_path
from tiering_core.config import load_config
from tiering_core.config.dags import DagsConfig
from tiering_core.errors import ConfigError

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from tiering_core.config import PlatformConfig

log = logging.getLogger(__name__)

#: The groups of DAGs, in the order they are built.
GROUPS = ("topics", "delete_partition", "delete_records", "rewrite", "replay", "erase", "spark")


def settings_only(config_path: str | None) -> DagsConfig:
    """The ``dags:`` section for DAGs that need nothing else of the config: the defaults when it
    cannot be read (the topics' DAG file reports why)."""
    try:
        return load_config(resolve_config_path(config_path)).dags
    except ConfigError as exc:
        log.warning("The config cannot be read (%s): the DAGs' default schedules and queues", exc)
        return DagsConfig()


def builders() -> dict[str, Callable[[DagsConfig], list[DAG]]]:
    """Each group but ``topics`` from its ``dags:`` settings; a group's module is imported only
    when it is built, so that a file of the Spark DAGs imports none of the others'."""

    def delete_partition(dags: DagsConfig) -> list[DAG]:
        from tiering_airflow.dags import removal

        return [removal.build(dags["delete_partition"])]

    def delete_records(dags: DagsConfig) -> list[DAG]:
        from tiering_airflow.dags import delete_records

        return [delete_records.build(dags["delete_records"])]

    def rewrite(dags: DagsConfig) -> list[DAG]:
        from tiering_airflow.dags import rewrite

        return [rewrite.build(dags["rewrite"])]

    def replay(dags: DagsConfig) -> list[DAG]:
        from tiering_airflow.dags import replay

        return [replay.build(dags["replay"])]

    def erase(dags: DagsConfig) -> list[DAG]:
        from tiering_airflow.dags import erase

        return [erase.build(dags["erase"])]

    def spark(dags: DagsConfig) -> list[DAG]:
        from tiering_airflow.dags import spark

        return spark.build(dags)

    return {
        "delete_partition": delete_partition,
        "delete_records": delete_records,
        "rewrite": rewrite,
        "replay": replay,
        "erase": erase,
        "spark": spark,
    }


def topic_dags(config: PlatformConfig) -> list[DAG]:
    from tiering_airflow.dags import topics

    return topics.build(config)


def tiering_dags(*groups: str, config_path: str | None = None) -> dict[str, DAG]:
    """The DAGs of ``groups`` (default: every one of ``GROUPS``) by id, from the config at
    ``config_path`` (default: ``$TIERING_CONFIG``, else the Variable ``tiering_config``).

    ConfigError naming the key when the config is invalid and ``topics`` is among the groups, or
    when a DAG's schedule cannot fire; ValueError naming an unknown group."""
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        raise ValueError(f"tiering_dags: unknown group(s) {', '.join(unknown)} (groups: {', '.join(GROUPS)})")
    chosen = [g for g in GROUPS if g in groups] if groups else list(GROUPS)
    built: list[DAG] = []
    if "topics" in chosen:
        config = load_config(resolve_config_path(config_path))
        settings = config.dags
        built += topic_dags(config)
    else:
        settings = settings_only(config_path)
    build = builders()
    for group in chosen:
        if group != "topics":
            built += build[group](settings)
    return {dag.dag_id: dag for dag in built}
