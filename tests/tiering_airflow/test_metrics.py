"""The runs' metrics through Airflow's own pipeline: a real UDP socket as the StatsD server, Airflow's
StatsD and OpenTelemetry loggers as the ``[metrics]`` settings build them, and a metrics backend that
fails without failing the run."""

from __future__ import annotations

import atexit
import logging
import socket
from collections.abc import Callable, Iterator

import pytest
from statsd import StatsClient

from tests.engine_support import TieringEnv, write_segments
from tests.metrics_support import OtlpReceiver, StatsdListener, reader_points, with_reader
from tiering_airflow.hooks.tiering import TieringHook
from tiering_airflow.metrics import AirflowStatsSink, task_metrics
from tiering_airflow.sensors.tiering import EligibleSegmentSensor
from tiering_core.metrics.names import REMOTE_COPY_BYTES, REMOTE_COPY_REQUESTS, REMOTE_LOG_SIZE_BYTES
from tiering_core.metrics.sink import NullSink, current_sink, emit

Configure = Callable[..., None]


@pytest.fixture()
def statsd_listener() -> Iterator[StatsdListener]:
    listener = StatsdListener()
    yield listener
    listener.close()


@pytest.fixture()
def airflow_stats(monkeypatch: pytest.MonkeyPatch) -> Iterator[Configure]:
    """``configure(statsd_on="True", ...)``: the ``[metrics]`` settings as environment variables, then
    Airflow's stats initialized from them the way its task runner does at start."""
    from airflow.sdk.configuration import conf
    from airflow.sdk.observability.metrics import stats_utils
    from airflow.sdk.observability.stats import Stats

    def configure(**metrics: str) -> None:
        for key, value in metrics.items():
            monkeypatch.setenv(f"AIRFLOW__METRICS__{key.upper()}", value)
        Stats.initialize(
            factory=stats_utils.get_stats_factory(),
            export_legacy_names=conf.getboolean("metrics", "legacy_names_on"),
        )

    yield configure
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger

    Stats.initialize(factory=NoStatsLogger, export_legacy_names=True)  # as the session's settings have it


def statsd_settings(listener: StatsdListener, **more: str) -> dict[str, str]:
    return {
        "statsd_on": "True",
        "statsd_host": "127.0.0.1",
        "statsd_port": str(listener.port),
        "statsd_influxdb_enabled": "True",
        **more,
    }


def test_run_metrics_reach_statsd_behind_airflows_prefix_with_their_tags(
    airflow_stats: Configure, statsd_listener: StatsdListener
) -> None:
    airflow_stats(**statsd_settings(statsd_listener))
    with task_metrics():
        emit(REMOTE_COPY_REQUESTS, 1, "orders.v2", 3, broker_id=2)
        emit(REMOTE_COPY_BYTES, 4096, "orders.v2", 3, broker_id=2)
        emit(REMOTE_LOG_SIZE_BYTES, 81920, "orders.v2", 3, broker_id=2)  # a partition's gauge: no broker
    assert statsd_listener.lines(3) == [
        "airflow.tiering.remote_copy_requests,topic=orders.v2,partition=3,broker=2:1|c",
        "airflow.tiering.remote_copy_bytes,topic=orders.v2,partition=3,broker=2:4096|c",
        "airflow.tiering.remote_log_size_bytes,topic=orders.v2,partition=3:81920|g",
    ]
    assert isinstance(current_sink(), NullSink)


def test_prefix_and_block_list_are_airflows_settings(airflow_stats: Configure, statsd_listener: StatsdListener) -> None:
    airflow_stats(**statsd_settings(statsd_listener, statsd_prefix="kafka", metrics_block_list="remote_copy_bytes"))
    with task_metrics():
        emit(REMOTE_COPY_BYTES, 4096, "orders", 0, broker_id=1)
        emit(REMOTE_COPY_REQUESTS, 1, "orders", 0, broker_id=1)
    assert statsd_listener.lines(1) == ["kafka.tiering.remote_copy_requests,topic=orders,partition=0,broker=1:1|c"]
    assert statsd_listener.drain() == []


def test_without_influxdb_tags_statsd_gets_the_bare_names(
    airflow_stats: Configure, statsd_listener: StatsdListener
) -> None:
    airflow_stats(**statsd_settings(statsd_listener, statsd_influxdb_enabled="False"))
    with task_metrics():
        emit(REMOTE_COPY_BYTES, 10, "orders", 0, broker_id=1)
    assert statsd_listener.lines(1) == ["airflow.tiering.remote_copy_bytes:10|c"]


def test_a_context_from_the_hook_reports_through_airflow_until_it_closes(
    tiering: TieringEnv, airflow_stats: Configure, statsd_listener: StatsdListener
) -> None:
    airflow_stats(**statsd_settings(statsd_listener))
    with TieringHook().get_conn() as ctx:
        assert ctx.config.metadata.url == tiering.metadata_url
        assert isinstance(current_sink(), AirflowStatsSink)
        emit(REMOTE_COPY_REQUESTS, 1, "orders", 0, broker_id=1)
    assert isinstance(current_sink(), NullSink)
    emit(REMOTE_COPY_REQUESTS, 1, "orders", 0, broker_id=1)  # after the context: nowhere
    assert statsd_listener.lines(1) == ["airflow.tiering.remote_copy_requests,topic=orders,partition=0,broker=1:1|c"]
    assert statsd_listener.drain() == []


