"""The ``kafka:`` section (``tiering_core/config/kafka.py``): the live cluster's address and
security, secrets read only when a client connects."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.support import base_doc
from tiering_core.config import parse_config
from tiering_core.errors import ConfigError


def test_kafka_section_parses_servers_as_string_or_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = base_doc(tmp_path)
    assert parse_config(doc).kafka is None
    doc["kafka"] = {"bootstrap_servers": "a:9092, b:9093"}
    kafka = parse_config(doc).kafka
    assert kafka is not None
    assert kafka.bootstrap_servers == ("a:9092", "b:9093")
    assert (kafka.request_timeout_ms, kafka.client_id, kafka.security_protocol) == (30_000, "tiering", "PLAINTEXT")
    monkeypatch.setenv("TIERING_TEST_KAFKA_PASSWORD", "s3cret")
    doc["kafka"] = {
        "bootstrap_servers": ["[::1]:9092"],
        "request_timeout_ms": 5000,
        "client_id": "tier-7",
        "security_protocol": "sasl_ssl",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "tier",
        "sasl_password_env": "TIERING_TEST_KAFKA_PASSWORD",
        "ssl_cafile": "ca.pem",
    }
    config = parse_config(doc, base_dir=tmp_path)
    assert config.kafka is not None
    assert config.kafka.security_protocol == "SASL_SSL"
    assert config.kafka.ssl_cafile == tmp_path / "ca.pem"
    assert "s3cret" not in repr(config)
    # The password is read when the client connects, not here: a process that never asks the
    # cluster (scheduler, API server) parses the same file without it.
    monkeypatch.delenv("TIERING_TEST_KAFKA_PASSWORD")
    assert parse_config(doc, base_dir=tmp_path).kafka == config.kafka


@pytest.mark.parametrize(
    ("section", "named"),
    [
        ({}, "kafka.bootstrap_servers"),
        ({"bootstrap_servers": []}, "kafka.bootstrap_servers"),
        ({"bootstrap_servers": "no-port"}, "kafka.bootstrap_servers"),
        ({"bootstrap_servers": "a:1", "bootstrap": "a:1"}, "kafka.bootstrap"),
        ({"bootstrap_servers": "a:1", "sasl_plain_password": "x"}, "kafka.sasl_plain_password"),
        ({"bootstrap_servers": "a:1", "request_timeout_ms": 0}, "kafka.request_timeout_ms"),
        ({"bootstrap_servers": "a:1", "security_protocol": "TLS"}, "kafka.security_protocol"),
        ({"bootstrap_servers": "a:1", "security_protocol": "SASL_SSL"}, "kafka.sasl_mechanism"),
        ({"bootstrap_servers": "a:1", "sasl_mechanism": "PLAIN"}, "kafka.sasl_mechanism"),
        (
            {"bootstrap_servers": "a:1", "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "GSSAPI"},
            "kafka.sasl_mechanism",
        ),
        (
            {"bootstrap_servers": "a:1", "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"},
            "kafka.sasl_plain_username",
        ),
        (
            {
                "bootstrap_servers": "a:1",
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "PLAIN",
                "sasl_plain_username": "u",
            },
            "kafka.sasl_password_env",
        ),
        ("a:1", "kafka"),
    ],
)
def test_bad_kafka_section_names_the_key(tmp_path: Path, section: object, named: str) -> None:
    doc = base_doc(tmp_path)
    doc["kafka"] = section
    with pytest.raises(ConfigError) as err:
        parse_config(doc)
    assert named in str(err.value)
