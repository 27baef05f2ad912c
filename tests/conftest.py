"""Shared fixtures: real S3 (moto server), real PostgreSQL, real SQLite files."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services import PostgresServer, S3Endpoint, moto_s3, postgres_server

# The package tiering_airflow lives in Airflow's plugins folder, which Airflow puts on sys.path
# itself (and `pip install .` installs); the tests import it before Airflow runs, from this checkout.
PLUGINS = str(Path(__file__).resolve().parents[1] / "plugins")
if PLUGINS not in sys.path:
    sys.path.insert(0, PLUGINS)

os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
logging.getLogger("werkzeug").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[S3Endpoint]:
    with moto_s3() as endpoint:
        yield endpoint


@pytest.fixture()
def s3_bucket(s3_endpoint: S3Endpoint) -> str:
    return s3_endpoint.new_bucket()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


@pytest.fixture()
def pg_url(pg_server: PostgresServer) -> Iterator[str]:
    with pg_server.database() as url:
        yield url


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
