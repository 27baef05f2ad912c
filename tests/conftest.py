"""Shared fixtures: real S3 (moto server), real PostgreSQL, Redis and Spark standalone servers the
tests start themselves (tests/services.py), real SQLite files.

A server that cannot be had fails the tests that need it under CI (``CI`` set), with the one-line
reason; elsewhere those tests are skipped with that reason, and the README says which variable
points them at an existing server instead."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import pytest

from tests.services import (
    STARTED,
    PostgresServer,
    RedisServer,
    S3Endpoint,
    ServiceUnavailable,
    SparkStandalone,
    moto_s3,
    postgres_server,
    redis_server,
    spark_standalone,
    use_test_jvm_options,
)

# The package tiering_airflow lives in Airflow's plugins folder, which Airflow puts on sys.path
# itself (and `pip install .` installs); the tests import it before Airflow runs, from this checkout.
PLUGINS = str(Path(__file__).resolve().parents[1] / "plugins")
if PLUGINS not in sys.path:
    sys.path.insert(0, PLUGINS)

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
use_test_jvm_options(os.environ)
logging.getLogger("werkzeug").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[S3Endpoint]:
    with moto_s3() as endpoint:
        yield endpoint


@pytest.fixture()
def s3_bucket(s3_endpoint: S3Endpoint) -> str:
    return s3_endpoint.new_bucket()


T = TypeVar("T")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(what: str, exc: ServiceUnavailable | str) -> NoReturn:
    """A missing server (or its binaries): a failure under CI, a skip on a user's machine."""
    reason = f"{what}: {exc}"
    if in_ci():
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def provided(what: str, service: AbstractContextManager[T]) -> Iterator[T]:
    """A session fixture's body: the server for the whole run, or the missing-server rule."""
    try:
        with service as server:
            yield server
    except ServiceUnavailable as exc:
        unavailable(what, exc)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """PostgreSQL: ``TIERING_TEST_PG_URL``, else a private server."""
    yield from provided("PostgreSQL", postgres_server())


@pytest.fixture(scope="session")
def redis() -> Iterator[RedisServer]:
    """Redis: ``TIERING_TEST_REDIS_URL``, else a private ``redis-server``."""
    yield from provided("Redis", redis_server())


@pytest.fixture(scope="session")
def spark_cluster() -> Iterator[SparkStandalone]:
    """A Spark standalone cluster manager: ``TIERING_TEST_SPARK_MASTER``, else a private master
    and worker."""
    yield from provided("Spark standalone", spark_standalone())


#: Servers that pytest-xdist workers started, as they reported them when they finished.
WORKER_SERVICES: list[str] = []


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the controller what this process started
        workeroutput["tiering_services"] = [service.describe() for service in STARTED]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    WORKER_SERVICES.extend(getattr(node, "workeroutput", {}).get("tiering_services", []))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Name every server the run started, with its port and where its binaries came from."""
    for described in [service.describe() for service in STARTED] + WORKER_SERVICES:
        terminalreporter.write_line(f"services: {described}")


@pytest.fixture()
def pg_url(pg_server: PostgresServer) -> Iterator[str]:
    with pg_server.database() as url:
        yield url


@pytest.fixture()
def ctrl_c() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt in this test, as in any Python program: a test that sends it
    (``_thread.interrupt_main``) depends on Python's own SIGINT handler, which code run earlier in
    the same worker may have replaced (Airflow's task supervisor resets it to the OS default, and
    then ``interrupt_main`` does nothing). The worker's handler is put back afterwards."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture()
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'metadata.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def metadata_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty metadata database URL on each real backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'metadata.db'}"
    else:
        server: PostgresServer = request.getfixturevalue("pg_server")
        with server.database() as url:
            yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def tiering_env(request: pytest.FixtureRequest, tmp_path: Path, s3_endpoint: S3Endpoint):
    """Log dir + metadata (SQLite or real PostgreSQL) + S3 through moto's server."""
    from tests.engine_support import TieringEnv

    log_dir = tmp_path / "kafka-logs"
    log_dir.mkdir()
    remote = {
        "backend": "s3",
        "bucket": s3_endpoint.new_bucket(),
        "prefix": "t/",
        "endpoint_url": s3_endpoint.url,
        "region": "us-east-1",
    }
    if request.param == "sqlite":
        env = TieringEnv(tmp_path, log_dir, tmp_path / "tiering.yaml", remote, f"sqlite:///{tmp_path / 'm.db'}")
        env.write_config()
        yield env
    else:
        server: PostgresServer = request.getfixturevalue("pg_server")
        with server.database() as url:
            env = TieringEnv(tmp_path, log_dir, tmp_path / "tiering.yaml", remote, url)
            env.write_config()
            yield env


@pytest.fixture()
def fs_env(tmp_path: Path):
    """Log dir + SQLite + the filesystem backend."""
    from tests.engine_support import TieringEnv

    log_dir = tmp_path / "kafka-logs"
    log_dir.mkdir()
    env = TieringEnv(
        tmp_path,
        log_dir,
        tmp_path / "tiering.yaml",
        {"backend": "filesystem", "root": str(tmp_path / "tier")},
        f"sqlite:///{tmp_path / 'm.db'}",
    )
    env.write_config()
    return env
