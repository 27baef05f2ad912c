"""The rows of ``tiering status`` and ``segments`` (``tiering_core/tier/status.py``), over a real log
dir, SQLite store and filesystem tier: a broker partition joined with what is tiered, the offsets
only the tier still serves, a DeleteRecords applied through the platform, partitions the store
alone knows, and the ``--json`` fields of the contract (docs/architecture.md)."""

from __future__ import annotations

import shutil

import pytest

from tests.engine_support import TieringEnv, tip_of, write_segments
from tiering_core.errors import TieringError
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.runs.copy import run_copy
from tiering_core.runs.delete_records import apply_delete_records
from tiering_core.tier.status import PartitionStatus, collect_status, list_remote_segments

#: The ``status --json`` fields every row carries (snake_case, stable once released).
CONTRACT = {
    "topic",
    "partition",
    "topic_id",
    "log_start_offset",
    "high_watermark",
    "last_stable_offset",
    "log_end_offset",
    "leader_epoch",
    "highest_copied_offset",
    "remote_log_start_offset",
    "remote_segments",
    "remote_bytes",
    "copy_lag_segments",
    "copy_lag_bytes",
    "delete_state",
    "gaps",
}


def tiered(env: TieringEnv, segments: int = 3) -> PartitionWriter:
    w = env.writer()
    write_segments(w, segments)
    w.append_records(2)
    w.set_high_watermark()
    with env.context() as ctx:
        assert run_copy(ctx, w.tp).segments_copied == segments
    return w


def status(env: TieringEnv, topic: str | None = "orders", partition: int | None = 0) -> list[PartitionStatus]:
    with env.context() as ctx:
        return collect_status(ctx, topic, partition)


def log_sizes(w: PartitionWriter) -> dict[int, int]:
    return {int(p.stem): p.stat().st_size for p in w.path.glob("*.log")}


def test_a_tiered_partition_s_row_joins_the_broker_s_offsets_with_the_tier(fs_env: TieringEnv) -> None:
    w = tiered(fs_env)  # [0..4], [5..9], [10..14] tiered; [15..16] active
    write_segments(w, 1)  # [15..21]: closed, not yet tiered
    w.become_leader(3)
    w.set_high_watermark()
    (row,) = status(fs_env)
    sizes = log_sizes(w)
    assert (row.topic, row.partition, row.topic_id, row.on_broker) == ("orders", 0, w.topic_id, True)
    assert (row.log_start_offset, row.local_log_start_offset, row.remote_log_start_offset) == (0, 0, 0)
    assert (row.high_watermark, row.last_stable_offset, row.log_end_offset, row.leader_epoch) == (22, 22, 22, 3)
    tiered_bytes = sizes[0] + sizes[5] + sizes[10]
    assert (row.highest_copied_offset, row.remote_segments, row.remote_bytes) == (14, 3, tiered_bytes)
    assert (row.copy_lag_segments, row.copy_lag_bytes) == (1, sizes[15])
    assert (row.gaps, row.remote_only_offsets, row.delete_state) == ([], None, None)
    assert (row.offsets_source, row.error, row.not_tiered_reason) == ("files", None, None)
    as_json = row.to_dict()
    assert CONTRACT <= set(as_json) and as_json["gaps"] == [] and as_json["remote_bytes"] == row.remote_bytes


def test_what_the_broker_dropped_after_tiering_is_served_by_the_tier_only(fs_env: TieringEnv) -> None:
    w = tiered(fs_env)
    w.delete_oldest_segments(2)  # [0..4] and [5..9], both tiered
    (row,) = status(fs_env)
    assert (row.log_start_offset, row.local_log_start_offset, row.remote_log_start_offset) == (0, 10, 0)
    assert (row.remote_only_offsets, row.gaps) == ([0, 9], [])


def test_a_delete_records_applied_through_the_platform_moves_the_log_start(fs_env: TieringEnv) -> None:
    w = tiered(fs_env)
    with fs_env.context() as ctx:
        apply_delete_records(ctx, w.tp, 7)
    (row,) = status(fs_env)
    assert (row.log_start_offset, row.local_log_start_offset, row.remote_log_start_offset) == (7, 0, 7)


def test_a_partition_only_the_store_knows_is_shown_from_the_store(fs_env: TieringEnv) -> None:
    """Removed from the broker, its remote data kept: a row without the broker's offsets, unless a
    selector excludes it."""
    w = tiered(fs_env)
    tiered_bytes = sum(size for base, size in log_sizes(w).items() if base < 15)
    fs_env.writer("orders", 1).append_records(3)
    shutil.rmtree(w.path)
    row, other = status(fs_env, None, None)
    assert (other.topic, other.partition, other.on_broker, other.log_end_offset) == ("orders", 1, True, 3)
    assert (row.topic, row.partition, row.topic_id, row.on_broker) == ("orders", 0, w.topic_id, False)
    assert (row.remote_segments, row.remote_bytes, row.remote_log_start_offset, row.log_start_offset) == (
        3,
        tiered_bytes,
        0,
        0,
    )
    assert (row.high_watermark, row.log_end_offset, row.delete_state, row.delete_lag_segments) == (None, None, None, 0)
    assert [(r.partition, r.on_broker) for r in status(fs_env, "orders", 1)] == [(1, True)]


def test_segments_rows_follow_the_json_contract_in_offset_order(fs_env: TieringEnv) -> None:
    w = tiered(fs_env, segments=2)
    with fs_env.context() as ctx:
        rows = list_remote_segments(ctx, "orders", 0)
        stored = {str(s.segment_id): s for s in ctx.metadata.list_segments(tip_of(w))}
        with pytest.raises(TieringError):
            list_remote_segments(ctx, "orders", 9)  # neither tiered nor on the broker: a typo, not []
    assert [(r["start_offset"], r["end_offset"]) for r in rows] == [(0, 4), (5, 9)]
    first = rows[0]
    assert set(first) == {
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
    segment = stored[first["segment_id"]]
    assert (first["topic"], first["partition"], first["leader_epochs"]) == ("orders", 0, {"0": 0})
    assert (first["state"], first["size_bytes"], first["max_timestamp"]) == (
        "COPY_SEGMENT_FINISHED",
        segment.size_bytes,
        segment.max_timestamp,
    )
    assert {"log", "index", "timeindex"} <= set(first["objects"])
    assert all(key.endswith(f"{first['segment_id']}.{kind}") for kind, key in first["objects"].items())
