"""``TieringSparkSubmitOperator``: SparkSubmitOperator for the project's Spark apps.

What it adds, all decided at execute time (parsing reads nothing from disk or connections):

- the Spark master: the ``spark_default`` connection when it exists, else ``local[*]`` (the
  embedded default; the provider alone would fall back to ``yarn``);
- S3 credentials: the ``aws`` connection read by the project's hook (keys, role, endpoint,
  region), handed to spark-submit as the standard AWS environment variables, which the driver
  and, in local mode, the executors inherit; for a cluster master they also go to the executors
  as ``spark.executorEnv.*``. They are never template fields (so never rendered into the
  task's stored fields) and Airflow's log masker hides the secrets in the task log.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from tiering_airflow.hooks.tiering import TieringHook, connection_credentials

if TYPE_CHECKING:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from tiering_core.context import AwsCredentials


def s3_environment(credentials: AwsCredentials | None) -> dict[str, str]:
    """The AWS environment variables boto3 reads for these credentials (none: the AWS chain)."""
    if credentials is None:
        return {}
    env = {
        "AWS_ACCESS_KEY_ID": credentials.access_key_id,
        "AWS_SECRET_ACCESS_KEY": credentials.secret_access_key,
        "AWS_SESSION_TOKEN": credentials.session_token,
        # Used by boto3 when the config names no endpoint_url itself.
        "AWS_ENDPOINT_URL_S3": credentials.endpoint_url,
        "AWS_DEFAULT_REGION": credentials.region,
    }
    return {name: value for name, value in env.items() if value}


def is_local_master(master: str) -> bool:
    return master == "local" or master.startswith("local[")


class TieringSparkSubmitOperator(SparkSubmitOperator):
    """spark-submit of one of the project's apps; see the module docstring for what it adds."""

    def __init__(self, *, aws_conn_id: str | None = TieringHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.aws_conn_id = aws_conn_id

    def spark_master(self) -> str | None:
        """The master the connection names, or ``None`` when the connection does not exist."""
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            conn = BaseHook.get_connection(self._conn_id)
        except AirflowNotFoundException:
            return None
        return str(conn.host or conn.conn_type or "")

    @contextmanager
    def default_master(self) -> Iterator[str]:
        """While the hook resolves its connection: ``local[*]`` if ``spark_default`` does not exist.

        The provider turns a missing connection into ``yarn``; an environment connection, set only
        for this call, gives its hook the embedded default instead.
        """
        from spark_apps.runtime import DEFAULT_MASTER

        master = self.spark_master()
        if master is not None:
            yield master
            return
        name = f"AIRFLOW_CONN_{self._conn_id.upper()}"
        self.log.info("No connection %r: Spark master %s (the embedded default)", self._conn_id, DEFAULT_MASTER)
        os.environ[name] = f'{{"conn_type": "spark", "host": "{DEFAULT_MASTER}"}}'
        try:
            yield DEFAULT_MASTER
        finally:
            os.environ.pop(name, None)

    def _get_hook(self) -> SparkSubmitHook:
        secrets = s3_environment(connection_credentials(self.aws_conn_id, self.log))
        rendered_env, rendered_conf = self.env_vars, self.conf
        with self.default_master() as master:
            # The hook copies these; the operator's own (rendered) fields never hold the secrets.
            self.env_vars = {**(rendered_env or {}), **secrets}
            executors = {} if is_local_master(master) else {f"spark.executorEnv.{k}": v for k, v in secrets.items()}
            self.conf = {**(rendered_conf or {}), **executors}
            try:
                return super()._get_hook()
            finally:
                self.env_vars, self.conf = rendered_env, rendered_conf
