"""Kafka accepts any int64 timestamp a producer chooses: such records export (``timestamp``
clamped to the years 0001-9999 a day partition can hold, the timestamp as Kafka holds it in
``timestamp_ms``), and a segment of many distinct days keeps its open files bounded (a process
limited to a few hundred file descriptors exports a segment of 1,500 days)."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine_support import TieringEnv
from tests.export.support import sqlite_catalog, table_of, with_export
from tiering_core.cli import main
from tiering_core.export.table import MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS
from tiering_core.runs.copy import run_copy

ROOT = Path(__file__).resolve().parents[2]
INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)
HOSTILE = [9_300_000_000_000_000, -100_000_000_000_000, INT64_MAX, INT64_MIN, -1, 0, 1_700_000_000_000]


def utc(ms: int) -> datetime.datetime:
    return datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(milliseconds=ms)


def test_any_int64_timestamp_exports_clamped_with_the_timestamp_kept(
    tiering_env: TieringEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = tiering_env.writer("orders", 0)
    for i, ts in enumerate(HOSTILE):
        w.append([(f"k{i}".encode(), f"v{i}".encode())], timestamp=ts)
    w.roll()
    w.append([(b"k", b"active")])
    w.set_high_watermark()
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with tiering_env.context() as ctx:
        assert run_copy(ctx, w.tp).segments_copied == 1
    assert main(["--config", str(tiering_env.config_path), "export", "--topic", "orders"]) == 0, capsys.readouterr()
    with tiering_env.context() as ctx:
        table = table_of(ctx, "orders")
        rows = table.scan(selected_fields=("offset", "timestamp", "timestamp_ms")).to_arrow().to_pylist()
    assert [r["offset"] for r in sorted(rows, key=lambda r: r["offset"])] == list(range(len(HOSTILE)))
    for row in rows:
        raw = HOSTILE[row["offset"]]
        assert row["timestamp_ms"] == raw
        assert row["timestamp"] == utc(min(max(raw, MIN_TIMESTAMP_MS), MAX_TIMESTAMP_MS))
    with tiering_env.context() as ctx:  # the day partitions hold, and filter, as any other
        table = table_of(ctx, "orders")
        late = table.scan(row_filter="timestamp >= '9999-12-31T00:00:00+00:00'").to_arrow()
        assert sorted(late["timestamp_ms"].to_pylist()) == [9_300_000_000_000_000, INT64_MAX]


_LIMITED = """
import resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
from tiering_core.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_a_segment_of_many_days_exports_with_few_file_descriptors(fs_env: TieringEnv, tmp_path: Path) -> None:
    days = 1_500
    w = fs_env.writer("orders", 0)
    for day in range(days):  # one record a day, out of order: every group spans many days
        shuffled = (day * 7919) % days
        w.append([(f"k{day}".encode(), b"v" * 20)], timestamp=shuffled * 86_400_000 + 1234)
    w.roll()
    w.append([(b"k", b"active")])
    w.set_high_watermark()
    with_export(fs_env, sqlite_catalog(tmp_path))
    with fs_env.context() as ctx:
        assert run_copy(ctx, w.tp).segments_copied == 1
    limit = 256  # far fewer than the segment's days
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _LIMITED,
            str(limit),
            "--config",
            str(fs_env.config_path),
            "export",
            "--topic",
            "orders",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with fs_env.context() as ctx:
        table = table_of(ctx, "orders")
        files = [t.file for t in table.scan().plan_files()]
        got = table.scan(selected_fields=("offset", "timestamp_ms")).to_arrow()
    assert sorted(got["offset"].to_pylist()) == list(range(days))
    assert len(files) == days and all(f.record_count == 1 for f in files)  # one file a day
    assert sorted(f.partition[1] for f in files) == list(range(days))  # its day partition
