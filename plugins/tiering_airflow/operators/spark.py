"""``TieringSparkSubmitOperator``: spark-submit of one of the project's apps, through the Spark
provider's public surface: ``execute`` builds a ``SparkSubmitHook`` from the operator's fields and
calls its ``submit``.

What it adds, all decided at execute time (parsing reads nothing from disk or connections):

- the Spark master: the connection ``conn_id`` (``spark_default``) when it exists, else
  ``local[*]`` (the embedded default; the provider alone would fall back to ``yarn``);
- S3 credentials: the ``aws`` connection read by the project's hook (keys, role, endpoint,
  region) as the standard AWS environment variables. They never go on spark-submit's command
  line, which every user of the host can read: they are in the environment of the spark-submit
  process (the driver in client mode and, with a local master, the executors), and for any other
  master also in a properties file only the task's user can read (``spark.executorEnv.*``, and
  the driver's environment on YARN and Kubernetes), removed when spark-submit ends. They are
  never template fields (so never rendered into the task's stored fields) and Airflow's log
  masker hides the secrets in the task log.

``env_vars`` (templated, not secret) go the same ways, and so does the task's try
(``TIERING_TASK_ATTEMPT``), by which an app names the leases it holds so that a retry of the task
takes them over at once. The provider's cluster-side tracking
through the Kubernetes or YARN APIs is not offered (``execute`` waits for spark-submit), nor is its
OpenLineage injection into ``conf``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from tiering_airflow.hooks.tiering import TieringHook, connection_credentials

if TYPE_CHECKING:
    from airflow.sdk import Connection, Context

    from tiering_core.context import AwsCredentials
    from tiering_core.metadata.store import TaskAttempt

# The operator's arguments that are not template fields and that the hook takes as they are.
HOOK_ARGUMENTS = (
    "archives",
    "java_class",
    "repositories",
    "total_executor_cores",
    "executor_cores",
    "executor_memory",
    "driver_memory",
    "num_executors",
    "status_poll_interval",
    "verbose",
    "spark_binary",
    "yarn_queue",
    "deploy_mode",
    "use_krb5ccache",
)
# Where Spark hands environment variables to the processes it starts away from spark-submit.
EXECUTOR_ENV = "spark.executorEnv."
DRIVER_ENV = ("spark.yarn.appMasterEnv.", "spark.kubernetes.driverEnv.")


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


def properties_line(key: str, value: str) -> str:
    """One line of a Java properties file (``--properties-file``; spark-submit reads it as UTF-8),
    escaped so that the key and the value read back as written (Spark trims blanks around values)."""
    controls = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"})
    key = "".join("\\" + c if c in " =:#!" else c for c in key.translate(controls))
    return f"{key}={value.translate(controls)}\n"


def spark_defaults_file() -> Path | None:
    """The ``spark-defaults.conf`` spark-submit reads when no ``--properties-file`` is given."""
    conf_dir = os.environ.get("SPARK_CONF_DIR") or (
        os.path.join(os.environ["SPARK_HOME"], "conf") if os.environ.get("SPARK_HOME") else None
    )
    path = Path(conf_dir, "spark-defaults.conf") if conf_dir else None
    return path if path is not None and path.is_file() else None


class LocalDefaultSparkSubmitHook(SparkSubmitHook):
    """A ``SparkSubmitHook`` for which a missing Spark connection means the embedded default master
    (``local[*]``), where the provider would submit to ``yarn``."""

    @classmethod
    def get_connection(cls, conn_id: str) -> Connection:
        from airflow.sdk import Connection
        from airflow.sdk.exceptions import AirflowNotFoundException

        from spark_apps.runtime import DEFAULT_MASTER

        try:
            return super().get_connection(conn_id)
        except AirflowNotFoundException:
            cls.logger().info("No connection %r: Spark master %s (the embedded default)", conn_id, DEFAULT_MASTER)
            return Connection(conn_id=conn_id, conn_type="spark", host=DEFAULT_MASTER)


@dataclass(frozen=True)
class SparkSubmission:
    """A hook ready to submit, and the environment of its spark-submit process (with the secrets)."""

    hook: SparkSubmitHook
    env: dict[str, str]


class TieringSparkSubmitOperator(SparkSubmitOperator):
    """spark-submit of one of the project's apps; see the module docstring for what it adds."""

    def __init__(self, *, aws_conn_id: str | None = TieringHook.default_conn_name, **kwargs: Any) -> None:
        for tracking in ("track_driver_via_k8s_api", "yarn_track_via_rm_api"):
            if kwargs.get(tracking):
                raise ValueError(f"{tracking} is not offered: the task waits for spark-submit")
        super().__init__(**kwargs)
        self.aws_conn_id = aws_conn_id
        self.spark_conn_id: str = kwargs.get("conn_id", "spark_default")
        self.hook_arguments = {name: kwargs[name] for name in HOOK_ARGUMENTS if name in kwargs}
        self.submitted: SparkSubmitHook | None = None

    def spark_master(self) -> str | None:
        """The master the connection names, or ``None`` when the connection does not exist."""
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            conn = BaseHook.get_connection(self.spark_conn_id)
        except AirflowNotFoundException:
            return None
        return str(conn.host or conn.conn_type or "")

    @contextmanager
    def submission(self, attempt: TaskAttempt | None = None) -> Iterator[SparkSubmission]:
        """The hook for this task's spark-submit and the environment to run it with (``attempt``:
        the task's try, for the app); the properties file holding the secrets for the executors
        (not for a local master) exists until the end."""
        from spark_apps.runtime import TASK_ATTEMPT_ENV

        secrets = s3_environment(connection_credentials(self.aws_conn_id, self.log))
        variables = {str(k): str(v) for k, v in (self.env_vars or {}).items()}
        if attempt is not None:
            variables[TASK_ATTEMPT_ENV] = attempt.to_json()
        master = self.spark_master()
        with tempfile.TemporaryDirectory(prefix="tiering-spark-submit-") as workdir:
            properties_file = self.properties_file
            if (secrets or variables) and not (master is None or is_local_master(master)):
                properties_file = self.write_properties(Path(workdir), variables, secrets)
            hook = LocalDefaultSparkSubmitHook(
                conf=self.conf,
                conn_id=self.spark_conn_id,
                files=self.files,
                py_files=self.py_files,
                driver_class_path=self.driver_class_path,
                jars=self.jars,
                packages=self.packages,
                exclude_packages=self.exclude_packages,
                keytab=self.keytab,
                principal=self.principal,
                proxy_user=self.proxy_user,
                name=self.name,
                application_args=self.application_args,
                properties_file=properties_file,
                post_submit_commands=self.post_submit_commands,
                **self.hook_arguments,
            )
            yield SparkSubmission(hook, {**os.environ, **variables, **secrets})

    def write_properties(self, workdir: Path, variables: Mapping[str, str], secrets: Mapping[str, str]) -> str:
        """A 0600 properties file: the one spark-submit would read (``properties_file``, else
        ``spark-defaults.conf``), then the environment of the executors and of a cluster driver."""
        base = Path(self.properties_file) if self.properties_file else spark_defaults_file()
        lines = [base.read_text(encoding="utf-8"), "\n"] if base is not None else []
        lines += [properties_line(EXECUTOR_ENV + name, value) for name, value in secrets.items()]
        lines += [
            properties_line(prefix + name, value)
            for prefix in DRIVER_ENV
            for name, value in {**variables, **secrets}.items()
        ]
        path = workdir / "spark-submit.properties"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.writelines(lines)
        return str(path)

    def execute(self, context: Context) -> None:
        from tiering_airflow.operators.tiering import task_attempt

        with self.submission(task_attempt(context)) as submission:
            self.submitted = submission.hook
            submission.hook.submit(self.application, env=submission.env)

    def on_kill(self) -> None:
        if self.submitted is not None:
            self.submitted.on_kill()
