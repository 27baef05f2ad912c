"""The ``replay:`` section (``tiering_core/config/replay.py``): the clusters a replay may write to
by name, each parsed as the ``kafka:`` section is, its errors naming ``replay.targets.NAME.<key>``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.support import base_doc
from tiering_core.config import parse_config
from tiering_core.errors import ConfigError


def test_replay_targets_parse_as_kafka_sections(tmp_path: Path) -> None:
    doc = base_doc(tmp_path)
    assert parse_config(doc).replay.targets == {}
    doc["kafka"] = {"bootstrap_servers": "a:9092"}
    doc["replay"] = {
        "targets": {
            "dr": {"bootstrap_servers": "dr-1:9092, dr-2:9092"},
            "reprocess_2": {
                "bootstrap_servers": ["b:9093"],
                "request_timeout_ms": 5000,
                "security_protocol": "sasl_ssl",
                "sasl_mechanism": "SCRAM-SHA-256",
                "sasl_plain_username": "replayer",
                "sasl_password_env": "TIERING_REPLAY_PASSWORD",
                "ssl_cafile": "ca.pem",
            },
        }
    }
    config = parse_config(doc, base_dir=tmp_path)
    dr, reprocess = config.replay.targets["dr"], config.replay.targets["reprocess_2"]
    assert (dr.bootstrap_servers, dr.security_protocol, dr.sasl_password_env) == (
        ("dr-1:9092", "dr-2:9092"),
        "PLAINTEXT",
        None,
    )
    assert (reprocess.bootstrap_servers, reprocess.security_protocol) == (("b:9093",), "SASL_SSL")
    assert (reprocess.sasl_plain_username, reprocess.sasl_password_env) == ("replayer", "TIERING_REPLAY_PASSWORD")
    assert reprocess.ssl_cafile == tmp_path / "ca.pem"
    assert (dr.section, reprocess.section) == ("replay.targets.dr", "replay.targets.reprocess_2")
    assert config.kafka is not None and config.kafka.section == "kafka"
    assert parse_config({**doc, "replay": {"targets": None}}).replay.targets == {}


@pytest.mark.parametrize(
    ("section", "named"),
    [
        ("dr", "replay: expected a mapping"),
        ({"target": {}}, "replay.target: unknown key"),
        ({"targets": ["dr"]}, "replay.targets: expected a mapping"),
        ({"targets": {"dr": "a:1"}}, "replay.targets.dr: expected a mapping"),
        ({"targets": {"dr": {}}}, "replay.targets.dr.bootstrap_servers: required key is missing"),
        ({"targets": {"dr": {"bootstrap_servers": "no-port"}}}, "replay.targets.dr.bootstrap_servers"),
        (
            {"targets": {"dr": {"bootstrap_servers": "a:1", "sasl_plain_password": "x"}}},
            "replay.targets.dr.sasl_plain_password: unknown key",
        ),
        (
            {"targets": {"dr": {"bootstrap_servers": "a:1", "security_protocol": "TLS"}}},
            "replay.targets.dr.security_protocol",
        ),
        (
            {
                "targets": {
                    "dr": {"bootstrap_servers": "a:1", "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"}
                }
            },
            "replay.targets.dr.sasl_plain_username",
        ),
        (
            {"targets": {"dr": {"bootstrap_servers": "a:1", "request_timeout_ms": 0}}},
            "replay.targets.dr.request_timeout_ms",
        ),
        (
            {"targets": {"127.0.0.1:9092": {"bootstrap_servers": "a:1"}}},
            "replay.targets: '127.0.0.1:9092' is not a target name",
        ),
        ({"targets": {"dr.example.com": {"bootstrap_servers": "a:1"}}}, "'dr.example.com' is not a target name"),
        ({"targets": {7: {"bootstrap_servers": "a:1"}}}, "replay.targets: 7 is not a target name"),
    ],
)
def test_bad_replay_section_names_the_key(tmp_path: Path, section: object, named: str) -> None:
    doc = base_doc(tmp_path)
    doc["replay"] = section
    with pytest.raises(ConfigError) as err:
        parse_config(doc)
    assert named in str(err.value) and "\n" not in str(err.value)
