"""The ``copy:`` section: how a scheduled run splits a broker's partitions into a bounded number
of lanes, and how long a lane may work before it leaves the rest to the next run.

A lane is one task of a copy or retention run: one partition where a broker's partitions fit the
bound, else a share of them worked through on ``concurrency`` threads (docs/architecture.md,
"Lanes"). The budgets keep a slow partition from holding a run past its next one, so each must
be shorter than its DAG's period (``check_budget``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tiering_core.config.parsing import as_int, check_keys, require_mapping
from tiering_core.errors import ConfigError

DEFAULT_LANES = 16
DEFAULT_CONCURRENCY = 4
#: Shorter than the copy DAG's 10-minute period, with room for its sensor and listing.
DEFAULT_BUDGET_SECONDS = 480
#: Shorter than the retention DAG's hourly period.
DEFAULT_RETENTION_BUDGET_SECONDS = 3000

KEYS = {"lanes", "concurrency", "budget_seconds", "retention_budget_seconds"}


@dataclass(frozen=True)
class CopyConfig:
    """``lanes`` per broker (the task bound of a copy or retention run, before Airflow's own
    ``max_map_length``), ``concurrency`` upload threads per lane, and the time a copy lane
    (``budget_seconds``) or a retention lane (``retention_budget_seconds``) may start new work."""

    lanes: int = DEFAULT_LANES
    concurrency: int = DEFAULT_CONCURRENCY
    budget_seconds: int = DEFAULT_BUDGET_SECONDS
    retention_budget_seconds: int = DEFAULT_RETENTION_BUDGET_SECONDS

    def check_budget(self, key: str, period_seconds: float) -> None:
        """ConfigError naming ``copy.<key>`` when that budget is not shorter than the period of the
        DAG that uses it: a lane would still start work when the next run is due."""
        budget = getattr(self, key)
        if budget >= period_seconds:
            raise ConfigError(
                f"copy.{key}: {budget} s is not shorter than the DAG's period of {period_seconds:g} s "
                "(a lane would still start work when the next run is due)"
            )


def parse_copy_config(raw: Any) -> CopyConfig:
    """``copy: {lanes: 16, concurrency: 4, budget_seconds: 480, retention_budget_seconds: 3000}``,
    every key optional."""
    section = require_mapping(raw if raw is not None else {}, "copy")
    check_keys(section, KEYS, "copy")
    return CopyConfig(**{str(key): as_int(value, f"copy.{key}", 1) for key, value in section.items()})
