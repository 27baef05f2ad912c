"""Airflow's own metrics pipeline as the runs' ``MetricsSink``: what a run reports inside a task goes
out through ``airflow.sdk.observability.stats.Stats``, so to StatsD, Datadog or OpenTelemetry as the
deployment's ``[metrics]`` section says (nothing when none is on), behind Airflow's prefix
(``statsd_prefix`` / ``otel_prefix``), through Airflow's name checks and allow/block lists.

Names are the specs' StatsD names (``tiering.remote_copy_bytes``); the tags ``topic``, ``partition``
and ``broker`` become InfluxDB-style tags on StatsD (``statsd_influxdb_enabled``), Datadog tags, or
OpenTelemetry attributes. ``TieringHook.get_conn`` installs the sink for as long as a run's context
is open, so every task (operators, the sensor's poke, TaskFlow tasks) reports without doing
anything itself. The sink is the process's (the core's rule; a task process runs one task): where
threads open contexts side by side (the triggerer's polls), a value reported while another
thread's context closes may be dropped.

A metrics backend that fails never fails the run: Airflow's loggers already drop socket errors and
bad names; anything else raised on the way is logged once per sink and the value dropped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from airflow.sdk.observability.stats import Stats

from tiering_core.metrics.names import MetricSpec
from tiering_core.metrics.sink import Tags, emitting

log = logging.getLogger(__name__)


class AirflowStatsSink:
    """Sends each value to ``Stats`` under ``spec.statsd_name`` with the partition's tags."""

    def __init__(self) -> None:
        self._failed = threading.Event()  # one warning per sink, not one per segment copied

    def incr(self, spec: MetricSpec, count: int, tags: Tags) -> None:
        self._send(Stats.incr, spec, count, tags)

    def gauge(self, spec: MetricSpec, value: float, tags: Tags) -> None:
        self._send(Stats.gauge, spec, value, tags)

    def _send(self, send: Callable[..., Any], spec: MetricSpec, value: float, tags: Tags) -> None:
        try:
            send(spec.statsd_name, value, tags=dict(tags))
        except Exception:  # the metrics pipeline is never a reason for a run to fail
            if not self._failed.is_set():
                self._failed.set()
                log.warning(
                    "Metrics: could not send %s to Airflow's metrics pipeline; this task's further "
                    "failures to send are not logged",
                    spec.statsd_name,
                    exc_info=True,
                )


@contextmanager
def task_metrics() -> Iterator[AirflowStatsSink]:
    """Runs inside the block report through Airflow's metrics pipeline."""
    sink = AirflowStatsSink()
    with emitting(sink):
        yield sink
