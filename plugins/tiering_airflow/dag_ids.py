"""Every DAG id of the platform, in one place: the rule ``tiering_airflow.dags.topics`` names a
topic's copy and retention DAGs by and the Tiering page links to their grids by, and the ids of the
DAGs that name no topic.

A topic the config names has DAGs of its own, ``tiering_copy__<topic>`` and
``tiering_retention__<topic>``, cut to Airflow's id limit with a digest of the whole name so that
long topics stay distinct; every other topic is tiered by the catch-all DAGs of the ``"*"``
default, whose ids have a single underscore so that no topic's DAG can take them. The
hand-triggered DAGs and the Spark apps' DAGs have fixed ids.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection

#: Airflow's limit on a DAG id's length.
MAX_DAG_ID = 250
DEFAULT_COPY_DAG_ID = "tiering_copy_default_topics"
DEFAULT_RETENTION_DAG_ID = "tiering_retention_default_topics"
DELETE_PARTITION_DAG_ID = "tiering_delete_partition"
DELETE_RECORDS_DAG_ID = "tiering_delete_records"
REWRITE_DAG_ID = "tiering_rewrite"
REPLAY_DAG_ID = "tiering_replay"
ERASE_DAG_ID = "tiering_erase"
SPARK_BULK_UPLOAD_DAG_ID = "tiering_spark_bulk_upload"
SPARK_REBUILD_INDEXES_DAG_ID = "tiering_spark_rebuild_indexes"
SPARK_VERIFY_DAG_ID = "tiering_spark_verify"
EXPORT_DAG_ID = "tiering_export"
#: The DAGs whose ids name no topic: every other DAG is a named topic's copy or retention.
FIXED_DAG_IDS = (
    DEFAULT_COPY_DAG_ID,
    DEFAULT_RETENTION_DAG_ID,
    DELETE_PARTITION_DAG_ID,
    DELETE_RECORDS_DAG_ID,
    REWRITE_DAG_ID,
    REPLAY_DAG_ID,
    ERASE_DAG_ID,
    SPARK_BULK_UPLOAD_DAG_ID,
    SPARK_REBUILD_INDEXES_DAG_ID,
    SPARK_VERIFY_DAG_ID,
    EXPORT_DAG_ID,
)


def fit(name: str, limit: int) -> str:
    """``name`` cut to Airflow's ``limit``, with a digest so distinct long topics stay distinct."""
    if len(name) <= limit:
        return name
    return f"{name[: limit - 11]}-{hashlib.sha256(name.encode()).hexdigest()[:10]}"


def copy_dag_id(topic: str) -> str:
    """The id of the copy DAG of a topic the config names."""
    return fit(f"tiering_copy__{topic}", MAX_DAG_ID)


def retention_dag_id(topic: str) -> str:
    """The id of the retention DAG of a topic the config names."""
    return fit(f"tiering_retention__{topic}", MAX_DAG_ID)


def dag_ids_of(topic: str, named: Collection[str]) -> tuple[str, str]:
    """(copy, retention) DAG ids that tier ``topic``: its own if the config names it (``named``),
    else the catch-all DAGs of the default."""
    if topic in named:
        return copy_dag_id(topic), retention_dag_id(topic)
    return DEFAULT_COPY_DAG_ID, DEFAULT_RETENTION_DAG_ID
