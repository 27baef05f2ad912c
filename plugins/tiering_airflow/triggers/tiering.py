"""``EligibleSegmentTrigger``: waits in the triggerer until a topic has a segment eligible for copy.

Each poll runs ``plan_copy`` (file reads and metadata queries) on a thread, so the triggerer's
event loop never blocks and the waiting task holds no worker slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from tiering_airflow.hooks.tiering import TieringHook


class EligibleSegmentTrigger(BaseTrigger):
    """Fires ``{"status": "eligible", "topic", "partitions"}`` once; a failed poll fires ``status: error``.

    ``topic="*"`` watches every topic the config does not name (the ``"*"`` default); its
    partitions are then ``<topic>-<partition>`` labels rather than numbers.
    """

    def __init__(
        self, *, topic: str, config_path: str, aws_conn_id: str | None = None, poll_interval: float = 60.0
    ) -> None:
        super().__init__()
        self.topic = topic
        self.config_path = config_path
        self.aws_conn_id = aws_conn_id
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "topic": self.topic,
                "config_path": self.config_path,
                "aws_conn_id": self.aws_conn_id,
                "poll_interval": self.poll_interval,
            },
        )

    def eligible_partitions(self) -> list[int] | list[str]:
        return TieringHook(config_path=self.config_path, aws_conn_id=self.aws_conn_id).eligible(self.topic)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                partitions = await asyncio.to_thread(self.eligible_partitions)
            except Exception as exc:  # the task reports it; the triggerer must keep running
                yield TriggerEvent({"status": "error", "topic": self.topic, "message": f"{type(exc).__name__}: {exc}"})
                return
            if partitions:
                yield TriggerEvent({"status": "eligible", "topic": self.topic, "partitions": partitions})
                return
            self.log.debug("%s: nothing eligible yet; next poll in %.0f s", self.topic, self.poll_interval)
            await asyncio.sleep(self.poll_interval)
