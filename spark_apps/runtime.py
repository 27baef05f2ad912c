"""What every Spark app shares: arguments, the Spark session, shipping our code, progress lines.

Apps run under ``spark-submit`` (local, standalone, YARN or Kubernetes). The driver imports
``tiering_core`` and ``spark_apps`` as installed packages (``pip install .``); executors import
them from a zip the driver ships with ``addPyFile``, so workers need only the third-party
packages, never this checkout (``spark_apps.bundle``). Segment files are read from the log dir
path, so in a cluster the broker's log dirs must be mounted (read-only) on the executors of the
apps that read them (the bulk upload; ``rebuild_indexes --local``); the others run where the
process serves no broker too, on what the metadata store holds (``run_app``'s ``remote_only``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from spark_apps.bundle import ship_packages
from tiering_core.config import load_config, select_broker
from tiering_core.context import TieringContext
from tiering_core.engine.executor import Task, TaskOutcome, hand_out
from tiering_core.errors import TieringError, one_line
from tiering_core.events import RunEvent
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.report.exit_codes import EXIT_FAILURE, EXIT_INTERRUPTED
from tiering_core.report.lines import event_line
from tiering_core.storage.quota import SplitQuota, capped_copies

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from tiering_core.config import RemoteConfig
    from tiering_core.metadata.store import TaskAttempt
    from tiering_core.storage.quota import TokenBucket
    from tiering_core.storage.remote import RemoteStorage

#: How long an abort waits for cancelled Spark jobs to end before it cleans up around them.
CANCEL_SETTLE_SECONDS = 60.0

DEFAULT_MASTER = "local[*]"
#: The environment variable a scheduled task's spark-submit carries its try in
#: (``TaskAttempt.to_json``; set by ``tiering_airflow.operators.spark``).
TASK_ATTEMPT_ENV = "TIERING_TASK_ATTEMPT"

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


class AppError(TieringError):
    """A Spark app cannot run as asked (bad selector, no config)."""


@dataclass(frozen=True)
class Selection:
    """The partitions an app covers: all, one topic, one partition or an explicit list."""

    topic: str | None = None
    partition: int | None = None
    partitions: tuple[TopicPartition, ...] = ()

    def resolve(self, ctx: TieringContext) -> list[TopicPartition]:
        """The selected partitions in the log dirs; a named partition that is absent is an error."""
        if self.partitions:
            for tp in self.partitions:
                ctx.partitions(tp.topic, tp.partition)  # raises when absent
            return sorted(set(self.partitions))
        return [log.topic_partition for log in ctx.partitions(self.topic, self.partition)]

    def tiered(self, ctx: TieringContext) -> list[TopicIdPartition]:
        """The selected partitions the metadata store holds live remote data of, as a process that
        serves no broker selects them (``TieringContext.tiered_partitions``); a topic or partition
        named that the store holds none of is an error naming it."""
        if not self.partitions:
            return ctx.tiered_partitions(self.topic, self.partition)
        found = {tip for tp in self.partitions for tip in ctx.tiered_partitions(tp.topic, tp.partition)}
        return sorted(found, key=lambda tip: (tip.topic, tip.partition, tip.topic_id))


def _unset(value: str | None) -> bool:
    """Templated arguments (Airflow params) arrive as empty strings when not given."""
    return value is None or value.strip() in ("", "None")


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="platform config file (YAML); default: $TIERING_CONFIG")
    parser.add_argument("--topic", default=None, help="only this topic")
    parser.add_argument("--partition", default=None, help="only this partition (needs --topic)")
    parser.add_argument("--partitions", default=None, help="<topic>-<partition> list: orders-0,orders-3")
    parser.add_argument("--master", default=None, help=f"Spark master when spark-submit sets none ({DEFAULT_MASTER})")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug log on stderr (tracebacks of failures)")


def configure_logging(args: argparse.Namespace) -> None:
    """Warnings (and with ``--verbose`` the debug log, tracebacks included) on stderr."""
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "verbose", False) else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("botocore", "boto3", "urllib3", "s3transfer", "alembic", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def parse_selection(args: argparse.Namespace) -> Selection:
    topic = None if _unset(args.topic) else args.topic.strip()
    partition: int | None = None
    if not _unset(args.partition):
        try:
            partition = int(args.partition)
        except ValueError as exc:
            raise AppError(f"--partition: {args.partition!r} is not a partition number") from exc
    if partition is not None and topic is None:
        raise AppError("--partition needs --topic")
    listed = tuple(
        TopicPartition.from_dir_name(item.strip())
        for item in ("" if _unset(args.partitions) else args.partitions).split(",")
        if item.strip()
    )
    if listed and (topic is not None or partition is not None):
        raise AppError("--partitions cannot be combined with --topic/--partition")
    return Selection(topic, partition, listed)


def config_path(args: argparse.Namespace) -> str:
    path = None if _unset(args.config) else args.config
    path = path or os.environ.get("TIERING_CONFIG")
    if not path:
        raise AppError("no config file: pass --config FILE or set TIERING_CONFIG")
    return str(path)


def spark_session(app_name: str, master: str | None = None) -> SparkSession:
    """The app's session: the master spark-submit chose, else ``--master``, else ``local[*]``."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name).config("spark.ui.showConsoleProgress", "false")
    if master:
        builder = builder.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit
        builder = builder.master(DEFAULT_MASTER)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    ship_packages(spark.sparkContext)
    return spark


def task_attempt() -> TaskAttempt | None:
    """The try of the scheduled task that submitted this app (``TASK_ATTEMPT_ENV``), None when
    none did: its leases are named after its task instance, so its retry takes them over."""
    from tiering_core.metadata.store import TaskAttempt

    raw = os.environ.get(TASK_ATTEMPT_ENV, "").strip()
    if not raw:
        return None
    try:
        return TaskAttempt.from_json(raw)
    except ValueError as exc:
        raise AppError(f"{TASK_ATTEMPT_ENV}: {exc}") from exc


def say(line: str) -> None:
    """A progress line on stdout, flushed so spark-submit and Airflow logs show it at once."""
    print(line, flush=True)


def fail(app: str, reason: str) -> None:
    """A one-line reason on stderr."""
    print(f"{app}: failed: {one_line(reason)}", file=sys.stderr, flush=True)


def report_failure(app: str, exc: BaseException) -> int:
    """The exit code and one line on stderr for an error that ended a run; the traceback goes
    to the debug log (``--verbose``), never to the user's screen."""
    if isinstance(exc, KeyboardInterrupt):
        fail(app, "interrupted")
        return EXIT_INTERRUPTED
    if isinstance(exc, TieringError):
        fail(app, str(exc) or type(exc).__name__)
        return EXIT_FAILURE
    log.debug("%s failed", app, exc_info=exc)
    if isinstance(exc, OSError):  # a file vanished or a disk failed under us: name it
        fail(app, f"{type(exc).__name__}: {exc}")
    else:
        fail(app, f"unexpected {type(exc).__name__}: {spark_failure_reason(exc)} (rerun with -v for the traceback)")
    return EXIT_FAILURE


def say_event(event: RunEvent) -> None:
    """The sink the apps give their runs: each event's line (``event_line``) on stdout."""
    say(event_line(event))


class AppRun:
    """What an app's body works with: its arguments, the run's context, the selected partitions,
    and the Spark session, started when first asked for (so the body can refuse its own arguments
    before Spark starts)."""

    def __init__(
        self,
        app: str,
        args: argparse.Namespace,
        ctx: TieringContext,
        selection: Selection,
        partitions: list[TopicPartition],
        spark: SparkSession | None,
        tiered: list[TopicIdPartition] | None = None,
    ) -> None:
        self.app = app
        self.args = args
        self.ctx = ctx
        self.selection = selection
        self.partitions = partitions
        self.tiered = tiered
        self._spark = spark

    @property
    def selected(self) -> Sequence[TopicPartition | TopicIdPartition]:
        """What a ``remote_only`` app works on: on a broker, the selection in its log dirs
        (``partitions``); where the process serves no broker, the selected partitions the
        metadata store holds, each with its topic id (``tiered``)."""
        return self.partitions if self.tiered is None else self.tiered

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            self._spark = spark_session(f"tiering-{self.app.replace('_', '-')}", self.args.master)
        return self._spark

    @property
    def started_spark(self) -> SparkSession | None:
        """The session, if one was given or started."""
        return self._spark

    def executor(self, *, uploads: bool = False) -> SparkExecutor:
        """The run's executor on this session, ``--parallelism`` tasks at a time (Spark's default
        parallelism when not given); ``uploads``: its tasks upload segments, so they share this
        process's copy quota (``SparkExecutor``)."""
        return SparkExecutor(
            self.spark.sparkContext,
            self.ctx.config.remote,
            getattr(self.args, "parallelism", None),
            copy_quota=self.ctx.storage.quotas.copy if uploads else None,
        )


