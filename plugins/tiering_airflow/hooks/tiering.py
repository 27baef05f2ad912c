"""``TieringHook``: the platform config plus an Airflow ``aws`` connection -> a ``TieringContext``.

The config file comes from the ``TIERING_CONFIG`` environment variable, else the Airflow
Variable ``tiering_config``. A hook reads the log dirs of one broker: the one its task names
(``broker_id``, the task group's broker in the cluster form), else this worker's
(``TIERING_BROKER_ID``, or the only broker configured); a broker id the config does not have is
an error naming it. S3 credentials come from the connection's login/password and the
endpoint from its extra ``endpoint_url``; the metadata DB password may come from the connection
``tiering_metadata``. They are handed to the core and never logged.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

if TYPE_CHECKING:
    from tiering_core.config import PlatformConfig
    from tiering_core.context import AwsCredentials, TieringContext
    from tiering_core.kafka.topic import TopicIdPartition, TopicPartition

CONFIG_ENV = "TIERING_CONFIG"
CONFIG_VARIABLE = "tiering_config"
#: A connection whose password is the metadata DB's, so that the YAML file need not hold it.
METADATA_CONN_ID = "tiering_metadata"


@dataclass(frozen=True)
class Eligibility:
    """What a copy run would upload now: the partitions with an eligible segment (numbers, or
    ``<topic>-<partition>`` labels for ``"*"``), and a line per partition whose closed segments
    below the LSO wait for their delayed upload (KIP-1241), saying why."""

    partitions: list[int] | list[str]
    waiting: list[str] = field(default_factory=list)
    #: The run's plan handed to its listing task: the partitions with a segment to copy now or a
    #: tiering gap to record, most urgent first, as ``[topic, [partition, ...]]`` runs
    #: (``runs.lanes.partition_runs``).
    plan: list[list[Any]] = field(default_factory=list)
    #: ``[topic, partition, reason]`` of each partition the run leaves to another broker or does
    #: not copy at all (another broker's replica is ahead, not tiered, ...): the run's word on why.
    skipped: list[list[Any]] = field(default_factory=list)


def resolve_config_path(explicit: str | None = None) -> str:
    """The platform config path: ``explicit``, else ``$TIERING_CONFIG``, else the Variable ``tiering_config``."""
    if explicit:
        return explicit
    if os.environ.get(CONFIG_ENV):
        return os.environ[CONFIG_ENV]
    from airflow.sdk import Variable

    from tiering_core.errors import ConfigError

    path = Variable.get(CONFIG_VARIABLE, default=None)
    if not path:
        raise ConfigError(
            f"no platform config: set the environment variable {CONFIG_ENV} "
            f"or the Airflow Variable {CONFIG_VARIABLE} to the path of the YAML config file"
        )
    return str(path)


def named_topics(config: PlatformConfig) -> frozenset[str]:
    """The topics the config names (each gets DAGs of its own), without the ``"*"`` default."""
    from tiering_core.config import DEFAULT_TOPIC

    return frozenset(config.topics) - {DEFAULT_TOPIC}


def load_topics(config_path: str | None = None) -> list[str]:
    """The topics named in the config (not the ``*`` default), sorted; reads only the YAML file."""
    from tiering_core.config import load_config

    return sorted(named_topics(load_config(resolve_config_path(config_path))))


class TaskBrokerError(Exception):
    """A task names a broker id the config does not have, or a value that is no broker id: no
    worker's host has that broker's log dirs, so the task fails at once rather than retrying."""


def task_broker_id(value: int | str | None) -> int | None:
    """A task's broker id, which may arrive rendered from a template as text; None: none named."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    text = str(value).strip()
    if text.isdigit():
        return int(text)
    raise TaskBrokerError(f"broker_id: expected a broker id (a non-negative integer), got {value!r}")


def with_metadata_password(config: PlatformConfig, log: Any) -> PlatformConfig:
    """The config with the metadata DB password of the ``tiering_metadata`` connection, when that
    connection exists and has one (registered with Airflow's log masker, never logged)."""
    from dataclasses import replace

    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException
    from airflow.sdk.log import mask_secret

    try:
        conn = BaseHook.get_connection(METADATA_CONN_ID)
    except AirflowNotFoundException:
        return config
    if not conn.password:
        return config
    mask_secret(conn.password)
    log.info("Metadata DB password from connection %r", METADATA_CONN_ID)
    return replace(config, metadata=config.metadata.with_password(conn.password, f"connection {METADATA_CONN_ID}"))


def connection_credentials(aws_conn_id: str | None, log: Any) -> AwsCredentials | None:
    """``aws_credentials`` of the connection, or ``None`` for the config and the AWS chain.

    A missing ``aws_default`` is normal (local filesystem tier, instance roles); a missing
    connection named explicitly is an error.
    """
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    if not aws_conn_id:
        return None
    try:
        BaseHook.get_connection(aws_conn_id)
    except AirflowNotFoundException:
        if aws_conn_id != TieringHook.default_conn_name:
            raise
        log.info("No connection %r: S3 credentials come from the config and the AWS chain", aws_conn_id)
        return None
    return aws_credentials(aws_conn_id, log)


