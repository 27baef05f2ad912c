"""Per-topic copy and retention DAGs, generated from the platform config.

For every topic named under ``topics:`` in the config file given by ``TIERING_CONFIG`` (else the
Airflow Variable ``tiering_config``):

- ``tiering_copy__<topic>``: a sensor waits until some partition has a segment eligible for
  copy, a small task lists the topic's partitions on this broker and splits them into lanes, then
  one mapped copy task per lane runs in the pool ``tiering_uploads``;
- ``tiering_retention__<topic>``: hourly, one mapped retention task per lane.

A run maps at most ``copy.lanes`` tasks per broker (default 16), never more than Airflow's
``[core] max_map_length`` read when the listing task runs. Partitions that fit are one lane each,
labelled ``<topic>-<partition>``; beyond the bound each lane (``lane-<i> (<n> partitions)``) works
through its share, most urgent first, on ``copy.concurrency`` threads, and starts nothing after
``copy.budget_seconds`` (``copy.retention_budget_seconds`` for retention): the rest is the next
run's. A budget not shorter than its DAG's period is this file's import error.

Every other topic in the broker's log dirs falls under the config's ``"*"`` default. Two
catch-all DAGs tier those: ``tiering_copy_default_topics`` and ``tiering_retention_default_topics``
do the same per partition of every topic the config does not name, found at run time (a topic
later named in the config moves to DAGs of its own). Their ids have a single underscore, so no
topic's DAG can take them.

In the cluster form (``brokers:`` in the config) every DAG holds one task group per broker,
``broker_<id>``: its sensor, ``list_partitions`` and mapped tasks run on that broker's queue
(``tiering-broker-<id>`` unless the config names another) and name the broker, so the worker
serving that queue on the broker's host reads only its own disks. The single-broker form keeps
one flat lane on the executor's default queue, the worker's broker being its ``TIERING_BROKER_ID``
(or the only one).

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

Parsing reads only the YAML config and the environment: partitions are found at run time, and
everything heavy is imported inside the tasks. A missing or invalid config is this file's import
error and names the problem; the removal DAG lives in its own file and is unaffected.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import DAG, TaskGroup, task

from tiering_airflow.dag_ids import (
    DEFAULT_COPY_DAG_ID,
    DEFAULT_RETENTION_DAG_ID,
    copy_dag_id,
    fit,
    retention_dag_id,
)
from tiering_airflow.hooks.tiering import load_brokers, load_lane_config, load_topics, not_tiered_topics
from tiering_airflow.operators.tiering import TieringCopyLaneOperator, TieringRetentionLaneOperator, as_bool
from tiering_airflow.params import RETRY_DELAY
from tiering_airflow.sensors.tiering import EligibleSegmentSensor
from tiering_core.config import DEFAULT_TOPIC, BrokerConfig

START = datetime(2026, 1, 1, tzinfo=UTC)
UPLOAD_POOL = "tiering_uploads"
COPY_SCHEDULE = "*/10 * * * *"
COPY_PERIOD = timedelta(minutes=10)  # COPY_SCHEDULE's: a copy lane's budget must be shorter
RETENTION_SCHEDULE = "@hourly"
RETENTION_PERIOD = timedelta(hours=1)
# How often the sensor (or its trigger) re-plans; it gives up (skipped) before the next run is due.
POKE_SECONDS = float(os.environ.get("TIERING_SENSOR_POKE_SECONDS", "60"))
# Deferrable (waits in the triggerer) unless switched off for deployments without a triggerer;
# unset: deferrable in the single-broker form only (module docstring).
_DEFERRABLE = os.environ.get("TIERING_SENSOR_DEFERRABLE")
SENSOR_DEFERRABLE = None if _DEFERRABLE is None else as_bool(_DEFERRABLE, "TIERING_SENSOR_DEFERRABLE")
SENSOR_TIMEOUT = timedelta(minutes=9)
#: A lane's label: ``<topic>-<partition>`` for a lane of one partition (``runs.lanes.Lane``).
LANE_LABEL = "{{ task.lane }}"
DEFAULT_ARGS = {
    "owner": "tiering",
    "retries": 3,
    "retry_delay": RETRY_DELAY,
    "retry_exponential_backoff": 2.0,
    "max_retry_delay": timedelta(minutes=30),
}
MAX_TAG = 100


def broker_group(broker: BrokerConfig | None) -> AbstractContextManager[Any]:
    """The task group of one broker's tasks (cluster form); the single-broker form has none."""
    if broker is None:
        return nullcontext()
    return TaskGroup(group_id=f"broker_{broker.broker_id}", tooltip=f"broker {broker.broker_id}: queue {broker.queue}")


