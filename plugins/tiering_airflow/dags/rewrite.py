"""``tiering_rewrite``: re-encode a topic's remote segments in the current format, by hand only.

Trigger it after changing ``remote.compression``, ``remote.chunk_size`` or ``remote.encryption``
(a key rotation: the new key pair current, the old one's private key kept until the run is done)::

    airflow dags trigger tiering_rewrite --conf '{"topic": "orders", "partition": 3}'

Every finished remote segment of the topic (or of one partition) not stored as a copy made now
would be is copied again under a new segment id, switched in one transaction and its old objects
deleted, as ``tiering rewrite`` does (docs/segment-format.md). A killed or failed try is resumed
by its retry, which takes over its lease. The task reads the log dirs of the worker's broker
(``TIERING_BROKER_ID``, or the only one); on a worker that serves none of a cluster's brokers (the
default queue) it reads no log dir and rewrites the partitions the metadata store holds of the
topic (a partition it holds nothing of fails the task naming it). Its tasks run on
``dags.rewrite.queue``; built apart from the topics' DAGs it loads even when the config is broken
(``tiering_airflow.dags.factory``).
"""

from __future__ import annotations

from airflow.sdk import DAG, Param

from tiering_airflow.dag_ids import REWRITE_DAG_ID
from tiering_airflow.operators.tiering import TieringRewriteOperator
from tiering_airflow.params import manual_dag, topic_param
from tiering_core.config.dags import DagConfig


def build(settings: DagConfig) -> DAG:
    """The DAG, its tasks on ``dags.rewrite.queue`` (None: the executor's default queue)."""
    with manual_dag(
        REWRITE_DAG_ID,
        "Re-encode a topic's remote segments in the current remote: format (manual)",
        {
            "topic": topic_param("The topic whose remote segments are rewritten."),
            "partition": Param(
                None,
                type=["null", "integer"],
                minimum=0,
                title="Partition",
                description="Only this partition (default: every one of the topic on this broker, or in the tier).",
            ),
        },
        "rewrite",
        queue=settings.queue,
    ) as dag:
        TieringRewriteOperator(task_id="rewrite", topic="{{ params.topic }}", partition="{{ params.partition }}")
    return dag
