"""The eligibility sensor (``tiering_airflow/sensors/tiering.py``): deferred to its trigger while
nothing is eligible, poking in reschedule mode otherwise, and failing (not skipping) when the check
itself breaks."""

from __future__ import annotations

import re

import pytest

from tests.engine_support import TieringEnv, write_segments
from tests.tiering_airflow.triggers.test_tiering import only_active_segment
from tiering_airflow.sensors.tiering import EligibilityCheckError, EligibleSegmentSensor
from tiering_airflow.triggers.tiering import EligibleSegmentTrigger


def test_deferrable_sensor_defers_when_nothing_is_eligible_and_returns_when_something_is(
    tiering: TieringEnv,
) -> None:
    from airflow.sdk.exceptions import TaskDeferred

    w = only_active_segment(tiering)
    sensor = EligibleSegmentSensor(task_id="wait", topic="orders", poke_interval=7, timeout=300, aws_conn_id=None)
    assert sensor.poke({}).is_done is False
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    trigger = deferred.value.trigger
    assert isinstance(trigger, EligibleSegmentTrigger)
    assert (trigger.topic, trigger.config_path, trigger.poll_interval) == ("orders", str(tiering.config_path), 7)
    assert deferred.value.method_name == "execute_complete" and deferred.value.timeout.total_seconds() == 300
    w.roll()
    w.set_high_watermark()
    assert sensor.execute({}) == [0]  # eligible now: returns without deferring
    assert sensor.execute_complete({}, {"status": "eligible", "topic": "orders", "partitions": [0]}) == [0]


def test_a_broken_check_fails_the_sensor_even_with_soft_fail(tiering: TieringEnv) -> None:
    sensor = EligibleSegmentSensor(task_id="wait", topic="orders", soft_fail=True)
    with pytest.raises(EligibilityCheckError, match="cannot read config file"):
        sensor.resume_execution(
            "execute_complete",
            {"event": {"status": "error", "topic": "orders", "message": "ConfigError: cannot read config file"}},
            {},
        )


def test_non_deferrable_sensor_pokes_in_reschedule_mode(tiering: TieringEnv) -> None:
    w = only_active_segment(tiering)
    sensor = EligibleSegmentSensor(task_id="wait", topic="orders", deferrable=False, aws_conn_id=None)
    assert sensor.mode == "reschedule" and sensor.reschedule
    assert sensor.poke({}).is_done is False
    w.roll()
    w.set_high_watermark()
    poked = sensor.poke({})
    assert poked.is_done and poked.xcom_value == [0]


def test_the_sensor_says_why_a_delayed_segment_waits(
    tiering: TieringEnv, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """Segments closed two minutes ago under ``remote.copy.lag.ms`` 10 minutes (KIP-1241): not
    eligible, and the check's log says why; with a lag of one minute they are."""
    import logging
    import time

    written = int(time.time() * 1000) - 120_000
    w = tiering.writer(clock=lambda: written)
    write_segments(w, 1)
    w.append_records(1)
    w.set_high_watermark()
    tiering.write_config(orders={"remote.copy.lag.ms": 600_000})
    sensor = EligibleSegmentSensor(task_id="wait", topic="orders", deferrable=False, aws_conn_id=None)
    with caplog.at_level(logging.INFO):
        assert sensor.poke({}).is_done is False
    logs = caplog.text + "".join(capfd.readouterr())
    assert re.search(
        r"orders-0: waiting: 1 segment\(s\) from 0 \(.*\): remote\.copy\.lag\.ms 600000, segment 0 is [2-9]m old; "
        r"remote\.copy\.lag\.bytes not applied",
        logs,
    ), logs
    tiering.write_config(orders={"remote.copy.lag.ms": 60_000})
    poked = sensor.poke({})
    assert poked.is_done and poked.xcom_value == [0]
