"""Per-topic copy and retention DAGs, generated from the platform config.

For every topic named under ``topics:`` (not the ``*`` default) in the config file given by
``TIERING_CONFIG`` (else the Airflow Variable ``tiering_config``):

- ``tiering_copy__<topic>``: a deferrable sensor waits until some partition has a segment
  eligible for copy, a small task lists the topic's partitions on this broker, then one mapped
  copy task per partition (labelled ``<topic>-<partition>``) runs in the pool ``tiering_uploads``;
- ``tiering_retention__<topic>``: hourly, one mapped retention task per partition.

Parsing reads only the YAML config: partitions are found at run time, and everything heavy
is imported inside the tasks. A missing or invalid config is this file's import error and
names the problem; the removal DAG lives in its own file and is unaffected.
"""

from __future__ import annotations

import hashlib
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

# dags/ and plugins/ ship side by side; the hooks and operators are the package ``plugins``.
_PROJECT_ROOT = str(Path(__file__).resolve().parents[1])
if _PROJECT_ROOT not in sys.path:
    sys.path.append(_PROJECT_ROOT)

from airflow.sdk import DAG, task  # noqa: E402

from plugins.hooks.tiering import load_topics  # noqa: E402
from plugins.operators.tiering import TieringCopyOperator, TieringRetentionOperator  # noqa: E402
from plugins.sensors.tiering import EligibleSegmentSensor  # noqa: E402

START = datetime(2026, 1, 1, tzinfo=UTC)
UPLOAD_POOL = "tiering_uploads"
COPY_SCHEDULE = "*/10 * * * *"
RETENTION_SCHEDULE = "@hourly"
# How often the sensor (or its trigger) re-plans; it gives up (skipped) before the next run is due.
POKE_SECONDS = float(os.environ.get("TIERING_SENSOR_POKE_SECONDS", "60"))
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

    from plugins.hooks.tiering import TieringHook

    partitions = TieringHook().partitions(topic)
    if not partitions:
        raise AirflowSkipException(f"topic {topic!r} has no partition in this broker's log dirs")
    return partitions


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
        wait = EligibleSegmentSensor(
            task_id="wait_for_eligible_segment",
            topic=topic,
            poke_interval=POKE_SECONDS,
            timeout=SENSOR_TIMEOUT,
            soft_fail=True,
        )
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


for _topic in load_topics():
    _copy, _retention = copy_dag(_topic), retention_dag(_topic)
    globals()[_copy.dag_id] = _copy
    globals()[_retention.dag_id] = _retention
