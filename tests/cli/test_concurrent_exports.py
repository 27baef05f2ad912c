"""Two real ``tiering export`` processes on one table at once: the second exits with a clear
message and touches nothing of the first's (even from another PID namespace, where the first's
process id means nothing), and the first exports each offset once. An export that stalls past its
table lease is taken over: the newer export exports everything once, the stalled one commits
nothing when it wakes, and its files are removed once the table moved on.

The first export is the real command, held after its first segment's data files are written
(nothing committed) until the test lets it go: it waits for a file to appear, as the test waits
for its "ready" file."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.cli.test_export_command import TOPIC, export, table_offsets, uncommitted_files
from tests.engine_support import TieringEnv
from tests.export.support import (
    build_partition,
    sqlite_catalog,
    wait_until_table_is_free,
    with_export,
    with_lease_ms,
)
from tiering_core.kafka.isolation import IsolationLevel
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.read.reader import open_reader
from tiering_core.runs.copy import run_copy

ROOT = Path(__file__).resolve().parents[2]


def copied(env: TieringEnv, writers: list[PartitionWriter]) -> dict[int, list[int]]:
    """The writers' partitions copied; the read_committed offsets fetch returns for each."""
    with env.context() as ctx:
        for w in writers:
            run_copy(ctx, w.tp)
        return {
            w.tp.partition: [r.offset for r in open_reader(ctx, w.tp).read(0, 100_000, IsolationLevel.READ_COMMITTED)]
            for w in writers
        }


_HELD_AFTER_ITS_FIRST_SEGMENT = """
import sys, time
from pathlib import Path
import tiering_core.export.run as run

ready, go = Path(sys.argv[1]), Path(sys.argv[2])
real = run.write_segment_files
calls = []

def write_segment_files(*args, **kwargs):
    files = real(*args, **kwargs)
    calls.append(1)
    if len(calls) == 1:  # its first segment's files are written, nothing is committed yet
        ready.write_text("\\n".join(files))
        while not go.exists():
            time.sleep(0.02)
    return files

run.write_segment_files = write_segment_files
from tiering_core.cli import main
sys.exit(main(sys.argv[3:]))
"""


def tiering(env: TieringEnv, command: str) -> list[str]:
    return ["--config", str(env.config_path), command, "--topic", TOPIC]


def held_export(env: TieringEnv, tmp_path: Path) -> tuple[subprocess.Popen[str], Path, list[Path]]:
    """The first export, started and held once its first segment's files are written: the
    process, the file that lets it go on, and the files it wrote."""
    ready, go = tmp_path / "ready", tmp_path / "go"
    proc = subprocess.Popen(
        [sys.executable, "-c", _HELD_AFTER_ITS_FIRST_SEGMENT, str(ready), str(go), *tiering(env, "export")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not ready.exists() or not ready.read_text():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the first export ended before its first segment was written: {out}{err}")
        assert time.monotonic() < deadline, "the first export never wrote its first segment"
        time.sleep(0.05)
    written = [Path(url.removeprefix("file://")) for url in ready.read_text().splitlines()]
    assert written and all(p.exists() for p in written)
    return proc, go, written


def in_another_pid_namespace(command: list[str]) -> list[str]:
    """``command`` in a PID namespace of its own (as in another container of the same host name),
    where the first export's process id is nobody's; as it is where user namespaces are denied."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return command
    probe = subprocess.run([unshare, "--user", "--map-root-user", "--pid", "--fork", "true"], capture_output=True)
    if probe.returncode != 0:
        return command
    return [unshare, "--user", "--map-root-user", "--pid", "--fork", *command]


def test_a_second_export_of_the_table_exits_naming_the_first_and_touches_none_of_its_files(
    tiering_env: TieringEnv, tmp_path: Path
) -> None:
    want = copied(tiering_env, [build_partition(tiering_env, TOPIC, p) for p in (0, 1)])
    with_export(tiering_env, sqlite_catalog(tmp_path))
    first, go, written = held_export(tiering_env, tmp_path)
    try:
        second = subprocess.run(
            in_another_pid_namespace([sys.executable, "-m", "tiering_core.cli", *tiering(tiering_env, "export")]),
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert second.returncode == 1, second.stdout + second.stderr
        err = second.stderr.strip()
        assert err.startswith(f"tiering: export to kafka.{TOPIC}: another export holds the table, try again later")
        assert "\n" not in err and "(token 1)" in err
        assert all(p.exists() for p in written)  # the first export's uncommitted files are untouched
        assert table_offsets_or_none(tiering_env) is None  # and nothing was committed by the second
    finally:
        go.touch()
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, out + err
    assert table_offsets(tiering_env) == want  # each offset once
    assert all(p.exists() for p in written)  # committed, kept
    assert uncommitted_files(tiering_env, tmp_path / "warehouse") == []


def table_offsets_or_none(env: TieringEnv) -> dict[int, list[int]] | None:
    """The table's offsets per partition, None while it has no snapshot."""
    with env.context() as ctx:
        from tiering_core.export import load_catalog, open_table, table_name

        table = open_table(load_catalog(ctx.config), table_name(ctx.config.export, TOPIC), create=False)
        if table is None or table.current_snapshot() is None:
            return None
    return table_offsets(env)


def test_an_export_that_stalls_past_its_lease_is_taken_over_and_commits_nothing(
    tiering_env: TieringEnv, tmp_path: Path
) -> None:
    writers = [build_partition(tiering_env, TOPIC, p) for p in (0, 1)]
    want = copied(tiering_env, writers)
    with_export(tiering_env, sqlite_catalog(tmp_path))
    with_lease_ms(tiering_env, 5_000)
    stalled, go, written = held_export(tiering_env, tmp_path)
    os.kill(stalled.pid, signal.SIGSTOP)  # a stalled process: its lease is renewed no more
    try:
        wait_until_table_is_free(tiering_env, f"kafka.{TOPIC}")
        assert export(tiering_env) == 0  # the newer export: everything, once
        assert table_offsets(tiering_env) == want
        # it moved the table on, so the stalled export can land nothing: its files went
        assert not any(p.exists() for p in written)
    finally:
        go.touch()
        os.kill(stalled.pid, signal.SIGCONT)
    out, err = stalled.communicate(timeout=300)
    assert stalled.returncode == 1, out + err
    reason = err.strip().splitlines()[-1]  # the command's one line, after the library's log lines
    assert reason.startswith("tiering: ") and "no longer holds the table" in reason, err
    assert table_offsets(tiering_env) == want  # it committed nothing
    # what it wrote after it woke is removed by the next export that moves the table on
    for w in writers:
        w.append_records(5)
        w.roll()
        w.set_high_watermark()
    want = copied(tiering_env, writers)
    assert export(tiering_env) == 0
    assert table_offsets(tiering_env) == want
    assert uncommitted_files(tiering_env, tmp_path / "warehouse") == []
