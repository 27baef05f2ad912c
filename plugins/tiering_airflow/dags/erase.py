"""``tiering_erase``: erase every record of some keys from a topic's remote tier, by hand only.

Trigger it with a config (the UI's "Trigger" form, the REST API or the CLI)::

    airflow dags trigger tiering_erase \\
        --conf '{"topic": "orders", "key_file": "requests/2026-11-29.txt", "confirm": "orders", "dry_run": false}'

The keys are the bytes Kafka sees, written in ``key_encoding`` (utf8, hex or base64), given either
as ``key_file``, a file of one key per line under the config's ``dags.erase.key_dir``, or as the
list ``keys``. A list stays in the run's conf in Airflow's database: for personal data, name a
file (and delete it once the erasure is done). Each remote segment holding a record of the keys is
copied again without those records, offsets kept, as ``tiering erase`` does (docs/commands.md "Erasure");
the audit trail holds each key's SHA-256, never a key, and names the DAG run that asked.

Airflow validates the Params before a run is created; ``confirm`` must repeat the topic, which
the task checks. A refusal (no confirmation, keys given both ways or neither, a key file outside
the directory, a topic with nothing in the tier) fails the task without retries; a partition that
failed fails it after the others ran, and the retry (which takes over the lease) finishes it.
``dry_run`` defaults to true: it names the segments and records it would remove and writes
nothing. With ``spark`` true the erasure runs as ``spark_apps/erase_keys.py`` through
spark-submit (the ``spark_default`` connection's master, as the Spark DAGs), each partition one
Spark task; the keys must then come as ``key_file``, so that none travels in spark-submit's argv.
The task reads the store and the bucket only, on ``dags.erase.queue``; built apart from
the topics' DAGs it loads even when the config is broken (``tiering_airflow.dags.factory``).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import DAG, Param, task

from tiering_airflow.dag_ids import ERASE_DAG_ID
from tiering_airflow.dags.spark import config_path, submit
from tiering_airflow.operators.erase import LOCAL_TASK_ID, SPARK_TASK_ID, TieringEraseOperator, erasure_route
from tiering_airflow.params import confirm_param, manual_dag, topic_param
from tiering_core.config.dags import DagConfig
from tiering_core.runs.erase_keys import KeyEncoding


@task.branch(task_id="route", retries=0)
def route(key_dir: str | None, params: dict[str, Any] | None = None) -> str:
    """``erase`` or ``erase_on_spark``, as the run's ``spark`` param asks (``erasure_route``)."""
    return erasure_route(params or {}, key_dir)


def spark_args(key_dir: str | None) -> list[str]:
    """``spark_apps/erase_keys.py``'s arguments: the keys only as a file under ``key_dir`` (without
    one the app is given none and refuses; the branch refuses first)."""
    keys = ["--key-dir", key_dir, "--key-file", "{{ params.key_file or '' }}"] if key_dir is not None else []
    return [
        "--config",
        config_path(),
        "--topic",
        "{{ params.topic }}",
        *keys,
        "--key-encoding",
        "{{ params.key_encoding }}",
        "--partition",
        "{{ (params.partitions or []) | join(',') }}",
        "--requested-by",
        "DAG run {{ dag.dag_id }}/{{ run_id }}",
        "{{ '--dry-run' if params.dry_run else '--yes' }}",
    ]


def build(settings: DagConfig) -> DAG:
    """The DAG, its tasks on ``dags.erase.queue`` (None: the executor's default queue)."""
    with manual_dag(
        ERASE_DAG_ID,
        "Erase every record of some keys from a topic's remote tier (manual; dry run by default)",
        {
            "topic": topic_param("The topic whose records of the keys are erased."),
            "key_file": Param(
                None,
                type=["null", "string"],
                maxLength=4096,
                pattern=r"^(?!/)(?!.*(^|/)\.\.(/|$)).+$",
                title="Key file",
                description="A file of keys, one per line, relative to the config's dags.erase.key_dir.",
            ),
            "keys": Param(
                None,
                type=["null", "array"],
                items={"type": "string", "minLength": 1},
                maxItems=10_000,
                title="Keys",
                description="The keys, if no key file is given (they stay in this run's conf).",
            ),
            "key_encoding": Param(
                KeyEncoding.UTF8.value,
                enum=[e.value for e in KeyEncoding],
                title="Key encoding",
                description="How the keys are written: a key is the bytes Kafka sees.",
            ),
            "partitions": Param(
                None,
                type=["null", "array"],
                items={"type": "integer", "minimum": 0},
                title="Partitions",
                description="Only these partitions (default: every partition the tier holds).",
            ),
            "confirm": confirm_param(),
            "dry_run": Param(
                True, type="boolean", title="Dry run", description="Only name what would be removed (the default)."
            ),
            "spark": Param(
                False,
                type="boolean",
                title="On Spark",
                description="Erase the partitions in parallel on Spark (spark_apps/erase_keys.py); keys as key_file.",
            ),
        },
        "erase",
        queue=settings.queue,
    ) as dag:
        local = TieringEraseOperator(
            task_id=LOCAL_TASK_ID,
            topic="{{ params.topic }}",
            # Lists as JSON text (the operator parses them); the topic and the confirmation stay the
            # exact strings that were validated.
            keys="{{ params['keys'] | tojson }}",
            key_file="{{ params.key_file | tojson }}",
            key_encoding="{{ params.key_encoding }}",
            partitions="{{ params.partitions | tojson }}",
            confirm="{{ params.confirm }}",
            plan_only="{{ params.dry_run }}",
            key_dir=settings.key_dir,
        )
        on_spark = submit(SPARK_TASK_ID, "erase_keys.py", spark_args(settings.key_dir))
        route(settings.key_dir) >> [local, on_spark]
    return dag
