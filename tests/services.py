"""Real services for the tests: an S3 endpoint (moto's server) and a PostgreSQL server.

PostgreSQL: ``TIERING_TEST_PG_URL`` names an explicit server (its user and password are kept).
Otherwise the test setup starts its own private server (initdb on a temporary directory, run
as the ``postgres`` OS user when the tests run as root, 127.0.0.1, a free port) so the tests
never depend on the machine's state, and stops it afterwards. Where that is impossible (no
server binaries, or root without a ``postgres`` user or ``runuser``) a server answering on
127.0.0.1:5432 is used instead; with neither, the error says what is missing. Every test
database gets a unique name and is dropped afterwards.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import URL, make_url

DEFAULT_PG = ("127.0.0.1", 5432)


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


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server could be started or found for the tests; says what is missing."""


@dataclass
class PostgresServer:
    """A PostgreSQL server the tests may create databases on."""

    host: str
    port: int
    user: str
    password: str | None = None
    private_dir: Path | None = None

    @classmethod
    def from_url(cls, url: str) -> PostgresServer:
        parsed = make_url(url)
        return cls(
            parsed.host or DEFAULT_PG[0], parsed.port or DEFAULT_PG[1], parsed.username or "postgres", parsed.password
        )

    def url(self, database: str, driver: str = "postgresql+psycopg") -> str:
        return URL.create(driver, self.user, self.password, self.host, self.port, database).render_as_string(
            hide_password=False
        )

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            dbname="postgres",
            autocommit=True,
            connect_timeout=10,
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


def _os_user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def _as_postgres(args: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *args]
    return args


def private_postgres_blockers(bindir: Path | None) -> list[str]:
    """Why a private server cannot be started here (empty: it can)."""
    if bindir is None:
        return ["PostgreSQL server binaries (initdb, pg_ctl) not found (install postgresql-15)"]
    blockers = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root: the server runs as ``postgres``
        if not _os_user_exists("postgres"):
            blockers.append("running as root and there is no 'postgres' OS user to run the server as")
        if shutil.which("runuser") is None:
            blockers.append("running as root and runuser (util-linux) is missing")
    return blockers


def _run_step(what: str, args: list[str]) -> None:
    try:
        subprocess.run(_as_postgres(args), check=True, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", None) or str(exc)
        raise PostgresUnavailable(f"{what} failed: {detail.strip()}") from exc


@contextmanager
def private_postgres(bindir: Path | None, *, prefix: str = "tiering-pg-") -> Iterator[PostgresServer]:
    """Start a throwaway PostgreSQL server from the binaries in ``bindir``; stop it and remove its
    directory afterwards, also when starting it failed halfway. PostgresUnavailable when it
    cannot be started."""
    blockers = private_postgres_blockers(bindir)
    if blockers or bindir is None:
        raise PostgresUnavailable("cannot start a private PostgreSQL server: " + "; ".join(blockers))
    data = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        user = "postgres" if os.geteuid() == 0 else os.environ.get("USER", "postgres")
        if os.geteuid() == 0:
            shutil.chown(data, user="postgres", group="postgres")
        port = free_port()
        _run_step(
            "initdb",
            [str(bindir / "initdb"), "-D", str(data / "db"), "-U", user, "-A", "trust", "--no-sync", "-E", "UTF8"],
        )
        opts = f"-h 127.0.0.1 -p {port} -k {data} -c fsync=off -c full_page_writes=off -c max_connections=200"
        try:
            _run_step(
                "pg_ctl start",
                [str(bindir / "pg_ctl"), "-D", str(data / "db"), "-o", opts, "-l", str(data / "log"), "-w", "start"],
            )
            yield PostgresServer("127.0.0.1", port, user, private_dir=data)
        finally:
            if (data / "db" / "postmaster.pid").exists():  # running, or started halfway
                subprocess.run(
                    _as_postgres([str(bindir / "pg_ctl"), "-D", str(data / "db"), "-m", "immediate", "-w", "stop"]),
                    capture_output=True,
                    timeout=120,
                )
    finally:
        shutil.rmtree(data, ignore_errors=True)


@contextmanager
def postgres_server(
    *,
    find_bindir: Callable[[], Path | None] = pg_bindir,
    fallback: tuple[str, int] = DEFAULT_PG,
    environ: Mapping[str, str] | None = None,
) -> Iterator[PostgresServer]:
    """The tests' PostgreSQL: ``TIERING_TEST_PG_URL``, else a private server, else one on ``fallback``."""
    env = os.environ if environ is None else environ
    explicit = env.get("TIERING_TEST_PG_URL")
    if explicit:
        yield PostgresServer.from_url(explicit)
        return
    with ExitStack() as stack:
        try:
            server = stack.enter_context(private_postgres(find_bindir()))
            problem = None
        except PostgresUnavailable as exc:
            server, problem = None, str(exc)
        if server is not None:
            yield server
            return
    host, port = fallback
    if port_answers(host, port):
        yield PostgresServer(host, port, env.get("PGUSER", "postgres"), env.get("PGPASSWORD"))
        return
    raise PostgresUnavailable(
        f"no PostgreSQL server for the tests: {problem}; and no server answers on {host}:{port}. "
        "Install the PostgreSQL server (postgresql-15), start one on that address, or set "
        "TIERING_TEST_PG_URL=postgresql+psycopg://user:password@host:port/postgres"
    )


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
