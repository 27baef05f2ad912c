"""The last line of a run over partitions counts what it tried and what failed, and agrees with
the failures' lines on stderr (one per failed partition)."""

from __future__ import annotations

import pytest

from tests.cli.test_commands import run
from tests.engine_support import TieringEnv, write_segments
from tiering_core.replay.run import OUTCOME_FAILED, PartitionReplayResult, ReplayResult
from tiering_core.report.summaries import format_replay_summary, format_retention_summary, format_rewrite_summary
from tiering_core.runs.retention import RetentionResult
from tiering_core.runs.rewrite import RewriteResult


def test_a_copy_summary_counts_the_segments_a_dry_run_would_copy_and_the_partitions_that_failed() -> None:
    from tiering_core.report.summaries import format_copy_summary
    from tiering_core.runs.copy_report import CopyResult

    def planned(*sizes: int) -> list[dict[str, int]]:
        return [{"base_offset": i, "end_offset": i, "size_bytes": size} for i, size in enumerate(sizes)]

    dry = [CopyResult("orders", 0, dry_run=True, planned=planned(1024, 1024)), CopyResult("orders", 1, dry_run=True)]
    assert format_copy_summary(dry) == "copy: 2 partition(s), would copy 2 segment(s), 2.0 KiB"
    real = [CopyResult("orders", 0, segments_copied=2, bytes_copied=2048)]
    assert format_copy_summary(real) == "copy: 1 partition(s), 2 segment(s), 2.0 KiB"
    failed = "copy: 3 partition(s), 2 segment(s), 2.0 KiB, 2 partition(s) failed"
    assert format_copy_summary(real, partitions=3, failed=2) == failed


def test_retention_rewrite_and_replay_summaries_count_the_failed_partitions() -> None:
    deleted = [RetentionResult("orders", 0, segments_deleted=3, bytes_deleted=3 * 1024), RetentionResult("orders", 1)]
    assert format_retention_summary(deleted, 3, 1) == (
        "retention: 3 partition(s), deleted 3 segment(s), 3.0 KiB, 1 partition(s) failed"
    )
    planned = [RetentionResult("orders", 0, dry_run=True, planned=[{"segment_id": "a"}, {"segment_id": "b"}])]
    assert format_retention_summary(planned, 1, 0) == "retention: 1 partition(s), would delete 2 segment(s)"
    rewrote = [RewriteResult("orders", 0, segments_rewritten=2)]
    assert (
        format_rewrite_summary(rewrote, 2, 1) == "rewrite: 2 partition(s), rewrote 2 segment(s), 1 partition(s) failed"
    )
    replayed = PartitionReplayResult("orders", 0, "id", "copy", 0, 9, records=10, bytes=2048)
    failed = PartitionReplayResult("orders", 1, "id", "copy", outcome=OUTCOME_FAILED, detail="refused")
    lines = format_replay_summary(ReplayResult("orders", "id", "copy", [replayed, failed])).splitlines()
    assert lines[:2] == [
        "  orders-0: replayed, offsets 0-9, 10 record(s)",
        "  orders-1: failed, nothing in range, 0 record(s): refused",
    ]
    assert lines[-1].startswith("replay orders (topic id id) -> copy: 10 record(s), 2.0 KiB from 2 partition(s)")
    assert lines[-1].endswith(", 1 partition(s) failed")


@pytest.mark.parametrize("command", ["retention", "rewrite"])
def test_a_run_against_an_unreachable_endpoint_ends_with_a_summary_of_its_failures(
    fs_env: TieringEnv, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    for partition in (0, 1):
        w = fs_env.writer(partition=partition)
        write_segments(w, 2)
        w.set_high_watermark()
    cfg = str(fs_env.config_path)
    assert run(capsys, "--config", cfg, "copy")[0] == 0
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
    fs_env.write_config(**{"*": {"retention.ms": 1, "retention.bytes": -1}})
    code, out, err = run(capsys, "--config", cfg, command)
    failed = err.splitlines()
    assert code == 1 and [line.split(": ")[2] for line in failed] == ["orders-0", "orders-1"], err
    assert all(line.startswith(f"tiering: {command} failed: ") and "127.0.0.1:1" in line for line in failed), err
    verb = "deleted" if command == "retention" else "rewrote"
    assert out.splitlines()[-1].startswith(f"{command}: 2 partition(s), {verb} 0 segment(s)"), out
    assert out.splitlines()[-1].endswith(", 2 partition(s) failed"), out
