"""Where a run reports what it did as it happens: a ``MetricsSink``.

Runs call ``current_sink()`` once per act (a segment copied, a deletion failed, a read served);
outside Airflow the sink is ``NullSink`` and nothing is sent. Inside a task the Airflow glue
installs a sink over Airflow's own metrics pipeline (StatsD or OpenTelemetry, as the deployment's
``[metrics]`` section says) with ``emitting``. What survives a restart is the store's counters,
not these emissions: the two are recorded side by side, never one derived from the other.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol

from tiering_core.metrics.names import MetricKind, MetricSpec

Tags = Mapping[str, str]


class MetricsSink(Protocol):
    def incr(self, spec: MetricSpec, count: int, tags: Tags) -> None: ...

    def gauge(self, spec: MetricSpec, value: float, tags: Tags) -> None: ...


class NullSink:
    """Sends nothing: the CLI and library use."""

    def incr(self, spec: MetricSpec, count: int, tags: Tags) -> None:
        return None

    def gauge(self, spec: MetricSpec, value: float, tags: Tags) -> None:
        return None


#: The process's sink: one per process (a task process runs one task), seen from every thread a
#: run starts (parallel uploads report from their own threads).
_sink: MetricsSink = NullSink()


def current_sink() -> MetricsSink:
    return _sink


@contextmanager
def emitting(sink: MetricsSink) -> Iterator[MetricsSink]:
    """Runs inside the block report to ``sink``."""
    global _sink
    previous, _sink = _sink, sink
    try:
        yield sink
    finally:
        _sink = previous


def partition_tags(topic: str, partition: int, broker_id: int | None = None) -> dict[str, str]:
    """The tags of a partition's metric, ``broker`` only where a replica is meant."""
    tags = {"topic": topic, "partition": str(partition)}
    if broker_id is not None:
        tags["broker"] = str(broker_id)
    return tags


def emit(spec: MetricSpec, value: float, topic: str, partition: int, broker_id: int | None = None) -> None:
    """Report one value of ``spec`` for a partition (or a broker's replica) to the current sink."""
    tags = partition_tags(topic, partition, broker_id if "broker" in spec.labels else None)
    sink = current_sink()
    if spec.kind is MetricKind.COUNTER:
        sink.incr(spec, int(value), tags)
    else:
        sink.gauge(spec, value, tags)
