"""``tiering erase``'s options: refused in one line without --yes (or --dry-run), without a topic
or a key; --key and --key-file exclude each other. The command erases the tier and the topic's
export table, and ``--status`` lists both parts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.engine_support import TieringEnv
from tests.export.support import sqlite_catalog, table_of, with_export
from tiering_core.cli import main
from tiering_core.export import run_export
from tiering_core.read.reader import open_reader
from tiering_core.runs.copy import run_copy


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--topic", "orders", "--key", "user-1"], "refusing to erase records of orders without --yes"),
        (["--key", "user-1", "--yes"], "erase needs --topic"),
        (["--topic", "orders", "--yes"], "erase needs --key or --key-file"),
    ],
)
def test_an_incomplete_erasure_is_refused_in_one_line(
    argv: list[str], reason: str, capsys: pytest.CaptureFixture[str], tmp_path
) -> None:
    config = tmp_path / "unused.yaml"  # refused before any config is read
    assert main(["--config", str(config), "erase", *argv]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and reason in err
    assert "user-1" not in err


def test_key_and_key_file_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["erase", "--topic", "orders", "--key", "a", "--key-file", "keys.txt", "--yes"])
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("tiering_env", ["sqlite"], indirect=True)
def test_the_command_erases_the_tier_and_the_export_table_and_its_status_shows_both(
    tiering_env: TieringEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = tiering_env.writer("orders", 0)
    w.append([(b"user-1", b"a"), (b"user-2", b"b")])
    w.roll()
    w.append([(b"user-1", b"c"), (b"user-3", b"d")])
    w.roll()
    w.set_high_watermark()
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        assert not run_export(ctx, "orders", commit_bytes=1).failed
    config = ["--config", str(tiering_env.config_path)]
    assert main([*config, "erase", "--topic", "orders", "--key", "user-1", "--dry-run"]) == 0
    planned = capsys.readouterr().out.splitlines()
    assert (
        "table kafka.orders: would delete 2 row(s) and 2 data file(s) holding the key(s), would expire 2 snapshot(s)"
        in planned
    )
    assert main([*config, "--json", "erase", "--topic", "orders", "--key", "user-1", "--yes"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["records_removed"] == 2 and result["failures"] == []
    (table,) = result["tables"]
    assert (table["table"], table["rows_deleted"], table["data_files_deleted"]) == ("kafka.orders", 2, 2)
    with tiering_env.context() as ctx:
        table_now = table_of(ctx, "orders")
        assert all(
            b"user-1" not in table_now.scan(snapshot_id=s.snapshot_id).to_arrow()["key"].to_pylist()
            for s in table_now.snapshots()
        )
        assert [r.key for r in open_reader(ctx, w.tp).read(0, 100)] == [b"user-2", b"user-3"]
    assert main([*config, "--json", "erase", "--status", "--topic", "orders"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r.get("partition"), r.get("table"), r["outcome"]) for r in rows] == [
        (0, None, "finished"),
        (None, "kafka.orders", "finished"),
    ]
    assert main([*config, "erase", "--status", "--topic", "orders"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{result['erasure_id']} orders-0 ")  # the partition's lines, then the table's
    table = [line for line in lines if line.startswith(f"{result['erasure_id']} table ")]
    assert table == [line for line in lines[1:] if " table " in line] and len(table) == 1, lines
    assert table[0].startswith(f"{result['erasure_id']} table kafka.orders finished: 2 row(s) deleted, 2 data file(s)")
