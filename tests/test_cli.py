"""The ``tiering`` command: JSON contracts, exit codes, one-line errors, and the demo."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine_support import TieringEnv, write_segments
from tiering_core.cli import main
from tiering_core.status import STATUS_FIELDS

ROOT = Path(__file__).resolve().parents[1]


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
    assert set(seg["objects"]) == {"log", "index", "timeindex", "snapshot", "leader-epoch-checkpoint"}
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
        from tiering_core.remote_segments import segment_ref
        from tiering_core.storage.layout import ObjectKind

        segment = ctx.metadata.list_segments(tip_of(w))[1]
        ctx.storage.delete_keys([segment_ref(segment).key(ObjectKind.LOG, ctx.storage.prefix)])
    code, out, err = run(capsys, "--config", cfg, "verify")
    assert code == 1 and "1 with problems" in out
    assert f"segment {segment.start_offset}..{segment.end_offset}" in err and "log: object" in err


@pytest.mark.parametrize("backend", ["filesystem", "s3"])
def test_demo_runs_end_to_end(tmp_path: Path, backend: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tiering_core.cli", "demo", "--dir", str(tmp_path / "demo"), "--backend", backend],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "copied" in proc.stderr and "payments-0" in proc.stdout
    assert "finished segment(s)" in proc.stdout and ", 0 with problems" in proc.stdout  # verified after the copy
    assert "demo:   offset 0 leader_epoch 0 key b'key-0'" in proc.stdout  # read back from the remote tier
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("orders-", "payments-", "clicks-"))]
    assert len(rows) == 6
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
