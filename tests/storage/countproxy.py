"""A byte-counting HTTP proxy on loopback, in front of the real S3 endpoint: it counts the request
body bytes the endpoint receives (uploads) and the response body bytes it sends (reads) as they
pass, each count with the instant it passed, so a test or benchmark measures a quota where the
bytes arrive rather than trusting the client's own count.

Request bodies are read from the client socket in small chunks, each timestamped on arrival,
then forwarded whole; response bodies are counted as they are written to the client.
"""

from __future__ import annotations

import bisect
import http.client
import socket
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType

CHUNK = 64 * 1024


@dataclass
class Arrivals:
    """Bytes counted with their instants (``time.monotonic``), in arrival order."""

    times: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, n: int) -> None:
        with self.lock:
            self.times.append(time.monotonic())
            self.sizes.append(n)

    @property
    def total(self) -> int:
        with self.lock:
            return sum(self.sizes)

    def between(self, start: float, end: float) -> int:
        """Bytes that passed in [start, end)."""
        with self.lock:
            lo = bisect.bisect_left(self.times, start)
            hi = bisect.bisect_left(self.times, end)
            return sum(self.sizes[lo:hi])

    def span(self) -> tuple[float, float] | None:
        """The first and last instants bytes passed."""
        with self.lock:
            return (self.times[0], self.times[-1]) if self.times else None

    def max_over_windows(self, window: float) -> int:
        """The most bytes that passed within any ``window`` seconds."""
        with self.lock:
            times, sizes = list(self.times), list(self.sizes)
        best = total = lo = 0
        for hi, at in enumerate(times):
            total += sizes[hi]
            while times[lo] < at - window:
                total -= sizes[lo]
                lo += 1
            best = max(best, total)
        return best


class CountingProxy:
    """Forwards every request to ``upstream`` (host, port), counting ``uploaded`` bytes (PUT request
    bodies: PutObject and UploadPart) and ``downloaded`` bytes (GET response bodies), the latter
    also per request (``downloaded_by_key``: the request's path, without its query, and its bytes)."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.uploaded = Arrivals()
        self.downloaded = Arrivals()
        self.downloaded_by_key: list[tuple[str, int]] = []
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(128)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._clients: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, name="countproxy-accept", daemon=True)

    @classmethod
    def before(cls, url: str) -> CountingProxy:
        """A proxy in front of the endpoint at ``url`` (``http://host:port``)."""
        host, _, port = url.removeprefix("http://").rstrip("/").partition(":")
        return cls(host, int(port))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.getsockname()[1]}"

    def __enter__(self) -> CountingProxy:
        self._acceptor.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        try:
            self._server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._server.close()
        with self._lock:
            clients = list(self._clients)
        for client in clients:
            try:
                client.shutdown(socket.SHUT_RDWR)
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
                thread = threading.Thread(target=self._serve, args=(client,), name="countproxy-conn", daemon=True)
                self._threads.append(thread)
            thread.start()

    def _serve(self, client: socket.socket) -> None:
        # A response goes out as its head, then its body: without TCP_NODELAY the body's first
        # write waits for the head's ACK, which the client delays (up to 40 ms per request).
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = client.makefile("rb")
        upstream = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            while not self._stop.is_set():
                head = _read_head(reader)
                if head is None:
                    return
                method, target, headers = head
                length = int(headers.get("content-length", "0"))
                if headers.get("expect", "").lower() == "100-continue":
                    client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                body = bytearray()
                while len(body) < length:
                    chunk = reader.read1(min(CHUNK, length - len(body)))
                    if not chunk:
                        return
                    body += chunk
                    if method == "PUT":
                        self.uploaded.add(len(chunk))
                forward = {k: v for k, v in headers.items() if k not in ("expect", "connection")}
                upstream.request(method, target, body=bytes(body), headers=forward)
                answer = upstream.getresponse()
                data = answer.read()
                lines = [f"HTTP/1.1 {answer.status} {answer.reason}"]
                keep_length = method == "HEAD"
                for name, value in answer.getheaders():
                    lower = name.lower()
                    if lower in ("transfer-encoding", "connection") or (lower == "content-length" and not keep_length):
                        continue
                    lines.append(f"{name}: {value}")
                if not keep_length:
                    lines.append(f"Content-Length: {len(data)}")
                client.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
                view = memoryview(data)
                if method == "GET":
                    self.downloaded_by_key.append((target.partition("?")[0], len(data)))
                for start in range(0, len(data), CHUNK):
                    client.sendall(view[start : start + CHUNK])
                    if method == "GET":
                        self.downloaded.add(len(view[start : start + CHUNK]))
        except OSError:
            return
        finally:
            upstream.close()
            reader.close()
            try:
                client.close()
            except OSError:
                pass


def _read_head(reader: object) -> tuple[str, str, dict[str, str]] | None:
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
    return method, target, headers
