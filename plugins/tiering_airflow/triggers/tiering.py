"""``EligibleSegmentTrigger``: waits in the triggerer until a topic has a segment eligible for copy.

Each poll runs the copy plans (``plan_copies``: file reads and metadata queries) on a thread, so
the triggerer's event loop never blocks and the waiting task holds no worker slot. A poll has a
time limit: a log dir that hangs (an unresponsive network mount) or a metadata store that stops
answering ends the wait with an error event, which fails the task to be retried, instead of
holding the trigger forever. A poll that finds segments waiting for their delayed upload
(KIP-1241) logs why each partition waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from tiering_airflow.hooks.tiering import TieringHook

#: How long one poll may take before the trigger gives up (seconds).
DEFAULT_POLL_TIMEOUT = 300.0


class EligibleSegmentTrigger(BaseTrigger):
    """Fires ``{"status": "eligible", "topic", "partitions", "plan"}`` once; a failed poll fires ``status: error``.

    ``topic="*"`` watches every topic the config does not name (the ``"*"`` default); its
    partitions are then ``<topic>-<partition>`` labels rather than numbers. ``broker_id``: the
    broker whose log dirs each poll reads (None: the triggerer's own, as a worker's).
    """

    def __init__(
        self,
        *,
        topic: str,
        config_path: str,
        aws_conn_id: str | None = None,
        poll_interval: float = 60.0,
        poll_timeout: float = DEFAULT_POLL_TIMEOUT,
        broker_id: int | None = None,
    ) -> None:
        super().__init__()
        self.topic = topic
        self.config_path = config_path
        self.aws_conn_id = aws_conn_id
        self.poll_interval = poll_interval
        self.poll_timeout = poll_timeout
        self.broker_id = broker_id
        #: The last poll's plan, handed to the task with the event that ends the wait.
        self.plan: list[list[Any]] = []
        #: The last poll's skipped partitions with their reasons (``Eligibility.skipped``).
        self.skipped: list[list[Any]] = []

    def serialize(self) -> tuple[str, dict[str, Any]]:
        kwargs: dict[str, Any] = {
            "topic": self.topic,
            "config_path": self.config_path,
            "aws_conn_id": self.aws_conn_id,
            "poll_interval": self.poll_interval,
            "poll_timeout": self.poll_timeout,
        }
        if self.broker_id is not None:  # the single-broker form's triggers stay as they were stored
            kwargs["broker_id"] = self.broker_id
        return f"{type(self).__module__}.{type(self).__qualname__}", kwargs

    def eligible_partitions(self) -> list[int] | list[str]:
        """The partitions eligible now; the poll's plan (``Eligibility.plan``) kept in ``plan``."""
        eligibility = TieringHook(
            config_path=self.config_path, aws_conn_id=self.aws_conn_id, broker_id=self.broker_id
        ).eligibility(self.topic)
        for line in eligibility.waiting:
            self.log.info("%s", line)
        self.plan = eligibility.plan
        self.skipped = eligibility.skipped
        return eligibility.partitions

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a cancellation
                # that arrives as the poll finishes, and the triggerer's cancel would never land.
                async with asyncio.timeout(self.poll_timeout):
                    partitions = await asyncio.to_thread(self.eligible_partitions)
            except TimeoutError:
                message = (
                    f"checking for eligible segments did not finish within {self.poll_timeout:.0f} s "
                    "(a log dir or the metadata store does not answer)"
                )
                yield TriggerEvent({"status": "error", "topic": self.topic, "message": message})
                return
            except Exception as exc:  # the task reports it; the triggerer must keep running
                yield TriggerEvent({"status": "error", "topic": self.topic, "message": f"{type(exc).__name__}: {exc}"})
                return
            if partitions:
                event = {
                    "status": "eligible",
                    "topic": self.topic,
                    "partitions": partitions,
                    "plan": self.plan,
                    "skipped": self.skipped,
                }
                yield TriggerEvent(event)
                return
            self.log.debug("%s: nothing eligible yet; next poll in %.0f s", self.topic, self.poll_interval)
            await asyncio.sleep(self.poll_interval)
