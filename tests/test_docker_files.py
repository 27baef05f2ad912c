"""The docker/ stack files are well-formed and agree with the config contract; the image runs as an
unprivileged user with runtime dependencies only, and no credential is written in any file."""

from __future__ import annotations

import configparser
import json
import re
from pathlib import Path

import pytest
import yaml
from sqlalchemy.engine import make_url

from tiering_core.config import parse_config

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
DEV_TOOLS = ("moto", "pytest", "ruff", "mypy", "types-", "boto3-stubs")
INTERPOLATED = re.compile(r"\$\{[A-Z_]+(:\?[^}]*)?\}")


def test_compose_and_config_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERING_METADATA_PASSWORD", "from-the-env-file")
    compose = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())
    assert {"postgres", "minio", "airflow-api-server", "airflow-scheduler", "spark-master"} <= set(compose["services"])
    config = parse_config(yaml.safe_load((DOCKER / "tiering.yaml").read_text()))
    assert config.remote.endpoint_url == "http://minio:9000"
    assert "constraints.txt" in (DOCKER / "Dockerfile").read_text()
    assert make_url(config.metadata.url).password == "from-the-env-file"


def test_the_image_runs_as_an_unprivileged_user() -> None:
    users = re.findall(r"^USER\s+(\S+)", (DOCKER / "Dockerfile").read_text(), re.MULTILINE)
    assert users and users[-1] not in ("root", "0", "0:0")


def test_the_image_installs_runtime_dependencies_only() -> None:
    dockerfile = (DOCKER / "Dockerfile").read_text()
    assert "requirements.txt" not in dockerfile  # it lists the test and lint tools too
    assert not any(tool in dockerfile for tool in DEV_TOOLS)
    (extras,) = re.findall(r"\"\.\[([a-z,]+)\]\"", dockerfile)
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    declared = setup["options"]["install_requires"].split()
    for extra in extras.split(","):
        declared += setup["options.extras_require"][extra].split()
    assert "psycopg[binary]" in declared and "apache-airflow>=3.3" in declared
    assert not [requirement for requirement in declared if requirement.startswith(DEV_TOOLS)]


def _secrets(key: str, value: str) -> list[str]:
    """The credentials an environment entry of the compose file carries."""
    if re.search(r"PASSWORD|SECRET|_USER$", key) and key != "POSTGRES_USER":
        return [value]
    found = []
    if value.startswith("{"):
        conn = json.loads(value)
        found += [conn[field] for field in ("login", "password") if field in conn]
    elif "://" in value:
        url = make_url(value.replace("${", "").replace(":?", "").replace("}", ""))
        if url.password is not None:
            found.append(re.search(r"://[^:/]+:([^@]+)@", value).group(1))  # type: ignore[union-attr]
    return found


def test_no_credential_is_written_in_the_files_they_come_from_the_env_file() -> None:
    compose_text = (DOCKER / "docker-compose.yml").read_text()
    compose = yaml.safe_load(compose_text)
    checked = 0
    for service in compose["services"].values():
        for key, value in (service.get("environment") or {}).items():
            for secret in _secrets(key, str(value)):
                assert INTERPOLATED.fullmatch(secret), (key, secret)
                checked += 1
    assert checked >= 6  # postgres, minio, and the Airflow services' database and aws connection
    assert "--env-file docker/tiering.env" in compose_text
    assert make_url(yaml.safe_load((DOCKER / "tiering.yaml").read_text())["metadata"]["url"]).password is None
    for ignore in (".gitignore", ".dockerignore"):
        assert "docker/tiering.env" in (ROOT / ignore).read_text().splitlines()
    assert "docker/tiering.env" in (ROOT / "README.md").read_text()
