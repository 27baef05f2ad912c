"""Partition removal (docs/kafka-rules.md section 7): which topic ids it removes, only on the controller's
word that Kafka deleted them (what counts as that word: test_removal_evidence.py), dry runs, the sweep of
unreferenced objects, resuming after a kill at each step, no recopy."""

from __future__ import annotations

import shutil
import textwrap
import uuid

import pytest

from tests.engine_support import (
    TieringEnv,
    expire_lease,
    kafka_creates_topic,
    kafka_deletes_topic,
    tip_of,
    write_segments,
)
from tests.runs.test_retention import (
    assert_objects_match_metadata,
    end_state,
    remote_ranges,
    run_killed,
    snapshot_state,
    twin_of,
)
from tiering_core.errors import TieringError
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.states import RemoteLogSegmentState, RemotePartitionDeleteState
from tiering_core.runs.copy import run_copy
from tiering_core.runs.errors import DeletionUnprovenError, RemovalRefusedError
from tiering_core.runs.removal import delete_partition, lift_tombstone, removal_targets
from tiering_core.runs.removal_targets import RemovalTargets
from tiering_core.runs.retention import run_retention
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef
from tiering_core.storage.partition_state import PartitionState, partition_state_key

FINISHED = RemotePartitionDeleteState.DELETE_PARTITION_FINISHED.value


def tiered_partition(env: TieringEnv, segments: int = 3, topic: str = "orders") -> PartitionWriter:
    w = env.writer(topic)
    write_segments(w, segments)
    w.set_high_watermark()
    with env.context() as ctx:
        assert run_copy(ctx, w.tp).segments_copied == segments
    return w


def delete_topic_on_broker(w: PartitionWriter) -> None:
    """Kafka deletes the topic: the controller's committed RemoveTopicRecord in the broker's
    metadata log, and the partition directory renamed ``<topic>-<partition>.<uuid>-delete``."""
    kafka_deletes_topic(w)


