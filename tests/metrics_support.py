"""Where the tests receive Airflow's metrics: a StatsD server (a UDP socket), an OpenTelemetry
collector (an OTLP/HTTP endpoint that decodes what it is sent), and the SDK's in-memory reader on
the MeterProvider Airflow builds.

Airflow's ``get_otel_logger`` builds its MeterProvider with the readers it chooses (a periodic
OTLP exporter) and offers no way to add one; ``with_reader`` is the provider class it builds with
one more reader, the SDK's own ``InMemoryMetricReader``: everything else (resource, views, prefix,
name checks, allow/block lists, attributes) stays Airflow's.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class StatsdListener:
    """A StatsD server: a UDP socket on a free local port, read until the expected lines came."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        self.sock.bind(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]

    def lines(self, count: int, timeout: float = 5) -> list[str]:
        """The next ``count`` lines (a datagram may hold several)."""
        self.sock.settimeout(timeout)
        received: list[str] = []
        while len(received) < count:
            data, _ = self.sock.recvfrom(65535)
            received += data.decode("ascii").splitlines()
        return received

    def drain(self, quiet: float = 0.2) -> list[str]:
        """Every line received until the socket stays quiet for ``quiet`` seconds."""
        self.sock.settimeout(quiet)
        received: list[str] = []
        while True:
            try:
                data, _ = self.sock.recvfrom(65535)
            except TimeoutError:
                return received
            received += data.decode("ascii").splitlines()

    def close(self) -> None:
        self.sock.close()


Points = dict[str, list[tuple[dict[str, str], float]]]


class OtlpReceiver:
    """An OpenTelemetry collector's OTLP/HTTP metrics endpoint on a free local port: it answers
    every export and keeps the requests, decoded."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

        received: list[Any] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                request = ExportMetricsServiceRequest()
                request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
                received.append(request)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/metrics"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def metric_names(self) -> set[str]:
        return {
            metric.name
            for request in self.received
            for resource_metrics in request.resource_metrics
            for scope_metrics in resource_metrics.scope_metrics
            for metric in scope_metrics.metrics
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def with_reader(reader: Any) -> type[Any]:
    """The SDK's MeterProvider, built with ``reader`` after the readers its caller chose."""
    from opentelemetry.sdk.metrics import MeterProvider

    class MeterProviderWithReader(MeterProvider):
        def __init__(self, *, metric_readers: Sequence[Any] = (), **kwargs: Any) -> None:
            super().__init__(metric_readers=[*metric_readers, reader], **kwargs)

    return MeterProviderWithReader


def reader_points(reader: Any, prefix: str = "") -> Points:
    """Each metric's data points (attributes, value) the in-memory reader collects now."""
    data = reader.get_metrics_data()
    if data is None:
        return {}
    return {
        metric.name: [(dict(point.attributes or {}), point.value) for point in metric.data.data_points]
        for resource_metrics in data.resource_metrics
        for scope_metrics in resource_metrics.scope_metrics
        for metric in scope_metrics.metrics
        if metric.name.startswith(prefix)
    }
