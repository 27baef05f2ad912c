"""Per-topic copy and retention DAGs, generated from the platform config.

For every topic named under ``topics:`` in the config file given by ``TIERING_CONFIG`` (else the
Airflow Variable ``tiering_config``):

- ``tiering_copy__<topic>``: a sensor waits until some partition has a segment eligible for
  copy and plans the run, a small task splits the partitions of its plan (those with a segment to
  copy or a gap to record, most urgent first) into lanes without reading them again, then one
  mapped copy task per lane runs in the pool ``tiering_uploads``;
- ``tiering_retention__<topic>``: one mapped retention task per lane.

Their schedules are the config's ``dags.copy.schedule`` (default every 10 minutes) and
``dags.retention.schedule`` (default hourly). A run maps at most ``copy.lanes`` tasks per broker
(default 16), never more than Airflow's ``[core] max_map_length`` read when the listing task runs.
Partitions that fit are one lane each, labelled ``<topic>-<partition>``; beyond the bound each
lane (``lane-<i> (<n> partitions)``) works through its share, most urgent first, on
``copy.concurrency`` threads, and starts nothing after ``copy.budget_seconds``
(``copy.retention_budget_seconds`` for retention): the rest is the next run's. A budget not
shorter than the shortest interval of its DAG's schedule is a config error naming the key.

Every other topic in the broker's log dirs falls under the config's ``"*"`` default. Two
catch-all DAGs tier those: ``tiering_copy_default_topics`` and ``tiering_retention_default_topics``
do the same per partition of every topic the config does not name, found at run time (a topic
later named in the config moves to DAGs of its own). Their ids have a single underscore, so no
topic's DAG can take them.

In the cluster form (``brokers:`` in the config) every DAG holds one task group per broker,
``broker_<id>``: its sensor, ``list_partitions`` and mapped tasks run on that broker's queue
(``tiering-broker-<id>`` unless the config names another) and name the broker, so the worker
serving that queue on the broker's host reads only its own disks. The single-broker form keeps
one flat lane on the queue of ``dags.copy.queue`` (``dags.retention.queue``), by default the
executor's, the worker's broker being its ``TIERING_BROKER_ID`` (or the only one).

The sensor is deferrable (it waits in the triggerer, holding no worker slot); with
``TIERING_SENSOR_DEFERRABLE=false`` it pokes in reschedule mode instead, for deployments that run
no triggerer. In the cluster form it pokes in reschedule mode on its broker's queue unless
``TIERING_SENSOR_DEFERRABLE=true`` says that a triggerer on each broker host serves its queue
(``[triggerer] queues_enabled``): a triggerer elsewhere cannot read that broker's log dirs.
``TIERING_SENSOR_POKE_SECONDS`` sets how often either re-plans; ``TIERING_RETRY_DELAY_SECONDS`` how
long a failed task waits before its first retry (default 60).

A named topic the config says is not tiered (a compacted one inheriting ``remote.storage.enable``
from ``"*"``, ...) keeps its DAGs, their description saying why: its copy sensor skips at once
with the reason, and retention still finishes what was tiered before.

Building reads only the YAML config and the environment: partitions are found at run time, and
everything heavy is imported inside the tasks.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from airflow.sdk import DAG, TaskGroup, XComArg, task

from tiering_airflow.dag_ids import (
    DEFAULT_COPY_DAG_ID,
    DEFAULT_RETENTION_DAG_ID,
    copy_dag_id,
    fit,
    retention_dag_id,
)
from tiering_airflow.dags.schedules import START, shortest_period
from tiering_airflow.hooks.tiering import named_topics
from tiering_airflow.operators.tiering import TieringCopyLaneOperator, TieringRetentionLaneOperator, as_bool
from tiering_airflow.params import RETRY_DELAY, on_queue
from tiering_airflow.sensors.tiering import PLAN_KEY, EligibleSegmentSensor
from tiering_core.config import DEFAULT_TOPIC, BrokerConfig, PlatformConfig

UPLOAD_POOL = "tiering_uploads"
SENSOR_TIMEOUT = timedelta(minutes=9)
#: A lane's label: ``<topic>-<partition>`` for a lane of one partition (``runs.lanes.Lane``).
LANE_LABEL = "{{ task.lane }}"
MAX_TAG = 100


@dataclass(frozen=True)
class TopicDags:
    """What every copy and retention DAG of one config shares, read once per parse."""

    #: One lane per broker of the ``brokers:`` section, each in its task group on its queue; one
    #: flat lane (None) for the single-broker form.
    brokers: tuple[BrokerConfig | None, ...]
    #: Named topics the config says are not tiered, with why (their DAGs say it; the sensor skips).
    not_tiered: dict[str, str]
    config: PlatformConfig
    #: How often the sensor (or its trigger) re-plans: ``TIERING_SENSOR_POKE_SECONDS``.
    poke_seconds: float
    #: ``TIERING_SENSOR_DEFERRABLE``; None: deferrable in the single-broker form only.
    deferrable: bool | None

    def default_args(self, kind: str) -> dict[str, Any]:
        """The tasks' retries and the single-broker form's queue (``dags.<kind>.queue``)."""
        return {
            "owner": "tiering",
            "retries": 3,
            "retry_delay": RETRY_DELAY,
            "retry_exponential_backoff": 2.0,
            "max_retry_delay": timedelta(minutes=30),
            **on_queue(self.config.dags[kind].queue),
        }

    def described(self, what: str, topic: str | None) -> str:
        """A topic DAG's description, saying why when the config says the topic is not tiered."""
        reason = None if topic is None else self.not_tiered.get(topic)
        return what if reason is None else f"{what}. Not tiered: {reason}"

    def sensor(self, topic: str, broker: BrokerConfig | None) -> EligibleSegmentSensor:
        return EligibleSegmentSensor(
            task_id="wait_for_eligible_segment",
            topic=topic,
            poke_interval=self.poke_seconds,
            timeout=SENSOR_TIMEOUT,
            soft_fail=True,
            deferrable=broker is None if self.deferrable is None else self.deferrable,
            **on_broker(broker),
        )


