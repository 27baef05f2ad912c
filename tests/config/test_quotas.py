"""The ``quotas:`` section: Kafka's KIP-956 names, unlimited by default, a broker's own caps over the
top-level ones key by key, and errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.support import base_doc
from tiering_core.config import QuotaConfig, parse_config
from tiering_core.errors import ConfigError

COPY = "remote.log.manager.copy.max.bytes.per.second"
FETCH = "remote.log.manager.fetch.max.bytes.per.second"


def cluster_doc(tmp_path: Path, **broker_1: object) -> dict:
    doc = base_doc(tmp_path)
    del doc["log_dirs"]
    doc["brokers"] = {
        1: {"log_dirs": [str(tmp_path / "b1")], **broker_1},
        2: {"log_dirs": [str(tmp_path / "b2")]},
    }
    return doc


def test_no_section_is_unlimited_as_in_kafka(tmp_path: Path) -> None:
    config = parse_config(base_doc(tmp_path), base_dir=tmp_path)
    assert config.quotas == QuotaConfig() and config.quota_config == QuotaConfig(None, None)


def test_the_caps_under_kafkas_names(tmp_path: Path) -> None:
    doc = {**base_doc(tmp_path), "quotas": {COPY: 50 * 1024 * 1024, FETCH: "104857600"}}
    config = parse_config(doc, base_dir=tmp_path)
    assert config.quota_config == QuotaConfig(50 * 1024 * 1024, 104857600)


def test_a_brokers_own_caps_override_the_top_level_key_by_key(tmp_path: Path) -> None:
    doc = {**cluster_doc(tmp_path, quotas={COPY: 1000}), "quotas": {COPY: 5000, FETCH: 7000}}
    config = parse_config(doc, base_dir=tmp_path)
    assert config.for_broker(1).quota_config == QuotaConfig(1000, 7000)
    assert config.for_broker(2).quota_config == QuotaConfig(5000, 7000)
    assert config.for_broker(None).quota_config == QuotaConfig(5000, 7000)  # a process of no broker


@pytest.mark.parametrize(
    ("quotas", "message"),
    [
        ({COPY[:-3]: 1}, rf"quotas\.{COPY[:-3]}: unknown key \(allowed: {COPY}, {FETCH}\)"),
        ({COPY: 0}, rf"quotas\.{COPY}: 0 is below the minimum 1"),
        ({FETCH: -1}, rf"quotas\.{FETCH}: -1 is below the minimum 1"),
        ({COPY: "fast"}, rf"quotas\.{COPY}: expected an integer, got 'fast'"),
        ({COPY: 1.5}, rf"quotas\.{COPY}: expected an integer"),
        ([COPY], r"quotas: expected a mapping"),
    ],
)
def test_bad_caps_name_the_key(tmp_path: Path, quotas: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({**base_doc(tmp_path), "quotas": quotas}, base_dir=tmp_path)


def test_a_bad_broker_cap_names_the_broker(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"brokers\.1\.quotas\.{COPY}: expected an integer"):
        parse_config(cluster_doc(tmp_path, quotas={COPY: True}), base_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"brokers\.1\.quotas\.copy: unknown key"):
        parse_config(cluster_doc(tmp_path, quotas={"copy": 1}), base_dir=tmp_path)
