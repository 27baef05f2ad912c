"""``tiering --broker ID`` (or ``TIERING_BROKER_ID``) on a cluster config: each process reads only
its own broker's log dirs; commands that read none need no broker id."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from tests.cli.test_commands import run
from tests.engine_support import write_segments
from tiering_core.cli.commands import reads_log_dirs
from tiering_core.demo.writer import PartitionWriter
from tiering_core.kafka.topic import TopicPartition


@pytest.fixture()
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two brokers, each with its own log dir and one partition of ``orders``; a filesystem tier."""
    monkeypatch.delenv("TIERING_BROKER_ID", raising=False)
    for broker_id, partition in ((1, 0), (2, 1)):
        w = PartitionWriter(tmp_path / f"broker-{broker_id}", TopicPartition("orders", partition), node_id=broker_id)
        write_segments(w, 2)
        w.append_records(2)
        w.set_high_watermark()
    doc = {
        "brokers": {1: {"log_dirs": ["broker-1"]}, 2: {"log_dirs": ["broker-2"], "queue": "host-2"}},
        "metadata": {"url": "sqlite:///m.db"},
        "remote": {"backend": "filesystem", "root": "tier"},
    }
    path = tmp_path / "tiering.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_each_broker_process_copies_only_its_own_partitions(
    cluster: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = str(cluster)
    code, _, err = run(capsys, "--config", cfg, "copy")
    assert code == 1 and err.count("\n") == 1
    assert "brokers: 2 brokers are configured (1, 2); name this process's broker with --broker ID" in err
    code, out, _ = run(capsys, "--config", cfg, "--broker", "1", "--json", "copy")
    assert code == 0 and [(r["partition"], r["segments_copied"]) for r in json.loads(out)] == [(0, 2)]
    code, out, _ = run(capsys, "--config", cfg, "--json", "copy", "--broker", "2")  # after the command too
    assert code == 0 and [(r["partition"], r["segments_copied"]) for r in json.loads(out)] == [(1, 2)]
    monkeypatch.setenv("TIERING_BROKER_ID", "2")
    code, out, _ = run(capsys, "--config", cfg, "--json", "status")
    # broker 2's own partition from its disk; broker 1's only from the store (its disk is not read)
    rows = {r["partition"]: (r["high_watermark"], r["remote_segments"]) for r in json.loads(out)}
    assert code == 0 and rows == {0: (None, 2), 1: (12, 2)}
    code, out, _ = run(capsys, "--config", cfg, "--broker", "1", "--json", "status")  # the flag wins
    rows = {r["partition"]: (r["high_watermark"], r["remote_segments"]) for r in json.loads(out)}
    assert code == 0 and rows == {0: (12, 2), 1: (None, 2)}


def test_commands_that_read_no_log_dir_need_no_broker(cluster: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = str(cluster)
    assert run(capsys, "--config", cfg, "--broker", "2", "copy")[0] == 0
    code, out, err = run(capsys, "--config", cfg, "--json", "segments", "--topic", "orders", "--partition", "1")
    assert code == 0 and [(s["start_offset"], s["end_offset"]) for s in json.loads(out)] == [(0, 4), (5, 9)], err
    code, _, err = run(capsys, "--config", cfg, "db", "current")
    assert code == 0, err


def test_unknown_or_wrong_broker_ids_are_one_line_errors(
    cluster: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = str(cluster)
    code, _, err = run(capsys, "--config", cfg, "--broker", "9", "status")
    assert code == 1 and "brokers.9: no such broker in the config (configured: 1, 2)" in err and err.count("\n") == 1
    monkeypatch.setenv("TIERING_BROKER_ID", "one")
    code, _, err = run(capsys, "--config", cfg, "status")
    assert code == 1 and "TIERING_BROKER_ID: expected a broker id" in err
    monkeypatch.delenv("TIERING_BROKER_ID")
    # broker 1's config names broker 2's disk (a worker on the wrong host): refused, nothing read
    doc = yaml.safe_load(cluster.read_text())
    doc["brokers"][1]["log_dirs"] = ["broker-2"]
    doc["brokers"][2]["log_dirs"] = ["broker-1"]
    cluster.write_text(yaml.safe_dump(doc))
    code, _, err = run(capsys, "--config", cfg, "--broker", "1", "copy")
    assert code == 1 and "brokers.1.log_dirs: " in err and "belongs to broker 2 by its meta.properties" in err
    with pytest.raises(SystemExit) as exit_:
        run(capsys, "--config", cfg, "--broker", "x", "status")
    assert exit_.value.code == 2 and "--broker: expected a broker id" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "cluster_view", "reads"),
    [
        ("status", False, True),
        ("status", True, False),  # the cluster view is built from the store
        ("copy", False, True),
        ("retention", False, True),
        ("delete-partition", False, True),
        ("delete-records", False, True),
        ("rebuild-indexes", False, True),
        ("segments", False, False),
        ("fetch", False, False),
        ("find-offset", False, False),
        ("verify", False, False),
        ("restore", False, False),
        ("db", False, False),
    ],
)
def test_which_commands_need_this_process_s_broker(command: str, cluster_view: bool, reads: bool) -> None:
    assert reads_log_dirs(argparse.Namespace(command=command, cluster=cluster_view)) is reads