def run_app(
    app: str,
    argv: Sequence[str] | None,
    spark: SparkSession | None,
    build_parser: Callable[[], argparse.ArgumentParser],
    body: Callable[[AppRun], int],
    *,
    remote_only: bool = False,
    store_selects: bool = False,
) -> int:
    """What every app's ``main`` does: parse ``argv`` with ``build_parser()`` (which adds
    ``add_common_arguments``), log to stderr, read the selection and the config, open the run's
    context, resolve the selected partitions (a bad selector fails before Spark starts), then run
    ``body`` and return its exit code. ``spark``: the session to use (a test's); without it the
    app starts its own (``tiering-<app>``) when the body first needs it, and stops it at the end.
    An error that ends the run is one line on stderr and its exit code (``report_failure``).
    ``remote_only``: the app reads only the remote tier and the metadata store, so where the
    process serves no broker (a cluster's worker without a broker disk) nothing is resolved in
    log dirs: the selection is resolved in the metadata store instead (``AppRun.tiered``, and
    ``AppRun.selected`` either way; ``AppRun.partitions`` is then empty).
    ``store_selects``: the body always selects from the metadata store (the erasure: a topic's tier
    outlives its log dirs), so nothing is resolved in log dirs anywhere."""
    args = build_parser().parse_args(argv)
    configure_logging(args)
    run: AppRun | None = None
    try:
        selection = parse_selection(args)
        config = select_broker(load_config(config_path(args)))  # as ``tiering`` chooses it
        with TieringContext.open(config) as ctx:
            tiered = selection.tiered(ctx) if remote_only and ctx.config.serves_no_broker else None
            partitions = [] if store_selects or tiered is not None else selection.resolve(ctx)
            run = AppRun(app, args, ctx, selection, partitions, spark, tiered)
            return body(run)
    except (Exception, KeyboardInterrupt) as exc:
        return report_failure(app, exc)
    finally:
        own = run.started_spark if run is not None and spark is None else None
        if own is not None:
            own.stop()


def spark_failure_reason(exc: BaseException) -> str:
    """The informative line of a Spark job failure (Py4J wraps it in a long Java trace)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for marker in ("exited unexpectedly", "SparkException:", "Exception:", "Error:"):
        for line in lines:
            if marker in line:
                return line.rsplit("Exception: ", 1)[-1].split(". Consider", 1)[0][:300]
    return (lines[0] if lines else type(exc).__name__)[:300]


_STORAGE: dict[RemoteConfig, RemoteStorage] = {}


def executor_storage(remote: RemoteConfig) -> RemoteStorage:
    """One storage backend per executor Python worker, reused across its tasks."""
    storage = _STORAGE.get(remote)
    if storage is None:
        from tiering_core.storage.factory import create_remote_storage

        storage = _STORAGE[remote] = create_remote_storage(remote)
    return storage


def run_one_job(sc: SparkContext, item: T, fn: Callable[[T], R], description: str) -> R:
    """``fn(item)`` as a one-task Spark job: a lost or killed task fails only this item."""
    sc.setJobDescription(description)
    return sc.parallelize([item], 1).map(fn).collect()[0]


class SparkJobs:
    """One-task Spark jobs submitted from driver threads, ``slots`` at a time.

    Every job carries this runner's job tag, so ``cancel`` drops what is queued and interrupts
    what runs: an abort never waits for every queued job to run first. Use as a context
    manager: leaving it by an exception cancels, leaving it normally waits for the jobs.
    """

    def __init__(self, sc: SparkContext, slots: int, name: str) -> None:
        self.sc = sc
        self.tag = f"tiering-{name}-{uuid.uuid4().hex}"
        self._pool = ThreadPoolExecutor(max_workers=max(1, slots), thread_name_prefix=name)
        self._futures: list[Future[Any]] = []
        self._cancelled = threading.Event()

    def submit(self, item: T, fn: Callable[[T], R], description: str) -> Future[R]:
        future = self._pool.submit(self._run, item, fn, description)
        self._futures.append(future)
        return future

    def _run(self, item: T, fn: Callable[[T], R], description: str) -> R:
        if self._cancelled.is_set():
            raise CancelledError(f"{description}: cancelled before it started")
        self.sc.setInterruptOnCancel(True)
        self.sc.addJobTag(self.tag)
        try:
            return run_one_job(self.sc, item, fn, description)
        finally:
            self.sc.removeJobTag(self.tag)

    def cancel(self, settle_seconds: float = CANCEL_SETTLE_SECONDS) -> None:
        """Drop queued jobs, cancel running ones (their tasks are interrupted), and wait, bounded,
        until the driver has seen every job end. A cancelled task's Python worker may still run
        for a moment after that: work it had begun is for the next run's recovery."""
        self._cancelled.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + settle_seconds
        while True:
            try:
                self.sc.cancelJobsWithTag(self.tag)
            except Exception as exc:  # the context may be gone already; nothing more to stop
                log.warning("could not cancel Spark jobs tagged %s: %s", self.tag, exc)
                return
            running = [f for f in self._futures if not f.done()]
            if not running:
                return
            if time.monotonic() >= deadline:
                log.warning(
                    "%d Spark job(s) still running %.0f s after they were cancelled", len(running), settle_seconds
                )
                return
            wait(running, timeout=0.5)

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def __enter__(self) -> SparkJobs:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.cancel()


