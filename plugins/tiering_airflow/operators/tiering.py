"""Thin operators: one copy, retention, removal or DeleteRecords run for one partition, or a
lane's copy or retention run over its share of a broker's partitions, over ``tiering_core``.
Each returns the core's result (``to_dict()``) to XCom. Heavy modules are imported when a task
runs, so that DAG files using these operators parse fast.

``broker_id`` names the broker whose log dirs the task reads (the cluster form's DAGs give each
task its broker's id and queue); the run records its observations under that id. A broker id
the config does not have fails the task at once, without retries: no retry can find that disk.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from airflow.sdk import BaseOperator

from tiering_airflow.hooks.tiering import TieringHook, broker_config, broker_hook, observing_broker, task_partitions

if TYPE_CHECKING:
    from tiering_core.config import PlatformConfig
    from tiering_core.context import TieringContext
    from tiering_core.events import RunEvent
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.metadata.store import TaskAttempt
    from tiering_core.runs.copy_report import CopyResult, ParallelCopyReport
    from tiering_core.runs.lanes import LaneRun, RetentionLaneReport
    from tiering_core.runs.retention import RetentionResult

    #: What a partition's scheduled run returns.
    ScheduledResult = CopyResult | RetentionResult

#: What a lane's run returns: ``runs.lanes``' report of a copy or a retention lane.
LaneReport = TypeVar("LaneReport")


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


def task_attempt(context: Any) -> TaskAttempt | None:
    """This try of the running task instance: a retry takes over the partition lease its killed
    previous try left, instead of failing until the lease expires. None outside a task run."""
    from tiering_core.metadata.store import TaskAttempt

    ti = context.get("ti")
    if ti is None:
        return None
    map_index = ti.map_index
    return TaskAttempt(
        dag_id=ti.dag_id,
        run_id=ti.run_id,
        task_id=ti.task_id,
        map_index=-1 if map_index is None else int(map_index),
        try_number=int(ti.try_number),
    )


class TieringBrokerOperator(BaseOperator):
    """What every task on one broker's log dirs takes: the config path, the ``aws`` connection and
    the broker (``broker_id`` None: this worker's, ``TIERING_BROKER_ID`` or the only one configured)."""

    template_fields: Sequence[str] = ("config_path", "aws_conn_id", "broker_id")
    ui_color = "#e8f1fb"

    def __init__(
        self,
        *,
        config_path: str | None = None,
        aws_conn_id: str | None = TieringHook.default_conn_name,
        broker_id: int | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.config_path = config_path
        self.aws_conn_id = aws_conn_id
        self.broker_id = broker_id

    def hook(self) -> TieringHook:
        return broker_hook(self.broker_id, config_path=self.config_path, aws_conn_id=self.aws_conn_id)


class TieringPartitionOperator(TieringBrokerOperator):
    """Common arguments: the partition, its broker, the config path and the ``aws`` connection.

    ``plan_only`` is the core's ``dry_run`` (``BaseOperator.dry_run`` is a method already).
    """

    template_fields: Sequence[str] = ("topic", "partition", "config_path", "aws_conn_id", "plan_only", "broker_id")

    def __init__(self, *, topic: str, partition: int | str, plan_only: bool | str = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.topic = topic
        self.partition = partition
        self.plan_only = plan_only

    def broker_config(self, hook: TieringHook) -> PlatformConfig:
        """The config of the task's broker; a broker the config does not have fails the task now."""
        return broker_config(hook)

    def topic_partition(self) -> TopicPartition:
        from tiering_core.kafka.topic import TopicPartition

        return TopicPartition(self.topic, int(self.partition))

    def is_plan_only(self) -> bool:
        return as_bool(self.plan_only, "plan_only")


class TieringScheduledOperator(TieringPartitionOperator):
    """One partition's scheduled run, copy or retention (Kafka's RLM copy and expiration tasks):
    ``run_partition`` on the task's broker, the result to XCom; a partition another run holds is a warning,
    since the next scheduled run catches up."""

    @abstractmethod
    def run_partition(self, context: Any, ctx: TieringContext, tp: TopicPartition, **arguments: Any) -> ScheduledResult:
        """The core's run of the partition with the arguments both runs take."""

    def execute(self, context: Any) -> dict[str, Any]:
        tp = self.topic_partition()
        hook = self.hook()
        config = self.broker_config(hook)
        with hook.get_conn(config) as ctx:
            result = self.run_partition(
                context,
                ctx,
                tp,
                dry_run=self.is_plan_only(),
                run_id=context["run_id"],
                attempt=task_attempt(context),
                broker_id=observing_broker(config),
            )
        if result.fenced:
            self.log.warning("%s: another run holds the partition; the next scheduled run catches up", tp)
        return result.to_dict()


class TieringCopyOperator(TieringScheduledOperator):
    """Copy every eligible segment of one partition; a tiering gap fails the task without retries."""

    def run_partition(self, context: Any, ctx: TieringContext, tp: TopicPartition, **arguments: Any) -> ScheduledResult:
        from airflow.sdk.exceptions import AirflowFailException

        from tiering_core.errors import TieringGapError
        from tiering_core.report.lines import event_line
        from tiering_core.runs.copy import run_copy
        from tiering_core.runs.copy_report import CopyResult

        try:
            return run_copy(ctx, tp, events=lambda event: self.log.info("%s", event_line(event)), **arguments)
        except TieringGapError as exc:
            # What remained was copied; the gap is permanent, so retrying would only hide it.
            if isinstance(exc.result, CopyResult):
                context["ti"].xcom_push(key="return_value", value=exc.result.to_dict())
            raise AirflowFailException(f"{tp}: {exc}") from exc


class TieringRetentionOperator(TieringScheduledOperator):
    """Delete the remote segments of one partition that breach its retention."""

    def run_partition(self, context: Any, ctx: TieringContext, tp: TopicPartition, **arguments: Any) -> ScheduledResult:
        from tiering_core.runs.retention import run_retention

        return run_retention(ctx, tp, **arguments)


class TieringLaneOperator(TieringBrokerOperator, Generic[LaneReport]):
    """A lane of a scheduled run (``runs.lanes``): ``partitions`` are ``[topic, partition]`` pairs
    in the order the listing task chose (its XCom, so a retry works the same share), ``lane`` the
    label the grid shows. The log holds one line per partition; the XCom, a result per partition
    (``to_dict()`` with its ``outcome`` and ``detail``). A subclass names its lane's run
    (``run_lane``), its time budget under ``copy:`` (``budget_key``) and its failures (``problems``)."""

    #: The key under ``copy:`` of the lane's time budget in seconds.
    budget_key = "budget_seconds"

    def __init__(self, *, partitions: Sequence[Sequence[Any]], lane: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.partitions = partitions
        self.lane = lane

    def topic_partitions(self) -> list[TopicPartition]:
        """The lane's partitions; a malformed list fails the task without retries."""
        from airflow.sdk.exceptions import AirflowFailException

        from tiering_core.errors import InvalidTopicError
        from tiering_core.runs.lanes import lane_partitions

        try:
            return lane_partitions(self.partitions)
        except (ValueError, TypeError, InvalidTopicError) as exc:
            raise AirflowFailException(f"lane {self.lane}: {exc}") from exc

    def tell(self, event: RunEvent) -> None:
        """A partition's outcome and the lane's summary in the log; a run's other events at debug."""
        from tiering_core.events.copy import ParallelUploadFinished, PartitionCopyOutcome
        from tiering_core.events.retention import PartitionRetentionOutcome
        from tiering_core.report.lines import event_line

        outcome = isinstance(event, (PartitionCopyOutcome, PartitionRetentionOutcome, ParallelUploadFinished))
        self.log.log(logging.INFO if outcome else logging.DEBUG, "%s", event_line(event))

    def working(self, context: Any) -> AbstractContextManager[Any]:
        """What surrounds the lane's run while it works (nothing unless a subclass says)."""
        return nullcontext()

    @abstractmethod
    def run_lane(self, ctx: TieringContext, partitions: list[TopicPartition], run: LaneRun) -> LaneReport:
        """The core's lane (``runs.lanes``) over ``partitions``."""

    @abstractmethod
    def problems(self, report: LaneReport) -> tuple[int, list[str]]:
        """How many partitions have a tiering gap, and why the failed ones failed."""

    def execute(self, context: Any) -> list[dict[str, Any]]:
        from tiering_core.runs.lanes import LaneRun

        tps = self.topic_partitions()
        hook = self.hook()
        config = broker_config(hook)
        with self.working(context), hook.get_conn(config) as ctx:
            budget = getattr(config.copy, self.budget_key)
            run = LaneRun(context["run_id"], budget, task_attempt(context), observing_broker(config), self.tell)
            report = self.run_lane(ctx, tps, run)
        results = results_of(report)
        self.finish(context, results, *self.problems(report))
        return results

    def finish(self, context: Any, results: list[dict[str, Any]], gaps: int, failures: list[str]) -> None:
        """Fail the lane after every partition ran: a tiering gap without retries (permanent),
        another failure with them; the results go to XCom either way."""
        from airflow.sdk.exceptions import AirflowException, AirflowFailException

        if not gaps and not failures:
            return
        context["ti"].xcom_push(key="return_value", value=results)
        problems = [r for r in results if r["outcome"] in ("gap", "failed")]
        summary = "; ".join(f"{r['topic']}-{r['partition']}: {r['detail']}" for r in problems[:5])
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        message = f"lane {self.lane}: {len(problems)} of {len(results)} partition(s) failed: {summary}{more}"
        if gaps:
            raise AirflowFailException(message)
        raise AirflowException(message)


def results_of(report: Any) -> list[dict[str, Any]]:
    """A lane report's XCom: each partition's result with its outcome and why."""
    results = []
    for result in report.results:
        outcome = report.outcome(result)
        results.append({**result.to_dict(), "outcome": outcome.outcome, "detail": outcome.detail})
    return results


class TieringCopyLaneOperator(TieringLaneOperator["ParallelCopyReport"]):
    """Copy a lane's partitions, most urgent first, on ``copy.concurrency`` threads within
    ``copy.budget_seconds`` (what the budget leaves is the next run's); a tiering gap fails the
    lane without retries once the other partitions ran. What ended so far is in the XCom while it
    works and once it is stopped (``operators.progress``); ``on_kill`` ends the budget at once."""

    PROGRESS_SECONDS = 10.0  # how often, at most, the results so far are pushed while it works

    def working(self, context: Any) -> AbstractContextManager[Any]:
        from tiering_airflow.operators.progress import LaneProgress

        self.progress = LaneProgress(context, self.tell, results_of, self.PROGRESS_SECONDS)
        return self.progress

    def run_lane(self, ctx: TieringContext, partitions: list[TopicPartition], run: LaneRun) -> ParallelCopyReport:
        from tiering_core.runs.lanes import copy_lane

        return copy_lane(ctx, partitions, replace(run, clock=self.progress.clock), report=self.progress.report)

    def problems(self, report: ParallelCopyReport) -> tuple[int, list[str]]:
        return len(report.gaps), report.failures

    def on_kill(self) -> None:
        if getattr(self, "progress", None) is not None:
            self.log.warning("lane %s: the task is being killed; nothing new starts", self.lane)
            self.progress.killed = True


class TieringRetentionLaneOperator(TieringLaneOperator["RetentionLaneReport"]):
    """Delete what breaches retention for each of a lane's partitions within
    ``copy.retention_budget_seconds``; a failed partition fails the lane after the others ran."""

    budget_key = "retention_budget_seconds"

    def run_lane(self, ctx: TieringContext, partitions: list[TopicPartition], run: LaneRun) -> RetentionLaneReport:
        from tiering_core.runs.lanes import retention_lane

        return retention_lane(ctx, partitions, run)

    def problems(self, report: RetentionLaneReport) -> tuple[int, list[str]]:
        return 0, list(report.failures.values())


class TieringDeletePartitionOperator(TieringPartitionOperator):
    """Delete the remote data of one removed partition (resumable: run it again after a failure).

    ``topic_ids=None`` removes what the core removes by default (topic ids no longer in the
    broker's log dirs); a list removes exactly those topic ids, as checked beforehand (the
    removal DAG's validation), and reports them as one result. Either way the core asks for the
    controller's word that each was deleted again, unless ``force``.
    """

    def __init__(self, *, topic_ids: Sequence[str] | None = None, force: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.topic_ids = topic_ids
        self.force = force

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowException

        from tiering_core.runs.removal import delete_partition

        tp = self.topic_partition()
        with self.hook().get_conn() as ctx:
            result = delete_partition(
                ctx,
                tp,
                topic_ids=self.topic_ids,
                force=bool(self.force),
                dry_run=self.is_plan_only(),
                run_id=context["run_id"],
                attempt=task_attempt(context),
            )
        if result.fenced:
            raise AirflowException(f"{tp}: another run holds the partition; removal resumes on retry")
        return result.to_dict()


class TieringDeleteRecordsOperator(TieringPartitionOperator):
    """Apply a DeleteRecords to one partition through the platform: the remote tier and, with a
    ``kafka:`` section, the cluster (``runs.delete_records``). ``confirm`` must repeat the topic;
    ``plan_only`` checks the request and applies nothing. A refusal fails the task without
    retries; a partition held by another run or a cluster that does not answer is retried (the
    DeleteRecords is idempotent)."""

    template_fields: Sequence[str] = (*TieringPartitionOperator.template_fields, "before_offset", "confirm")

    def __init__(self, *, before_offset: int | str, confirm: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.before_offset = before_offset
        self.confirm = confirm

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowException, AirflowFailException

        from tiering_core.metadata.errors import LeaseHeldError
        from tiering_core.runs.delete_records import apply_delete_records
        from tiering_core.runs.errors import DeleteRecordsRefusedError

        if self.confirm != self.topic:
            raise AirflowFailException(
                f"confirm must repeat the topic name {self.topic!r} (got {self.confirm!r}); nothing applied"
            )
        tp = self.topic_partition()
        hook = self.hook()
        with hook.get_conn(self.broker_config(hook)) as ctx:
            try:
                result = apply_delete_records(
                    ctx,
                    tp,
                    int(self.before_offset),
                    dry_run=self.is_plan_only(),
                    run_id=context["run_id"],
                    attempt=task_attempt(context),
                )
            except DeleteRecordsRefusedError as exc:
                raise AirflowFailException(str(exc)) from exc
            except LeaseHeldError as exc:
                raise AirflowException(str(exc)) from exc
        self.log.info(
            "%s: log start offset %s%s",
            tp,
            result.log_start_offset,
            " (dry run: nothing applied)" if result.dry_run else "",
        )
        return result.to_dict()


class TieringRewriteOperator(TieringBrokerOperator):
    """Re-encode a topic's remote segments (or one partition's) in the current ``remote:`` format
    (``runs.rewrite``): a key rotation or a compression backfill. ``partition`` None (or rendered
    "None") covers every one of the topic in the log dirs (on a worker serving no broker: the store's,
    ``task_partitions``). One held by another run, or a passing fault, fails the task; its retry resumes."""

    template_fields: Sequence[str] = ("topic", "partition", "config_path", "aws_conn_id", "broker_id")

    def __init__(self, *, topic: str, partition: int | str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.topic = topic
        self.partition = partition

    def execute(self, context: Any) -> list[dict[str, Any]]:
        from tiering_core.report.summaries import format_rewrite
        from tiering_core.runs.rewrite import run_rewrite

        partition = None if self.partition in (None, "", "None") else int(str(self.partition))
        hook = self.hook()
        results = []
        with hook.get_conn(broker_config(hook)) as ctx:
            for selected in task_partitions(ctx, self.topic, partition):
                result = run_rewrite(ctx, selected, run_id=context["run_id"], attempt=task_attempt(context))
                self.log.info("%s", format_rewrite([result]))
                results.append(result.to_dict())
        return results


class TieringReplayOperator(BaseOperator):
    """Replay a lane's source partitions into a Kafka topic (``tiering_core.replay``): ``request``
    is the planning task's validated request (its fields as ``ReplayRequest.to_dict`` gives them),
    ``partitions`` the lane's ``[topic, partition]`` pairs. The XCom is one result per partition.
    A partition that failed fails the task after the others ran, with retries (a retry resumes
    where the target says it stopped: exactly once); offsets the tier cannot replay fail it
    without retries, after the rest was replayed."""

    template_fields: Sequence[str] = ("config_path", "aws_conn_id")
    ui_color = "#eef7e8"

    def __init__(
        self,
        *,
        partitions: Sequence[Sequence[Any]],
        lane: str,
        request: dict[str, Any],
        config_path: str | None = None,
        aws_conn_id: str | None = TieringHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.partitions = partitions
        self.lane = lane
        self.request = request
        self.config_path = config_path
        self.aws_conn_id = aws_conn_id

    def tell(self, event: RunEvent) -> None:
        from tiering_core.report.lines import event_line

        self.log.info("%s", event_line(event))

    def execute(self, context: Any) -> list[dict[str, Any]]:
        from airflow.sdk.exceptions import AirflowException, AirflowFailException

        from tiering_core.errors import TieringError
        from tiering_core.replay import ReplayRequest, replay
        from tiering_core.replay.target import replay_cluster
        from tiering_core.runs.lanes import lane_partitions

        try:
            if self.request.get("bootstrap_servers") is not None:  # planned before targets were named
                raise TieringError("bootstrap_servers: not taken; name a target of the config's replay.targets")
            tps = lane_partitions(self.partitions)
            request = ReplayRequest.from_dict({**self.request, "partitions": [tp.partition for tp in tps]})
        except (ValueError, TypeError, TieringError) as exc:
            raise AirflowFailException(f"lane {self.lane}: {exc}") from exc
        hook = TieringHook(config_path=self.config_path, aws_conn_id=self.aws_conn_id)
        attempt = task_attempt(context)
        with hook.get_conn() as ctx:
            kafka = replay_cluster(ctx.config, self.request.get("target"))
            run = None if attempt is None else attempt.holder("replay")
            result = replay(ctx, request, kafka, events=self.tell, run=run)
        results = [p.to_dict() for p in result.partitions]
        problems = [p for p in result.partitions if not p.ok]
        if problems:
            context["ti"].xcom_push(key="return_value", value=results)
            summary = "; ".join(f"{p.topic}-{p.partition} {p.outcome}: {p.detail}" for p in problems[:5])
            failed = f"{len(problems)} of {len(results)} partition(s) failed"
            raise AirflowException(f"lane {self.lane}: {failed}: {summary}")
        if result.has_gaps:
            context["ti"].xcom_push(key="return_value", value=results)
            gaps = "; ".join(
                f"{p.topic}-{p.partition} offsets {g.start}-{g.end} ({why})"
                for p in result.partitions
                for g, why in p.gaps
            )
            raise AirflowFailException(f"lane {self.lane}: replayed what the tier holds; not replayed: {gaps}")
        return results
