"""The ``copy:`` section: lanes per broker, threads per lane and the lanes' time budgets, strict
like every section; a budget not shorter than its DAG's period is refused naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.support import base_doc
from tiering_core.config import CopyConfig, parse_config
from tiering_core.errors import ConfigError


def test_defaults_without_the_section(tmp_path: Path) -> None:
    config = parse_config(base_doc(tmp_path), base_dir=tmp_path)
    assert config.copy == CopyConfig(lanes=16, concurrency=4, budget_seconds=480, retention_budget_seconds=3000)


def test_every_key_may_be_set(tmp_path: Path) -> None:
    doc = {**base_doc(tmp_path), "copy": {"lanes": 4, "concurrency": "8", "budget_seconds": 120}}
    config = parse_config(doc, base_dir=tmp_path)
    assert config.copy == CopyConfig(lanes=4, concurrency=8, budget_seconds=120, retention_budget_seconds=3000)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"lane": 4}, r"copy.lane: unknown key \(allowed: budget_seconds, concurrency, lanes, retention_"),
        ({"lanes": 0}, r"copy.lanes: 0 is below the minimum 1"),
        ({"concurrency": "many"}, r"copy.concurrency: expected an integer, got 'many'"),
        ({"budget_seconds": True}, r"copy.budget_seconds: expected an integer, got True"),
        ([4], r"copy: expected a mapping, got list"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, section: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({**base_doc(tmp_path), "copy": section}, base_dir=tmp_path)


def test_a_budget_not_shorter_than_the_dag_s_period_is_refused() -> None:
    CopyConfig(budget_seconds=599).check_budget("budget_seconds", 600)
    with pytest.raises(ConfigError, match=r"copy.budget_seconds: 600 s is not shorter than the DAG's period of 600 s"):
        CopyConfig(budget_seconds=600).check_budget("budget_seconds", 600)
    with pytest.raises(ConfigError, match=r"copy.retention_budget_seconds: 3600 s"):
        CopyConfig(retention_budget_seconds=3600).check_budget("retention_budget_seconds", 3600)
