"""Where a run's tasks execute: the run decides what to do, an ``Executor`` only where.

A driver (``CopyRun``, the export, rebuild and verify runs) plans on the caller's process, hands
its per-segment or per-partition tasks to an executor and commits what comes back under its
lease, as Kafka's ``RLMTask.run()`` checks once and leaves ``execute()`` to each task. The
in-process executor runs the tasks in this process (one after the other, or on a thread pool);
the Spark apps give the same drivers a Spark executor (``spark_apps/runtime.py``), whose tasks
run on Spark's executors. A task is a plain function of the remote storage and one item: each
executor supplies the storage its workers use (the run's own here, one per Python worker there),
so the task function and its items must pickle for Spark.

Items are pulled from the driver's iterable only as a slot frees up (at most ``slots`` tasks
handed out at a time), so a driver may decide the next item from the outcomes it has seen so far
(the multi-partition copy hands out a partition's next segment only while that partition goes
on); an item's index is its place in that order.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from tiering_core.storage.remote import RemoteStorage

T = TypeVar("T")
R = TypeVar("R")

#: A task: the remote storage the executor supplies, and one item of the run's plan.
Task = Callable[["RemoteStorage", T], R]


@dataclass(frozen=True)
class TaskOutcome(Generic[R]):
    """One item's outcome: its index in the list handed over, and its result or why it has none.

    ``error`` is set when the task itself failed (on Spark: after Spark's own retries; a lost
    executor, an unreadable tier): the driver decides what that means for the item.
    """

    index: int
    result: R | None
    error: str | None = None


class Executor(Protocol):
    """Runs a run's tasks and yields their outcomes as they complete.

    Closing the generator early (``contextlib.closing``: the driver lost its lease, an interrupt)
    cancels what is queued and stops what runs, so an abort never waits for every queued task.
    """

    @property
    def slots(self) -> int:
        """How many tasks run at a time."""
        ...

    def run(
        self,
        items: Iterable[T],
        task: Task[T, R],
        *,
        describe: Callable[[T], str],
        on_wait: Callable[[], None] | None = None,
    ) -> Generator[TaskOutcome[R], None, None]:
        """``task(storage, item)`` for each item, pulled from ``items`` only when a slot is free
        (and in the thread that iterates the outcomes, so an item may be made by the driver's own
        writes, e.g. COPY_SEGMENT_STARTED). ``describe`` names an item (a job description,
        a thread name); ``on_wait`` runs between completions, at least every few seconds (the
        driver renews its lease there)."""
        ...


class InProcessExecutor:
    """This process runs the tasks: in the calling thread (``threads=1``), or on a thread pool.

    A task's exception is not an outcome here: it propagates to the driver at once, as it would
    in a plain loop (the command and the Airflow task fail with it, and the run's recovery picks
    up what was in flight).
    """

    def __init__(self, storage: RemoteStorage, threads: int = 1, *, wait_seconds: float = 5.0) -> None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, not {threads}")
        self.storage = storage
        self.threads = threads
        self.wait_seconds = wait_seconds

    @property
    def slots(self) -> int:
        return self.threads

    def run(
        self,
        items: Iterable[T],
        task: Task[T, R],
        *,
        describe: Callable[[T], str],
        on_wait: Callable[[], None] | None = None,
    ) -> Generator[TaskOutcome[R], None, None]:
        if self.threads == 1:
            return self._serial(items, task, on_wait)
        return self._pooled(items, task, describe, on_wait)

    def _serial(
        self, items: Iterable[T], task: Task[T, R], on_wait: Callable[[], None] | None
    ) -> Generator[TaskOutcome[R], None, None]:
        for index, item in enumerate(items):
            yield TaskOutcome(index, task(self.storage, item))
            if on_wait is not None:
                on_wait()

    def _pooled(
        self,
        items: Iterable[T],
        task: Task[T, R],
        describe: Callable[[T], str],
        on_wait: Callable[[], None] | None,
    ) -> Generator[TaskOutcome[R], None, None]:
        cancelled = threading.Event()

        def one(item: T) -> R:
            if cancelled.is_set():  # queued before the cancel: never started
                raise CancelledTaskError(describe(item))
            return task(self.storage, item)

        pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="tiering-task")
        source = enumerate(items)
        pending: dict[Future[R], int] = {}

        def refill() -> None:
            for index, item in hand_out(source, self.threads - len(pending)):
                pending[pool.submit(one, item)] = index

        try:
            refill()
            while pending:
                done, _ = wait(list(pending), timeout=self.wait_seconds, return_when=FIRST_COMPLETED)
                for future in sorted(done, key=pending.__getitem__):
                    index = pending.pop(future)
                    result = future.result()  # a task's exception propagates
                    refill()  # the freed slot takes the next item before the driver hears of this one
                    yield TaskOutcome(index, result)
                if on_wait is not None:
                    on_wait()
        finally:  # normal end, an exception, or the driver closed us early
            cancelled.set()
            pool.shutdown(wait=True, cancel_futures=True)


def hand_out(source: Iterator[tuple[int, T]], free: int) -> Iterator[tuple[int, T]]:
    """Up to ``free`` of the driver's (index, item) pairs, each pulled only when the caller asks
    for it: the caller submits one before the next is made."""
    return itertools.islice(source, max(0, free))


class CancelledTaskError(Exception):
    """A queued task that the run's abort reached before it started."""
