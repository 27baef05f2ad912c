"""The eligibility trigger (``tiering_airflow/triggers/tiering.py``): waiting while nothing is
eligible, firing when a segment rolls, polling off the event loop, and reporting a broken or hung
check as an error event (the sensor that defers to it: sensors/test_tiering.py)."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from typing import Any

import pytest

from tests.engine_support import TieringEnv, wait_until, write_segments
from tiering_airflow.hooks.tiering import Eligibility, TieringHook
from tiering_airflow.triggers.tiering import EligibleSegmentTrigger


def first_event(trigger: EligibleSegmentTrigger, within: float) -> Any:
    """The trigger's first event, or asyncio.TimeoutError if none comes ``within`` seconds."""

    async def run() -> Any:
        events = trigger.run()
        try:
            return await asyncio.wait_for(events.__anext__(), within)
        finally:
            await events.aclose()

    return asyncio.run(run())


def only_active_segment(tiering: TieringEnv):  # type: ignore[no-untyped-def]
    w = tiering.writer("orders", 0)
    w.append_records(5)  # the active segment is never eligible
    w.set_high_watermark()
    return w


def test_trigger_waits_then_fires_when_a_segment_rolls(tiering: TieringEnv) -> None:
    w = only_active_segment(tiering)
    trigger = EligibleSegmentTrigger(topic="orders", config_path=str(tiering.config_path), poll_interval=0.1)
    with pytest.raises(asyncio.TimeoutError):
        first_event(trigger, 1.0)  # ~10 polls, no event
    w.roll()
    w.append_records(1)
    w.set_high_watermark()
    event = first_event(trigger, 60.0)
    assert event.payload == {
        "status": "eligible",
        "topic": "orders",
        "partitions": [0],
        "plan": [["orders", [0]]],
        "skipped": [],
    }


def test_trigger_serializes_to_an_importable_class_path(tiering: TieringEnv) -> None:
    from airflow._shared.module_loading import import_string

    trigger = EligibleSegmentTrigger(topic="orders", config_path="/etc/t.yaml", aws_conn_id="s3", poll_interval=5)
    classpath, kwargs = trigger.serialize()
    assert classpath == "tiering_airflow.triggers.tiering.EligibleSegmentTrigger"
    assert import_string(classpath) is EligibleSegmentTrigger
    assert kwargs == {
        "topic": "orders",
        "config_path": "/etc/t.yaml",
        "aws_conn_id": "s3",
        "poll_interval": 5,
        "poll_timeout": 300.0,
    }
    assert EligibleSegmentTrigger(**kwargs).serialize() == (classpath, kwargs)