def aws_credentials(aws_conn_id: str, log: Any) -> AwsCredentials:
    """S3 credentials, endpoint and region of an Airflow ``aws`` connection, read the way the Amazon
    provider reads it: keys from login/password (or the extras), ``role_arn`` assumed through STS,
    ``profile_name`` from the shared files, the endpoint from ``endpoint_url`` or
    ``service_config.s3``. Without keys, role or profile the keys stay ``None`` (the AWS chain).
    Secrets are registered with Airflow's log masker and never logged."""
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    from tiering_core.context import AwsCredentials

    aws = AwsBaseHook(aws_conn_id=aws_conn_id, client_type="s3")
    conn = aws.conn_config
    access_key = secret_key = token = None
    if conn.aws_access_key_id or conn.role_arn or conn.profile_name:
        frozen = aws.get_credentials(region_name=conn.region_name)  # assumes the role if there is one
        access_key, secret_key, token = frozen.access_key, frozen.secret_key, frozen.token or None
    credentials = AwsCredentials(
        access_key_id=access_key,
        secret_access_key=secret_key,
        session_token=token,
        endpoint_url=conn.get_service_endpoint_url("s3"),
        region=conn.region_name,
    )
    source = "the AWS chain"
    if conn.role_arn:
        source = f"role {conn.role_arn}"
    elif conn.profile_name:
        source = f"profile {conn.profile_name}"
    elif conn.aws_access_key_id:
        source = "access keys"
    log.info(
        "Connection %r: endpoint %s, region %s, credentials from %s",
        aws_conn_id,
        credentials.endpoint_url or "(from config)",
        credentials.region or "(from config)",
        source,
    )
    return credentials


def broker_hook(broker_id: int | str | None, **kwargs: Any) -> TieringHook:
    """The hook of a task's broker (``TieringHook`` arguments); a broker id that is not one fails
    the task without retries."""
    from airflow.sdk.exceptions import AirflowFailException

    try:
        return TieringHook(broker_id=broker_id, **kwargs)
    except TaskBrokerError as exc:
        raise AirflowFailException(str(exc)) from exc


def broker_config(hook: TieringHook) -> PlatformConfig:
    """``hook.get_config()``; a task naming a broker the config does not have fails without retries
    (its log dirs exist on no worker's host), naming the broker and the configured ones."""
    from airflow.sdk.exceptions import AirflowFailException

    try:
        return hook.get_config()
    except TaskBrokerError as exc:
        raise AirflowFailException(str(exc)) from exc


def task_partitions(
    ctx: TieringContext, topic: str, partition: int | None
) -> Sequence[TopicPartition | TopicIdPartition]:
    """The partitions a task that needs no log dir works on (``TieringContext.selected_partitions``:
    on a worker serving no broker, those the metadata store holds); a topic or partition found
    neither in the log dirs nor in the store fails the task without retries (none would find it)."""
    from airflow.sdk.exceptions import AirflowFailException

    from tiering_core.errors import TieringError

    try:
        return ctx.selected_partitions(topic, partition)
    except TieringError as exc:
        raise AirflowFailException(str(exc)) from exc


def observing_broker(config: PlatformConfig) -> int | None:
    """The id under which a run on ``config`` records what it saw: its chosen broker's (in the
    single-broker form the one its log dirs' ``meta.properties`` name); None when it has none (no
    log dir names its broker yet: nothing recorded)."""
    return config.broker.broker_id if config.broker is not None else None


