"""Thin operators: one copy, retention or removal run for one partition, over ``tiering_core``.

Each returns the core's result (``to_dict()``) to XCom. Heavy modules are imported inside
``execute`` so that DAG files using these operators parse fast.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from plugins.hooks.tiering import TieringHook

if TYPE_CHECKING:
    from tiering_core.kafka.topic import TopicPartition


def as_bool(value: bool | str, name: str) -> bool:
    """A flag that may arrive rendered from a template as text ("True", "false")."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"{name}: expected true or false, got {value!r}")


class TieringPartitionOperator(BaseOperator):
    """Common arguments: the partition, the config path and the ``aws`` connection.

    ``plan_only`` is the core's ``dry_run`` (``BaseOperator.dry_run`` is a method already).
    """

    template_fields: Sequence[str] = ("topic", "partition", "config_path", "aws_conn_id", "plan_only")
    ui_color = "#e8f1fb"

    def __init__(
        self,
        *,
        topic: str,
        partition: int | str,
        config_path: str | None = None,
        aws_conn_id: str | None = TieringHook.default_conn_name,
        plan_only: bool | str = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.topic = topic
        self.partition = partition
        self.config_path = config_path
        self.aws_conn_id = aws_conn_id
        self.plan_only = plan_only

    def hook(self) -> TieringHook:
        return TieringHook(config_path=self.config_path, aws_conn_id=self.aws_conn_id)

    def topic_partition(self) -> TopicPartition:
        from tiering_core.kafka.topic import TopicPartition

        return TopicPartition(self.topic, int(self.partition))

    def is_plan_only(self) -> bool:
        return as_bool(self.plan_only, "plan_only")


class TieringCopyOperator(TieringPartitionOperator):
    """Copy every eligible segment of one partition; a tiering gap fails the task without retries."""

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowFailException

        from tiering_core.copy import CopyResult, run_copy
        from tiering_core.errors import TieringGapError

        tp = self.topic_partition()
        with self.hook().get_conn() as ctx:
            try:
                result = run_copy(
                    ctx, tp, dry_run=self.is_plan_only(), run_id=context["run_id"], progress=self.log.info
                )
            except TieringGapError as exc:
                # What remained was copied; the gap is permanent, so retrying would only hide it.
                if isinstance(exc.result, CopyResult):
                    context["ti"].xcom_push(key="return_value", value=exc.result.to_dict())
                raise AirflowFailException(f"{tp}: {exc}") from exc
        if result.fenced:
            self.log.warning("%s: another run holds the partition; the next scheduled run catches up", tp)
        return result.to_dict()


class TieringRetentionOperator(TieringPartitionOperator):
    """Delete the remote segments of one partition that breach its retention."""

    def execute(self, context: Any) -> dict[str, Any]:
        from tiering_core.retention import run_retention

        tp = self.topic_partition()
        with self.hook().get_conn() as ctx:
            result = run_retention(ctx, tp, dry_run=self.is_plan_only(), run_id=context["run_id"])
        if result.fenced:
            self.log.warning("%s: another run holds the partition; the next scheduled run catches up", tp)
        return result.to_dict()


class TieringDeletePartitionOperator(TieringPartitionOperator):
    """Delete the remote data of one removed partition (resumable: run it again after a failure).

    ``topic_ids=None`` removes what the core removes by default (topic ids no longer in the
    broker's log dirs); a list removes exactly those topic ids, as checked beforehand (the
    removal DAG's validation), and reports them as one result.
    """

    def __init__(self, *, topic_ids: Sequence[str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.topic_ids = topic_ids

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowException

        from tiering_core.removal import RemovalResult, delete_partition

        tp = self.topic_partition()
        dry_run, run_id = self.is_plan_only(), context["run_id"]
        with self.hook().get_conn() as ctx:
            if self.topic_ids is None:
                results = [delete_partition(ctx, tp, dry_run=dry_run, run_id=run_id)]
            else:
                results = [
                    delete_partition(ctx, tp, topic_id=topic_id, dry_run=dry_run, run_id=run_id)
                    for topic_id in self.topic_ids
                ]
        result = combined(RemovalResult(topic=tp.topic, partition=tp.partition, dry_run=dry_run), results)
        if result["fenced"]:
            raise AirflowException(f"{tp}: another run holds the partition; removal resumes on retry")
        return result


def combined(empty: Any, results: Sequence[Any]) -> dict[str, Any]:
    """One partition's removal results (one per topic id) as one: counts and lists added up, fenced
    if any was, the state of the least advanced. ``empty`` is the result of removing nothing."""
    if len(results) == 1:
        return dict(results[0].to_dict())
    total: dict[str, Any] = empty.to_dict()
    states = []
    for result in results:
        for key, value in result.to_dict().items():
            if key == "state":
                states.append(value)
            elif isinstance(value, bool):
                total[key] = total[key] or value
            elif isinstance(value, int | float | list) and key not in ("partition",):
                total[key] = total[key] + value
    finished = [s for s in states if s == "DELETE_PARTITION_FINISHED"]
    total["state"] = next((s for s in states if s != "DELETE_PARTITION_FINISHED"), finished[0] if finished else None)
    if "seconds" in total:
        total["seconds"] = round(total["seconds"], 3)
    return total
