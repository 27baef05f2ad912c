"""Real services for the tests: an S3 endpoint (moto's server) and a PostgreSQL server.

PostgreSQL: the test setup starts its own private server (initdb on a temporary directory
owned by ``postgres``, 127.0.0.1, a free port) so the tests never depend on the machine's
state; if the server binaries are missing it falls back to one answering on
127.0.0.1:5432, and ``TIERING_TEST_PG_URL`` names an explicit server. Every test database
gets a unique name and is dropped afterwards.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def pg_bindir() -> Path | None:
    try:
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
        if (Path(out) / "initdb").exists():
            return Path(out)
    except (OSError, subprocess.CalledProcessError):
        pass
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "initdb").exists():
            return candidate
    return None


@dataclass
class PostgresServer:
    """A PostgreSQL server the tests may create databases on."""

    host: str
    port: int
    user: str
    private_dir: Path | None = None

    def url(self, database: str, driver: str = "postgresql+psycopg") -> str:
        return f"{driver}://{self.user}@{self.host}:{self.port}/{database}"

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(
            host=self.host, port=self.port, user=self.user, dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    @contextmanager
    def database(self) -> Iterator[str]:
        name = f"tiering_test_{uuid.uuid4().hex[:12]}"
        self._admin(f'CREATE DATABASE "{name}"')
        try:
            yield self.url(name)
        finally:
            self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _as_postgres(args: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *args]
    return args


@contextmanager
def private_postgres() -> Iterator[PostgresServer]:
    """Start a throwaway PostgreSQL server (PostgreSQL refuses to run as root)."""
    bindir = pg_bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) not found; install postgresql-15")
    data = Path(tempfile.mkdtemp(prefix="tiering-pg-"))
    user = "postgres" if os.geteuid() == 0 else os.environ.get("USER", "postgres")
    if os.geteuid() == 0:
        shutil.chown(data, user="postgres", group="postgres")
    port = free_port()
    subprocess.run(
        _as_postgres(
            [str(bindir / "initdb"), "-D", str(data / "db"), "-U", user, "-A", "trust", "--no-sync", "-E", "UTF8"]
        ),
        check=True,
        capture_output=True,
    )
    opts = f"-h 127.0.0.1 -p {port} -k {data} -c fsync=off -c full_page_writes=off -c max_connections=200"
    subprocess.run(
        _as_postgres(
            [str(bindir / "pg_ctl"), "-D", str(data / "db"), "-o", opts, "-l", str(data / "log"), "-w", "start"]
        ),
        check=True,
        capture_output=True,
    )
    try:
        yield PostgresServer("127.0.0.1", port, user, private_dir=data)
    finally:
        subprocess.run(
            _as_postgres([str(bindir / "pg_ctl"), "-D", str(data / "db"), "-m", "immediate", "-w", "stop"]),
            capture_output=True,
        )
        shutil.rmtree(data, ignore_errors=True)


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    explicit = os.environ.get("TIERING_TEST_PG_URL")
    if explicit:
        from sqlalchemy.engine import make_url

        url = make_url(explicit)
        yield PostgresServer(url.host or "127.0.0.1", url.port or 5432, url.username or "postgres")
        return
    if pg_bindir() is not None:
        with private_postgres() as server:
            yield server
        return
    if port_answers("127.0.0.1", 5432):
        yield PostgresServer("127.0.0.1", 5432, "postgres")
        return
    raise RuntimeError("no PostgreSQL: neither server binaries to start one nor a server on 127.0.0.1:5432")


@dataclass
class S3Endpoint:
    url: str
    region: str = "us-east-1"

    def client(self):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client("s3", endpoint_url=self.url, region_name=self.region)

    def new_bucket(self) -> str:
        name = f"tier-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        return name


@contextmanager
def moto_s3() -> Iterator[S3Endpoint]:
    """moto's S3 server over HTTP on loopback (not in-process mocking)."""
    from moto.server import ThreadedMotoServer

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    deadline = time.monotonic() + 10
    while not port_answers(host, port) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield S3Endpoint(f"http://{host}:{port}")
    finally:
        server.stop()