def on_broker(broker: BrokerConfig | None) -> dict[str, Any]:
    """The arguments that put a task on its broker: the broker's queue and id (none for the
    single-broker form: the default queue, the worker's own broker)."""
    if broker is None:
        return {}
    return {"queue": broker.queue, "broker_id": broker.broker_id}


def broker_name(broker_id: int | None) -> str:
    return "this broker" if broker_id is None else f"broker {broker_id}"


@task
def list_partitions(topic: str, broker_id: int | None = None, urgent_first: bool = False) -> list[dict[str, Any]]:
    """The lanes over the topic's partitions on the broker, found at run time, as the mapped
    tasks' arguments; no partition -> the run is skipped."""
    from airflow.sdk.exceptions import AirflowSkipException

    from tiering_airflow.hooks.tiering import broker_config, broker_hook
    from tiering_core.kafka.topic import TopicPartition

    hook = broker_hook(broker_id)
    config = broker_config(hook)
    partitions = [TopicPartition(topic, p) for p in hook.partitions(topic, config)]
    if not partitions:
        raise AirflowSkipException(f"topic {topic!r} has no partition in {broker_name(broker_id)}'s log dirs")
    return hook.lanes(partitions, config, urgent_first=urgent_first)


@task
def list_default_partitions(broker_id: int | None = None, urgent_first: bool = False) -> list[dict[str, Any]]:
    """The lanes over every partition on the broker of a topic the config does not name."""
    from airflow.sdk.exceptions import AirflowSkipException

    from tiering_airflow.hooks.tiering import broker_config, broker_hook

    hook = broker_hook(broker_id)
    config = broker_config(hook)
    partitions = hook.default_partitions(config)
    if not partitions:
        raise AirflowSkipException(f"every topic in {broker_name(broker_id)}'s log dirs has DAGs of its own")
    return hook.lanes(partitions, config, urgent_first=urgent_first)


def sensor(topic: str, broker: BrokerConfig | None) -> EligibleSegmentSensor:
    deferrable = broker is None if SENSOR_DEFERRABLE is None else SENSOR_DEFERRABLE
    return EligibleSegmentSensor(
        task_id="wait_for_eligible_segment",
        topic=topic,
        poke_interval=POKE_SECONDS,
        timeout=SENSOR_TIMEOUT,
        soft_fail=True,
        deferrable=deferrable,
        **on_broker(broker),
    )


def listing(broker: BrokerConfig | None, topic: str | None = None, *, urgent_first: bool = False) -> Any:
    """The ``list_partitions`` task of one broker: the lanes over the topic's partitions, or (no
    topic) over those of every topic the config does not name; ``urgent_first`` for copy."""
    place = on_broker(broker)
    queue = {"queue": place["queue"]} if place else {}
    broker_id, order = place.get("broker_id"), {"urgent_first": urgent_first}
    if topic is None:
        return list_default_partitions.override(task_id="list_partitions", **queue)(broker_id, **order)
    return list_partitions.override(task_id="list_partitions", **queue)(topic, broker_id, **order)


