"""The runs' metrics through Airflow's own pipeline: a real UDP socket as the StatsD server, Airflow's
StatsD and OpenTelemetry loggers as the ``[metrics]`` settings build them, and a metrics backend that
fails without failing the run."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from statsd import StatsClient

from tests.engine_support import TieringEnv
from tiering_airflow.hooks.tiering import TieringHook
from tiering_airflow.metrics import AirflowStatsSink, task_metrics
from tiering_core.metrics.names import REMOTE_COPY_BYTES, REMOTE_COPY_REQUESTS, REMOTE_LOG_SIZE_BYTES
from tiering_core.metrics.sink import NullSink, current_sink, emit

Configure = Callable[..., None]


class StatsdListener:
    """A StatsD server: a UDP socket on a free local port, read until the expected lines came."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(5)
        self.port = self.sock.getsockname()[1]

    def lines(self, count: int) -> list[str]:
        received: list[str] = []
        while len(received) < count:
            data, _ = self.sock.recvfrom(65535)
            received += data.decode("ascii").splitlines()
        return received

    def nothing_more(self) -> bool:
        self.sock.settimeout(0.2)
        try:
            self.sock.recvfrom(65535)
        except TimeoutError:
            return True
        return False


@pytest.fixture()
def statsd_listener() -> Iterator[StatsdListener]:
    listener = StatsdListener()
    yield listener
    listener.sock.close()


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
        "airflow.tiering.RemoteCopyRequests,topic=orders.v2,partition=3,broker=2:1|c",
        "airflow.tiering.RemoteCopyBytes,topic=orders.v2,partition=3,broker=2:4096|c",
        "airflow.tiering.RemoteLogSizeBytes,topic=orders.v2,partition=3:81920|g",
    ]
    assert isinstance(current_sink(), NullSink)


def test_prefix_and_block_list_are_airflows_settings(airflow_stats: Configure, statsd_listener: StatsdListener) -> None:
    airflow_stats(**statsd_settings(statsd_listener, statsd_prefix="kafka", metrics_block_list="RemoteCopyBytes"))
    with task_metrics():
        emit(REMOTE_COPY_BYTES, 4096, "orders", 0, broker_id=1)
        emit(REMOTE_COPY_REQUESTS, 1, "orders", 0, broker_id=1)
    assert statsd_listener.lines(1) == ["kafka.tiering.RemoteCopyRequests,topic=orders,partition=0,broker=1:1|c"]
    assert statsd_listener.nothing_more()


def test_without_influxdb_tags_statsd_gets_the_bare_names(
    airflow_stats: Configure, statsd_listener: StatsdListener
) -> None:
    airflow_stats(**statsd_settings(statsd_listener, statsd_influxdb_enabled="False"))
    with task_metrics():
        emit(REMOTE_COPY_BYTES, 10, "orders", 0, broker_id=1)
    assert statsd_listener.lines(1) == ["airflow.tiering.RemoteCopyBytes:10|c"]


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
    assert statsd_listener.lines(1) == ["airflow.tiering.RemoteCopyRequests,topic=orders,partition=0,broker=1:1|c"]
    assert statsd_listener.nothing_more()


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
    assert len(warnings) == 1 and "tiering.RemoteCopyBytes" in warnings[0].getMessage()
    assert warnings[0].exc_info is not None and "injected" in str(warnings[0].exc_info[1])


# OpenTelemetry: Airflow's OTel logger over an SDK MeterProvider whose reader is the in-memory one.


def otel_points(reader: Any) -> dict[str, list[tuple[dict[str, Any], float]]]:
    """Each metric's data points (attributes, value) as the SDK's in-memory reader collected them."""
    data = reader.get_metrics_data()
    return {
        metric.name: [(dict(point.attributes or {}), point.value) for point in metric.data.data_points]
        for resource_metrics in data.resource_metrics
        for scope_metrics in resource_metrics.scope_metrics
        for metric in scope_metrics.metrics
    }


def test_run_metrics_reach_opentelemetry_with_their_attributes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``otel_on`` selects Airflow's OTel logger; it is built as ``get_otel_logger`` builds it (the
    prefix, the allow/block lists), on a MeterProvider whose reader is the SDK's in-memory one
    where Airflow puts its periodic OTLP exporter."""
    from airflow.sdk._shared.observability.metrics.otel_logger import SafeOtelLogger
    from airflow.sdk._shared.observability.metrics.validators import get_validator
    from airflow.sdk.configuration import conf
    from airflow.sdk.observability.metrics import otel_logger, stats_utils
    from airflow.sdk.observability.stats import Stats
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    monkeypatch.setenv("AIRFLOW__METRICS__OTEL_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__OTEL_PREFIX", "airflow")
    assert stats_utils.get_stats_factory() is otel_logger.get_otel_logger
    reader = InMemoryMetricReader()
    provider = MeterProvider(resource=Resource.create({SERVICE_NAME: "airflow"}), metric_readers=[reader])
    logger = SafeOtelLogger(
        provider,
        conf.get("metrics", "otel_prefix"),
        get_validator(conf.get("metrics", "metrics_allow_list"), conf.get("metrics", "metrics_block_list")),
    )

    def factory() -> Any:  # typed as Airflow's own factory lookup returns it
        return logger

    Stats.initialize(factory=factory, export_legacy_names=True)
    try:
        with task_metrics():
            emit(REMOTE_COPY_REQUESTS, 1, "orders.v2", 3, broker_id=2)
            emit(REMOTE_COPY_BYTES, 4096, "orders.v2", 3, broker_id=2)
            emit(REMOTE_COPY_BYTES, 1024, "orders.v2", 3, broker_id=2)
            emit(REMOTE_LOG_SIZE_BYTES, 81920, "orders.v2", 3)
        points = otel_points(reader)
    finally:
        from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger

        Stats.initialize(factory=NoStatsLogger, export_legacy_names=True)
        provider.shutdown()
    replica = {"topic": "orders.v2", "partition": "3", "broker": "2"}
    assert points == {  # instrument names are case-insensitive: the SDK reports them in lower case
        "airflow.tiering.remotecopyrequests": [(replica, 1)],
        "airflow.tiering.remotecopybytes": [(replica, 5120)],
        "airflow.tiering.remotelogsizebytes": [({"topic": "orders.v2", "partition": "3"}, 81920)],
    }
