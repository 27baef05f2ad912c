"""The in-process executor: outcomes for every item, the task's exception raised to the driver,
and an early close that never starts what was queued."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tiering_core.engine.executor import InProcessExecutor, TaskOutcome

STORAGE: Any = object()  # the executor hands its storage to every task untouched


def square(storage: Any, item: int) -> int:
    assert storage is STORAGE
    return item * item


@pytest.mark.parametrize("threads", [1, 3])
def test_every_item_has_its_outcome_by_index(threads: int) -> None:
    waits: list[int] = []
    outcomes = list(
        InProcessExecutor(STORAGE, threads).run(list(range(10)), square, describe=str, on_wait=lambda: waits.append(1))
    )
    assert sorted(o.index for o in outcomes) == list(range(10))
    assert all(o == TaskOutcome(o.index, o.index * o.index) for o in outcomes)
    assert waits  # the driver's lease is renewed between completions


def test_the_serial_executor_runs_in_order_in_the_calling_thread() -> None:
    seen: list[tuple[int, str]] = []

    def record(storage: Any, item: int) -> int:
        seen.append((item, threading.current_thread().name))
        return item

    list(InProcessExecutor(STORAGE).run([3, 1, 2], record, describe=str))
    assert seen == [
        (3, threading.current_thread().name),
        (1, threading.current_thread().name),
        (2, threading.current_thread().name),
    ]


@pytest.mark.parametrize("threads", [1, 2])
def test_a_task_that_raises_ends_the_run_with_its_exception(threads: int) -> None:
    def fail_on_two(storage: Any, item: int) -> int:
        if item == 2:
            raise OSError("segment 2 vanished")
        return item

    with pytest.raises(OSError, match="segment 2 vanished"):
        list(InProcessExecutor(STORAGE, threads).run([0, 1, 2, 3], fail_on_two, describe=str))


def test_closing_the_outcomes_early_never_starts_the_queued_tasks() -> None:
    started: list[int] = []
    release = threading.Event()

    def held(storage: Any, item: int) -> int:
        started.append(item)
        if item:  # all but the first wait until the driver has aborted
            release.wait(timeout=30)
        return item

    outcomes = InProcessExecutor(STORAGE, threads=2, wait_seconds=0.05).run(list(range(20)), held, describe=str)
    first = next(outcomes)
    # The close drops the queue at once, then waits for the one task still running; it is let go
    # only after that (a timer: nothing else to wait on from inside close()).
    threading.Timer(0.5, release.set).start()
    outcomes.close()
    assert first == TaskOutcome(0, 0)
    assert len(started) < 20
    assert sorted(started[:2]) == [0, 1]


def test_threads_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        InProcessExecutor(STORAGE, threads=0)


@pytest.mark.parametrize("threads", [1, 3])
def test_items_are_pulled_only_as_slots_free_up(threads: int) -> None:
    """The driver's items are made when a slot is free, never all at once, so the driver can make
    each from the outcomes it has seen (the multi-partition copy writes COPY_SEGMENT_STARTED as a
    segment goes out); at most ``threads`` items are out before the driver hears of the first."""
    seen = 0
    pulled_after: list[int] = []  # per item: how many outcomes the driver had seen when it was made

    def items() -> Iterator[int]:
        for item in range(10):
            pulled_after.append(seen)
            yield item

    executor = InProcessExecutor(STORAGE, threads, wait_seconds=0.05)
    assert executor.slots == threads
    for _outcome in executor.run(items(), square, describe=str):
        seen += 1
    assert seen == 10
    assert pulled_after[:threads] == [0] * threads
    # the k-th item waits for a free slot: k - threads + 1 tasks ended, all but the last told
    assert all(after >= k - threads for k, after in enumerate(pulled_after))
