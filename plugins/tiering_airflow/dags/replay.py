"""``tiering_replay``: a range of the remote tier put back into a Kafka topic, by hand only.

Trigger it with a config (the UI's "Trigger" form, the REST API or the CLI)::

    airflow dags trigger tiering_replay --conf '{"topic": "orders", "partitions": [], "from_offset": 0,
        "target_topic": "orders-replayed", "confirm": "orders-replayed"}'

Every record of the finished, in-lineage remote segments in the range goes into the target topic
(which must exist) through transactional producers, exactly once across kills and retries: each
record carries its source in the ``tiering.source`` header and a rerun resumes after the last one
the target holds (docs/replay.md). The cluster is the config's ``kafka:`` section, or the
``target`` Param's cluster of ``replay.targets``: a name, never an address, so a cluster's
credentials go only to its own servers.

Airflow validates the Params before a run is created (a bad topic name, a negative offset, an
unknown isolation level, a target that is not a name are refused there). What one Param's JSON
schema cannot say (exactly one first offset or timestamp, ``confirm`` repeating the target topic,
the target among the config's, the source partitions the tier holds) the first task checks
before anything is written; it then splits the source partitions into lanes as the copy DAGs do
(one task per partition up to ``copy.lanes`` and Airflow's ``[core] max_map_length``, balanced
shares beyond). Each lane's XCom is one result per partition.
Its tasks run on ``dags.replay.queue``; built apart from the topics' DAGs it loads even when the
config is broken (``tiering_airflow.dags.factory``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import DAG, Param, task

from tiering_airflow.dag_ids import REPLAY_DAG_ID
from tiering_airflow.operators.tiering import TieringReplayOperator
from tiering_airflow.params import TARGET_PATTERN, TOPIC_PATTERN, manual_dag, topic_param
from tiering_core.config.dags import DagConfig


def offset_param(title: str, description: str) -> Param:
    """An offset or a time in ms, or nothing."""
    return Param(None, type=["integer", "null"], minimum=0, title=title, description=description)


@task(retries=3, retry_delay=timedelta(seconds=30), retry_exponential_backoff=2.0, max_retry_delay=timedelta(minutes=5))
def plan_replay(params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Refuse a request the Params' schemas let through; the lanes over the source partitions,
    each with the validated request (the source topic id fixed, so every lane reads the same)."""
    from airflow.sdk.exceptions import AirflowFailException

    from tiering_airflow.hooks.tiering import TieringHook
    from tiering_core.errors import TieringError
    from tiering_core.replay import ReplayRequest
    from tiering_core.replay.source import source_partitions, source_topic_id
    from tiering_core.replay.target import replay_cluster

    assert params is not None
    if params.get("bootstrap_servers") is not None:
        raise AirflowFailException(
            "bootstrap_servers: not taken (a cluster's credentials go only to its own servers): name a target of the "
            "config's replay.targets in target; nothing replayed"
        )
    if params.get("confirm") != params.get("target_topic"):
        raise AirflowFailException(
            f"confirm must repeat the target topic {params.get('target_topic')!r} (got {params.get('confirm')!r}); "
            "nothing replayed"
        )
    hook = TieringHook()
    try:
        request = ReplayRequest.from_dict(params)
        config = hook.get_config()
        replay_cluster(config, params.get("target"))
        with hook.get_conn(config) as ctx:
            topic_id = source_topic_id(ctx, request.topic, request.topic_id)
            tips = source_partitions(ctx, request.topic, topic_id, request.partitions)
    except TieringError as exc:
        raise AirflowFailException(str(exc)) from exc
    fixed = {**request.to_dict(), "topic_id": topic_id, "target": params.get("target")}
    lanes = hook.lanes([tip.topic_partition for tip in tips], config)
    return [{**lane, "request": fixed} for lane in lanes]


def build(settings: DagConfig) -> DAG:
    """The DAG, its tasks on ``dags.replay.queue`` (None: the executor's default queue)."""
    with manual_dag(
        REPLAY_DAG_ID,
        "Put a range of the remote tier back into a Kafka topic through the producer, exactly once (manual)",
        {
            "topic": topic_param("The source topic, as the remote tier holds it (a deleted topic too)."),
            "partitions": Param(
                [],
                type="array",
                items={"type": "integer", "minimum": 0},
                uniqueItems=True,
                title="Partitions",
                description="Source partition numbers, e.g. [0, 3]; empty: every partition the tier holds.",
            ),
            "from_offset": offset_param("From offset", "The first source offset."),
            "from_timestamp": offset_param("From timestamp", "Or: the first record at or after this time (ms)."),
            "to_offset": offset_param("To offset", "The last source offset (inclusive)."),
            "to_timestamp": offset_param("To timestamp", "Or: records before the first one after this time (ms)."),
            "target_topic": topic_param("The topic written: it must exist."),
            "isolation": Param(
                "read_committed",
                type="string",
                enum=["read_committed", "read_uncommitted"],
                title="Isolation",
                description="read_committed never replays aborted transactions; control records are never replayed.",
            ),
            "partitioning": Param(
                "same",
                type="string",
                enum=["same", "key"],
                title="Partitions of the target",
                description="same: the source's partition number; key: where the producer's partitioner puts the key.",
            ),
            "target": Param(
                None,
                type=["string", "null"],
                pattern=TARGET_PATTERN,
                title="Target cluster",
                description="The cluster written: a name of the config's replay.targets (default: its kafka: section).",
            ),
            "confirm": Param(
                type="string",
                pattern=TOPIC_PATTERN,
                title="Confirm",
                description="Type the target topic's name again to confirm.",
            ),
        },
        "replay",
        queue=settings.queue,
    ) as dag:
        TieringReplayOperator.partial(task_id="replay", map_index_template="{{ task.lane }}").expand_kwargs(
            plan_replay()
        )
    return dag
