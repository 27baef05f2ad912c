"""Spark DAGs: each one ``spark-submit`` of a ``spark_apps`` application through SparkSubmitOperator.

- ``tiering_spark_bulk_upload`` (manual unless ``dags.spark_bulk_upload.schedule``): every eligible
  segment of the selected partitions, uploaded in parallel with the copy engine's invariants
  (``spark_apps/parallel_upload.py``);
- ``tiering_spark_rebuild_indexes`` (``dags.spark_rebuild_indexes.schedule``, default weekly):
  rebuild offset, time and transaction indexes from the ``.log``, compare with what is stored,
  repair what differs (``spark_apps/rebuild_indexes.py``);
- ``tiering_spark_verify`` (``dags.spark_verify.schedule``, default weekly): stream every finished
  remote segment against its manifest and the checksums recorded at copy time; the run fails when
  any segment is damaged (``spark_apps/verify_segments.py``);
- ``tiering_export`` (``dags.export.schedule``, default daily): the tiered log of the selected
  partitions into its Iceberg table, exactly once (``spark_apps/export_table.py``: one Spark task
  per remote segment writes its data files, the driver commits them; a rerun finishes what a
  killed run left).

Params select the partitions (empty: all in the log dirs; on a worker that serves none of a
cluster's brokers, verify, rebuild and export take them from the metadata store instead, and a
partition it holds nothing of fails the run naming it). The Spark master comes from the
``spark_default`` connection (``local[2]``, ``spark://...``, ``yarn``, ``k8s://...``); without
that connection it is ``local[*]``. S3 credentials come from the ``aws_default`` connection at
run time (see ``tiering_airflow/operators/spark.py``). The config file is the deployment's only:
``$TIERING_CONFIG`` when the file was parsed, else the Variable ``tiering_config``; whoever may
trigger a DAG cannot point the job at another file on the worker (no param or run conf names
it). spark-submit is the one beside this interpreter when it has one (found through ``PATH`` when
the task runs), else the one on ``PATH``. Each may also be triggered by hand, and runs on the
queue ``dags.<name>.queue`` names. Parsing imports only Airflow, the Spark provider's operator and
the config's parser (no Spark, no storage client); the applications are found where the package
``spark_apps`` is installed, without importing it.
"""

from __future__ import annotations

import importlib.util
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
from tiering_airflow.dags.schedules import cron_of
from tiering_airflow.operators.spark import TieringSparkSubmitOperator
from tiering_airflow.params import on_queue
from tiering_core.config.dags import DagConfig, DagsConfig

VENV_BIN = Path(sys.executable).parent
START = pendulum.datetime(2026, 1, 1, tz="UTC")
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


def apps() -> Path:
    """The folder of the ``spark_apps`` package, found without importing it (nor pyspark)."""
    spec = importlib.util.find_spec("spark_apps")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("spark_apps: the package of the Spark applications is not installed")
    return Path(spec.origin).parent


def config_path() -> str:
    """The deployment's config, never a param: a run's conf must not choose which file the job reads."""
    return os.environ.get("TIERING_CONFIG") or "{{ var.value.get('tiering_config', '') }}"


def selector_args() -> list[str]:
    """The apps' partition selectors; a blank one means "every partition" (the apps read it as unset)."""
    return ["--config", config_path(), "--topic", "{{ params.topic }}", "--partitions", "{{ params.partitions }}"]


def spark_dag(settings: DagConfig, dag_id: str, description: str, params: dict[str, Param], *tags: str) -> DAG:
    """One Spark DAG: what every one of them shares (no catch-up, one run at a time, this doc), its
    schedule and queue from the config's ``dags.<name>``."""
    return DAG(
        dag_id=dag_id,
        description=description,
        schedule=settings.schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["tiering", "spark", *tags],
        params=params,
        doc_md=__doc__,
        default_args=on_queue(settings.queue),
    )


def submit(task_id: str, app: str, args: list[str]) -> TieringSparkSubmitOperator:
    """spark-submit of one app, with Python (and spark-submit, when it has one) from this environment."""
    return TieringSparkSubmitOperator(
        task_id=task_id,
        conn_id="spark_default",
        application=str(apps() / app),
        application_args=args,
        name=f"tiering-{task_id.replace('_', '-')}",
        spark_binary="spark-submit",
        env_vars={
            "TIERING_CONFIG": config_path(),
            "PYSPARK_PYTHON": sys.executable,
            # First on PATH: spark-submit resolves here when the task runs, not at parse time.
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        },
    )


def bulk_upload_dag(settings: DagConfig) -> DAG:
    with spark_dag(
        settings,
        SPARK_BULK_UPLOAD_DAG_ID,
        "Parallel upload of many partitions on Spark (spark_apps/parallel_upload.py)",
        selector_params(),
    ) as dag:
        submit("parallel_upload", "parallel_upload.py", selector_args())
    return dag


def rebuild_indexes_dag(settings: DagConfig) -> DAG:
    with spark_dag(
        settings,
        SPARK_REBUILD_INDEXES_DAG_ID,
        "Rebuild segment indexes from the .log and repair what differs (spark_apps/rebuild_indexes.py)",
        {
            **selector_params(),
            "repair": Param(True, type="boolean", description="copy damaged segments again (false: only report)"),
            "local": Param(False, type="boolean", description="also check the broker's local segments (read-only)"),
        },
    ) as dag:
        mode = [
            "--mode",
            "{{ 'repair' if params.repair else 'check' }}",
            "--local",
            "{{ 'yes' if params.local else 'no' }}",
        ]
        submit("rebuild_indexes", "rebuild_indexes.py", [*selector_args(), *mode])
    return dag


def verify_dag(settings: DagConfig) -> DAG:
    with spark_dag(
        settings,
        SPARK_VERIFY_DAG_ID,
        "Verify every finished remote segment against its manifest (spark_apps/verify_segments.py)",
        selector_params(),
    ) as dag:
        submit("verify_segments", "verify_segments.py", selector_args())
    return dag


def export_dag(settings: DagConfig) -> DAG:
    with spark_dag(
        settings,
        EXPORT_DAG_ID,
        "The tiered log as an Iceberg table, exactly once (spark_apps/export_table.py)",
        {
            **selector_params(),
            "partition": Param(
                "", type="string", pattern=PARTITION, description="one partition of the topic, or empty"
            ),
            "isolation": Param(
                "read_committed",
                type="string",
                enum=list(ISOLATION),
                description="read_committed drops aborted transactions; read_uncommitted keeps every data record",
            ),
        },
        "export",
    ) as dag:
        selection = ["--partition", "{{ params.partition }}", "--isolation", "{{ params.isolation }}"]
        submit("export_table", "export_table.py", [*selector_args(), *selection])
    return dag


def scheduled(dags: DagsConfig, name: str) -> DagConfig:
    """``dags.<name>``; ConfigError naming its schedule when Airflow's cron parser refuses it."""
    settings = dags[name]
    if settings.schedule is not None:
        cron_of(settings.schedule, f"dags.{name}.schedule")
    return settings


def build(dags: DagsConfig) -> list[DAG]:
    """The four Spark DAGs, each with its ``dags.<name>`` schedule and queue."""
    return [
        bulk_upload_dag(scheduled(dags, "spark_bulk_upload")),
        rebuild_indexes_dag(scheduled(dags, "spark_rebuild_indexes")),
        verify_dag(scheduled(dags, "spark_verify")),
        export_dag(scheduled(dags, "export")),
    ]