def run_jobs(
    sc: SparkContext,
    items: Iterable[T],
    fn: Callable[[T], R],
    *,
    slots: int,
    describe: Callable[[T], str],
    on_wait: Callable[[], None] | None = None,
    wait_seconds: float = 5.0,
) -> Generator[TaskOutcome[Any], None, None]:
    """Each item as its own Spark job, ``slots`` at a time (an item pulled from ``items`` only
    when a slot is free); outcomes as they complete.

    ``on_wait`` runs between completions (and at least every ``wait_seconds``), e.g. to renew
    leases. If the consumer stops early (an exception, or ``close()``), queued jobs are dropped
    and running ones cancelled instead of being waited for.
    """
    source = enumerate(items)
    with SparkJobs(sc, slots, "spark-job") as jobs:
        pending: dict[Future[R], int] = {}

        def refill() -> None:
            for index, item in hand_out(source, slots - len(pending)):
                pending[jobs.submit(item, fn, describe(item))] = index

        refill()
        while pending:
            done, _ = wait(list(pending), timeout=wait_seconds, return_when=FIRST_COMPLETED)
            for future in done:
                index = pending.pop(future)
                exc = future.exception()
                refill()  # the freed slot takes the next item before the driver hears of this one
                if exc is not None:
                    yield TaskOutcome(index, None, f"Spark task failed: {spark_failure_reason(exc)}")
                else:
                    yield TaskOutcome(index, future.result())
            if on_wait is not None:
                on_wait()


class SparkExecutor:
    """The ``Executor`` of ``tiering_core.engine.executor`` on Spark: each item a one-task Spark job,
    ``slots`` at a time, run by Spark's executors against one storage backend per Python worker
    (``executor_storage``). A task that fails after Spark's retries is an outcome with an error,
    never an exception: the driver names the item and goes on, as the in-process runs do for a
    bad segment. ``copy_quota``: the driver's bucket of its broker's copy quota, whose bytes the
    tasks send: its share is split among the slots (``storage.quota.SplitQuota``)."""

    def __init__(
        self, sc: SparkContext, remote: RemoteConfig, slots: int | None = None, *, copy_quota: TokenBucket | None = None
    ) -> None:
        self.sc = sc
        self.remote = remote
        self.slots = slots or max(1, sc.defaultParallelism)
        self.copy_quota = copy_quota

    def run(
        self,
        items: Iterable[T],
        task: Task[T, R],
        *,
        describe: Callable[[T], str],
        on_wait: Callable[[], None] | None = None,
    ) -> Generator[TaskOutcome[R], None, None]:
        remote, split = self.remote, SplitQuota(self.copy_quota, self.slots)

        def on_executor(paced: tuple[T, float | None]) -> R:
            storage = executor_storage(remote)
            with capped_copies(storage, paced[1]):
                return task(storage, paced[0])

        def heartbeat() -> None:
            split.rate()  # the driver stays a holder of the cap while its tasks send
            if on_wait is not None:
                on_wait()

        # closed early: queued jobs dropped, running ones cancelled (``run_jobs``)
        return run_jobs(
            self.sc,
            ((item, split.rate()) for item in items),  # each item's cap read as its slot frees
            on_executor,
            slots=self.slots,
            describe=lambda paced: describe(paced[0]),
            on_wait=heartbeat,
        )
