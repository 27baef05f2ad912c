"""``EligibleSegmentSensor``: waits until some partition of a topic has a segment eligible for copy.

Deferrable by default: one check on the worker (no deferral when work is already waiting),
then ``EligibleSegmentTrigger`` polls in the triggerer. With ``deferrable=False`` it pokes in
reschedule mode, releasing the worker slot between pokes (for deployments without a triggerer).
Either way it returns (and pushes to XCom) the eligible partition numbers, or for
``topic="*"`` (every topic the config does not name) their ``<topic>-<partition>`` labels. A topic
the config says is not tiered (compacted, ``remote.storage.enable`` false, ...) is skipped at once,
the reason in the task's log, and its copy tasks with it. A partition whose closed segments wait
for their delayed upload (``remote.copy.lag.ms``/``remote.copy.lag.bytes``, KIP-1241) is not
eligible yet; each check says in the log why it waits.

The check is the run's plan, and it is handed on: the XCom ``copy_plan`` holds the partitions
with a segment to copy now or a tiering gap to record, ``[topic, partition]`` pairs most urgent
first, which the listing task splits into lanes without reading any view again; the XCom
``copy_skipped`` holds the partitions the run leaves out, ``[topic, partition, reason]`` (another
broker's replica is ahead, ...), each also a line of the task's log.

``broker_id`` names the broker whose log dirs it plans on (the cluster form gives each broker's
sensor its id and queue); its plans record that broker's observations. Its trigger carries the
id too, so a deferred wait reads the same broker's disks: in the cluster form only a triggerer
on that broker's host serving its queue (``[triggerer] queues_enabled``) may run it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue

from tiering_airflow.hooks.tiering import TieringHook, broker_config, broker_hook
from tiering_airflow.triggers.tiering import EligibleSegmentTrigger
from tiering_core.config import DEFAULT_TOPIC

#: The XCom key of the run's plan (``Eligibility.plan``), which the listing task reads.
PLAN_KEY = "copy_plan"
#: The XCom key of the partitions the run skips, each with its reason (``Eligibility.skipped``).
SKIPPED_KEY = "copy_skipped"


def hand_on(context: Any, plan: list[list[Any]], skipped: list[list[Any]], log: Any) -> None:
    """The run's plan to the listing task (XCom ``copy_plan``), and each skipped partition's reason
    to the task's log and XCom ``copy_skipped``; a check outside a task run keeps them."""
    for topic, partition, reason in skipped:
        log.info("%s-%s: skipped: %s", topic, partition, reason)
    ti = context.get("ti")
    if ti is not None:
        ti.xcom_push(key=PLAN_KEY, value=plan)
        ti.xcom_push(key=SKIPPED_KEY, value=skipped)


class EligibilityCheckError(Exception):
    """The trigger could not check the topic (bad config, unreadable log dir, metadata store down).

    Deliberately not an ``AirflowException``: ``soft_fail`` turns those into a skip, and a broken
    check must fail the task rather than look like "nothing to copy".
    """


class EligibleSegmentSensor(BaseSensorOperator):
    template_fields: Sequence[str] = ("topic", "config_path", "aws_conn_id", "broker_id")

    def __init__(
        self,
        *,
        topic: str,
        config_path: str | None = None,
        aws_conn_id: str | None = TieringHook.default_conn_name,
        deferrable: bool = True,
        broker_id: int | str | None = None,
        **kwargs: Any,
    ) -> None:
        if not deferrable:
            kwargs.setdefault("mode", "reschedule")
        super().__init__(**kwargs)
        self.topic = topic
        self.config_path = config_path
        self.aws_conn_id = aws_conn_id
        self.deferrable = deferrable
        self.broker_id = broker_id

    def hook(self) -> TieringHook:
        return broker_hook(self.broker_id, config_path=self.config_path, aws_conn_id=self.aws_conn_id)

    def poke(self, context: Any) -> PokeReturnValue:
        hook = self.hook()
        config = broker_config(hook)
        reason = None if self.topic == DEFAULT_TOPIC else config.not_tiered_reason(self.topic)
        if reason is not None:  # nothing will ever be eligible: say why at once rather than wait
            from airflow.sdk.exceptions import AirflowSkipException

            raise AirflowSkipException(f"{self.topic}: not tiered: {reason}")
        eligibility = hook.eligibility(self.topic, config)
        found = eligibility.partitions
        for line in eligibility.waiting:
            self.log.info("%s", line)
        self.log.info("%s: partitions with segments eligible for copy: %s", self.topic, found or "none")
        if found:
            hand_on(context, eligibility.plan, eligibility.skipped, self.log)
        return PokeReturnValue(is_done=bool(found), xcom_value=found)

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)
        if first.is_done:
            return first.xcom_value
        hook = self.hook()
        self.defer(
            trigger=EligibleSegmentTrigger(
                topic=self.topic,
                config_path=hook.config_path,
                aws_conn_id=self.aws_conn_id,
                poll_interval=float(self.poke_interval),
                broker_id=hook.broker_id,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout)),
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> list[int] | list[str]:
        if event.get("status") != "eligible":
            raise EligibilityCheckError(f"{self.topic}: eligibility check failed: {event.get('message')}")
        self.log.info("%s: partitions with segments eligible for copy: %s", self.topic, event["partitions"])
        hand_on(context, list(event.get("plan", [])), list(event.get("skipped", [])), self.log)
        return list(event["partitions"])
