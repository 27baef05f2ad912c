"""Per-topic copy and retention DAGs, generated from the platform config.

For every topic named under ``topics:`` in the config file given by ``TIERING_CONFIG`` (else the
Airflow Variable ``tiering_config``):

- ``tiering_copy__<topic>``: a sensor waits until some partition has a segment eligible for
  copy, a small task lists the topic's partitions on this broker, then one mapped copy task per
  partition (labelled ``<topic>-<partition>``) runs in the pool ``tiering_uploads``;
- ``tiering_retention__<topic>``: hourly, one mapped retention task per partition.

Every other topic in the broker's log dirs falls under the config's ``"*"`` default. Two
catch-all DAGs tier those: ``tiering_copy_default_topics`` and ``tiering_retention_default_topics``
do the same per partition of every topic the config does not name, found at run time (a topic
later named in the config moves to DAGs of its own). Their ids have a single underscore, so no
topic's DAG can take them.

The sensor is deferrable (it waits in the triggerer, holding no worker slot); with
``TIERING_SENSOR_DEFERRABLE=false`` it pokes in reschedule mode instead, for deployments that run
no triggerer. ``TIERING_SENSOR_POKE_SECONDS`` sets how often either re-plans.

Parsing reads only the YAML config and the environment: partitions are found at run time, and
everything heavy is imported inside the tasks. A missing or invalid config is this file's import
error and names the problem; the removal DAG lives in its own file and is unaffected.
"""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import DAG, task

from tiering_airflow.hooks.tiering import load_topics
from tiering_airflow.operators.tiering import TieringCopyOperator, TieringRetentionOperator, as_bool
from tiering_airflow.sensors.tiering import EligibleSegmentSensor
from tiering_core.config import DEFAULT_TOPIC

START = datetime(2026, 1, 1, tzinfo=UTC)
UPLOAD_POOL = "tiering_uploads"
COPY_SCHEDULE = "*/10 * * * *"
RETENTION_SCHEDULE = "@hourly"
# How often the sensor (or its trigger) re-plans; it gives up (skipped) before the next run is due.
POKE_SECONDS = float(os.environ.get("TIERING_SENSOR_POKE_SECONDS", "60"))
# Deferrable (waits in the triggerer) unless switched off for deployments without a triggerer.
SENSOR_DEFERRABLE = as_bool(os.environ.get("TIERING_SENSOR_DEFERRABLE", "true"), "TIERING_SENSOR_DEFERRABLE")
SENSOR_TIMEOUT = timedelta(minutes=9)
PARTITION_LABEL = "{{ task.topic }}-{{ task.partition }}"
DEFAULT_ARGS = {
    "owner": "tiering",
    "retries": 3,
    "retry_delay": timedelta(minutes=1),
    "retry_exponential_backoff": 2.0,
    "max_retry_delay": timedelta(minutes=30),
}
MAX_DAG_ID = 250
MAX_TAG = 100


def fit(name: str, limit: int) -> str:
    """``name`` cut to Airflow's ``limit``, with a digest so distinct long topics stay distinct."""
    if len(name) <= limit:
        return name
    return f"{name[: limit - 11]}-{hashlib.sha256(name.encode()).hexdigest()[:10]}"


@task
def list_partitions(topic: str) -> list[int]:
    """The topic's partitions on this broker, found at run time; none -> the run is skipped."""
    from airflow.sdk.exceptions import AirflowSkipException

    from tiering_airflow.hooks.tiering import TieringHook

    partitions = TieringHook().partitions(topic)
    if not partitions:
        raise AirflowSkipException(f"topic {topic!r} has no partition in this broker's log dirs")
    return partitions


@task
def list_default_partitions() -> list[dict[str, Any]]:
    """Every partition on this broker of a topic the config does not name, as operator arguments."""
    from airflow.sdk.exceptions import AirflowSkipException

    from tiering_airflow.hooks.tiering import TieringHook

    partitions = TieringHook().default_partitions()
    if not partitions:
        raise AirflowSkipException("every topic in this broker's log dirs has DAGs of its own")
    return [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]


def sensor(topic: str) -> EligibleSegmentSensor:
    return EligibleSegmentSensor(
        task_id="wait_for_eligible_segment",
        topic=topic,
        poke_interval=POKE_SECONDS,
        timeout=SENSOR_TIMEOUT,
        soft_fail=True,
        deferrable=SENSOR_DEFERRABLE,
    )


def copy_dag(topic: str) -> DAG:
    with DAG(
        dag_id=fit(f"tiering_copy__{topic}", MAX_DAG_ID),
        description=f"Copy closed segments of {topic} below the LSO to the remote tier",
        schedule=COPY_SCHEDULE,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["tiering", "copy", fit(topic, MAX_TAG)],
        default_args=DEFAULT_ARGS,
    ) as dag:
        wait = sensor(topic)
        partitions = list_partitions.override(task_id="list_partitions")(topic)
        copies = TieringCopyOperator.partial(
            task_id="copy", topic=topic, pool=UPLOAD_POOL, map_index_template=PARTITION_LABEL
        ).expand(partition=partitions)
        wait >> partitions >> copies
    return dag


def retention_dag(topic: str) -> DAG:
    with DAG(
        dag_id=fit(f"tiering_retention__{topic}", MAX_DAG_ID),
        description=f"Delete remote segments of {topic} that breach its retention",
        schedule=RETENTION_SCHEDULE,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["tiering", "retention", fit(topic, MAX_TAG)],
        default_args=DEFAULT_ARGS,
    ) as dag:
        partitions = list_partitions.override(task_id="list_partitions")(topic)
        TieringRetentionOperator.partial(task_id="retention", topic=topic, map_index_template=PARTITION_LABEL).expand(
            partition=partitions
        )
    return dag


def default_copy_dag() -> DAG:
    with DAG(
        dag_id="tiering_copy_default_topics",
        description="Copy closed segments below the LSO of every topic without DAGs of its own (the '*' default)",
        schedule=COPY_SCHEDULE,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["tiering", "copy", "default-topics"],
        default_args=DEFAULT_ARGS,
    ) as dag:
        wait = sensor(DEFAULT_TOPIC)
        partitions = list_default_partitions.override(task_id="list_partitions")()
        copies = TieringCopyOperator.partial(
            task_id="copy", pool=UPLOAD_POOL, map_index_template=PARTITION_LABEL
        ).expand_kwargs(partitions)
        wait >> partitions >> copies
    return dag


def default_retention_dag() -> DAG:
    with DAG(
        dag_id="tiering_retention_default_topics",
        description="Delete remote segments that breach retention, for every topic without DAGs of its own",
        schedule=RETENTION_SCHEDULE,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["tiering", "retention", "default-topics"],
        default_args=DEFAULT_ARGS,
    ) as dag:
        partitions = list_default_partitions.override(task_id="list_partitions")()
        TieringRetentionOperator.partial(task_id="retention", map_index_template=PARTITION_LABEL).expand_kwargs(
            partitions
        )
    return dag


for _dag in [default_copy_dag(), default_retention_dag()]:
    globals()[_dag.dag_id] = _dag
for _topic in load_topics():
    _copy, _retention = copy_dag(_topic), retention_dag(_topic)
    globals()[_copy.dag_id] = _copy
    globals()[_retention.dag_id] = _retention