def test_trigger_polls_off_the_event_loop(tiering: TieringEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow check (a slow metadata store, injected here) must not stall the triggerer's loop:
    each check ends only once the loop has ticked meanwhile, which it could not if the check ran
    on the loop; with nothing eligible, the trigger polls again without an event."""
    only_active_segment(tiering)
    check = TieringHook.eligibility
    threads: set[int] = set()
    ticks = 0
    checks_done = 0

    def slow_check(self: TieringHook, topic: str, *args: Any, **kwargs: Any) -> Eligibility:
        nonlocal checks_done
        threads.add(threading.get_ident())
        started = ticks
        wait_until(lambda: ticks >= started + 5, what="the event loop to tick while a check runs")
        found = check(self, topic, *args, **kwargs)
        checks_done += 1
        return found

    monkeypatch.setattr(TieringHook, "eligibility", slow_check)
    trigger = EligibleSegmentTrigger(topic="orders", config_path=str(tiering.config_path), poll_interval=0.05)

    async def run() -> bool:
        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        tick_task = asyncio.create_task(ticker())
        events = trigger.run()
        first = asyncio.ensure_future(events.__anext__())
        while checks_done < 2 and not first.done():  # a whole check, then the next poll's
            await asyncio.sleep(0.01)
        fired = first.done()
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        await events.aclose()
        tick_task.cancel()
        return fired

    assert asyncio.run(run()) is False  # two checks went by and nothing was eligible: no event
    assert threads and threading.get_ident() not in threads
    assert checks_done >= 2


def test_trigger_reports_a_broken_check_as_an_error_event(tiering: TieringEnv) -> None:
    trigger = EligibleSegmentTrigger(topic="orders", config_path=str(tiering.root / "absent.yaml"), poll_interval=1)
    event = first_event(trigger, 60.0)
    assert event.payload["status"] == "error" and "cannot read config file" in event.payload["message"]


def test_trigger_for_the_default_topics_fires_with_partition_labels(tiering: TieringEnv) -> None:
    """``topic="*"``: every topic the config does not name (here all of them), labelled."""
    waiting = tiering.writer("audit", 1)
    waiting.append_records(3)
    waiting.set_high_watermark()
    trigger = EligibleSegmentTrigger(topic="*", config_path=str(tiering.config_path), poll_interval=0.1)
    with pytest.raises(asyncio.TimeoutError):
        first_event(trigger, 0.5)
    waiting.roll()
    waiting.set_high_watermark()
    event = first_event(trigger, 60.0)
    assert event.payload == {
        "status": "eligible",
        "topic": "*",
        "partitions": ["audit-1"],
        "plan": [["audit", [1]]],
        "skipped": [],
    }


def test_a_poll_that_hangs_ends_the_wait_with_an_error_event(
    tiering: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log dir on a mount that stops answering (injected: a check that never returns) must not
    hold the trigger forever: the poll's time limit turns it into an error event."""
    released = threading.Event()

    def hung_check(self: TieringHook, topic: str, *args: Any, **kwargs: Any) -> Eligibility:
        released.wait(30)
        return Eligibility([])

    monkeypatch.setattr(TieringHook, "eligibility", hung_check)
    trigger = EligibleSegmentTrigger(
        topic="orders", config_path=str(tiering.config_path), poll_interval=0.05, poll_timeout=0.5
    )

    async def run() -> tuple[Any, float]:
        events = trigger.run()
        started = time.monotonic()
        try:
            event = await asyncio.wait_for(events.__anext__(), 10.0)
            return event, time.monotonic() - started
        finally:
            released.set()  # the hung read ends, so the loop's executor can shut down
            await events.aclose()

    event, waited = asyncio.run(run())
    assert waited < 5
    assert event.payload["status"] == "error" and "did not finish within" in event.payload["message"]
    assert "does not answer" in event.payload["message"]
    assert trigger.serialize()[1]["poll_timeout"] == 0.5


def test_cancelling_the_trigger_always_lands_even_as_a_poll_finishes(tiering: TieringEnv) -> None:
    """The triggerer cancels a trigger whose task is gone. A cancellation arriving just as a poll
    returns must still end the trigger, not be swallowed into another round of polling."""
    only_active_segment(tiering)

    stop = threading.Event()

    class QuickPolls(EligibleSegmentTrigger):
        def eligible_partitions(self) -> list[int] | list[str]:
            if stop.is_set():  # ends a trigger that swallowed its cancellation, so the test can fail
                raise RuntimeError("stopped")
            return []

    async def cancel_many() -> int:
        landed = 0
        for attempt in range(300):
            trigger = QuickPolls(topic="orders", config_path=str(tiering.config_path), poll_interval=0)
            events = trigger.run()
            task = asyncio.ensure_future(events.__anext__())
            await asyncio.sleep(0.0005 * (attempt % 7))
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=5)
            if not done:
                stop.set()
                await task
                pytest.fail(f"cancellation {attempt} was swallowed: the trigger kept polling")
            landed += task.cancelled()
        return landed

    assert asyncio.run(cancel_many()) == 300


def test_the_trigger_waits_for_a_delayed_upload_and_logs_why(
    tiering: TieringEnv, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """A closed segment below the LSO that ``remote.copy.lag.bytes`` holds back (KIP-1241) is not
    eligible: the trigger keeps waiting, each poll logging why; the lag met, it fires."""
    import logging

    w = tiering.writer("orders", 0)
    write_segments(w, 1)
    w.append_records(1)
    w.set_high_watermark()
    active = sum(p.stat().st_size for p in w.path.glob("*.log")) - w.path.joinpath(f"{0:020d}.log").stat().st_size
    tiering.write_config(orders={"remote.copy.lag.ms": -1, "remote.copy.lag.bytes": active + 1})
    trigger = EligibleSegmentTrigger(topic="orders", config_path=str(tiering.config_path), poll_interval=0.1)
    with caplog.at_level(logging.INFO), pytest.raises(asyncio.TimeoutError):
        first_event(trigger, 1.0)
    logs = caplog.text + "".join(capfd.readouterr())
    assert re.search(r"orders-0: waiting: 1 segment\(s\) from 0 .*remote\.copy\.lag\.ms not applied", logs), logs
    assert f"after it of remote.copy.lag.bytes {active + 1} B" in logs
    tiering.write_config(orders={"remote.copy.lag.ms": -1, "remote.copy.lag.bytes": active})
    event = first_event(trigger, 60.0)
    assert event.payload == {
        "status": "eligible",
        "topic": "orders",
        "partitions": [0],
        "plan": [["orders", [0]]],
        "skipped": [],
    }
