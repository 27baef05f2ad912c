"""The docker/ stack files are well-formed and agree with the config contract."""

from __future__ import annotations

from pathlib import Path

import yaml

from tiering_core.config import parse_config

DOCKER = Path(__file__).resolve().parents[1] / "docker"


def test_compose_and_config_parse() -> None:
    compose = yaml.safe_load((DOCKER / "docker-compose.yml").read_text())
    assert {"postgres", "minio", "airflow-api-server", "airflow-scheduler", "spark-master"} <= set(compose["services"])
    config = parse_config(yaml.safe_load((DOCKER / "tiering.yaml").read_text()))
    assert config.remote.endpoint_url == "http://minio:9000"
    assert "requirements.txt" in (DOCKER / "Dockerfile").read_text()
