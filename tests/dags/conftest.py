"""Airflow tests run against the session's isolated Airflow (see tests/airflow_support.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.airflow_support import airflow_db, configure_airflow, remove_airflow_home
from tests.engine_support import TieringEnv
from tests.services import S3Endpoint

configure_airflow()  # before any test module imports airflow


@pytest.fixture(scope="session", autouse=True)
def airflow_home() -> Iterator[Path]:
    yield airflow_db()
    remove_airflow_home()


# The aws connection's password: it must never reach a log.
SECRET = "tiering-test-secret-7Qx2"


@pytest.fixture()
def tiering(tmp_path: Path, s3_endpoint: S3Endpoint, monkeypatch: pytest.MonkeyPatch) -> TieringEnv:
    """A broker log dir, a SQLite metadata DB and a bucket on moto's S3 server.

    The config names no S3 endpoint: the endpoint and the credentials come only from the Airflow
    connection ``aws_default``, as in production.
    """
    log_dir = tmp_path / "kafka-logs"
    log_dir.mkdir()
    remote = {"backend": "s3", "bucket": s3_endpoint.new_bucket(), "prefix": "t/", "region": "us-east-1"}
    env = TieringEnv(tmp_path, log_dir, tmp_path / "tiering.yaml", remote, f"sqlite:///{tmp_path / 'm.db'}")
    env.write_config(orders={}, payments={"retention.bytes": 0}, **{"clicks.v2": {}})
    monkeypatch.setenv("TIERING_CONFIG", str(env.config_path))
    monkeypatch.setenv(
        "AIRFLOW_CONN_AWS_DEFAULT",
        json.dumps(
            {
                "conn_type": "aws",
                "login": "AKIDTIERINGTEST",
                "password": SECRET,
                "extra": {"endpoint_url": s3_endpoint.url, "region_name": "us-east-1"},
            }
        ),
    )
    return env
