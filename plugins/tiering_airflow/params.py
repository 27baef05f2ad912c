"""What the manual DAGs share (``tiering_delete_partition``, ``tiering_delete_records``,
``tiering_rewrite``, ``tiering_replay``): their DAG's settings and their Params; and the queue
argument every DAG of ``tiering_airflow.dags`` takes from the config's ``dags:`` section."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import DAG, Param

from tiering_core.config.replay import TARGET_NAME
from tiering_core.kafka.topic import MAX_TOPIC_NAME_LENGTH

#: How long a failed task waits before its first retry (doubling with each retry, as Airflow's
#: exponential backoff does): ``TIERING_RETRY_DELAY_SECONDS``, default a minute.
RETRY_DELAY = timedelta(seconds=float(os.environ.get("TIERING_RETRY_DELAY_SECONDS", "60")))

# Kafka's legal topic names as a JSON-schema pattern (the runtime check is the core's
# validate_topic_name; a test keeps the two in step). JSON schema searches, so both ends are
# anchored; Python's jsonschema uses re, whose $ also matches before a final newline, which
# (?!\n) rules out (a no-op in the UI's JavaScript).
TOPIC_PATTERN = rf"^(?!\.{{1,2}}$)[a-zA-Z0-9._-]{{1,{MAX_TOPIC_NAME_LENGTH}}}$(?!\n)"


# A replay target's name (``replay.targets``) as a JSON-schema pattern, anchored as the topic's is:
# a name, never an address (the planning task then holds it to the config's names).
TARGET_PATTERN = rf"^{TARGET_NAME}$(?!\n)"


def topic_param(description: str) -> Param:
    """The topic a manual DAG acts on: a legal Kafka topic name."""
    return Param(type="string", pattern=TOPIC_PATTERN, title="Topic", description=description)


def confirm_param() -> Param:
    """The topic name typed again: a destructive request names its topic twice."""
    return Param(
        type="string", pattern=TOPIC_PATTERN, title="Confirm", description="Type the topic name again to confirm."
    )


def on_queue(queue: str | None) -> dict[str, Any]:
    """The default argument that puts a DAG's tasks on ``queue`` (none: the executor's default)."""
    return {} if queue is None else {"queue": queue}


def manual_dag(dag_id: str, description: str, params: dict[str, Any], *tags: str, queue: str | None = None) -> DAG:
    """A DAG an operator triggers by hand: no schedule, no catch-up, one run at a time; a task that
    fails on a passing fault (the store, the tier, the cluster) is tried again with backoff; its
    tasks on ``queue`` (the config's ``dags.<name>.queue``)."""
    return DAG(
        dag_id=dag_id,
        description=description,
        schedule=None,
        start_date=datetime(2026, 1, 1, tzinfo=UTC),
        catchup=False,
        max_active_runs=1,
        tags=["tiering", *tags],
        default_args={
            "owner": "tiering",
            "retries": 3,
            "retry_delay": RETRY_DELAY,
            "retry_exponential_backoff": 2.0,
            **on_queue(queue),
        },
        params=params,
    )
