"""A schedule's shortest interval, by Airflow's cron parser (``croniter``, which Airflow ships):
a copy or retention lane's budget must end before its DAG's next run is due."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

from croniter import croniter

from tiering_core.config.dags import PRESETS
from tiering_core.errors import ConfigError

#: The copy and retention DAGs' start date, from which their schedules' fires are walked.
START = datetime(2026, 1, 1, tzinfo=UTC)

#: Fire days looked at after the first: enough for day-of-week and day-of-month patterns.
FIRE_DAYS = 40
#: Cron's resolution: no two fires are closer.
MINUTE = 60.0


def cron_of(schedule: str, key: str) -> croniter:
    """The schedule (a cron expression or a preset) as croniter's iterator from a fixed start;
    ConfigError naming ``key`` when it cannot fire (a field out of range, the 30th of February)."""
    expression = PRESETS.get(schedule, schedule)
    try:
        cron = croniter(expression, START)
        cron.get_next(datetime)
        cron.set_current(START)
    except (ValueError, KeyError) as exc:  # croniter's errors are ValueErrors
        raise ConfigError(f"{key}: {schedule!r} is not a cron expression Airflow can run ({exc})") from None
    return cron


def shortest_period(schedule: str, key: str) -> float:
    """The shortest interval in seconds between two fires of ``schedule``; ConfigError naming
    ``key`` when it is not a valid schedule.

    A cron expression fires at the same times on each day it fires on, so the shortest interval is
    within the first such day or between the last fire of one day and the first of the next: the
    first day's fires are walked one by one, the later days' boundaries only."""
    cron = cron_of(schedule, key)
    first = cron.get_next(datetime)
    times, fire = [first], cron.get_next(datetime)
    while fire.date() == first.date() and (fire - times[-1]).total_seconds() > MINUTE:
        times.append(fire)
        fire = cron.get_next(datetime)
    if fire.date() == first.date():
        return MINUTE
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
    last_of_day = times[-1].timetz()
    for _ in range(FIRE_DAYS):
        gaps.append((fire - times[-1]).total_seconds())
        times.append(datetime.combine(fire.date(), last_of_day))
        cron.set_current(times[-1])
        fire = cron.get_next(datetime)
    return min(gaps)
