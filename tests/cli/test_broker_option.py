"""``tiering --broker ID`` (or ``TIERING_BROKER_ID``) on a cluster config: each process reads only
its own broker's log dirs; commands that read none need no broker id."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from tests.cli.test_commands import run
from tests.engine_support import counted_view_builds, write_segments
from tiering_core.cli.commands import reads_log_dirs
from tiering_core.kafka.log_writer import PartitionWriter
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


def test_a_broker_s_copy_builds_each_partition_s_view_once(cluster: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Once, under the lease: the replica choice is made there, from the view it reads, and the
    end reads none again."""
    for broker_id in (1, 2):
        with counted_view_builds() as builds:
            code, out, _ = run(capsys, "--config", str(cluster), "--broker", str(broker_id), "--json", "copy")
        assert code == 0 and [r["segments_copied"] for r in json.loads(out)] == [2]
        assert [path.parent.name for path in builds] == [f"broker-{broker_id}"]
        assert list(builds.values()) == [1]


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
        ("rebuild-indexes", False, False),  # what the store holds; --local skips the broker's files
        ("rewrite", False, False),
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


@pytest.fixture()
def tiered(cluster: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Path:
    """The two-broker config after each broker copied its partition, with an export catalog."""
    from tests.export.support import sqlite_catalog

    for broker in ("1", "2"):
        assert run(capsys, "--config", str(cluster), "--broker", broker, "copy")[0] == 0
    doc = yaml.safe_load(cluster.read_text())
    doc["export"] = {"catalog": sqlite_catalog(tmp_path)}
    cluster.write_text(yaml.safe_dump(doc))
    return cluster


def _topic_id(config: Path, partition: int) -> str:
    from tiering_core.config import load_config
    from tiering_core.metadata.store import RemoteLogMetadataStore

    with RemoteLogMetadataStore(load_config(config).metadata.url) as store:
        (record,) = [r for r in store.list_partitions() if r.partition == partition]
    return record.topic_id


SEL_0 = ("--topic", "orders", "--partition", "0")  # broker 1's partition
SEL_1 = ("--topic", "orders", "--partition", "1")  # broker 2's


@pytest.mark.parametrize(
    ("argv", "check"),
    [
        (("segments", *SEL_0), lambda out: [s["start_offset"] for s in out] == [0, 5]),
        (("segments", *SEL_1), lambda out: [s["start_offset"] for s in out] == [0, 5]),
        (
            ("fetch", *SEL_1, "--offset", "3", "--max-records", "4"),
            lambda out: [r["offset"] for r in out] == [3, 4, 5, 6],
        ),
        (("find-offset", *SEL_0, "--timestamp", "0"), lambda out: out["offset"] == 0),
        (("restore", *SEL_1, "--to", "{tmp}/restored"), lambda out: (out["segments"], out["end_offset"]) == (2, 9)),
        (  # every partition the store knows, both brokers'
            ("verify",),
            lambda out: (
                sorted((r["partition"], r["start_offset"]) for r in out if r["ok"]) == [(0, 0), (0, 5), (1, 0), (1, 5)]
            ),
        ),
        (("verify", *SEL_1), lambda out: [(r["partition"], r["ok"]) for r in out] == [(1, True), (1, True)]),
        (("export", "--topic", "orders"), lambda out: not out["failed"] and out["rows"] == 20),
        (("export", *SEL_1), lambda out: not out["failed"] and out["rows"] == 10),
        (  # the broker's own files are not read here: its remote segments only
            ("rebuild-indexes", *SEL_1, "--local"),
            lambda out: (out["partition"], out["segments"], out["ok"]) == (1, 2, 2),
        ),
        (  # nothing stored in another format: each partition's segments left as they are
            ("rewrite", "--topic", "orders"),
            lambda out: (
                [(r["partition"], r["segments_current"], r["segments_rewritten"]) for r in out]
                == [(0, 2, 0), (1, 2, 0)]
            ),
        ),
        (("status", "--cluster"), lambda out: [(r["partition"], r["best_broker"]) for r in out] == [(0, 1), (1, 2)]),
        (("retention", "--orphans"), lambda out: out == []),
        (("db", "current"), lambda out: bool(out["revision"])),
        (("db", "upgrade"), lambda out: bool(out["revision"])),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else None,
)
def test_a_command_that_reads_no_log_dir_works_without_a_broker_id(
    tiered: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: tuple[str, ...], check: object
) -> None:
    """Through the real command on the two-broker config, no ``--broker`` and no
    ``TIERING_BROKER_ID`` (the scheduler's or the API server's host): it works on the metadata
    store and the remote tier alone, for every broker's partitions."""
    argv = tuple(a.replace("{tmp}", str(tmp_path)) for a in argv)
    code, out, err = run(capsys, "--config", str(tiered), "--json", *argv)
    assert code == 0, err
    assert check(json.loads(out)), out  # type: ignore[operator]


def test_a_tombstone_is_lifted_without_a_broker_id(tiered: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = str(tiered)
    topic_id = _topic_id(tiered, 1)
    removal = ("delete-partition", *SEL_1, "--topic-id", topic_id, "--yes")
    code, _, err = run(capsys, "--config", cfg, "--broker", "2", *removal, "--force")
    assert code == 0, err
    code, out, err = run(capsys, "--config", cfg, "--json", *removal, "--lift-tombstone")
    assert code == 0 and json.loads(out)["tombstone_lifted"] is True, err


@pytest.mark.parametrize(
    "argv",
    [
        ("segments",),
        ("fetch", "--offset", "0"),
        ("verify",),
        ("find-offset", "--timestamp", "0"),
        ("rebuild-indexes",),
        ("rewrite",),
    ],
)
def test_a_partition_the_store_does_not_know_is_named_not_a_missing_broker_id(
    tiered: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    code, _, err = run(capsys, "--config", str(tiered), *argv, "--topic", "orders", "--partition", "7")
    assert code == 1 and err.count("\n") == 1, err
    assert "partition orders-7 has no remote data (unknown to the metadata store)" in err


def test_serving_no_broker_the_local_indexes_are_skipped_in_one_line_and_a_rewrite_takes_the_store_s_partitions(
    tiered: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``rebuild-indexes --local`` where no log dir is read says why the broker's files are not
    checked; ``rewrite`` with a new format re-encodes what each broker copied, reading no log dir."""
    cfg = str(tiered)
    code, out, err = run(capsys, "--config", cfg, "rebuild-indexes", *SEL_0, "--local", "--check-only")
    skipped = [line for line in out.splitlines() if "local indexes" in line]
    assert code == 0 and skipped == [
        "rebuild-indexes: local indexes of 1 partition(s) skipped: this process serves no broker (no log dir to "
        "read); the remote segments are checked"
    ], (out, err)
    doc = yaml.safe_load(tiered.read_text())
    doc["remote"].update(chunk_size=8192, compression="zstd")
    tiered.write_text(yaml.safe_dump(doc))
    code, out, err = run(capsys, "--config", cfg, "--json", "rewrite", "--topic", "orders")
    rewritten = [(r["partition"], r["segments_rewritten"], r["segments_current"]) for r in json.loads(out)]
    assert code == 0 and rewritten == [(0, 2, 0), (1, 2, 0)], err
    code, out, err = run(capsys, "--config", cfg, "--json", "verify")
    assert code == 0 and len(json.loads(out)) == 4 and all(r["ok"] for r in json.loads(out)), err
    code, _, err = run(capsys, "--config", cfg, "export", "--topic", "orders", "--partition", "7")
    assert code == 1 and err == "tiering: topic orders partition 7 has no remote data\n"


@pytest.mark.parametrize(
    "argv",
    [
        ("status",),
        ("copy",),
        ("retention",),
        ("delete-partition", "--topic", "orders", "--partition", "0", "--yes"),
        ("delete-records", "--topic", "orders", "--partition", "0", "--before-offset", "3", "--yes"),
    ],
)
def test_commands_that_read_log_dirs_still_need_the_broker_id(
    cluster: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    code, _, err = run(capsys, "--config", str(cluster), *argv)
    assert code == 1 and err.count("\n") == 1, err
    assert "brokers: 2 brokers are configured (1, 2); name this process's broker with --broker ID" in err


def test_the_single_broker_form_records_under_its_log_dir_s_broker_and_refuses_another(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``log_dirs:`` without ``--broker``: the runs record under the ``node.id`` of the log dir's
    ``meta.properties``; a ``--broker`` or ``TIERING_BROKER_ID`` naming another is refused."""
    from tiering_core.config import load_config
    from tiering_core.context import TieringContext

    monkeypatch.delenv("TIERING_BROKER_ID", raising=False)
    w = PartitionWriter(tmp_path / "kafka", TopicPartition("orders", 0), node_id=4)
    write_segments(w, 2)
    w.set_high_watermark()
    doc = {
        "log_dirs": ["kafka"],
        "metadata": {"url": "sqlite:///m.db"},
        "remote": {"backend": "filesystem", "root": "tier"},
    }
    path = tmp_path / "tiering.yaml"
    path.write_text(yaml.safe_dump(doc))
    cfg = str(path)
    code, _, err = run(capsys, "--config", cfg, "--broker", "2", "copy")
    assert code == 1 and "log_dirs: " in err and "belongs to broker 4 by its meta.properties, not to broker 2" in err
    monkeypatch.setenv("TIERING_BROKER_ID", "2")
    code, _, err = run(capsys, "--config", cfg, "copy")
    assert code == 1 and "belongs to broker 4 by its meta.properties, not to broker 2" in err
    monkeypatch.delenv("TIERING_BROKER_ID")
    with TieringContext.open(load_config(path)) as ctx:
        assert ctx.metadata.latest_observations().replicas == {}  # nothing was read, nothing recorded
    code, out, err = run(capsys, "--config", cfg, "--json", "copy")
    assert code == 0 and [r["segments_copied"] for r in json.loads(out)] == [2], err
    with TieringContext.open(load_config(path)) as ctx:
        (replicas,) = ctx.metadata.latest_observations().replicas.values()
    assert list(replicas) == [4] and replicas[4].copy_lag_segments == 0
