"""``tiering status --cluster``: the cluster view from the metadata store (SQLite and PostgreSQL),
with no broker id and no log dir read: each broker's replica, the best one, copy lag on it, and
stale brokers (a configured broker that never reported is stale, never waited for)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli.test_commands import run
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.topic import TopicPartition

TOPIC_ID = "mYmOgOlwTqyLnR1xXuOhUA"


def config(tmp_path: Path, url: str, **cluster: Any) -> str:
    doc: dict[str, Any] = {
        "brokers": {b: {"log_dirs": [f"broker-{b}"]} for b in (1, 2, 3)},
        "metadata": {"url": url},
        "remote": {"backend": "filesystem", "root": "tier"},
    }
    if cluster:
        doc["cluster"] = cluster
    path = tmp_path / "tiering.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def replica(tmp_path: Path, broker: int, high_watermark: int) -> PartitionWriter:
    w = PartitionWriter(
        tmp_path / f"broker-{broker}", TopicPartition("orders", 0), topic_id=TOPIC_ID, seed=1, node_id=broker
    )
    for _ in range(3):
        w.append_records(5, value_size=30, per_batch=5)
        w.roll()
    w.append_records(2, value_size=30)
    w.set_high_watermark(high_watermark)
    return w


def test_status_cluster_shows_each_broker_s_replica_the_best_and_stale_brokers(
    tmp_path: Path, metadata_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TIERING_BROKER_ID", raising=False)
    cfg = config(tmp_path, metadata_url)
    replica(tmp_path, 1, 12)
    replica(tmp_path, 2, 17)  # broker 3 serves nothing: no worker ever reports for it
    code, out, err = run(capsys, "--config", cfg, "--json", "status", "--cluster")
    assert (code, json.loads(out)) == (0, []), err

    assert run(capsys, "--config", cfg, "--broker", "1", "status")[0] == 0
    code, out, err = run(capsys, "--config", cfg, "--broker", "2", "--json", "copy")
    assert code == 0, err
    assert [(r["segments_copied"], r["skipped_reason"]) for r in json.loads(out)] == [(3, None)]
    code, out, err = run(capsys, "--config", cfg, "--broker", "1", "--json", "copy")
    assert code == 0, err
    (skipped,) = json.loads(out)
    assert skipped["skipped_reason"] == "broker 2 holds a more advanced replica (LSO 17 > 12)"

    code, out, err = run(capsys, "--config", cfg, "--json", "status", "--cluster")  # no --broker needed
    assert code == 0, err
    (row,) = json.loads(out)
    assert (row["topic"], row["partition"], row["topic_id"]) == ("orders", 0, TOPIC_ID)
    assert row["best_broker"] == 2 and row["stale_brokers"] == [3]
    assert row["highest_copied_offset"] == 14 and row["copy_lag_offsets"] == 2  # 15, 16 below LSO 17
    assert row["remote_segments"] == 3 and row["gaps"] == [] and row["delete_state"] is None
    replicas = {r["broker_id"]: r for r in row["replicas"]}
    assert sorted(replicas) == [1, 2]
    assert (replicas[1]["high_watermark"], replicas[1]["last_stable_offset"], replicas[1]["leader_epoch"]) == (
        12,
        12,
        0,
    )
    assert (replicas[2]["last_stable_offset"], replicas[2]["local_log_start_offset"], replicas[2]["stale"]) == (
        17,
        0,
        False,
    )
    assert replicas[1]["age_ms"] >= 0
    # fetch needs no broker either: without one it reads the remote tier alone
    code, out, err = run(
        capsys, "--config", cfg, "--json", "fetch", "--topic", "orders", "--partition", "0", "--offset", "3"
    )
    assert code == 0, err
    assert [r["offset"] for r in json.loads(out)] == list(range(3, 13))

    code, out, _ = run(capsys, "--config", cfg, "status", "--cluster", "--topic", "orders")
    assert code == 0
    header, line = out.strip().splitlines()
    assert header.split()[:8] == [
        "PARTITION",
        "BEST",
        "COPIED",
        "LAG-OFFSETS",
        "REMOTE-SEGMENTS",
        "REMOTE-SIZE",
        "DELETE",
        "STALE",
    ]
    assert line.startswith("orders-0") and " 2*:17/17 e0 @0 " in line and " 1:12/12 e0 @0 " in line
    stale = header.index("STALE")
    assert line[stale:].split()[0] == "3" and line[: header.index("LAG-OFFSETS") + len("LAG-OFFSETS")].endswith(" 2")
    assert re.search(r" \d+(\.\d)? (B|KiB) ", line), line  # the remote size in human units

    time.sleep(0.05)
    cfg = config(tmp_path, metadata_url, observation_staleness_ms=1)  # every observation is stale now
    code, out, _ = run(capsys, "--config", cfg, "--json", "status", "--cluster")
    (row,) = json.loads(out)
    assert row["best_broker"] is None and row["copy_lag_offsets"] is None and row["stale_brokers"] == [1, 2, 3]
    assert all(r["stale"] for r in row["replicas"])
    code, out, _ = run(capsys, "--config", cfg, "status", "--cluster")
    assert " 1!:12/12 " in out and " 2!:17/17 " in out
