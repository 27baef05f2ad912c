"""Spark DAGs: each one ``spark-submit`` of a ``spark_apps`` application through SparkSubmitOperator.

- ``tiering_spark_bulk_upload`` (manual): every eligible segment of the selected partitions,
  uploaded in parallel with the copy engine's invariants (``spark_apps/parallel_upload.py``);
- ``tiering_spark_rebuild_indexes`` (weekly, or manual): rebuild offset, time and transaction
  indexes from the ``.log``, compare with what is stored, repair what differs
  (``spark_apps/rebuild_indexes.py``);
- ``tiering_spark_verify`` (weekly, or manual): stream every finished remote segment against its
  manifest and the checksums recorded at copy time; the run fails when any segment is damaged
  (``spark_apps/verify_segments.py``);
- ``tiering_export`` (daily, or manual): the tiered log of the selected partitions into its
  Iceberg table, exactly once (``spark_apps/export_table.py``: one Spark task per remote segment
  writes its data files, the driver commits them; a rerun finishes what a killed run left).

Params select the partitions (empty: all in the log dirs). The Spark master comes from the
``spark_default`` connection (``local[2]``, ``spark://...``, ``yarn``, ``k8s://...``); without
that connection it is ``local[*]``. S3 credentials come from the ``aws_default`` connection at
run time (see ``tiering_airflow/operators/spark.py``). The config file is the deployment's only:
``$TIERING_CONFIG`` when the file was parsed, else the Variable ``tiering_config``; whoever may
trigger a DAG cannot point the job at another file on the worker (no param or run conf names
it). spark-submit is the one beside this interpreter when it has one (found through ``PATH`` when
the task runs), else the one on ``PATH``. Parsing imports only Airflow and the Spark provider's
operator.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Param

from tiering_airflow.dag_ids import (
    EXPORT_DAG_ID,
    SPARK_BULK_UPLOAD_DAG_ID,
    SPARK_REBUILD_INDEXES_DAG_ID,
    SPARK_VERIFY_DAG_ID,
)
from tiering_airflow.operators.spark import TieringSparkSubmitOperator

APPS = Path(__file__).resolve().parents[1] / "spark_apps"
VENV_BIN = Path(sys.executable).parent
START = pendulum.datetime(2026, 1, 1, tz="UTC")
# The deployment's config, never a param: a run's conf must not choose which file the job reads.
CONFIG = os.environ.get("TIERING_CONFIG") or "{{ var.value.get('tiering_config', '') }}"
# A blank selector means "every partition"; the apps read blank values as unset.
SELECTOR_ARGS = ["--config", CONFIG, "--topic", "{{ params.topic }}", "--partitions", "{{ params.partitions }}"]
TOPIC = r"^([A-Za-z0-9._-]+)?$"  # a topic name or nothing: never an option of the app
PARTITION = r"^([0-9]+)?$"
ISOLATION = ("read_committed", "read_uncommitted")
PARTITION_LIST = r"^\s*([A-Za-z0-9._-]+-[0-9]+\s*(,\s*[A-Za-z0-9._-]+-[0-9]+\s*)*)?$"


def selector_params() -> dict[str, Param]:
    return {
        "topic": Param("", type="string", pattern=TOPIC, description="one topic, or empty for every topic"),
        "partitions": Param(
            "",
            type="string",
            pattern=PARTITION_LIST,
            description="comma-separated <topic>-<partition> list, e.g. orders-0,orders-3 (instead of topic)",
        ),
    }


def spark_dag(dag_id: str, description: str, schedule: str | None, params: dict[str, Param], *tags: str) -> DAG:
    """One Spark DAG: what every one of them shares (no catch-up, one run at a time, this doc)."""
    return DAG(
        dag_id=dag_id,
        description=description,
        schedule=schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["tiering", "spark", *tags],
        params=params,
        doc_md=__doc__,
    )


def submit(task_id: str, app: str, args: list[str]) -> TieringSparkSubmitOperator:
    """spark-submit of one app, with Python (and spark-submit, when it has one) from this environment."""
    return TieringSparkSubmitOperator(
        task_id=task_id,
        conn_id="spark_default",
        application=str(APPS / app),
        application_args=args,
        name=f"tiering-{task_id.replace('_', '-')}",
        spark_binary="spark-submit",
        env_vars={
            "TIERING_CONFIG": CONFIG,
            "PYSPARK_PYTHON": sys.executable,
            # First on PATH: spark-submit resolves here when the task runs, not at parse time.
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        },
    )


with spark_dag(
    SPARK_BULK_UPLOAD_DAG_ID,
    "Parallel upload of many partitions on Spark (spark_apps/parallel_upload.py)",
    None,
    selector_params(),
) as tiering_spark_bulk_upload:
    submit("parallel_upload", "parallel_upload.py", SELECTOR_ARGS)


with spark_dag(
    SPARK_REBUILD_INDEXES_DAG_ID,
    "Rebuild segment indexes from the .log and repair what differs (spark_apps/rebuild_indexes.py)",
    "@weekly",
    {
        **selector_params(),
        "repair": Param(True, type="boolean", description="copy damaged segments again (false: only report)"),
        "local": Param(False, type="boolean", description="also check the broker's local segments (read-only)"),
    },
) as tiering_spark_rebuild_indexes:
    submit(
        "rebuild_indexes",
        "rebuild_indexes.py",
        [
            *SELECTOR_ARGS,
            "--mode",
            "{{ 'repair' if params.repair else 'check' }}",
            "--local",
            "{{ 'yes' if params.local else 'no' }}",
        ],
    )


with spark_dag(
    SPARK_VERIFY_DAG_ID,
    "Verify every finished remote segment against its manifest (spark_apps/verify_segments.py)",
    "@weekly",
    selector_params(),
) as tiering_spark_verify:
    submit("verify_segments", "verify_segments.py", SELECTOR_ARGS)


with spark_dag(
    EXPORT_DAG_ID,
    "The tiered log as an Iceberg table, exactly once (spark_apps/export_table.py)",
    "@daily",
    {
        **selector_params(),
        "partition": Param("", type="string", pattern=PARTITION, description="one partition of the topic, or empty"),
        "isolation": Param(
            "read_committed",
            type="string",
            enum=list(ISOLATION),
            description="read_committed drops aborted transactions; read_uncommitted keeps every data record",
        ),
    },
    "export",
) as tiering_export:
    submit(
        "export_table",
        "export_table.py",
        [*SELECTOR_ARGS, "--partition", "{{ params.partition }}", "--isolation", "{{ params.isolation }}"],
    )