class TieringHook(BaseHook):
    """Opens the platform's run context for one task, trigger poll or page view."""

    conn_name_attr = "aws_conn_id"
    default_conn_name = "aws_default"
    #: The connection type of ``tiering_metadata`` (the provider's, ``get_provider_info``): only its
    #: password is read. S3 comes from an ``aws`` connection (``aws_conn_id``).
    conn_type = "tiering"
    hook_name = "Kafka Tiering"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The connection form of the ``tiering`` type: the metadata DB password alone."""
        return {
            "hidden_fields": ["host", "schema", "login", "port", "extra"],
            "relabeling": {"password": "Metadata DB password"},
        }

    def __init__(
        self,
        *,
        config_path: str | None = None,
        aws_conn_id: str | None = default_conn_name,
        broker_id: int | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.config_path = resolve_config_path(config_path)
        self.aws_conn_id = aws_conn_id
        self.broker_id = task_broker_id(broker_id)

    def get_config(self) -> PlatformConfig:
        """The config of the task's broker (``broker_id``), else of this worker's broker
        (``TIERING_BROKER_ID``, or the only one configured); ConfigError naming a broker id the
        config does not have (TaskBrokerError)."""
        from tiering_core.config import load_config, select_broker

        config = load_config(self.config_path)
        if self.broker_id is not None and config.brokers and self.broker_id not in config.brokers:
            raise TaskBrokerError(
                f"brokers.{self.broker_id}: the task's broker is not in the config (configured: "
                f"{', '.join(map(str, sorted(config.brokers)))}); the DAGs follow the config at their next parse"
            )
        return with_metadata_password(select_broker(config, self.broker_id), self.log)

    def get_credentials(self) -> AwsCredentials | None:
        """Credentials and endpoint from the connection; ``None`` means the config and the AWS chain."""
        return connection_credentials(self.aws_conn_id, self.log)

    @contextmanager
    def get_conn(self, config: PlatformConfig | None = None) -> Iterator[TieringContext]:
        """An open context (metadata store, remote storage) on ``config`` (default ``get_config()``),
        as a context manager; while it is open, what the runs report goes out through Airflow's
        metrics pipeline (``tiering_airflow.metrics``)."""
        from tiering_airflow.metrics import task_metrics
        from tiering_core.context import TieringContext

        with TieringContext.open(config or self.get_config(), self.get_credentials()) as ctx, task_metrics():
            yield ctx

    def partitions(self, topic: str, config: PlatformConfig | None = None) -> list[int]:
        """The topic's partition numbers in the log dirs of ``config`` (default ``get_config()``);
        empty when this broker holds none."""
        from tiering_core.context import select_partitions

        logs = select_partitions(config or self.get_config())  # the log dirs only: no metadata store, no S3
        return [log.topic_partition.partition for log in logs if log.topic_partition.topic == topic]

    def default_partitions(self, config: PlatformConfig | None = None) -> list[TopicPartition]:
        """The partitions in the log dirs of every topic the config does not name: those the ``"*"``
        default covers, which have no DAGs of their own (read-only, the log dirs only)."""
        from tiering_core.context import select_partitions

        config = config or self.get_config()
        named = named_topics(config)
        return [log.topic_partition for log in select_partitions(config) if log.topic_partition.topic not in named]

    def lanes(
        self,
        partitions: list[TopicPartition],
        config: PlatformConfig | None = None,
        *,
        urgent_first: bool = False,
        plan: list[list[Any]] | None = None,
    ) -> list[dict[str, Any]]:
        """The run's lanes over ``partitions`` as the mapped tasks' arguments (``runs.lanes``):
        at most ``copy.lanes``, and never more than the scheduler's ``[core] max_map_length``, read
        now (a listing task runs this, not the DAG file's parse). ``plan``: the sensor's
        (``Eligibility.plan``), which keeps of ``partitions`` those it names, in its order, and
        reads no view. Without it ``urgent_first`` orders a share beyond the bound most urgent
        first, from views read now (copy); else by topic and partition (retention)."""
        from airflow.sdk import conf

        from tiering_core.runs.lanes import by_urgency, lane_bound, lane_partitions, split_into_lanes

        config = config or self.get_config()
        bound = lane_bound(config.copy.lanes, conf.getint("core", "max_map_length"))
        ordered = sorted(partitions)
        if plan is not None:
            here = set(partitions)
            ordered = [tp for tp in lane_partitions(plan) if tp in here]
        elif urgent_first and len(ordered) > bound:
            with self.get_conn(config) as ctx:
                ordered = by_urgency(ctx, ordered)
        return [lane.to_dict() for lane in split_into_lanes(ordered, bound)]

    def eligible(self, topic: str, config: PlatformConfig | None = None) -> list[int] | list[str]:
        """What a copy run would upload now (read-only): the partition numbers of ``topic``; for
        ``"*"``, the ``<topic>-<partition>`` labels of the partitions ``default_partitions`` covers."""
        return self.eligibility(topic, config).partitions

    def eligibility(self, topic: str, config: PlatformConfig | None = None, now_ms: int | None = None) -> Eligibility:
        """``eligible``, with why the partitions whose segments wait for their delayed upload wait
        (``now_ms``: the clock it is judged by; None: now)."""
        from tiering_core.config import DEFAULT_TOPIC
        from tiering_core.report.lines import copy_delay_words
        from tiering_core.runs.copy_plan import plan_copies
        from tiering_core.runs.lanes import partition_runs, planned_order

        default = topic == DEFAULT_TOPIC
        with self.get_conn(config) as ctx:
            named = named_topics(ctx.config)
            selected = [
                tp
                for tp in (log.topic_partition for log in ctx.partitions())
                if (tp.topic not in named if default else tp.topic == topic)
            ]
            plans = plan_copies(ctx, selected, broker_id=observing_broker(ctx.config), now_ms=now_ms)
            order = planned_order(ctx, plans)
        found = [plan.topic_partition for plan in plans if plan.eligible]
        waiting = [
            f"{plan.topic_partition}: {copy_delay_words(plan.delay.to_dict())}"
            for plan in plans
            if plan.delay is not None and plan.skipped_reason is None
        ]
        labels = [str(tp) for tp in found] if default else [tp.partition for tp in found]
        skipped = [
            [plan.topic_partition.topic, plan.topic_partition.partition, plan.skipped_reason]
            for plan in plans
            if plan.skipped_reason is not None
        ]
        return Eligibility(labels, waiting, partition_runs(order), skipped)
