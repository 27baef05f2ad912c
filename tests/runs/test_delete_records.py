"""A DeleteRecords applied through the platform (``tiering_core/runs/delete_records.py``,
docs/kafka-rules.md section 10 item 1): checked first (a tiered partition not removed, an offset
at most the high watermark), then recorded under the partition's lease; refused requests and dry
runs change nothing; the tiering gaps below it are history from then on. Its effect on retention
is tested in test_retention.py."""

from __future__ import annotations

import pytest

from tests.engine_support import TieringEnv, assert_partition_state_published, tip_of, write_segments
from tests.live.test_identity import OTHER_CLUSTER_ID, ClusterAt
from tests.live.test_source import with_kafka
from tests.runs.test_retention import assert_gaps_reported, gapped_partition, remote_ranges, snapshot_state
from tiering_core.errors import TieringError
from tiering_core.kafka.log_writer import DEMO_CLUSTER_ID
from tiering_core.kafka.topic import TopicPartition
from tiering_core.metadata.errors import LeaseHeldError
from tiering_core.runs.copy import run_copy
from tiering_core.runs.delete_records import apply_delete_records
from tiering_core.runs.errors import DeleteRecordsRefusedError
from tiering_core.runs.retention import run_retention


def test_delete_records_by_hand_is_bounded_by_the_high_watermark(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    write_segments(w, 3)
    w.set_high_watermark(12)  # log end offset 15
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        with pytest.raises(TieringError, match="beyond the high watermark 12"):
            apply_delete_records(ctx, w.tp, 13)
        assert ctx.metadata.get_delete_records_offset(tip_of(w)) is None
        assert assert_partition_state_published(ctx, tip_of(w)).delete_records_offset is None  # nothing published
        assert apply_delete_records(ctx, w.tp, 12).log_start_offset == 12
        assert run_retention(ctx, w.tp).segments_deleted == 2
    assert remote_ranges(fs_env, w) == []  # [10..14] was never copied (above the high watermark)


def test_delete_records_by_hand_without_a_high_watermark_is_bounded_by_the_log_end(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
    (fs_env.log_dir / "replication-offset-checkpoint").unlink()
    with fs_env.context() as ctx:
        with pytest.raises(TieringError, match=r"beyond the log end offset 15 \(the high watermark is unknown"):
            apply_delete_records(ctx, w.tp, 16)
        assert apply_delete_records(ctx, w.tp, 15).log_start_offset == 15


def test_delete_records_by_hand_refuses_untiered_and_removed_partitions(fs_env: TieringEnv) -> None:
    from tiering_core.runs.removal import delete_partition

    w = fs_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        with pytest.raises(TieringError, match="nothing tiered"):
            apply_delete_records(ctx, w.tp, 3)
        assert ctx.metadata.get_partition(tip_of(w)) is None and ctx.metadata.list_partitions() == []
        run_copy(ctx, w.tp)
        delete_partition(ctx, w.tp, topic_id=w.topic_id, force=True)
        before = snapshot_state(fs_env, tip_of(w))
        with pytest.raises(TieringError, match="is removed in the remote tier"):
            apply_delete_records(ctx, w.tp, 3)
    assert snapshot_state(fs_env, tip_of(w)) == before


def test_a_dry_run_says_where_the_log_start_would_go_and_records_nothing(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        planned = apply_delete_records(ctx, w.tp, 7, dry_run=True)
        assert ctx.metadata.get_delete_records_offset(tip_of(w)) is None
        applied = apply_delete_records(ctx, w.tp, 7, run_id="by-hand")
        assert ctx.metadata.get_delete_records_offset(tip_of(w)) == 7
    assert planned.to_dict() == {
        "topic": "orders",
        "partition": 0,
        "topic_id": w.topic_id,
        "before_offset": 7,
        "high_watermark": 15,
        "bound": "the high watermark",
        "dry_run": True,
        "log_start_offset": 7,
        "sent_to_cluster": False,  # no kafka: section: the cluster is not asked
        "cluster_log_start_offset": None,
    }
    assert applied.to_dict() == {**planned.to_dict(), "dry_run": False}


def test_the_gaps_a_delete_records_passes_are_no_longer_reported(fs_env: TieringEnv) -> None:
    """What a DeleteRecords deletes is history the moment it is applied: a gap below its offset is
    reported nowhere (status, the metrics, the page), a gap it cuts through from the offset on, a
    gap above it as before; retention of the segments below it changes none of that. Each one
    applied is published in the partition's state object, with the gaps it trimmed."""
    w = gapped_partition(fs_env)  # gaps [10..14] and [25..34]
    assert_gaps_reported(fs_env, w, [[10, 14], [25, 34]])
    with fs_env.context() as ctx:
        assert apply_delete_records(ctx, w.tp, 12).log_start_offset == 12
        published = assert_partition_state_published(ctx, tip_of(w))
    assert (published.delete_records_offset, published.gaps) == (12, ((12, 14), (25, 34)))
    assert_gaps_reported(fs_env, w, [[12, 14], [25, 34]])
    with fs_env.context() as ctx:
        assert apply_delete_records(ctx, w.tp, 30).log_start_offset == 30
        published = assert_partition_state_published(ctx, tip_of(w))
    assert (published.remote_log_start_offset, published.delete_records_offset, published.gaps) == (0, 30, ((30, 34),))
    assert_gaps_reported(fs_env, w, [[30, 34]])
    with fs_env.context() as ctx:
        assert run_retention(ctx, w.tp).segments_deleted == 4  # every segment below 30
    assert remote_ranges(fs_env, w) == [(35, 39)]
    assert_gaps_reported(fs_env, w, [[30, 34]])
    with fs_env.context() as ctx:
        assert apply_delete_records(ctx, w.tp, 35).log_start_offset == 35
        assert ctx.metadata.list_gaps(tip_of(w)) == []
    assert_gaps_reported(fs_env, w, [])


@pytest.mark.parametrize(
    ("topic", "partition", "offset", "reason"),
    [
        ("orders", 0, -1, "orders-0: the DeleteRecords offset must be >= 0, got -1"),
        ("orders", 5, 3, "partition orders-5 is not in the log dirs; nothing applied"),
        ("payments", 0, 3, "partition payments-0 is not in the log dirs; nothing applied"),
    ],
)
def test_a_request_for_no_partition_of_this_broker_is_refused_naming_it(
    fs_env: TieringEnv, topic: str, partition: int, offset: int, reason: str
) -> None:
    w = fs_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        with pytest.raises(DeleteRecordsRefusedError, match=reason):
            apply_delete_records(ctx, TopicPartition(topic, partition), offset)
        assert ctx.metadata.get_delete_records_offset(tip_of(w)) is None


def test_while_another_run_holds_the_partition_nothing_is_applied(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        other = ctx.metadata.acquire_lease(tip_of(w), "retention:elsewhere")
        with pytest.raises(LeaseHeldError, match=r"orders-0: another run holds the partition .*; nothing applied"):
            apply_delete_records(ctx, w.tp, 3)
        assert ctx.metadata.get_delete_records_offset(tip_of(w)) is None
        ctx.metadata.release_lease(other)
        assert apply_delete_records(ctx, w.tp, 3).log_start_offset == 3  # run again: applied


def test_another_cluster_s_high_watermark_is_no_bound(fs_env: TieringEnv) -> None:
    """A ``kafka:`` section at a wrong address: its cluster is not the log dirs' one, so neither its
    high watermark nor its DeleteRecords counts; refused naming both cluster ids, nothing applied."""
    w = fs_env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
    with_kafka(fs_env, sasl=False)
    before = snapshot_state(fs_env, tip_of(w))
    with fs_env.context() as ctx:
        assert ctx.config.kafka is not None
        ctx.cluster = ClusterAt(ctx.config.kafka, OTHER_CLUSTER_ID)
        for dry_run in (True, False):
            with pytest.raises(DeleteRecordsRefusedError) as refusal:
                apply_delete_records(ctx, w.tp, 7, dry_run=dry_run)
            assert str(refusal.value) == (
                f"orders-0: the cluster at {ctx.cluster.servers} has cluster id {OTHER_CLUSTER_ID}, but the log "
                f"dirs belong to cluster {DEMO_CLUSTER_ID}: its word is not this cluster's; nothing applied"
            )
    assert snapshot_state(fs_env, tip_of(w)) == before
