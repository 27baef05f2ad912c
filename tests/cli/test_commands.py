"""The ``tiering`` command: JSON contracts, exit codes, one-line errors, and the demo."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine_support import TieringEnv, write_segments
from tiering_core.cli import main
from tiering_core.tier.status import STATUS_FIELDS

ROOT = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_status_copy_segments_json_contract(fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]) -> None:
    w = fs_env.writer()
    w.append_records(10)
    w.become_leader(3)
    write_segments(w, 2)
    w.set_high_watermark()
    cfg = str(fs_env.config_path)
    code, out, _ = run(capsys, "--config", cfg, "--json", "copy", "--dry-run")
    assert code == 0 and [p["base_offset"] for p in json.loads(out)[0]["planned"]] == [0, 15]
    code, out, _ = run(capsys, "--config", cfg, "--json", "copy")
    assert code == 0 and json.loads(out)[0]["segments_copied"] == 2
    code, out, _ = run(capsys, "--config", cfg, "--json", "status")
    (row,) = json.loads(out)
    assert set(STATUS_FIELDS) <= set(row)
    assert (row["topic"], row["partition"], row["leader_epoch"], row["highest_copied_offset"]) == ("orders", 0, 3, 19)
    assert (row["remote_segments"], row["copy_lag_segments"], row["gaps"]) == (2, 0, [])
    code, out, _ = run(capsys, "--config", cfg, "--json", "segments", "--topic", "orders", "--partition", "0")
    seg, second = json.loads(out)
    assert (second["start_offset"], second["end_offset"]) == (15, 19)
    assert set(seg) == {
        "segment_id",
        "topic",
        "partition",
        "start_offset",
        "end_offset",
        "leader_epochs",
        "max_timestamp",
        "size_bytes",
        "state",
        "objects",
    }
    assert seg["leader_epochs"] == {"0": 0, "3": 10} and seg["state"] == "COPY_SEGMENT_FINISHED"
    assert set(seg["objects"]) == {"log", "index", "timeindex", "snapshot", "leader-epoch-checkpoint", "keyfilter"}
    code, out, _ = run(capsys, "--config", cfg, "status")
    assert code == 0 and "orders-0" in out


def test_errors_are_one_line_and_nonzero(fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]) -> None:
    fs_env.writer().set_high_watermark()
    cfg = str(fs_env.config_path)
    code, _, err = run(capsys, "--config", cfg, "delete-partition", "--topic", "orders", "--partition", "0")
    assert code != 0 and "--yes" in err and err.count("\n") == 1
    code, _, err = run(capsys, "--config", cfg, "status", "--topic", "nope")
    assert code != 0 and "'nope'" in err and err.count("\n") == 1
    bad = fs_env.root / "bad.yaml"
    bad.write_text("log_dirs: [x]\nmetadata: {url: 'sqlite:///m.db'}\nremote: {backend: s4}\n")
    code, _, err = run(capsys, "--config", str(bad), "status")
    assert code != 0 and "remote.backend" in err and err.count("\n") == 1


def test_gap_exit_code(fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]) -> None:
    w = fs_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    cfg = str(fs_env.config_path)
    assert run(capsys, "--config", cfg, "copy")[0] == 0
    write_segments(w, 3)
    w.set_high_watermark()
    w.delete_oldest_segments(3)
    code, _, err = run(capsys, "--config", cfg, "copy")
    assert code == 3 and "tiering gap" in err


def test_fetch_find_offset_and_verify_contracts(fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]) -> None:
    import base64

    w = fs_env.writer()
    w.append([(b"k0", b"v0", [("trace", b"t0")]), (None, b"v1")])
    write_segments(w, 2)
    w.append_records(3)
    w.set_high_watermark()
    cfg = str(fs_env.config_path)
    select = ("--topic", "orders", "--partition", "0")
    assert run(capsys, "--config", cfg, "copy")[0] == 0

    code, out, _ = run(capsys, "--config", cfg, "--json", "fetch", *select, "--offset", "0", "--max-records", "3")
    first, second, third = json.loads(out)
    assert code == 0 and set(first) == {"offset", "timestamp", "leader_epoch", "key", "value", "headers"}
    assert (first["offset"], base64.b64decode(first["key"]), base64.b64decode(first["value"])) == (0, b"k0", b"v0")
    assert first["headers"] == [{"key": "trace", "value": base64.b64encode(b"t0").decode()}]
    assert (second["key"], third["offset"], third["leader_epoch"]) == (None, 2, 0)

    at = str(third["timestamp"])
    code, out, _ = run(capsys, "--config", cfg, "--json", "find-offset", *select, "--timestamp", at)
    assert code == 0 and json.loads(out) == {
        "offset": 2,
        "timestamp": third["timestamp"],
        "leader_epoch": 0,
    }
    code, out, _ = run(capsys, "--config", cfg, "--json", "find-offset", *select, "--timestamp", str(2**62))
    assert code == 0 and json.loads(out) is None

    code, out, err = run(capsys, "--config", cfg, "fetch", *select, "--offset", "999")
    assert code == 1 and "above the remote tier" in err and err.count("\n") == 1

    code, out, _ = run(capsys, "--config", cfg, "--json", "verify")
    assert code == 0 and [r["ok"] for r in json.loads(out)] == [True, True]
    with fs_env.context() as ctx:
        from tests.engine_support import tip_of
        from tiering_core.engine.segment_ops import segment_ref
        from tiering_core.storage.layout import ObjectKind

        segment = ctx.metadata.list_segments(tip_of(w))[1]
        ctx.storage.delete_keys([segment_ref(segment).key(ObjectKind.LOG, ctx.storage.prefix)])
    code, out, err = run(capsys, "--config", cfg, "verify")
    assert code == 1 and "1 with problems" in out
    assert f"segment {segment.start_offset}..{segment.end_offset}" in err and "log: object" in err


def test_an_undecodable_manifest_is_its_segments_error_and_verify_goes_on(
    fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.engine_support import tip_of
    from tests.storage.legacy_support import make_legacy
    from tiering_core.engine.segment_ops import segment_ref
    from tiering_core.storage.layout import ObjectKind

    fs_env.remote.update(compression="zstd", chunk_size=8192)  # format 2: fetch reads the manifest too
    fs_env.write_config()
    w = fs_env.writer()
    write_segments(w, 3)
    w.append_records(2)
    w.set_high_watermark()
    cfg = str(fs_env.config_path)
    assert run(capsys, "--config", cfg, "copy")[0] == 0
    with fs_env.context() as ctx:
        bad, *good = ctx.metadata.list_segments(tip_of(w))
        # copied before manifest digests (whose store digest would refuse any other manifest
        # unread): the manifest itself is decoded, and nested past what the decoder takes
        make_legacy(ctx, bad)
        key = segment_ref(bad).key(ObjectKind.MANIFEST, ctx.storage.prefix)
        ctx.storage.put_object(key, b"[" * 400_000)
        why = f"{ctx.storage.describe(key)}: segment manifest is not valid JSON: nested too deep"
    assert f"{bad.start_offset:020d}-{bad.segment_id}.manifest.json" in why

    code, out, err = run(capsys, "--config", cfg, "--json", "verify")
    results = json.loads(out)
    assert code == 1 and [(r["segment_id"], r["ok"]) for r in results] == [
        (str(bad.segment_id), False),
        *((str(s.segment_id), True) for s in good),
    ]
    assert len(good) == 2 and results[0]["problems"] == [f"manifest: {why}"]
    assert f"segment {bad.start_offset}..{bad.end_offset} ({bad.segment_id}): manifest: " in err and why in err

    select = ("--topic", "orders", "--partition", "0")
    code, out, err = run(capsys, "--config", cfg, "fetch", *select, "--offset", str(bad.start_offset))
    assert code == 1 and out == "" and err.count("\n") == 1 and why in err and "Traceback" not in err
    code, out, _ = run(capsys, "--config", cfg, "--json", "fetch", *select, "--offset", str(good[0].start_offset))
    assert code == 0 and json.loads(out)[0]["offset"] == good[0].start_offset


@pytest.mark.parametrize("backend", ["filesystem", "s3"])
def test_demo_runs_end_to_end(tmp_path: Path, backend: str) -> None:
    spark = backend == "s3"  # once with the Spark step (spark-submit on local[2]), once without
    proc = subprocess.run(
        [sys.executable, "-m", "tiering_core.cli", "demo", "--dir", str(tmp_path / "demo"), "--backend", backend]
        + ([] if spark else ["--no-spark"]),
        cwd=ROOT,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "orders-0: copied segment 0 [0.." in proc.stdout and "payments-0" in proc.stdout  # per-segment progress
    if spark:
        assert "with the Spark parallel upload app on local[2]" in proc.stdout
        assert "(and topic clicks on Spark)" in proc.stdout
        assert "demo:   clicks-0: copied segment 0" in proc.stdout  # the Spark app's progress, relayed
        assert not any(line.startswith("clicks-0: copied") for line in proc.stdout.splitlines())  # not the engine
    else:
        assert any(line.startswith("clicks-0: copied segment") for line in proc.stdout.splitlines())
    assert "finished segment(s)" in proc.stdout and ", 0 with problems" in proc.stdout  # verified after the copy
    assert "demo:   offset 0 leader_epoch 0 key b'key-0'" in proc.stdout  # read back from the remote tier
    table = [line for line in proc.stdout.splitlines() if re.match(r"(orders|payments|clicks)-\d+ +\d", line)]
    assert len(table) == 6
    status = subprocess.run(
        [
            sys.executable,
            "-m",
            "tiering_core.cli",
            "--config",
            str(tmp_path / "demo" / "tiering.yaml"),
            "--json",
            "segments",
            "--topic",
            "orders",
            "--partition",
            "0",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert status.returncode == 0 and len(json.loads(status.stdout)) >= 3


def test_demo_json_keeps_stdout_one_document_and_never_wipes_a_foreign_dir(tmp_path: Path) -> None:
    foreign = tmp_path / "kafka-data"
    foreign.mkdir()
    (foreign / "orders-0").mkdir()
    demo = [sys.executable, "-m", "tiering_core.cli", "demo", "--backend", "filesystem", "--no-spark"]
    refused = subprocess.run([*demo, "--dir", str(foreign)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and "was not made by `tiering demo`" in refused.stderr
    assert (foreign / "orders-0").is_dir()  # untouched
    target = tmp_path / "demo"
    for _ in range(2):  # a rerun replaces what the first run made
        proc = subprocess.run(
            [*demo, "--dir", str(target), "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        rows = json.loads(proc.stdout)
        assert len(rows) == 6 and {r["topic"] for r in rows} == {"orders", "payments", "clicks"}
        assert "demo: built a Kafka log dir" in proc.stderr


def test_global_options_also_after_the_command(fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]) -> None:
    w = fs_env.writer()
    write_segments(w, 1)
    w.set_high_watermark()
    cfg = str(fs_env.config_path)
    assert run(capsys, "copy", "--config", cfg)[0] == 0
    code, out, _ = run(capsys, "segments", "--topic", "orders", "--partition", "0", "--json", "--config", cfg)
    assert code == 0 and [s["start_offset"] for s in json.loads(out)] == [0]
    code, out, _ = run(capsys, "--json", "status", "--config", cfg)
    assert code == 0 and json.loads(out)[0]["highest_copied_offset"] == 4


def test_status_partition_needs_a_topic(fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]) -> None:
    fs_env.writer().set_high_watermark()
    code, _, err = run(capsys, "--config", str(fs_env.config_path), "status", "--partition", "0")
    assert code == 1 and "--partition needs --topic" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (FileNotFoundError(2, "No such file or directory", "/logs/orders-0/00000000000000000000.log"), "No such file"),
        (ValueError("something\nspanning lines"), "failed unexpectedly: ValueError: something spanning lines"),
    ],
)
def test_unexpected_errors_are_one_line_too(
    fs_env: TieringEnv, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, error, expected
) -> None:
    import tiering_core.tier.status as status_mod

    def broken(*args, **kwargs):
        raise error

    monkeypatch.setattr(status_mod, "collect_status", broken)
    fs_env.writer().set_high_watermark()
    code, out, err = run(capsys, "--config", str(fs_env.config_path), "status")
    assert code == 1 and out == "" and expected in err and err.count("\n") == 1 and "Traceback" not in err


def test_retention_delete_records_and_status_report_where_the_remote_tier_starts(
    fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    w = fs_env.writer()
    write_segments(w, 3)  # [0..4], [5..9], [10..14]
    w.append_records(2)
    w.set_high_watermark()
    cfg = str(fs_env.config_path)
    select = ("--topic", "orders", "--partition", "0")
    assert run(capsys, "--config", cfg, "copy")[0] == 0
    code, out, _ = run(capsys, "--config", cfg, "delete-records", *select, "--before-offset", "7", "--yes")
    assert code == 0 and json.loads(json.dumps({"ok": True})) and "log start offset is now 7" in out
    code, out, _ = run(capsys, "--config", cfg, "--json", "status", *select)
    (row,) = json.loads(out)
    # [0..4] breaches the log start now: retention would delete it; remote reads start at 7.
    assert (row["log_start_offset"], row["remote_log_start_offset"]) == (7, 7)
    assert (row["delete_lag_segments"], row["delete_lag_bytes"]) == (1, (w.path / f"{0:020d}.log").stat().st_size)
    code, out, _ = run(capsys, "--config", cfg, "retention", "--dry-run")
    assert code == 0 and "orders-0: would delete 1 segment(s)" in out
    code, out, _ = run(capsys, "--config", cfg, "retention")
    assert code == 0 and "orders-0: deleted 1 segment(s)" in out
    code, out, _ = run(capsys, "--config", cfg, "--json", "status", *select)
    (row,) = json.loads(out)
    assert (row["remote_segments"], row["remote_log_start_offset"], row["delete_lag_segments"]) == (2, 7, 0)
    code, out, _ = run(capsys, "--config", cfg, "status")
    assert "DEL-LAG" in out.splitlines()[0]


def test_status_names_the_offsets_only_the_tier_holds_and_delete_records_checks_before_it_applies(
    fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    w = fs_env.writer()
    write_segments(w, 3)  # [0..4], [5..9], [10..14]
    w.append_records(2)
    w.set_high_watermark()  # 17
    cfg = str(fs_env.config_path)
    select = ("--topic", "orders", "--partition", "0")
    assert run(capsys, "--config", cfg, "copy")[0] == 0
    w.delete_oldest_segments(1)  # the broker's own retention: its log start is 5

    def status() -> dict:
        code, out, _ = run(capsys, "--config", cfg, "--json", "status", *select)
        assert code == 0
        (row,) = json.loads(out)
        return dict(row)

    row = status()
    assert (row["log_start_offset"], row["local_log_start_offset"], row["remote_log_start_offset"]) == (0, 5, 0)
    assert row["remote_only_offsets"] == [0, 4] and row["gaps"] == []
    code, out, _ = run(capsys, "--config", cfg, "status", *select)
    assert code == 0 and "remote only 0..4 (below the broker's log start, read from the tier)" in out

    delete = ("delete-records", *select, "--before-offset")
    code, out, err = run(capsys, "--config", cfg, *delete, "18", "--yes")
    assert (code, out) == (1, "") and "offset 18 is beyond the high watermark 17" in err and err.count("\n") == 1
    code, _, err = run(capsys, "--config", cfg, *delete, "3")
    assert code == 1 and "without --yes" in err
    code, out, _ = run(capsys, "--config", cfg, *delete, "3", "--dry-run")
    assert code == 0 and "the log start offset would be 3 (dry run: nothing applied)" in out
    assert status() == row
    code, out, _ = run(capsys, "--config", cfg, "--json", *delete, "3", "--yes")
    result = json.loads(out)
    assert code == 0 and (result["log_start_offset"], result["sent_to_cluster"], result["dry_run"]) == (3, False, False)
    code, out, _ = run(capsys, "--config", cfg, *delete, "3", "--yes")  # again: the same answer
    assert code == 0 and "log start offset is now 3" in out and "no kafka: section" in out
    row = status()
    assert (row["log_start_offset"], row["remote_log_start_offset"], row["remote_only_offsets"]) == (3, 3, [3, 4])


def test_delete_partition_names_topic_ids_and_refuses_one_still_on_the_broker(
    fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    w = fs_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    cfg = str(fs_env.config_path)
    select = ("--topic", "orders", "--partition", "0")
    assert run(capsys, "--config", cfg, "copy")[0] == 0
    code, _, err = run(capsys, "--config", cfg, "delete-partition", *select, "--yes")
    assert code == 1 and w.topic_id in err and "--topic-id" in err and err.count("\n") == 1
    named = ("delete-partition", *select, "--topic-id", w.topic_id)
    code, _, err = run(capsys, "--config", cfg, *named, "--dry-run")  # named: the controller's word still counts
    assert code == 1 and "no word from the controller" in err and "--force" in err and err.count("\n") == 1
    code, out, _ = run(capsys, "--config", cfg, *named, "--dry-run", "--force")
    assert code == 0 and f"(topic id {w.topic_id}): would delete 2 segment(s)" in out
    remove = (*named, "--yes", "--force")
    code, out, _ = run(capsys, "--config", cfg, "--json", *remove)
    result = json.loads(out)
    assert code == 0 and (result["segments_deleted"], result["state"]) == (2, "DELETE_PARTITION_FINISHED")


def test_orphans_dry_run_deletes_nothing_and_grace_must_be_positive(
    fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    import time

    from tests.engine_support import tip_of
    from tests.runs.test_orphans import killed_copy, unrecorded

    w = fs_env.writer()
    write_segments(w, 1)
    w.set_high_watermark()
    cfg = str(fs_env.config_path)
    assert run(capsys, "--config", cfg, "copy")[0] == 0
    with fs_env.context() as ctx:
        stray, unknown = killed_copy(ctx, tip_of(w), base=100)[0], unrecorded(ctx, tip_of(w), base=200)[0]
    time.sleep(0.05)
    code, _, err = run(capsys, "--config", cfg, "retention", "--delete-orphans", "--grace-ms", "0")
    assert code == 1 and "grace" in err and err.count("\n") == 1
    dry = ("retention", "--delete-orphans", "--dry-run", "--grace-ms", "1")
    code, out, _ = run(capsys, "--config", cfg, "--json", *dry)
    listed = {o["key"]: (o["kind"], o["deleted"]) for o in json.loads(out)}
    assert code == 0 and listed[stray] == ("object", False) and listed[unknown] == ("unrecorded", False)
    code, out, _ = run(capsys, "--config", cfg, "retention", "--delete-orphans", "--grace-ms", "1")
    assert code == 0 and f"deleted object {stray}" in out and f"kept unrecorded {unknown}" in out
    assert "`tiering recover` adds the segment back" in out
    code, out, _ = run(capsys, "--config", cfg, "retention", "--orphans")
    assert code == 0 and stray not in out and f"kept unrecorded {unknown}" in out


def test_delete_partition_needs_evidence_or_force_and_a_tombstone_can_be_lifted(
    fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.engine_support import kafka_creates_topic

    w = fs_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    kafka_creates_topic(w)
    cfg = str(fs_env.config_path)
    select = ("--topic", "orders", "--partition", "0")
    assert run(capsys, "--config", cfg, "copy")[0] == 0
    live = w.path
    moved = w.delete()  # reassigned away: the same -delete rename a deletion makes
    code, _, err = run(capsys, "--config", cfg, "delete-partition", *select, "--yes")
    assert code == 1 and f"still has topic id {w.topic_id}" in err and "--force" in err and err.count("\n") == 1
    code, out, _ = run(capsys, "--config", cfg, "--json", "delete-partition", *select, "--yes", "--force")
    assert code == 0 and json.loads(out)["state"] == "DELETE_PARTITION_FINISHED"
    moved.rename(live)  # it was live after all
    lift = ("delete-partition", *select, "--topic-id", w.topic_id, "--lift-tombstone")
    code, _, err = run(capsys, "--config", cfg, *lift)
    assert code == 1 and "--yes" in err
    code, out, _ = run(capsys, "--config", cfg, *lift, "--yes")
    assert code == 0 and f"(topic id {w.topic_id}): tombstone lifted" in out
    code, out, _ = run(capsys, "--config", cfg, "--json", "copy")
    assert code == 0 and '"segments_copied": 2' in out


def test_status_and_copy_say_why_a_delayed_segment_waits(
    fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """``remote.copy.lag.ms`` 10 minutes and ``remote.copy.lag.bytes`` 64 MiB, segments written two
    minutes ago: ``status`` (its table and its JSON ``copy_delay``) and ``copy`` say what waits and
    why, and the copy uploads nothing."""
    import time

    written = int(time.time() * 1000) - 120_000
    w = fs_env.writer(clock=lambda: written)
    write_segments(w, 2)
    w.append_records(1)
    w.set_high_watermark()
    fs_env.write_config(orders={"remote.copy.lag.ms": 600_000, "remote.copy.lag.bytes": 64 * 1024**2})
    cfg = str(fs_env.config_path)
    code, out, _ = run(capsys, "--config", cfg, "status")
    assert code == 0
    assert re.search(
        r"orders-0 .*waiting: 2 segment\(s\) from 0 \([0-9.]+ (B|KiB)\): remote\.copy\.lag\.ms 600000, "
        r"segment 0 is [2-9]m old; [0-9.]+ (B|KiB) after it of remote\.copy\.lag\.bytes 64\.0 MiB",
        out,
    ), out
    code, out, _ = run(capsys, "--config", cfg, "--json", "status")
    delay = json.loads(out)[0]["copy_delay"]
    assert (delay["base_offset"], delay["waiting_segments"], delay["copy_lag_ms"]) == (0, 2, 600_000)
    assert delay["copy_lag_bytes"] == 64 * 1024**2 and 120_000 <= delay["segment_age_ms"] < 600_000
    code, out, err = run(capsys, "--config", cfg, "--json", "copy")
    (result,) = json.loads(out)
    assert code == 0 and result["segments_copied"] == 0 and result["copy_delay"]["waiting_segments"] == 2
    assert "orders-0: waiting: 2 segment(s) from 0" in err


def test_a_partition_whose_high_watermark_is_not_checkpointed_yet_waits_for_the_next_copy(
    fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """A topic created within the broker's checkpoint interval: ``replication-offset-checkpoint`` has
    no entry for it yet. ``copy`` skips it with that reason (exit 0, nothing copied) while the other
    partition is copied; ``status`` says so instead of reporting an error; once the broker has
    checkpointed it, the next copy copies it."""
    ready, new = fs_env.writer("orders", 0), fs_env.writer("orders", 1)
    write_segments(ready, 2)
    ready.set_high_watermark()
    write_segments(new, 2)  # no high watermark checkpointed for orders-1 yet
    cfg = str(fs_env.config_path)
    code, out, err = run(capsys, "--config", cfg, "--json", "copy")
    results = {r["partition"]: r for r in json.loads(out)}
    assert code == 0, err
    assert results[0]["segments_copied"] == 2
    assert results[1]["segments_copied"] == 0
    assert "has not checkpointed" in results[1]["skipped_reason"], results[1]
    assert re.search(r"orders-1: skipped \(waiting for the broker's first high watermark checkpoint", err), err
    code, out, _ = run(capsys, "--config", cfg, "--json", "status")
    rows = {r["partition"]: r for r in json.loads(out)}
    assert code == 0 and rows[1]["error"] is None and rows[1]["last_stable_offset"] is None
    assert "has not checkpointed" in rows[1]["copy_skipped_reason"] and rows[0]["copy_skipped_reason"] is None
    code, out, _ = run(capsys, "--config", cfg, "status")
    assert code == 0 and "copy skipped: waiting for the broker's first high watermark checkpoint" in out
    new.set_high_watermark()
    code, out, err = run(capsys, "--config", cfg, "--json", "copy")
    results = {r["partition"]: r for r in json.loads(out)}
    assert code == 0 and results[1]["segments_copied"] == 2 and results[1]["skipped_reason"] is None, err


def test_version_prints_the_package_version_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    from tiering_core import __version__

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 0
    assert out == f"tiering {__version__}\n" and err == ""


@pytest.mark.parametrize(
    ("argv", "dest", "value"),
    [
        (["fetch", "--topic", "t", "--partition", "0", "--offset", "0"], "isolation", "read_uncommitted"),
        (["export", "--topic", "t"], "isolation", "read_committed"),
        (["replay", "--topic", "t", "--from-offset", "0", "--target-topic", "u"], "isolation", "read_committed"),
    ],
)
def test_isolation_level_is_kafkas_name_and_isolation_its_deprecated_alias(
    argv: list[str], dest: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from tiering_core.cli.main import build_parser

    other = "read_committed" if value == "read_uncommitted" else "read_uncommitted"
    parser = build_parser()
    assert getattr(parser.parse_args(argv), dest) == value
    assert getattr(parser.parse_args([*argv, "--isolation-level", other]), dest) == other
    assert getattr(parser.parse_args([*argv, "--isolation", other]), dest) == other
    with pytest.raises(SystemExit):
        parser.parse_args([argv[0], "--help"])
    help_text = capsys.readouterr().out
    assert "--isolation-level" in help_text and "--isolation {" not in help_text


def test_bootstrap_server_is_kafkas_name_and_bootstrap_servers_its_deprecated_alias(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tiering_core.cli.main import build_parser

    replay = ["replay", "--topic", "t", "--from-offset", "0", "--target-topic", "u"]
    parser = build_parser()
    assert parser.parse_args(replay).bootstrap_servers is None
    assert parser.parse_args([*replay, "--bootstrap-server", "a:9092"]).bootstrap_servers == "a:9092"
    assert parser.parse_args([*replay, "--bootstrap-servers", "a:9092"]).bootstrap_servers == "a:9092"
    for name in ("--bootstrap-server", "--bootstrap-servers"):
        with pytest.raises(SystemExit) as refused:
            parser.parse_args([*replay, "--target", "dr", name, "a:9092"])
        assert refused.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["replay", "--help"])
    help_text = capsys.readouterr().out
    assert "--bootstrap-server HOST:PORT" in help_text and "--bootstrap-servers HOST:PORT" not in help_text


def test_other_libraries_log_nothing_without_verbose(fs_env: TieringEnv) -> None:
    """``status`` against a cluster that refuses connections: without ``-v`` one line on stderr,
    the command's own (kafka-python logs each retried connection); with ``-v`` its records show."""
    w = fs_env.writer()
    write_segments(w, 1)
    w.set_high_watermark()
    fs_env.sections = {"kafka": {"bootstrap_servers": "127.0.0.1:1", "request_timeout_ms": 1000}}
    fs_env.write_config()
    cli = [sys.executable, "-m", "tiering_core.cli", "--config", str(fs_env.config_path)]
    quiet = subprocess.run([*cli, "status"], capture_output=True, text=True, timeout=60)
    lines = quiet.stderr.splitlines()
    assert quiet.returncode == 1 and 1 <= len(lines) <= 2, quiet.stderr
    assert lines[-1].startswith("tiering: kafka: the cluster at 127.0.0.1:1 did not answer"), quiet.stderr
    verbose = subprocess.run([*cli, "-v", "status"], capture_output=True, text=True, timeout=60)
    assert verbose.returncode == 1 and " kafka.net." in verbose.stderr, verbose.stderr