def described(what: str, topic: str) -> str:
    """A topic DAG's description, saying why when the config says the topic is not tiered."""
    reason = NOT_TIERED.get(topic)
    return what if reason is None else f"{what}. Not tiered: {reason}"


def copy_dag(topic: str) -> DAG:
    with DAG(
        dag_id=copy_dag_id(topic),
        description=described(f"Copy closed segments of {topic} below the LSO to the remote tier", topic),
        schedule=COPY_SCHEDULE,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["tiering", "copy", fit(topic, MAX_TAG)],
        default_args=DEFAULT_ARGS,
    ) as dag:
        for broker in BROKERS:
            with broker_group(broker):
                wait = sensor(topic, broker)
                lanes = listing(broker, topic, urgent_first=True)
                copies = TieringCopyLaneOperator.partial(
                    task_id="copy", pool=UPLOAD_POOL, map_index_template=LANE_LABEL, **on_broker(broker)
                ).expand_kwargs(lanes)
                wait >> lanes >> copies
    return dag


def retention_dag(topic: str) -> DAG:
    with DAG(
        dag_id=retention_dag_id(topic),
        description=described(f"Delete remote segments of {topic} that breach its retention", topic),
        schedule=RETENTION_SCHEDULE,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["tiering", "retention", fit(topic, MAX_TAG)],
        default_args=DEFAULT_ARGS,
    ) as dag:
        for broker in BROKERS:
            with broker_group(broker):
                TieringRetentionLaneOperator.partial(
                    task_id="retention", map_index_template=LANE_LABEL, **on_broker(broker)
                ).expand_kwargs(listing(broker, topic))
    return dag


def default_copy_dag() -> DAG:
    with DAG(
        dag_id=DEFAULT_COPY_DAG_ID,
        description="Copy closed segments below the LSO of every topic without DAGs of its own (the '*' default)",
        schedule=COPY_SCHEDULE,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["tiering", "copy", "default-topics"],
        default_args=DEFAULT_ARGS,
    ) as dag:
        for broker in BROKERS:
            with broker_group(broker):
                wait = sensor(DEFAULT_TOPIC, broker)
                lanes = listing(broker, urgent_first=True)
                copies = TieringCopyLaneOperator.partial(
                    task_id="copy", pool=UPLOAD_POOL, map_index_template=LANE_LABEL, **on_broker(broker)
                ).expand_kwargs(lanes)
                wait >> lanes >> copies
    return dag


def default_retention_dag() -> DAG:
    with DAG(
        dag_id=DEFAULT_RETENTION_DAG_ID,
        description="Delete remote segments that breach retention, for every topic without DAGs of its own",
        schedule=RETENTION_SCHEDULE,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["tiering", "retention", "default-topics"],
        default_args=DEFAULT_ARGS,
    ) as dag:
        for broker in BROKERS:
            with broker_group(broker):
                TieringRetentionLaneOperator.partial(
                    task_id="retention", map_index_template=LANE_LABEL, **on_broker(broker)
                ).expand_kwargs(listing(broker))
    return dag


#: One lane per broker of the ``brokers:`` section, each in its task group on its queue; one flat
#: lane (None) for the single-broker form.
BROKERS: list[BrokerConfig | None] = [*load_brokers()] or [None]
#: Named topics the config says are not tiered, with why (their DAGs say it; the copy sensor skips).
NOT_TIERED = not_tiered_topics()
#: ``copy:``: a lane's budget must end before its DAG's next run is due.
LANES = load_lane_config()
LANES.check_budget("budget_seconds", COPY_PERIOD.total_seconds())
LANES.check_budget("retention_budget_seconds", RETENTION_PERIOD.total_seconds())

for _dag in [default_copy_dag(), default_retention_dag()]:
    globals()[_dag.dag_id] = _dag
for _topic in load_topics():
    _copy, _retention = copy_dag(_topic), retention_dag(_topic)
    globals()[_copy.dag_id] = _copy
    globals()[_retention.dag_id] = _retention