def topic_dags_of(config: PlatformConfig) -> TopicDags:
    """The shared settings of ``config``'s topic DAGs; ConfigError naming the key of a lane budget
    that does not end before its DAG's next run is due, or of a schedule that cannot fire."""
    for kind, budget in (("copy", "budget_seconds"), ("retention", "retention_budget_seconds")):
        schedule = config.dags[kind].schedule
        assert schedule is not None  # the config refuses a null one for copy and retention
        config.copy.check_budget(budget, shortest_period(schedule, f"dags.{kind}.schedule"))
    deferrable = os.environ.get("TIERING_SENSOR_DEFERRABLE")
    return TopicDags(
        brokers=tuple(config.broker_configs()) if config.brokers else (None,),
        not_tiered={t: r for t in named_topics(config) if (r := config.not_tiered_reason(t)) is not None},
        config=config,
        poke_seconds=float(os.environ.get("TIERING_SENSOR_POKE_SECONDS", "60")),
        deferrable=None if deferrable is None else as_bool(deferrable, "TIERING_SENSOR_DEFERRABLE"),
    )


def broker_group(broker: BrokerConfig | None) -> AbstractContextManager[Any]:
    """The task group of one broker's tasks (cluster form); the single-broker form has none."""
    if broker is None:
        return nullcontext()
    return TaskGroup(group_id=f"broker_{broker.broker_id}", tooltip=f"broker {broker.broker_id}: queue {broker.queue}")


def on_broker(broker: BrokerConfig | None) -> dict[str, Any]:
    """The arguments that put a task on its broker: the broker's queue and id (none for the
    single-broker form: the DAG's queue, the worker's own broker)."""
    if broker is None:
        return {}
    return {"queue": broker.queue, "broker_id": broker.broker_id}


def broker_name(broker_id: int | None) -> str:
    return "this broker" if broker_id is None else f"broker {broker_id}"


@task
def list_partitions(
    topic: str, broker_id: int | None = None, urgent_first: bool = False, plan: list[list[Any]] | None = None
) -> list[dict[str, Any]]:
    """The lanes over the topic's partitions on the broker, found at run time, as the mapped
    tasks' arguments (``plan``: the copy sensor's, whose partitions and order they keep, no view
    read again); no partition -> the run is skipped."""
    return broker_lanes(broker_id, topic, urgent_first, plan)


@task
def list_default_partitions(
    broker_id: int | None = None, urgent_first: bool = False, plan: list[list[Any]] | None = None
) -> list[dict[str, Any]]:
    """The lanes over every partition on the broker of a topic the config does not name (``plan``:
    as ``list_partitions``)."""
    return broker_lanes(broker_id, None, urgent_first, plan)