def test_the_sensor_s_check_reports_the_copy_lag_it_sees(
    tiering: TieringEnv, airflow_stats: Configure, statsd_listener: StatsdListener
) -> None:
    w = tiering.writer("orders", 0)
    write_segments(w, 2)
    w.append_records(3)  # the active segment: never copied
    w.set_high_watermark()
    airflow_stats(**statsd_settings(statsd_listener))
    sensor = EligibleSegmentSensor(task_id="wait", topic="orders", deferrable=False)
    assert sensor.poke({}).xcom_value == [0]
    gauges = {
        line.split(",", 1)[0]: line.rsplit(":", 1)[1]
        for line in statsd_listener.drain(quiet=1.0)
        if line.startswith("airflow.tiering.remote_copy_lag") and ",topic=orders,partition=0:" in line
    }
    closed = [log for log in w.path.glob("*.log") if log != w.active_log_path]
    assert gauges == {
        "airflow.tiering.remote_copy_lag_segments": "2|g",
        "airflow.tiering.remote_copy_lag_bytes": f"{sum(log.stat().st_size for log in closed)}|g",
    }


# A StatsD host that cannot be reached never fails the run.


def test_a_statsd_host_that_does_not_resolve_drops_the_metrics(
    airflow_stats: Configure, statsd_listener: StatsdListener
) -> None:
    airflow_stats(**statsd_settings(statsd_listener, statsd_host="statsd.invalid"))
    with task_metrics():
        emit(REMOTE_COPY_BYTES, 4096, "orders", 0, broker_id=1)
        emit(REMOTE_LOG_SIZE_BYTES, 81920, "orders", 0)


def test_a_closed_statsd_port_drops_the_metrics(airflow_stats: Configure) -> None:
    closed = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens: the kernel answers each datagram with "port unreachable"
    airflow_stats(statsd_on="True", statsd_host="127.0.0.1", statsd_port=str(port), statsd_influxdb_enabled="True")
    with task_metrics():
        for _ in range(50):
            emit(REMOTE_COPY_BYTES, 4096, "orders", 0, broker_id=1)


class FailingStatsClient(StatsClient):
    """An injected fault: a StatsD client whose every send raises what Airflow's logger does not catch."""

    def _send(self, data: str) -> None:
        raise ValueError(f"injected: cannot send {data!r}")


def test_a_failing_metrics_backend_is_logged_once_and_never_fails_the_run(
    airflow_stats: Configure, statsd_listener: StatsdListener, caplog: pytest.LogCaptureFixture
) -> None:
    airflow_stats(
        **statsd_settings(statsd_listener, statsd_custom_client_path=f"{__name__}.{FailingStatsClient.__qualname__}")
    )
    with caplog.at_level(logging.WARNING, logger="tiering_airflow.metrics"), task_metrics():
        emit(REMOTE_COPY_BYTES, 4096, "orders", 0, broker_id=1)
        emit(REMOTE_COPY_REQUESTS, 1, "orders", 0, broker_id=1)
        emit(REMOTE_LOG_SIZE_BYTES, 81920, "orders", 0)
    warnings = [r for r in caplog.records if r.name == "tiering_airflow.metrics"]
    assert len(warnings) == 1 and "tiering.remote_copy_bytes" in warnings[0].getMessage()
    assert warnings[0].exc_info is not None and "injected" in str(warnings[0].exc_info[1])


# OpenTelemetry: the SDK's in-memory reader on the MeterProvider Airflow's OTel logger builds.


@pytest.fixture()
def otlp_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


def test_run_metrics_reach_opentelemetry_with_their_attributes(
    airflow_stats: Configure, otlp_receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.sdk._shared.observability.metrics import otel_logger
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    monkeypatch.setattr(otel_logger, "MeterProvider", with_reader(reader))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", otlp_receiver.url)  # Airflow's own exporter
    airflow_stats(otel_on="True", otel_prefix="airflow")
    with task_metrics():
        emit(REMOTE_COPY_REQUESTS, 1, "orders.v2", 3, broker_id=2)
        emit(REMOTE_COPY_BYTES, 4096, "orders.v2", 3, broker_id=2)
        emit(REMOTE_COPY_BYTES, 1024, "orders.v2", 3, broker_id=2)
        emit(REMOTE_LOG_SIZE_BYTES, 81920, "orders.v2", 3)
    points = reader_points(reader, "airflow.tiering.")
    metrics.get_meter_provider().shutdown()  # type: ignore[attr-defined]  # its last export, to the receiver
    atexit.unregister(otel_logger.flush_otel_metrics)  # nothing left for the flush Airflow set for exit
    replica = {"topic": "orders.v2", "partition": "3", "broker": "2"}
    assert points == {  # instrument names are case-insensitive: the SDK reports them in lower case
        "airflow.tiering.remote_copy_requests": [(replica, 1)],
        "airflow.tiering.remote_copy_bytes": [(replica, 5120)],
        "airflow.tiering.remote_log_size_bytes": [({"topic": "orders.v2", "partition": "3"}, 81920)],
    }
    assert set(points) <= otlp_receiver.metric_names()  # and the collector got them from Airflow's exporter
