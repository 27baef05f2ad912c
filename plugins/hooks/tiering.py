"""``TieringHook``: the platform config plus an Airflow ``aws`` connection -> a ``TieringContext``.

The config file comes from the ``TIERING_CONFIG`` environment variable, else the Airflow
Variable ``tiering_config``. S3 credentials come from the connection's login/password and the
endpoint from its extra ``endpoint_url``; they are handed to the core and never logged.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from tiering_core.errors import ConfigError

if TYPE_CHECKING:
    from tiering_core.config import PlatformConfig
    from tiering_core.context import AwsCredentials, TieringContext

CONFIG_ENV = "TIERING_CONFIG"
CONFIG_VARIABLE = "tiering_config"


def resolve_config_path(explicit: str | None = None) -> str:
    """The platform config path: ``explicit``, else ``$TIERING_CONFIG``, else the Variable ``tiering_config``."""
    if explicit:
        return explicit
    if os.environ.get(CONFIG_ENV):
        return os.environ[CONFIG_ENV]
    from airflow.sdk import Variable

    path = Variable.get(CONFIG_VARIABLE, default=None)
    if not path:
        raise ConfigError(
            f"no platform config: set the environment variable {CONFIG_ENV} "
            f"or the Airflow Variable {CONFIG_VARIABLE} to the path of the YAML config file"
        )
    return str(path)


def load_topics(config_path: str | None = None) -> list[str]:
    """The topics named in the config (not the ``*`` default), sorted; reads only the YAML file."""
    from tiering_core.config import DEFAULT_TOPIC, load_config

    return sorted(topic for topic in load_config(resolve_config_path(config_path)).topics if topic != DEFAULT_TOPIC)


class TieringHook(BaseHook):
    """Opens the platform's run context for one task, trigger poll or page view."""

    conn_name_attr = "aws_conn_id"
    default_conn_name = "aws_default"

    def __init__(
        self, *, config_path: str | None = None, aws_conn_id: str | None = default_conn_name, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.config_path = resolve_config_path(config_path)
        self.aws_conn_id = aws_conn_id

    def get_config(self) -> PlatformConfig:
        from tiering_core.config import load_config

        return load_config(self.config_path)

    def get_credentials(self) -> AwsCredentials | None:
        """Credentials and endpoint from the connection; ``None`` means the config and the AWS chain.

        A missing ``aws_default`` is normal (local filesystem tier, instance roles); a missing
        connection named explicitly is an error.
        """
        from airflow.sdk.exceptions import AirflowNotFoundException

        from tiering_core.context import AwsCredentials

        if not self.aws_conn_id:
            return None
        try:
            conn = self.get_connection(self.aws_conn_id)
        except AirflowNotFoundException:
            if self.aws_conn_id != self.default_conn_name:
                raise
            self.log.info("No connection %r: S3 credentials come from the config and the AWS chain", self.aws_conn_id)
            return None
        extra: dict[str, Any] = conn.extra_dejson or {}
        s3_service = (extra.get("service_config") or {}).get("s3") or {}
        credentials = AwsCredentials(
            access_key_id=conn.login or None,
            secret_access_key=conn.password or None,
            session_token=extra.get("aws_session_token"),
            endpoint_url=extra.get("endpoint_url") or s3_service.get("endpoint_url"),
            region=extra.get("region_name"),
        )
        self.log.info(
            "Connection %r: endpoint %s, region %s",
            self.aws_conn_id,
            credentials.endpoint_url or "(from config)",
            credentials.region or "(from config)",
        )
        return credentials

    def get_conn(self) -> TieringContext:
        """An open context (metadata store, remote storage); use it as a context manager."""
        from tiering_core.context import TieringContext

        return TieringContext.open(self.get_config(), self.get_credentials())

    def partitions(self, topic: str) -> list[int]:
        """The topic's partition numbers in the log dirs; empty when this broker holds none."""
        from tiering_core.context import select_partitions

        logs = select_partitions(self.get_config())  # the log dirs only: no metadata store, no S3
        return [log.topic_partition.partition for log in logs if log.topic_partition.topic == topic]

    def eligible_partitions(self, topic: str) -> list[int]:
        """Partitions of ``topic`` with a segment a copy run would upload now (read-only)."""
        from tiering_core.copy import plan_copy

        with self.get_conn() as ctx:
            return [
                log.topic_partition.partition
                for log in ctx.partitions()
                if log.topic_partition.topic == topic and plan_copy(ctx, log.topic_partition).eligible
            ]