def broker_lanes(
    broker_id: int | None, topic: str | None, urgent_first: bool, plan: list[list[Any]] | None
) -> list[dict[str, Any]]:
    """The listing tasks' lanes over the broker's partitions of ``topic``, or (None) of every topic
    the config does not name; no partition, or none of the plan's still on the broker, skips the run."""
    from airflow.sdk.exceptions import AirflowSkipException

    from tiering_airflow.hooks.tiering import broker_config, broker_hook
    from tiering_core.kafka.topic import TopicPartition

    hook = broker_hook(broker_id)
    config = broker_config(hook)
    if topic is None:
        partitions = hook.default_partitions(config)
        none = f"every topic in {broker_name(broker_id)}'s log dirs has DAGs of its own"
    else:
        partitions = [TopicPartition(topic, p) for p in hook.partitions(topic, config)]
        none = f"topic {topic!r} has no partition in {broker_name(broker_id)}'s log dirs"
    if not partitions:
        raise AirflowSkipException(none)
    lanes = hook.lanes(partitions, config, urgent_first=urgent_first, plan=plan)
    if not lanes:
        raise AirflowSkipException(f"the run's plan names no partition in {broker_name(broker_id)}'s log dirs")
    return lanes


def listing(broker: BrokerConfig | None, topic: str | None = None, *, plan: Any = None) -> Any:
    """The ``list_partitions`` task of one broker: the lanes over the topic's partitions, or (no
    topic) over those of every topic the config does not name; ``plan`` for copy: the sensor's
    (its XCom), urgent first."""
    place = on_broker(broker)
    queue = {"queue": place["queue"]} if place else {}
    broker_id = place.get("broker_id")
    order: dict[str, Any] = {} if plan is None else {"urgent_first": True, "plan": plan}
    if topic is None:
        return list_default_partitions.override(task_id="list_partitions", **queue)(broker_id, **order)
    return list_partitions.override(task_id="list_partitions", **queue)(topic, broker_id, **order)


def topic_dag(
    dags: TopicDags,
    kind: str,
    topic: str | None,
    dag_id: str,
    description: str,
    lane_tasks: Callable[[BrokerConfig | None], Any],
) -> DAG:
    """A scheduled DAG of ``kind`` (``copy`` or ``retention``: its ``dags.<kind>`` schedule and
    queue) for a named topic or (None) the catch-all one, one run at a time, holding for each broker
    in its group the tasks ``lane_tasks`` adds."""
    with DAG(
        dag_id=dag_id,
        description=description,
        schedule=dags.config.dags[kind].schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["tiering", kind, "default-topics" if topic is None else fit(topic, MAX_TAG)],
        default_args=dags.default_args(kind),
    ) as dag:
        for broker in dags.brokers:
            with broker_group(broker):
                lane_tasks(broker)
    return dag


def copy_dag(dags: TopicDags, topic: str | None) -> DAG:
    """The copy DAG of a named topic, or (None) the catch-all one of the ``"*"`` default."""

    def copy_lanes(broker: BrokerConfig | None) -> None:
        wait = dags.sensor(DEFAULT_TOPIC if topic is None else topic, broker)
        lanes = listing(broker, topic, plan=XComArg(wait, key=PLAN_KEY))
        copies = TieringCopyLaneOperator.partial(
            task_id="copy", pool=UPLOAD_POOL, map_index_template=LANE_LABEL, **on_broker(broker)
        ).expand_kwargs(lanes)
        wait >> lanes >> copies

    if topic is None:
        every = "Copy closed segments below the LSO of every topic without DAGs of its own (the '*' default)"
        return topic_dag(dags, "copy", None, DEFAULT_COPY_DAG_ID, every, copy_lanes)
    described = dags.described(f"Copy closed segments of {topic} below the LSO to the remote tier", topic)
    return topic_dag(dags, "copy", topic, copy_dag_id(topic), described, copy_lanes)


def retention_dag(dags: TopicDags, topic: str | None) -> DAG:
    """The retention DAG of a named topic, or (None) the catch-all one of the ``"*"`` default."""

    def retention_lanes(broker: BrokerConfig | None) -> None:
        TieringRetentionLaneOperator.partial(
            task_id="retention", map_index_template=LANE_LABEL, **on_broker(broker)
        ).expand_kwargs(listing(broker, topic))

    if topic is None:
        every = "Delete remote segments that breach retention, for every topic without DAGs of its own"
        return topic_dag(dags, "retention", None, DEFAULT_RETENTION_DAG_ID, every, retention_lanes)
    described = dags.described(f"Delete remote segments of {topic} that breach its retention", topic)
    return topic_dag(dags, "retention", topic, retention_dag_id(topic), described, retention_lanes)


def build(config: PlatformConfig) -> list[DAG]:
    """The catch-all DAGs, then a copy and a retention DAG per topic the config names."""
    dags = topic_dags_of(config)
    built = [copy_dag(dags, None), retention_dag(dags, None)]
    for topic in sorted(named_topics(config)):
        built += [copy_dag(dags, topic), retention_dag(dags, topic)]
    return built
