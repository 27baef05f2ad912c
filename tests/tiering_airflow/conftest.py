"""Airflow tests run against the session's isolated Airflow (see tests/airflow_support.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.airflow_support import airflow_db, configure_airflow, remove_airflow_home
from tests.engine_support import TieringEnv

configure_airflow()  # before any test module imports airflow


@pytest.fixture(scope="session", autouse=True)
def airflow_home() -> Iterator[Path]:
    yield airflow_db()
    remove_airflow_home()


@pytest.fixture()
def tiering(fs_env: TieringEnv, monkeypatch: pytest.MonkeyPatch) -> TieringEnv:
    """A broker log dir, a SQLite metadata DB and a filesystem tier, named by ``TIERING_CONFIG``."""
    monkeypatch.setenv("TIERING_CONFIG", str(fs_env.config_path))
    monkeypatch.delenv("AIRFLOW_CONN_AWS_DEFAULT", raising=False)
    return fs_env
