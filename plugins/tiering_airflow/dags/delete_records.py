"""``tiering_delete_records``: a DeleteRecords applied through the platform, by hand only.

Trigger it with a config (the UI's "Trigger" form, the REST API or the CLI)::

    airflow dags trigger tiering_delete_records \\
        --conf '{"topic": "orders", "partition": 3, "before_offset": 120000, "confirm": "orders", "dry_run": false}'

The records of the partition below ``before_offset`` are deleted: the platform records the
DeleteRecords (its next retention run deletes the remote segments wholly below it) and, when the
config has a ``kafka:`` section, sends it to the cluster through the admin API first, as
``tiering delete-records`` does (docs/kafka-rules.md section 10 item 1). A DeleteRecords made on
the cluster directly deletes nothing remote: this is the way to delete records on both.

Airflow validates the Params before a run is created (a bad topic name, a negative partition or
offset is refused there); ``confirm`` must repeat the topic, which the task checks. The offset may
not pass the high watermark; a partition the remote tier does not hold, or is removing, is
refused. Refusals fail the task without retries; a partition held by another run, or a cluster
that does not answer, is retried (applying the same DeleteRecords again changes nothing more).
``dry_run`` defaults to true: it checks the request and says where the log start would be.

The task reads the log dirs of the worker's broker (``TIERING_BROKER_ID``, or the only one): the
partition's directory must be there. Its tasks run on ``dags.delete_records.queue``; built apart
from the topics' DAGs it loads even when the config is broken (``tiering_airflow.dags.factory``).
"""

from __future__ import annotations

from airflow.sdk import DAG, Param

from tiering_airflow.dag_ids import DELETE_RECORDS_DAG_ID
from tiering_airflow.operators.tiering import TieringDeleteRecordsOperator
from tiering_airflow.params import confirm_param, manual_dag, topic_param
from tiering_core.config.dags import DagConfig


def build(settings: DagConfig) -> DAG:
    """The DAG, its tasks on ``dags.delete_records.queue`` (None: the executor's default queue)."""
    with manual_dag(
        DELETE_RECORDS_DAG_ID,
        "Delete a partition's records below an offset, remote and on the cluster (manual; dry run by default)",
        {
            "topic": topic_param("The topic whose records are deleted."),
            "partition": Param(type="integer", minimum=0, title="Partition", description="The partition number."),
            "before_offset": Param(
                type="integer",
                minimum=0,
                title="Before offset",
                description=(
                    "Records below this offset are deleted: the new log start offset (at most the high watermark)."
                ),
            ),
            "confirm": confirm_param(),
            "dry_run": Param(
                True, type="boolean", title="Dry run", description="Only check the request (the default)."
            ),
        },
        "delete-records",
        queue=settings.queue,
    ) as dag:
        TieringDeleteRecordsOperator(
            task_id="delete_records",
            # Rendered as text, not as native objects: the topic stays the exact string that was
            # validated ("123", "1e3", "True" are topic names, not numbers); the operator reads the
            # numbers and plan_only "True" or "False".
            topic="{{ params.topic }}",
            partition="{{ params.partition }}",
            before_offset="{{ params.before_offset }}",
            confirm="{{ params.confirm }}",
            plan_only="{{ params.dry_run }}",
        )
    return dag
