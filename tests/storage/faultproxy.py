"""A fault-injecting HTTP proxy on loopback, in front of the real S3 endpoint.

It parses each request on a client connection, asks ``plan(request)`` what to do, and then
forwards it to the upstream server, answers with an S3 error, resets the TCP connection
half-way through the request or the response body, or holds the connection without
answering (a hung endpoint). Every request is logged, so tests can count attempts.
"""

from __future__ import annotations

import http.client
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from types import TracebackType


class Fault(Enum):
    RESET_DURING_REQUEST = "reset-during-request"  # RST after half the request body
    RESET_DURING_RESPONSE = "reset-during-response"  # forwards, then RST after half the response body
    HANG = "hang"  # reads the request, never answers
    SLOW_DOWN = "503-slowdown"
    INTERNAL_ERROR = "500-internal"
    NO_SUCH_UPLOAD = "404-no-such-upload"


_STATUS = {
    Fault.SLOW_DOWN: (503, "Service Unavailable", "SlowDown", "Please reduce your request rate."),
    Fault.INTERNAL_ERROR: (500, "Internal Server Error", "InternalError", "We encountered an internal error."),
    Fault.NO_SUCH_UPLOAD: (404, "Not Found", "NoSuchUpload", "The specified upload does not exist."),
}


@dataclass
class ProxyRequest:
    method: str
    target: str  # path and query
    headers: dict[str, str]  # lower-case names
    fault: Fault | None = None

    @property
    def query(self) -> str:
        return self.target.partition("?")[2]


@dataclass
class FaultProxy:
    upstream_host: str
    upstream_port: int
    plan: Callable[[ProxyRequest], Fault | None] = lambda _request: None
    requests: list[ProxyRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._clients: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, name="faultproxy-accept", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.getsockname()[1]}"

    def matching(self, predicate: Callable[[ProxyRequest], bool]) -> list[ProxyRequest]:
        with self._lock:
            return [r for r in self.requests if predicate(r)]

    def __enter__(self) -> FaultProxy:
        self._acceptor.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        try:
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        except OSError:
            pass
        self._server.close()
        with self._lock:
            clients = list(self._clients)
        for client in clients:
            try:
                client.shutdown(socket.SHUT_RDWR)  # wakes a handler blocked reading
            except OSError:
                pass
        self._acceptor.join(timeout=5)
        for thread in list(self._threads):
            thread.join(timeout=5)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                self._clients.append(client)
            thread = threading.Thread(target=self._serve, args=(client,), name="faultproxy-conn", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, client: socket.socket) -> None:
        reader = client.makefile("rb")
        upstream = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=30)
        try:
            while not self._stop.is_set():
                request = _read_head(reader)
                if request is None:
                    return
                request.fault = self.plan(request)
                with self._lock:
                    self.requests.append(request)
                length = int(request.headers.get("content-length", "0"))
                if request.headers.get("expect", "").lower() == "100-continue":
                    client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                if request.fault is Fault.RESET_DURING_REQUEST:
                    reader.read(length // 2)
                    reader.close()
                    _reset(client)
                    return
                body = reader.read(length) if length else b""
                if request.fault is Fault.HANG:
                    self._stop.wait()
                    return
                if request.fault in _STATUS:
                    client.sendall(_error_response(request.fault))
                    continue
                forward = {k: v for k, v in request.headers.items() if k not in ("expect", "connection")}
                upstream.request(request.method, request.target, body=body, headers=forward)
                answer = upstream.getresponse()
                data = answer.read()
                head = [f"HTTP/1.1 {answer.status} {answer.reason}"]
                keep_length = request.method == "HEAD"  # a HEAD answer states the object's length
                for name, value in answer.getheaders():
                    lower = name.lower()
                    if lower in ("transfer-encoding", "connection") or (lower == "content-length" and not keep_length):
                        continue
                    head.append(f"{name}: {value}")
                if not keep_length:
                    head.append(f"Content-Length: {len(data)}")
                raw_head = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
                if request.fault is Fault.RESET_DURING_RESPONSE:
                    client.sendall(raw_head + data[: len(data) // 2])
                    reader.close()
                    _reset(client)
                    return
                client.sendall(raw_head + data)
        except OSError:
            return
        finally:
            upstream.close()
            reader.close()
            _close(client)


def _read_head(reader: object) -> ProxyRequest | None:
    lines = []
    while True:
        line = reader.readline(65536)  # type: ignore[attr-defined]
        if not line:
            return None
        if line in (b"\r\n", b"\n"):
            break
        lines.append(line.decode("latin-1").rstrip("\r\n"))
    method, target, _version = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        raise AssertionError("the proxy handles Content-Length bodies only")
    return ProxyRequest(method, target, headers)


def _error_response(fault: Fault) -> bytes:
    status, reason, code, message = _STATUS[fault]
    body = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{message}</Message></Error>"
    data = body.encode()
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\nContent-Length: {len(data)}\r\n\r\n"
    return head.encode("latin-1") + data


def _reset(sock: socket.socket) -> None:
    """Close with RST instead of FIN, as a dropped connection looks to the client."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    _close(sock)


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass
