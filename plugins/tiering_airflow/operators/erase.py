"""``TieringEraseOperator``: the erase DAG's task (``export.erase.erase_topic``: the tier, then the
topic's export tables), apart from the partition operators because it needs no broker's disk:
it writes only the metadata store, the bucket and the export catalog, and reads a broker's log dir
(read-only) only to name the local segments still holding the keys where the worker has one; a
worker without it names them as not checked."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator

from tiering_airflow.hooks.tiering import TieringHook
from tiering_airflow.operators.tiering import as_bool, task_attempt


def from_json(value: Any, name: str) -> Any:
    """A value that may arrive rendered from a template as JSON text (``| tojson``)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        raise ValueError(f"{name}: expected JSON, got text of {len(value)} characters") from None


#: The erase DAG's two ways: the erasure in the task's own process, or on Spark.
LOCAL_TASK_ID = "erase"
SPARK_TASK_ID = "erase_on_spark"


def erasure_route(params: Mapping[str, Any], key_dir: str | None) -> str:
    """The erase DAG's branch: the task that runs the erasure (``spark`` false: ``erase``, which
    checks the request itself; true: ``erase_on_spark``, ``spark_apps/erase_keys.py``). On Spark the
    keys come only from a key file under ``key_dir``, so that no key travels in spark-submit's argv,
    and the confirmation is checked here, before the submit; a refusal fails without retries."""
    from airflow.sdk.exceptions import AirflowFailException

    if not as_bool(params.get("spark", False), "spark"):
        return LOCAL_TASK_ID
    topic, confirm = params.get("topic"), params.get("confirm")
    if confirm != topic:
        raise AirflowFailException(f"confirm must repeat the topic name {topic!r} (got {confirm!r}); nothing erased")
    if params.get("keys") is not None or not params.get("key_file"):
        raise AirflowFailException(
            "on Spark, give the keys as key_file (a list would travel in spark-submit's argv); nothing erased"
        )
    if key_dir is None:
        raise AirflowFailException(
            "on Spark the keys come from a key file under dags.erase.key_dir, which the config does not set; "
            "nothing erased"
        )
    return SPARK_TASK_ID


class TieringEraseOperator(BaseOperator):
    """Erase every record of some keys from a topic's remote tier and its export tables. The keys
    come either as ``keys`` (a list) or as ``key_file``, a path relative to ``key_dir`` (the config's
    ``dags.erase.key_dir``), written in ``key_encoding``. ``confirm`` must repeat the topic;
    ``plan_only`` names what would be removed and writes nothing. A refusal fails the task without
    retries; a partition that failed fails it after the others ran (the retry takes over its lease).
    The XCom is the erasure's result: keys by SHA-256, never a key."""

    template_fields: Sequence[str] = (
        "topic",
        "keys",
        "key_file",
        "key_encoding",
        "partitions",
        "confirm",
        "plan_only",
        "config_path",
        "aws_conn_id",
    )
    ui_color = "#fbe8e8"

    def __init__(
        self,
        *,
        topic: str,
        confirm: str,
        keys: Sequence[str] | str | None = None,
        key_file: str | None = None,
        key_encoding: str = "utf8",
        partitions: Sequence[int] | str | None = None,
        plan_only: bool | str = True,
        key_dir: str | None = None,
        config_path: str | None = None,
        aws_conn_id: str | None = TieringHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.topic = topic
        self.confirm = confirm
        self.keys = keys
        self.key_file = key_file
        self.key_encoding = key_encoding
        self.partitions = partitions
        self.plan_only = plan_only
        self.key_dir = key_dir
        self.config_path = config_path
        self.aws_conn_id = aws_conn_id

    def request_keys(self) -> frozenset[bytes]:
        """The keys, decoded; ErasureRefusedError when given both ways, neither way, or badly."""
        from tiering_core.errors import TieringError
        from tiering_core.runs.erase_keys import KeyEncoding, decode_keys, key_file_under, read_key_file
        from tiering_core.runs.errors import ErasureRefusedError

        keys, key_file = from_json(self.keys, "keys"), from_json(self.key_file, "key_file")
        encoding = KeyEncoding(self.key_encoding)
        if (keys is None) == (key_file is None):
            raise ErasureRefusedError("give the keys either as keys (a list) or as key_file, not both and not neither")
        if not isinstance(keys, list | None) or keys == []:
            raise ErasureRefusedError("keys: expected a list of at least one key")
        try:
            if key_file is not None:
                return read_key_file(key_file_under(self.key_dir, str(key_file)), encoding)
            return decode_keys([str(k) for k in keys or ()], encoding)
        except ErasureRefusedError:
            raise
        except TieringError as exc:  # a key or a key file that cannot be read: the request is refused
            raise ErasureRefusedError(str(exc)) from exc
        except OSError as exc:
            raise ErasureRefusedError(f"key_file {key_file}: cannot be read: {exc.strerror or exc}") from exc

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowException, AirflowFailException

        from tiering_core.export.erase import erase_topic
        from tiering_core.runs.erase import ErasureRequest
        from tiering_core.runs.erase_report import format_erasure
        from tiering_core.runs.errors import ErasureRefusedError

        if self.confirm != self.topic:
            raise AirflowFailException(
                f"confirm must repeat the topic name {self.topic!r} (got {self.confirm!r}); nothing erased"
            )
        ti = context.get("ti")
        asked_by = f"DAG run {ti.dag_id}/{ti.run_id}" if ti is not None else f"DAG run {context['run_id']}"
        partitions = from_json(self.partitions, "partitions") or []
        try:
            request = ErasureRequest(self.topic, self.request_keys(), tuple(int(p) for p in partitions), asked_by)
            with TieringHook(config_path=self.config_path, aws_conn_id=self.aws_conn_id).get_conn() as ctx:
                result = erase_topic(
                    ctx, request, dry_run=as_bool(self.plan_only, "plan_only"), attempt=task_attempt(context)
                )
        except ErasureRefusedError as exc:
            raise AirflowFailException(str(exc)) from exc
        self.log.info("%s", format_erasure(result))
        if result.failures:
            for failure in result.failures:
                self.log.error("erase failed: %s", failure)
            raise AirflowException(
                f"{len(result.failures)} partition(s) or table(s) failed; the others are erased; "
                "the retry finishes them"
            )
        return result.to_dict()