def test_the_partitions_state_object_is_deleted_last(fs_env: TieringEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """After every segment and every stray object: the bucket tells of the partition until its data
    is gone."""
    w = tiered_partition(fs_env)
    stray = put_stray_object(fs_env, tip_of(w))
    deletions: list[list[str]] = []
    with fs_env.context() as ctx:
        key = partition_state_key(tip_of(w), ctx.storage.prefix)
        ctx.storage.write_partition_state(PartitionState(tip_of(w), 0, None))
        delete_keys = ctx.storage.delete_keys

        def recorded(keys):
            deletions.append(list(keys))
            delete_keys(deletions[-1])

        monkeypatch.setattr(ctx.storage, "delete_keys", recorded)
        assert delete_partition(ctx, w.tp, topic_id=w.topic_id, force=True).state == FINISHED
        monkeypatch.undo()
        assert ctx.storage.list_objects(tip_of(w)) == []
    assert deletions[-1] == [key] and not any(key in keys for keys in deletions[:-1])
    assert any(stray in keys for keys in deletions[:-1])


def put_stray_object(env: TieringEnv, tip: TopicIdPartition) -> str:
    """An object under the partition's prefix that no metadata names (e.g. a fenced copy's)."""
    with env.context() as ctx:
        key = RemoteSegmentRef(tip, 25, uuid.uuid4()).key(ObjectKind.LOG, ctx.storage.prefix)
        ctx.storage.put_object(key, b"not referenced by any metadata")
    return key


def test_removal_by_topic_id_deletes_everything_and_forbids_recopy(tiering_env: TieringEnv) -> None:
    w = tiered_partition(tiering_env)
    kafka_creates_topic(w)
    with tiering_env.context() as ctx:
        with pytest.raises(DeletionUnprovenError, match=f"still has topic id {w.topic_id} .topic 'orders'."):
            delete_partition(ctx, w.tp, topic_id=w.topic_id)  # named, but Kafka has not deleted it
        result = delete_partition(ctx, w.tp, topic_id=w.topic_id, force=True)  # a broker being decommissioned
        assert result.segments_deleted == 3 and result.state == FINISHED
        assert result.topic_ids == [w.topic_id] and result.kept_topic_ids == []
        assert ctx.storage.list_objects(tip_of(w)) == []
        assert ctx.metadata.list_segments(tip_of(w), include_deleted=True) == []
        record = ctx.metadata.get_partition(tip_of(w))
        assert record is not None and record.dropped
        with pytest.raises(TieringError, match="removed"):
            run_copy(ctx, w.tp)


def test_partition_still_on_the_broker_is_refused_without_its_topic_id(fs_env: TieringEnv) -> None:
    w = tiered_partition(fs_env)
    before = snapshot_state(fs_env, tip_of(w))
    with fs_env.context() as ctx:
        for dry_run in (True, False):
            with pytest.raises(RemovalRefusedError) as refused:
                delete_partition(ctx, w.tp, dry_run=dry_run)
            message = str(refused.value)
            assert "orders-0 is still in the broker's log dirs" in message
            assert f"topic id {w.topic_id} in {w.path}" in message
            assert f"--topic-id {w.topic_id}, with --force while Kafka has not deleted it" in message
        with pytest.raises(TieringError, match="has no remote data under topic id AAAAAAAAAAAAAAAAAAAAAA"):
            delete_partition(ctx, w.tp, topic_id="AAAAAAAAAAAAAAAAAAAAAA")
        with pytest.raises(TieringError, match="unknown to the metadata store"):
            delete_partition(ctx, TopicPartition("orders", 9))
    assert snapshot_state(fs_env, tip_of(w)) == before


def test_a_refusal_carries_what_it_found(tiering_env: TieringEnv) -> None:
    """The refused removal's targets (the live topic id kept, the already removed one) come with
    the error, so a caller deciding on force needs no second look at the store."""
    old = tiered_partition(tiering_env)
    delete_topic_on_broker(old)
    new = tiered_partition(tiering_env, segments=2)
    with tiering_env.context() as ctx:
        delete_partition(ctx, old.tp)
        with pytest.raises(RemovalRefusedError) as refused:
            removal_targets(ctx, new.tp)
    assert refused.value.targets == RemovalTargets(new.tp, (), (tip_of(old),), (tip_of(new),))
    shutil.rmtree(tiering_env.log_dir)  # the broker cannot be read: nothing was found
    with tiering_env.context() as ctx, pytest.raises(RemovalRefusedError) as unreadable:
        removal_targets(ctx, new.tp)
    assert unreadable.value.targets is None


def test_named_topic_ids_are_removed_as_one_result(tiering_env: TieringEnv) -> None:
    old = tiered_partition(tiering_env)
    delete_topic_on_broker(old)
    new = tiered_partition(tiering_env, segments=2)  # recreated, still in the log dirs
    new_before = snapshot_state(tiering_env, tip_of(new))
    kafka_creates_topic(new)
    with tiering_env.context() as ctx:
        with pytest.raises(ValueError, match="not both"):
            delete_partition(ctx, new.tp, topic_id=new.topic_id, topic_ids=[new.topic_id])
        nothing = delete_partition(ctx, new.tp, topic_ids=[])
        assert (nothing.topic_ids, nothing.state, nothing.segments_deleted) == ([], None, 0)
        assert delete_partition(ctx, new.tp, topic_ids=[old.topic_id], dry_run=True).topic_ids == [old.topic_id]
        for dry_run in (True, False):  # the live one needs force, and nothing goes without it
            with pytest.raises(DeletionUnprovenError, match=f"still has topic id {new.topic_id}"):
                delete_partition(ctx, new.tp, topic_ids=[old.topic_id, new.topic_id], dry_run=dry_run)
        assert snapshot_state(tiering_env, tip_of(new)) == new_before
        dry = delete_partition(ctx, new.tp, topic_ids=[new.topic_id, old.topic_id], dry_run=True, force=True)
        assert dry.topic_ids == [new.topic_id, old.topic_id] and len(dry.planned) == 5
        assert snapshot_state(tiering_env, tip_of(new)) == new_before
        result = delete_partition(ctx, new.tp, topic_ids=[old.topic_id, new.topic_id], force=True)
        assert (result.topic_ids, result.segments_deleted, result.state) == ([old.topic_id, new.topic_id], 5, FINISHED)
        again = delete_partition(ctx, new.tp, topic_ids=[old.topic_id, new.topic_id])
        assert (again.topic_ids, again.segments_deleted, again.state) == ([old.topic_id, new.topic_id], 0, FINISHED)
    assert remote_ranges(tiering_env, old) == remote_ranges(tiering_env, new) == []


def test_recreated_topic_is_left_intact(tiering_env: TieringEnv) -> None:
    old = tiered_partition(tiering_env)
    delete_topic_on_broker(old)
    new = tiered_partition(tiering_env, segments=2)  # recreated: same name, new topic id, tiered
    assert new.topic_id != old.topic_id
    new_before = snapshot_state(tiering_env, tip_of(new))
    with tiering_env.context() as ctx:
        targets = removal_targets(ctx, old.tp)
        assert (targets.remove, targets.kept) == ((tip_of(old),), (tip_of(new),))
        dry = delete_partition(ctx, old.tp, dry_run=True)
    assert dry.topic_ids == [old.topic_id] and dry.kept_topic_ids == [new.topic_id]
    assert {p["topic_id"] for p in dry.planned} == {old.topic_id} and len(dry.planned) == 3
    with tiering_env.context() as ctx:
        result = delete_partition(ctx, old.tp)
    assert result.state == FINISHED and result.topic_ids == [old.topic_id] and result.segments_deleted == 3
    assert snapshot_state(tiering_env, tip_of(new)) == new_before  # the live topic's data and row
    assert remote_ranges(tiering_env, old) == []
    # The recreated topic goes on being tiered and retained.
    write_segments(new, 1)
    new.set_high_watermark()
    with tiering_env.context() as ctx:
        assert run_copy(ctx, new.tp).segments_copied == 1
        assert not run_retention(ctx, new.tp).skipped_reason
        # Asked again without a topic id: the old one is already removed, the live one is refused.
        with pytest.raises(RemovalRefusedError, match=f"already removed: topic id\\(s\\) {old.topic_id}"):
            delete_partition(ctx, new.tp)
    assert remote_ranges(tiering_env, new) == [(0, 4), (5, 9), (10, 14)]
    assert_objects_match_metadata(tiering_env, tip_of(new))


def test_dry_run_reports_exactly_what_goes_and_changes_nothing(tiering_env: TieringEnv) -> None:
    w = tiered_partition(tiering_env)
    delete_topic_on_broker(w)
    stray = put_stray_object(tiering_env, tip_of(w))
    before = snapshot_state(tiering_env, tip_of(w))
    with tiering_env.context() as ctx:
        segments = ctx.metadata.list_segments(tip_of(w))
        result = delete_partition(ctx, w.tp, dry_run=True)
    assert snapshot_state(tiering_env, tip_of(w)) == before  # rows, partition row (delete_state), objects
    assert before[1] is not None and before[1][0] is None  # not even marked
    assert [p["segment_id"] for p in result.planned] == [str(s.segment_id) for s in segments]
    assert result.orphan_objects == [stray] and result.topic_ids == [w.topic_id]
    assert result.segments_deleted == 0 and result.state is None
    with tiering_env.context() as ctx:
        real = delete_partition(ctx, w.tp)
    assert real.segments_deleted == len(result.planned) and real.orphan_objects == result.orphan_objects


def test_removal_sweeps_objects_no_metadata_references(fs_env: TieringEnv) -> None:
    w = tiered_partition(fs_env)
    stray = put_stray_object(fs_env, tip_of(w))
    with fs_env.context() as ctx:  # and a killed copy: COPY_SEGMENT_STARTED with an object stored
        from tiering_core.runs.segment_copy import prepare_segment_upload, upload_segment
        from tiering_core.tier.view import CopyCandidate, load_tier_view

        write_segments(w, 1)
        w.set_high_watermark()
        partition_log = ctx.partitions("orders", 0)[0]
        view = load_tier_view(partition_log, ctx.metadata)
        segments = partition_log.segments
        lease = ctx.metadata.acquire_lease(tip_of(w), holder="copy:killed")
        upload = prepare_segment_upload(
            view, CopyCandidate(segments[3], segments[4].base_offset), run_token=lease.token
        )
        ctx.metadata.add_segment(upload.metadata, lease)
        upload_segment(ctx.storage, upload)
        ctx.metadata.release_lease(lease)
    delete_topic_on_broker(w)
    with fs_env.context() as ctx:
        result = delete_partition(ctx, w.tp)
        assert result.state == FINISHED and result.segments_deleted == 4 and result.orphan_objects == [stray]
        assert ctx.storage.list_objects(tip_of(w)) == []


def test_rerun_after_the_drop_reports_the_removal_finished(fs_env: TieringEnv) -> None:
    w = tiered_partition(fs_env)
    delete_topic_on_broker(w)
    with fs_env.context() as ctx:
        assert delete_partition(ctx, w.tp).state == FINISHED
    before = snapshot_state(fs_env, tip_of(w))
    with fs_env.context() as ctx:
        for dry_run in (True, False):
            again = delete_partition(ctx, w.tp, dry_run=dry_run)
            assert (again.state, again.topic_ids, again.segments_deleted) == (FINISHED, [w.topic_id], 0)
        assert delete_partition(ctx, w.tp, topic_id=w.topic_id).state == FINISHED
    assert snapshot_state(fs_env, tip_of(w)) == before


REMOVAL_CRASH = textwrap.dedent(
    """
    import os, signal, sys
    import tiering_core.engine.segment_ops as rs
    import tiering_core.runs.removal as removal
    from tiering_core.config import load_config
    from tiering_core.context import TieringContext
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.metadata.states import RemoteLogSegmentState
    from tiering_core.metadata.store import RemoteLogMetadataStore

    where = sys.argv[2]

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    update = RemoteLogMetadataStore.update_partition_delete_state

    def updating(self, tip, state, lease):
        update(self, tip, state, lease)
        if state.value == where:
            die()

    drop = RemoteLogMetadataStore.drop_partition_metadata

    def dropping(self, tip, lease):
        drop(self, tip, lease)
        if where == "dropped":
            die()

    calls = {"n": 0}
    delete = rs.delete_remote_segment

    def deleting(store, storage, segment, lease):
        calls["n"] += 1
        if where == "mid-segments" and calls["n"] == 2:
            store.update_segment_state(segment.segment_id, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, lease)
            storage.delete_segment(rs.segment_ref(segment))
            die()
        delete(store, storage, segment, lease)

    sweep = removal._sweep

    def sweeping(store, storage, tip):
        keys = sweep(store, storage, tip)
        if where == "swept":
            die()
        return keys

    RemoteLogMetadataStore.update_partition_delete_state = updating
    RemoteLogMetadataStore.drop_partition_metadata = dropping
    removal.delete_remote_segment = deleting
    removal._sweep = sweeping
    with TieringContext.open(load_config(sys.argv[1])) as ctx:
        removal.delete_partition(ctx, TopicPartition("orders", 0))
    """
)


@pytest.mark.parametrize(
    ("where", "left"),
    [
        ("DELETE_PARTITION_MARKED", 3),
        ("DELETE_PARTITION_STARTED", 3),
        ("mid-segments", 1),
        ("swept", 0),
        ("DELETE_PARTITION_FINISHED", 0),
        ("dropped", 0),
    ],
)
def test_removal_killed_at_each_step_resumes_to_the_same_end(fs_env: TieringEnv, where: str, left: int) -> None:
    w = tiered_partition(fs_env)
    delete_topic_on_broker(w)
    stray = put_stray_object(fs_env, tip_of(w))
    twin = twin_of(fs_env)
    run_killed(REMOVAL_CRASH, fs_env, where)
    with fs_env.context() as ctx:
        record = ctx.metadata.get_partition(tip_of(w))
        assert record is not None and record.delete_state is not None
        live = [
            s for s in ctx.metadata.list_segments(tip_of(w)) if s.state != RemoteLogSegmentState.DELETE_SEGMENT_STARTED
        ]
        assert len(live) == left
        assert record.dropped is (where == "dropped")
        assert (stray in {o.key for o in ctx.storage.list_objects(tip_of(w))}) is (left > 0)
        expire_lease(ctx.metadata, tip_of(w))  # the killed run's lease lapses
    with fs_env.context() as ctx:
        resumed = delete_partition(ctx, w.tp)
    with twin.context() as ctx:
        uninterrupted = delete_partition(ctx, w.tp)
    assert resumed.state == uninterrupted.state == FINISHED
    assert end_state(fs_env, [tip_of(w)]) == end_state(twin, [tip_of(w)])
    (state,) = end_state(fs_env, [tip_of(w)])
    assert state == (w.topic_id, [], (FINISHED, True, None), [])  # no metadata, no objects, a tombstone


@pytest.mark.parametrize("broker", ["log-dir-gone", "partition-metadata-corrupt"])
def test_removal_refused_when_the_broker_cannot_be_read(fs_env: TieringEnv, broker: str) -> None:
    """Whether the broker still holds the partition decides what is removed; unknown, only a
    named topic id is, and without the controller's word only by force."""
    w = tiered_partition(fs_env)
    if broker == "log-dir-gone":  # e.g. a decommissioned broker's disks
        shutil.rmtree(fs_env.log_dir)
        reason = f"cannot tell whether the broker still holds it \\(log dir {fs_env.log_dir} does not exist"
    else:
        (w.path / "partition.metadata").write_text("version: 0\ntopic_id: ???\n")
        reason = "cannot tell which topic id the broker holds in"
    before = snapshot_state(fs_env, tip_of(w))
    with fs_env.context() as ctx:
        with pytest.raises(RemovalRefusedError, match=reason):
            delete_partition(ctx, w.tp)
    assert snapshot_state(fs_env, tip_of(w)) == before
    with fs_env.context() as ctx:
        with pytest.raises(DeletionUnprovenError, match="no word from the controller"):
            delete_partition(ctx, w.tp, topic_id=w.topic_id)
        result = delete_partition(ctx, w.tp, topic_id=w.topic_id, force=True)
        assert result.state == FINISHED and result.segments_deleted == 3
        assert ctx.storage.list_objects(tip_of(w)) == []


def test_a_tombstone_written_in_error_is_lifted(fs_env: TieringEnv) -> None:
    """A removal forced by mistake (the partition had moved, not been deleted): lifting the
    tombstone lets the topic id be tiered again from what the broker holds."""
    w = tiered_partition(fs_env)
    live = w.path
    moved = w.delete()  # e.g. a log-dir move's -delete rename, taken for a deletion
    with fs_env.context() as ctx:
        assert delete_partition(ctx, w.tp, force=True).state == FINISHED
    moved.rename(live)  # it was on this broker after all
    with fs_env.context() as ctx:
        with pytest.raises(TieringError, match="removed"):
            run_copy(ctx, w.tp)
        lift_tombstone(ctx, tip_of(w))
        record = ctx.metadata.get_partition(tip_of(w))
        assert record is not None and (record.dropped, record.delete_state) == (False, None)
        assert run_copy(ctx, w.tp).segments_copied == 3
        with pytest.raises(TieringError, match="not a tombstone"):
            lift_tombstone(ctx, tip_of(w))
    assert_objects_match_metadata(fs_env, tip_of(w))
    history = [c.to_state for c in fs_env_history(fs_env, tip_of(w))]
    assert history.count("TOMBSTONE_LIFTED") == 1


def fs_env_history(env: TieringEnv, tip: TopicIdPartition) -> list:
    with env.context() as ctx:
        return ctx.metadata.state_history(tip)
