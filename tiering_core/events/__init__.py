"""What a run tells while it works: values, never lines.

A run (copy, retention, export, rebuild, verify) emits one frozen dataclass per thing worth telling
(a segment copied, a snapshot committed, a check failed) to the ``EventSink`` its caller gives it,
and returns its result at the end. The events are values at the bottom of the house: one module per
family of runs in this package (``events.read``, ...), importing nothing but other values, so the
reporting layer can import every event without loading a run (Arrow, pyiceberg). The run never
decides how an event reads: the reporting layer (``tiering_core/report/lines.py``) turns events into
lines for the command, the Spark apps and the Airflow tasks' logs, or into JSON. Kafka's storage
module works the same way: its tasks record metrics and log values, the tools above format them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class RunEvent:
    """The base of every event a run emits; each family of runs defines its own in this package."""


EventSink = Callable[[RunEvent], None]


def discard(event: RunEvent) -> None:
    """The sink of a caller that wants the result alone."""
