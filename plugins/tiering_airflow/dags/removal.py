"""``tiering_delete_partition``: delete all remote data of removed partitions, by hand only.

Trigger it with a config (the UI's "Trigger" form, the REST API or the CLI)::

    airflow dags trigger tiering_delete_partition \\
        --conf '{"topic": "orders", "partitions": [3], "confirm": "orders", "dry_run": false}'

Airflow validates the Params before a run is created (a bad topic name, an empty or negative
partition list is refused there). Each Param has its own JSON schema, so "``confirm`` equals
``topic``" cannot be written in one; the first task checks it and decides, for the whole
request and before anything is deleted, which topic ids of each partition go:

- a partition's remote data belongs to a topic id. Data of topic ids no longer in the broker's
  log dirs (the topic was deleted, or deleted and recreated under a new id) is removed;
- data of a topic id the broker still holds is live: a request that would only delete such
  data is refused (nothing deleted) unless ``force`` is true (e.g. a broker being
  decommissioned), which removes it too. A partition unknown to the metadata store is refused;
- a topic id missing from the log dirs goes only on the controller's word that Kafka deleted it
  (the cluster's metadata, live with a ``kafka:`` section, else the KRaft metadata image on the
  broker's disk), or with ``force``; a ``-delete`` directory is no such word (a reassignment and a
  log-dir move leave one too). The removal task asks for that word again when it deletes.

``dry_run`` defaults to true: it lists what the same request would delete and changes nothing.
Its tasks run on ``dags.delete_partition.queue``; built apart from the topics' DAGs it loads even
when the config is broken (``tiering_airflow.dags.factory``).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from airflow.sdk import DAG, Param, task

from tiering_airflow.dag_ids import DELETE_PARTITION_DAG_ID
from tiering_airflow.operators.tiering import TieringDeletePartitionOperator
from tiering_airflow.params import confirm_param, manual_dag, topic_param
from tiering_core.config.dags import DagConfig

log = logging.getLogger(__name__)


@task(
    retries=3,  # a metadata store or log dir that is briefly unreachable; refusals never retry
    retry_delay=timedelta(seconds=30),
    retry_exponential_backoff=2.0,
    max_retry_delay=timedelta(minutes=5),
)
def validate_request(params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Refuse the request unless ``confirm`` repeats the topic, every partition has remote data and
    no live data (a topic id still in the log dirs) would go without ``force``; per partition, the
    topic ids to delete (a dry run: to list)."""
    from airflow.sdk.exceptions import AirflowFailException

    from tiering_airflow.hooks.tiering import TieringHook
    from tiering_core.runs.errors import RemovalRequestRefusedError
    from tiering_core.runs.removal import plan_removal_request

    assert params is not None
    try:
        with TieringHook().get_conn() as ctx:
            return plan_removal_request(
                ctx,
                params["topic"],
                params["partitions"],
                confirm=params["confirm"],
                dry_run=bool(params["dry_run"]),
                force=bool(params["force"]),
            )
    except RemovalRequestRefusedError as exc:
        raise AirflowFailException(str(exc)) from exc


def build(settings: DagConfig) -> DAG:
    """The DAG, its tasks on ``dags.delete_partition.queue`` (None: the executor's default queue)."""
    with manual_dag(
        DELETE_PARTITION_DAG_ID,
        "Delete all remote data of removed partitions (manual only; dry run by default)",
        {
            "topic": topic_param("The topic whose removed partitions' remote data is deleted."),
            "partitions": Param(
                type="array",
                items={"type": "integer", "minimum": 0},
                minItems=1,
                uniqueItems=True,
                title="Partitions",
                description="Partition numbers, e.g. [3] or [3, 4].",
            ),
            "confirm": confirm_param(),
            "dry_run": Param(
                True, type="boolean", title="Dry run", description="Only list what would be deleted (the default)."
            ),
            "force": Param(
                False,
                type="boolean",
                title="Force",
                description="Also delete the remote data of topic ids the broker still holds in its log dirs "
                "(e.g. a broker being decommissioned), and of topic ids without the controller's word that "
                "Kafka deleted them. Without it such a request is refused.",
            ),
        },
        "removal",
        queue=settings.queue,
    ) as dag:
        TieringDeletePartitionOperator.partial(
            task_id="delete_partition",
            # Rendered as text, not as native objects: the topic stays the exact string that was
            # validated ("123", "1e3", "True" are topic names, not numbers), and plan_only "True" or
            # "False" is read by the operator.
            topic="{{ params.topic }}",
            plan_only="{{ params.dry_run }}",
            map_index_template="{{ task.topic }}-{{ task.partition }}",
        ).expand_kwargs(validate_request())
    return dag
