"""``tiering_delete_partition``: delete all remote data of removed partitions, by hand only.

Trigger it with a config (the UI's "Trigger" form, the REST API or the CLI)::

    airflow dags trigger tiering_delete_partition \\
        --conf '{"topic": "orders", "partitions": [3], "confirm": "orders", "dry_run": false}'

Airflow validates the Params before a run is created (a bad topic name, an empty or negative
partition list is refused there). Each Param has its own JSON schema, so "``confirm`` equals
``topic``" cannot be written in one; the first task checks it, and that every partition has
remote data, before anything is deleted. ``dry_run`` defaults to true: it lists what would go.
The config does not matter to parsing, so this DAG loads even when the config is broken.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

# dags/ and plugins/ ship side by side; the hooks and operators are the package ``plugins``.
_PROJECT_ROOT = str(Path(__file__).resolve().parents[1])
if _PROJECT_ROOT not in sys.path:
    sys.path.append(_PROJECT_ROOT)

from airflow.sdk import DAG, Param, task  # noqa: E402

from plugins.operators.tiering import TieringDeletePartitionOperator  # noqa: E402

# Kafka's legal topic names: ASCII letters, digits, '.', '_', '-'; 1..249 characters; not "." or "..".
TOPIC_PATTERN = r"^(?!\.{1,2}$)[a-zA-Z0-9._-]{1,249}$"
log = logging.getLogger(__name__)


@task
def validate_request(params: dict[str, Any] | None = None) -> list[int]:
    """Refuse the request unless ``confirm`` repeats the topic and every partition has remote data."""
    from airflow.sdk.exceptions import AirflowFailException

    from plugins.hooks.tiering import TieringHook
    from tiering_core.errors import InvalidTopicError
    from tiering_core.kafka.topic import TopicPartition, validate_topic_name
    from tiering_core.removal import partitions_to_remove

    assert params is not None
    topic, confirm = params["topic"], params["confirm"]
    if confirm != topic:
        raise AirflowFailException(f"confirm must repeat the topic name {topic!r} (got {confirm!r}); nothing deleted")
    try:
        validate_topic_name(topic)
    except InvalidTopicError as exc:
        raise AirflowFailException(f"{exc}; nothing deleted") from exc
    partitions = sorted({int(p) for p in params["partitions"]})
    hook = TieringHook()
    with hook.get_conn() as ctx:
        unknown = [p for p in partitions if not partitions_to_remove(ctx, TopicPartition(topic, p))]
    if unknown:
        raise AirflowFailException(
            f"{topic}: partition(s) {unknown} have no remote data (unknown to the metadata store or already "
            "removed); nothing deleted"
        )
    still_local = sorted(set(partitions) & set(hook.partitions(topic)))
    if still_local:
        log.warning("%s partition(s) %s are still in this broker's log dirs", topic, still_local)
    mode = "dry run: listing" if params["dry_run"] else "deleting"
    log.info("%s the remote data of %s partition(s) %s", mode, topic, partitions)
    return partitions


with DAG(
    dag_id="tiering_delete_partition",
    description="Delete all remote data of removed partitions (manual only; dry run by default)",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    tags=["tiering", "removal"],
    render_template_as_native_obj=True,
    default_args={"owner": "tiering"},
    params={
        "topic": Param(
            type="string",
            pattern=TOPIC_PATTERN,
            title="Topic",
            description="The topic whose removed partitions' remote data is deleted.",
        ),
        "partitions": Param(
            type="array",
            items={"type": "integer", "minimum": 0},
            minItems=1,
            uniqueItems=True,
            title="Partitions",
            description="Partition numbers, e.g. [3] or [3, 4].",
        ),
        "confirm": Param(
            type="string",
            pattern=TOPIC_PATTERN,
            title="Confirm",
            description="Type the topic name again to confirm.",
        ),
        "dry_run": Param(
            True, type="boolean", title="Dry run", description="Only list what would be deleted (the default)."
        ),
    },
) as tiering_delete_partition:
    TieringDeletePartitionOperator.partial(
        task_id="delete_partition",
        topic="{{ params.topic }}",
        plan_only="{{ params.dry_run }}",
        map_index_template="{{ task.topic }}-{{ task.partition }}",
        retries=3,
        retry_delay=timedelta(minutes=1),
        retry_exponential_backoff=2.0,
    ).expand(partition=validate_request())
