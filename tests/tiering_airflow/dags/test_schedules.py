"""A schedule's shortest interval, which a copy or retention lane's budget must stay below."""

from __future__ import annotations

import re

import pytest

from tiering_airflow.dags.schedules import cron_of, shortest_period
from tiering_core.errors import ConfigError


@pytest.mark.parametrize(
    ("schedule", "seconds"),
    [
        ("*/10 * * * *", 600),
        ("*/7 * * * *", 240),  # :56 to :00
        ("@hourly", 3600),
        ("0 9,10 * * *", 3600),
        ("59 23 * * *", 86400),
        ("0 0,23 * * 1,3", 23 * 3600),  # Monday 23:00 to Wednesday 00:00 is longer
        ("0,59 0,23 * * *", 60),  # 23:59 to the next day's 00:00
        ("* * * * *", 60),
        ("@weekly", 7 * 86400),
        ("0 0 1,2 * *", 86400),
        ("@quarterly", 90 * 86400),  # January to April 2026
    ],
)
def test_the_shortest_interval_between_two_fires(schedule: str, seconds: int) -> None:
    assert shortest_period(schedule, "dags.copy.schedule") == seconds


@pytest.mark.parametrize("schedule", ["61 * * * *", "0 0 30 2 *", "a b c d e"])
def test_a_schedule_that_cannot_fire_names_the_key(schedule: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"dags.export.schedule: '{schedule}' is not a cron")):
        cron_of(schedule, "dags.export.schedule")
