"""The ``dags:`` section: each DAG's schedule and queue, the defaults the DAGs always had, and
errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.support import base_doc
from tiering_core.config import DagConfig, parse_config
from tiering_core.config.dags import MANUAL, PRESETS, SCHEDULED
from tiering_core.errors import ConfigError


def test_defaults_without_the_section_are_the_dags_own(tmp_path: Path) -> None:
    dags = parse_config(base_doc(tmp_path), base_dir=tmp_path).dags
    assert dags["copy"] == DagConfig("*/10 * * * *") and dags["retention"] == DagConfig("@hourly")
    assert dags["spark_rebuild_indexes"] == dags["spark_verify"] == DagConfig("@weekly")
    assert dags["export"] == DagConfig("@daily") and dags["spark_bulk_upload"] == DagConfig(None)
    assert all(dags[name] == DagConfig() for name in MANUAL)
    assert set(dags.dags) == {*SCHEDULED, *MANUAL}


def test_schedules_and_queues_may_be_set(tmp_path: Path) -> None:
    section = {
        "copy": {"schedule": " */5  * * * * ", "queue": "tiering-copy"},
        "retention": {"schedule": "@daily"},
        "spark_bulk_upload": {"schedule": "0 3 * * MON-FRI"},
        "export": {"schedule": None, "queue": "spark"},
        "replay": {"queue": "tiering-replay"},
        "erase": {"queue": "tiering-erase", "key_dir": "/srv/tiering/erase-requests"},
    }
    dags = parse_config({**base_doc(tmp_path), "dags": section}, base_dir=tmp_path).dags
    assert dags["copy"] == DagConfig("*/5 * * * *", "tiering-copy")
    assert dags["retention"] == DagConfig("@daily")
    assert dags["spark_bulk_upload"] == DagConfig("0 3 * * MON-FRI")
    assert dags["export"] == DagConfig(None, "spark") and dags["replay"] == DagConfig(None, "tiering-replay")
    assert dags["erase"] == DagConfig(None, "tiering-erase", "/srv/tiering/erase-requests")
    assert dags["spark_verify"] == DagConfig("@weekly")  # the others keep their defaults
    assert set(PRESETS) >= {"@hourly", "@daily", "@weekly"}


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"copies": {}}, r"dags.copies: unknown key \(allowed: copy, delete_partition, delete_records, erase, export"),
        ({"copy": {"budget_seconds": 60}}, r"dags.copy.budget_seconds: unknown key \(allowed: queue, schedule\)"),
        ({"replay": {"schedule": "@daily"}}, r"dags.replay.schedule: unknown key \(allowed: queue\)"),
        ({"copy": {"schedule": "*/10 * * *"}}, r"dags.copy.schedule: expected a cron expression of five fields"),
        ({"retention": {"schedule": "@once"}}, r"dags.retention.schedule: expected a cron expression .* got '@once'"),
        ({"export": {"schedule": 10}}, r"dags.export.schedule: expected a cron expression .* got 10"),
        ({"copy": {"schedule": None}}, r"dags.copy.schedule: copy runs on a schedule; null would never run it"),
        ({"rewrite": {"queue": "two words"}}, r"dags.rewrite.queue: expected a queue name .* got 'two words'"),
        ({"rewrite": {"queue": ""}}, r"dags.rewrite.queue: expected a queue name"),
        ({"rewrite": {"key_dir": "/srv/keys"}}, r"dags.rewrite.key_dir: unknown key \(allowed: queue\)"),
        ({"erase": {"key_dir": "keys"}}, r"dags.erase.key_dir: expected an absolute directory path .* got 'keys'"),
        ({"erase": {"key_dir": 7}}, r"dags.erase.key_dir: expected an absolute directory path or null, got 7"),
        ({"copy": []}, r"dags.copy: expected a mapping, got list"),
        ([1], r"dags: expected a mapping, got list"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, section: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({**base_doc(tmp_path), "dags": section}, base_dir=tmp_path)


def test_the_cluster_form_keeps_copy_and_retention_on_each_broker_s_queue(tmp_path: Path) -> None:
    doc = {k: v for k, v in base_doc(tmp_path).items() if k != "log_dirs"}
    doc["brokers"] = {1: {"log_dirs": [str(tmp_path / "b1")]}, 2: {"log_dirs": [str(tmp_path / "b2")]}}
    with pytest.raises(ConfigError, match=r"dags.retention.queue: the cluster form runs each broker's retention"):
        parse_config({**doc, "dags": {"retention": {"queue": "elsewhere"}}}, base_dir=tmp_path)
    dags = parse_config({**doc, "dags": {"replay": {"queue": "tiering-broker-1"}}}, base_dir=tmp_path).dags
    assert dags["replay"].queue == "tiering-broker-1"
