"""The command's tables: one formatter lines every column up, sizes and ages in human units (the
raw numbers stay in ``--json``), and LAG counts offsets in ``status`` and ``status --cluster``
alike, named so in the header."""

from __future__ import annotations

import json
import re

import pytest

from tests.cli.test_commands import run
from tests.engine_support import TieringEnv, write_segments
from tiering_core.humanize import fmt_bytes
from tiering_core.report.tables import LAG_OFFSETS, Column, format_table


def column_starts(header: str) -> list[int]:
    return [m.start() for m in re.finditer(r"\S+", header)]


def assert_aligned(table: str, numeric: set[str]) -> None:
    """Each left-aligned column's cells start where its header starts; each numeric one's end where
    its header ends (the last column is free text)."""
    header, *rows = table.splitlines()
    names = header.split()
    starts = column_starts(header)
    for row in rows:
        for name, start in zip(names[:-1], starts[:-1], strict=True):
            if name in numeric:
                end = start + len(name)
                assert row[end - 1] != " " and (end == len(row) or row[end] == " "), (name, row)
            else:
                assert row[start] != " " and (start == 0 or row[start - 1] == " "), (name, row)


def tiered_partition(fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]) -> str:
    """orders-0 with two copied segments and records below the LSO not tiered yet; the config."""
    w = fs_env.writer()
    write_segments(w, 2, records=20)
    w.set_high_watermark()
    cfg = str(fs_env.config_path)
    assert run(capsys, "--config", cfg, "copy")[0] == 0
    w.append_records(7, value_size=2000)
    w.roll()
    w.append_records(3)
    w.set_high_watermark()
    return cfg


def test_the_formatter_aligns_text_left_numbers_right_and_leaves_the_last_column_free() -> None:
    table = format_table(
        [Column("NAME"), Column("SIZE", numeric=True), Column("NOTES")],
        [["a", "60.8 KiB", "x"], ["longer-name", "1 B", "-"]],
    )
    assert table.splitlines() == [
        "NAME             SIZE  NOTES",
        "a            60.8 KiB  x",
        "longer-name       1 B  -",
    ]
    with pytest.raises(ValueError, match="3 cells"):
        format_table([Column("A"), Column("B"), Column("C")], [["only two", "cells"]])


def test_status_shows_sizes_in_human_units_and_lag_in_offsets_as_the_cluster_view_does(
    fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tiered_partition(fs_env, capsys)
    code, out, _ = run(capsys, "--config", cfg, "--json", "status")
    (row,) = json.loads(out)
    assert code == 0 and isinstance(row["remote_bytes"], int) and row["remote_bytes"] > 1024
    lag = row["last_stable_offset"] - (row["highest_copied_offset"] + 1)
    assert row["copy_lag_offsets"] == lag and lag > row["copy_lag_segments"] > 0

    code, out, _ = run(capsys, "--config", cfg, "status")
    header, line = out.splitlines()
    assert code == 0 and f" {LAG_OFFSETS} " in header and " LAG-SEGMENTS " in header and " LAG " not in header
    assert_aligned(out, numeric=set(header.split()[1:13]))
    end = header.index(LAG_OFFSETS) + len(LAG_OFFSETS)
    assert line[:end].split()[-1] == str(lag)
    size_end = header.index("REMOTE-SIZE") + len("REMOTE-SIZE")
    assert line[:size_end].endswith(fmt_bytes(row["remote_bytes"])) and str(row["remote_bytes"]) not in line

    code, out, _ = run(capsys, "--config", cfg, "--json", "status", "--cluster")
    (cluster,) = json.loads(out)
    assert code == 0 and cluster["copy_lag_offsets"] == lag
    code, out, _ = run(capsys, "--config", cfg, "status", "--cluster")
    header, line = out.splitlines()
    assert code == 0 and f" {LAG_OFFSETS} " in header
    assert_aligned(out, numeric={"BEST", "COPIED", LAG_OFFSETS, "REMOTE-SEGMENTS", "REMOTE-SIZE"})
    end = header.index(LAG_OFFSETS) + len(LAG_OFFSETS)
    assert line[:end].split()[-1] == str(lag)
    assert re.search(r" @\d+ \d+(ms|s|m|h|d)( \d+(s|m|h))?(;|,|$)", line), line  # the replica's age: "850ms", "1m 5s"


def test_segments_lines_up_every_row_and_reads_sizes_in_human_units(
    fs_env: TieringEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tiered_partition(fs_env, capsys)
    select = ("--topic", "orders", "--partition", "0")
    code, out, _ = run(capsys, "--config", cfg, "--json", "segments", *select)
    rows = json.loads(out)
    assert code == 0 and len(rows) == 2 and all(isinstance(r["size_bytes"], int) for r in rows)
    code, out, _ = run(capsys, "--config", cfg, "segments", *select)
    header, *lines = out.splitlines()
    assert code == 0 and header.split() == ["START", "END", "SIZE", "STATE", "EPOCHS", "SEGMENT-ID"]
    assert_aligned(out, numeric={"START", "END", "SIZE"})
    for r, line in zip(rows, lines, strict=True):
        assert fmt_bytes(r["size_bytes"]) in line and line.endswith(r["segment_id"])