def test_copy_dry_run_creates_nothing_and_agrees_with_the_copy(
    fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    w = fs_env.writer()
    w.append_records(10)
    write_segments(w, 3)
    w.set_high_watermark()
    w2 = fs_env.writer(partition=1)
    write_segments(w2, 2)
    w2.set_high_watermark()
    store, tier = fs_env.root / "m.db", fs_env.root / "tier"
    cfg = str(fs_env.config_path)
    code, out, _ = run(capsys, "--config", cfg, "copy", "--dry-run")
    assert code == 0 and not store.exists() and not tier.exists()
    assert sorted(p.name for p in fs_env.root.iterdir()) == ["kafka-logs", "tiering.yaml"]
    lines = out.splitlines()
    would = [line for line in lines if "would copy" in line and not line.startswith("copy:")]
    assert len(would) == 5, out
    assert re.fullmatch(r"copy: 2 partition\(s\), would copy 5 segment\(s\), .*", lines[-1]), out
    code, out, _ = run(capsys, "--config", cfg, "copy")
    assert code == 0 and re.fullmatch(r"copy: 2 partition\(s\), 5 segment\(s\), .*", out.splitlines()[-1]), out
    assert out.splitlines()[-1].split(", ")[-1] == lines[-1].split(", ")[-1]  # the same bytes
    assert store.exists() and tier.exists()
    code, out, _ = run(capsys, "--config", cfg, "copy", "--dry-run")
    assert code == 0 and out.splitlines()[-1].startswith("copy: 2 partition(s), would copy 0 segment(s)"), out


def test_copy_to_an_unreachable_endpoint_ends_with_a_summary_of_its_failures(
    fs_env: TieringEnv, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    fs_env.remote = {
        "backend": "s3",
        "bucket": "nowhere",
        "endpoint_url": "http://127.0.0.1:1",
        "region": "us-east-1",
        "max_attempts": 1,
        "timeout_seconds": 1,
    }
    fs_env.write_config()
    for partition in (0, 1):
        w = fs_env.writer(partition=partition)
        write_segments(w, 2)
        w.set_high_watermark()
    code, out, err = run(capsys, "--config", str(fs_env.config_path), "copy")
    assert code == 1
    assert out.splitlines()[-1] == "copy: 2 partition(s), 0 segment(s), 0 B, 2 partition(s) failed", out
    failed = err.splitlines()
    assert [line.split(": ")[2] for line in failed] == ["orders-0", "orders-1"], err
    assert all(line.startswith("tiering: copy failed: ") and "127.0.0.1:1" in line for line in failed), err


def test_the_command_gives_other_libraries_loggers_back_as_they_were(
    fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """Quiet while it runs (``test_other_libraries_log_nothing_without_verbose``), as they were
    after: a caller in the same process (the demo, a test that reads kafka-python's log) is not
    left with the command's levels."""
    import logging

    from tiering_core.cli.main import QUIET_LOGGERS

    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    before = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.DEBUG)
    try:
        assert run(capsys, "--config", str(fs_env.config_path), "status")[0] == 0
        assert [lg.level for lg in loggers] == [logging.DEBUG] * len(loggers)
    finally:
        for lg, level in zip(loggers, before, strict=True):
            lg.setLevel(level)


def test_an_unreachable_cluster_is_one_line_within_the_connect_timeout(fs_env: TieringEnv) -> None:
    """``status`` (the cluster's offsets) and ``replay`` (the cluster written) against a cluster
    that refuses connections: one line on stderr naming it, after one bootstrap of
    ``request_timeout_ms``, not one per partition or per retry."""
    import time

    for partition in (0, 1):
        w = fs_env.writer(partition=partition)
        write_segments(w, 1)
        w.set_high_watermark()
    cli = [sys.executable, "-m", "tiering_core.cli", "--config", str(fs_env.config_path)]
    assert subprocess.run([*cli, "copy"], capture_output=True, timeout=120).returncode == 0
    fs_env.sections = {"kafka": {"bootstrap_servers": "127.0.0.1:1", "request_timeout_ms": 2000}}
    fs_env.write_config()
    replay = ["replay", "--topic", "orders", "--from-offset", "0", "--target-topic", "copy-of-orders"]
    for argv in (["status"], replay):
        started = time.monotonic()
        done = subprocess.run([*cli, *argv], capture_output=True, text=True, timeout=120)
        took = time.monotonic() - started
        lines = done.stderr.splitlines()
        assert done.returncode == 1 and 1 <= len(lines) <= 2 and done.stdout == "", (argv, done.stderr, done.stdout)
        assert lines[-1].startswith("tiering: kafka: the cluster at 127.0.0.1:1 did not answer ("), done.stderr
        assert lines[-1].count("KafkaTimeoutError") == 1, done.stderr
        assert took < 60, (argv, took)  # the interpreter's start and one 2 s bootstrap, never a retry per partition
