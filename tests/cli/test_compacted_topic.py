"""A topic whose own entry is compacted while ``"*"`` enables remote storage: Kafka refuses remote
storage for it, so it is not tiered and every other topic is; copy, retention and status say why,
as when the cluster says a topic is compacted. (Written out beside ``compact``, remote storage is
a config error: tests/config/test_topics.py.)"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.cli.test_commands import run
from tests.engine_support import TieringEnv, write_segments

REASON = "cleanup.policy compact: Kafka never tiers a compacted topic"


@pytest.fixture()
def env(fs_env: TieringEnv) -> TieringEnv:
    for topic in ("orders", "ledger"):
        w = fs_env.writer(topic, 0)
        write_segments(w, 2)
        w.append_records(2)
        w.set_high_watermark()
    doc = yaml.safe_load(fs_env.config_path.read_text())
    doc["topics"] = {
        "*": {"remote.storage.enable": True, "retention.ms": -1, "retention.bytes": -1},
        "ledger": {"cleanup.policy": "compact"},
    }
    fs_env.config_path.write_text(yaml.safe_dump(doc))
    return fs_env


def test_the_compacted_topic_is_skipped_with_its_reason_and_the_rest_tiered(
    env: TieringEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = str(env.config_path)
    code, out, err = run(capsys, "--config", cfg, "--json", "copy", "--dry-run")
    assert code == 0, err
    planned = {r["topic"]: (len(r["planned"]), r["skipped_reason"]) for r in json.loads(out)}
    assert planned == {"ledger": (0, REASON), "orders": (2, None)}
    code, out, err = run(capsys, "--config", cfg, "copy")
    assert code == 0, err
    assert f"ledger-0: skipped ({REASON})" in out
    code, out, err = run(capsys, "--config", cfg, "--json", "copy")
    copied = {r["topic"]: (r["segments_copied"], r["skipped_reason"]) for r in json.loads(out)}
    assert code == 0 and copied == {"ledger": (0, REASON), "orders": (0, None)}  # orders: copied before

    code, out, err = run(capsys, "--config", cfg, "--json", "status")
    assert code == 0, err
    rows = {r["topic"]: r for r in json.loads(out)}
    assert rows["ledger"]["not_tiered_reason"] == REASON and rows["ledger"]["remote_segments"] == 0
    assert rows["orders"]["not_tiered_reason"] is None and rows["orders"]["remote_segments"] == 2
    code, out, _ = run(capsys, "--config", cfg, "status")
    (ledger_line,) = [line for line in out.splitlines() if line.startswith("ledger-0")]
    assert f"not tiered: {REASON}" in ledger_line

    code, out, err = run(capsys, "--config", cfg, "--json", "retention")
    assert code == 0, err
    skipped = {r["topic"]: r["skipped_reason"] for r in json.loads(out)}
    assert skipped == {"ledger": REASON, "orders": None}
