"""The evidence a removal acts on (``tiering_core/runs/removal_evidence.py``, docs/kafka-rules.md
section 7): only the controller's word that Kafka deleted a topic id, from the KRaft metadata image
on the broker's disk; a renamed or missing directory, an unmounted log dir, a metadata log of
another cluster, too short or damaged, is none, and the removal is refused unless forced."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest
import yaml

from tests.engine_support import TieringEnv, kafka_creates_topic, kafka_deletes_topic, tip_of
from tests.live.test_identity import OTHER_CLUSTER_ID, ClusterAt
from tests.live.test_source import with_kafka
from tests.runs.test_removal import FINISHED, tiered_partition
from tests.runs.test_retention import snapshot_state
from tiering_core.kafka.log_writer import DEMO_CLUSTER_ID, PartitionWriter, write_meta_properties
from tiering_core.kafka.metadata_log_writer import ClusterMetadataWriter
from tiering_core.kafka.topic import TopicPartition
from tiering_core.runs.errors import DeletionUnprovenError, RemovalRefusedError
from tiering_core.runs.removal import delete_partition


def use_log_dirs(env: TieringEnv, *log_dirs: Path, **extra: object) -> None:
    """The config lists ``log_dirs`` (e.g. an unmounted disk, or a JBOD broker's dirs), and ``extra`` keys."""
    doc = yaml.safe_load(env.config_path.read_text())
    doc["log_dirs"] = [str(d) for d in log_dirs]
    doc.update(extra)
    env.config_path.write_text(yaml.safe_dump(doc))


def refused(env: TieringEnv, w: PartitionWriter, reason: str) -> None:
    """Refused naming ``reason``, in a dry run too and with the topic id named, nothing changed."""
    before = snapshot_state(env, tip_of(w))
    with env.context() as ctx:
        for named in (None, w.topic_id):
            for dry_run in (True, False):
                with pytest.raises(DeletionUnprovenError, match=reason) as refusal:
                    delete_partition(ctx, w.tp, topic_id=named, dry_run=dry_run)
                assert "--force" in str(refusal.value) and "nothing deleted" in str(refusal.value)
                assert "\n" not in str(refusal.value)  # the command's one-line reason
    assert snapshot_state(env, tip_of(w)) == before


def refused_without_evidence(env: TieringEnv, w: PartitionWriter, reason: str) -> None:
    """``refused``; then ``force`` removes it."""
    refused(env, w, reason)
    with env.context() as ctx:
        forced = delete_partition(ctx, w.tp, force=True)
    assert (forced.state, forced.topic_ids, forced.segments_deleted) == (FINISHED, [w.topic_id], 3)


@pytest.mark.parametrize("how", ["renamed-delete", "gone-without-trace"])
def test_a_partition_gone_from_the_broker_is_no_evidence_while_the_controller_has_it(
    fs_env: TieringEnv, how: str
) -> None:
    """A reassignment away from this broker (StopReplica) and the end of a log-dir move rename the
    directory ``<topic>-<p>.<uuid>-delete`` exactly as a topic deletion does; the directory may also be
    gone already. Neither is the controller's word: the metadata image still has the topic."""
    w = tiered_partition(fs_env)
    kafka_creates_topic(w)
    if how == "renamed-delete":
        w.delete()
    else:
        shutil.rmtree(w.path)
    refused_without_evidence(
        fs_env, w, f"still has topic id {w.topic_id} \\(topic 'orders'\\): Kafka has not deleted it"
    )


def test_a_deletion_is_removed_on_the_controllers_word_alone(fs_env: TieringEnv) -> None:
    """A committed RemoveTopicRecord is the evidence, whatever the broker's directory looks like:
    here the broker has not renamed it yet (it was down when the topic was deleted)."""
    w = tiered_partition(fs_env)
    kafka_deletes_topic(w, rename=False)
    with fs_env.context() as ctx:
        result = delete_partition(ctx, w.tp, topic_id=w.topic_id)
    assert (result.state, result.segments_deleted) == (FINISHED, 3)


def test_a_deletion_not_yet_proven_committed_waits_for_a_snapshot_or_a_new_controller(fs_env: TieringEnv) -> None:
    """A follower may hold records the quorum never commits: a RemoveTopicRecord counts once the
    broker's snapshot includes it, or once a later controller has written (its epoch's start is then
    committed)."""
    first, second = tiered_partition(fs_env), tiered_partition(fs_env, topic="payments")
    kafka_deletes_topic(first, committed=False)
    refused(fs_env, first, "deletes topic id .* at offset 3, but it is proven committed only below offset 1")
    ClusterMetadataWriter(fs_env.log_dir).snapshot()  # the broker's snapshot includes the deletion
    with fs_env.context() as ctx:
        assert delete_partition(ctx, first.tp).state == FINISHED
    kafka_deletes_topic(second, committed=False)
    controller = ClusterMetadataWriter(fs_env.log_dir)
    controller.elect(2)  # a new leader; its LeaderChange alone proves nothing
    refused(fs_env, second, "proven committed only below offset 4")
    controller.no_op()  # the new active controller's first record
    with fs_env.context() as ctx:
        assert delete_partition(ctx, second.tp).state == FINISHED


def test_a_deletion_older_than_the_metadata_log_is_no_evidence(fs_env: TieringEnv) -> None:
    """Kafka's metadata log keeps its records before the latest snapshot for a while only
    (metadata.max.retention.ms); a topic id neither in the image nor deleted in the log proves
    nothing (it may as well be a log of another cluster, or one out of date)."""
    w = tiered_partition(fs_env)
    kafka_deletes_topic(w)
    controller = ClusterMetadataWriter(fs_env.log_dir)
    controller.roll()
    controller.no_op()
    controller.snapshot()
    controller.delete_segments_before_snapshot()
    reason = f"no word from the controller that topic id {w.topic_id} was deleted: the metadata log in .* neither has"
    refused_without_evidence(fs_env, w, reason)


def test_no_metadata_log_or_one_of_another_cluster_is_no_evidence(fs_env: TieringEnv) -> None:
    w = tiered_partition(fs_env)
    w.delete()  # the -delete rename alone
    refused(fs_env, w, "holds KRaft's __cluster_metadata-0 .* name it as metadata_log_dir")
    other = fs_env.root / "other-cluster"
    other.mkdir()
    (other / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=ANOTHERclusterID000000\n")
    stranger = ClusterMetadataWriter(other)
    stranger.create_topic("orders", topic_id=w.topic_id)
    stranger.remove_topic(w.topic_id)
    stranger.snapshot()
    use_log_dirs(fs_env, fs_env.log_dir, metadata_log_dir=str(other))
    refused(fs_env, w, "the log dirs and the metadata log dir belong to more than one broker or cluster")
    use_log_dirs(fs_env, fs_env.log_dir, metadata_log_dir=str(fs_env.root / "nowhere"))
    refused_without_evidence(fs_env, w, "metadata_log_dir: .*nowhere holds no __cluster_metadata-0")


def test_a_damaged_metadata_log_is_no_evidence(fs_env: TieringEnv) -> None:
    w = tiered_partition(fs_env)
    kafka_deletes_topic(w)
    segment = ClusterMetadataWriter(fs_env.log_dir).segment
    data = bytearray(segment.read_bytes())
    data[-2] ^= 0x55
    segment.write_bytes(bytes(data))
    refused_without_evidence(fs_env, w, f"{segment}: at byte .*CRC mismatch")


def test_an_empty_or_unmounted_log_dir_is_no_evidence(fs_env: TieringEnv) -> None:
    w = tiered_partition(fs_env)
    kafka_deletes_topic(w)
    unmounted = fs_env.root / "unmounted"  # the mount point, without its disk
    unmounted.mkdir()
    use_log_dirs(fs_env, unmounted)
    refused(fs_env, w, "no log dir of .*unmounted holds KRaft's __cluster_metadata-0")
    use_log_dirs(fs_env, fs_env.log_dir, unmounted)  # the controller's word, beside a log dir that is not live
    refused_without_evidence(fs_env, w, f"log dir {unmounted} has no meta.properties")


def test_a_partition_moving_between_the_brokers_log_dirs_is_live(fs_env: TieringEnv) -> None:
    """A log-dir move ends by renaming the current directory ``-delete`` (the same trace a deletion
    leaves) and the ``-future`` copy to the partition's name: between the two renames the partition
    is only a ``-future`` directory, and it is live."""
    w = tiered_partition(fs_env)
    second = fs_env.root / "disk2"
    second.mkdir()
    write_meta_properties(second)
    future = second / f"{w.tp}.{uuid.uuid4().hex}-future"
    shutil.copytree(w.path, future)
    w.delete()
    use_log_dirs(fs_env, fs_env.log_dir, second)
    before = snapshot_state(fs_env, tip_of(w))
    with fs_env.context() as ctx:
        with pytest.raises(RemovalRefusedError, match=f"topic id {w.topic_id} in {future}"):
            delete_partition(ctx, w.tp)
    assert snapshot_state(fs_env, tip_of(w)) == before


def test_log_dirs_of_two_brokers_are_no_evidence(fs_env: TieringEnv) -> None:
    w = tiered_partition(fs_env)
    kafka_deletes_topic(w)
    other = fs_env.root / "broker-2"
    PartitionWriter(other, TopicPartition("payments", 0), node_id=2)
    use_log_dirs(fs_env, fs_env.log_dir, other)
    refused_without_evidence(fs_env, w, "belong to more than one broker")


def test_a_process_serving_no_broker_asks_the_controller_not_for_a_broker(
    fs_env: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster's worker without a broker disk (the removal DAG's default queue) reads no log dir:
    it refuses for want of the controller's word (no kafka: section, no metadata image of its own),
    not for want of ``--broker``, and ``force`` removes it as on a broker."""
    monkeypatch.delenv("TIERING_BROKER_ID", raising=False)
    w = tiered_partition(fs_env)
    kafka_deletes_topic(w)
    doc = yaml.safe_load(fs_env.config_path.read_text())
    doc["brokers"] = {1: {"log_dirs": doc.pop("log_dirs")}, 2: {"log_dirs": [str(fs_env.root / "broker-2")]}}
    fs_env.config_path.write_text(yaml.safe_dump(doc))
    refused_without_evidence(fs_env, w, "no word from the controller")


def test_the_word_of_another_cluster_is_not_the_controllers(fs_env: TieringEnv) -> None:
    """A ``kafka:`` section at a wrong address reaches a cluster that knows none of this cluster's
    topics: its "unknown topic" is refused, naming both cluster ids, even for a named topic id;
    the cluster of the log dirs saying the same is the controller's word."""
    w = tiered_partition(fs_env)
    w.delete()  # a reassignment away from this broker renames it so, as a deletion does
    with_kafka(fs_env, sasl=False)
    before = snapshot_state(fs_env, tip_of(w))
    with fs_env.context() as ctx:
        assert ctx.config.kafka is not None
        ctx.cluster = ClusterAt(ctx.config.kafka, OTHER_CLUSTER_ID)
        reason = (
            f"has cluster id {OTHER_CLUSTER_ID}, but the log dirs belong to cluster {DEMO_CLUSTER_ID}: "
            "its word is not this cluster's"
        )
        for named in (None, w.topic_id):
            with pytest.raises(DeletionUnprovenError, match=reason) as refusal:
                delete_partition(ctx, w.tp, topic_id=named)
            assert "nothing deleted" in str(refusal.value) and "\n" not in str(refusal.value)
    assert snapshot_state(fs_env, tip_of(w)) == before
    with fs_env.context() as ctx:
        assert ctx.config.kafka is not None
        ctx.cluster = ClusterAt(ctx.config.kafka, DEMO_CLUSTER_ID)
        result = delete_partition(ctx, w.tp)
    assert (result.state, result.topic_ids) == (FINISHED, [w.topic_id])


def test_a_process_serving_no_broker_takes_no_cluster_s_word(
    fs_env: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a ``kafka:`` section too, a worker without a broker disk has no log dir whose cluster id
    the cluster's could be compared with (the metadata store records none): refused, naming
    ``--broker``; ``force`` removes it as on a broker."""
    monkeypatch.delenv("TIERING_BROKER_ID", raising=False)
    w = tiered_partition(fs_env)
    w.delete()
    doc = yaml.safe_load(fs_env.config_path.read_text())
    doc["brokers"] = {1: {"log_dirs": doc.pop("log_dirs")}, 2: {"log_dirs": [str(fs_env.root / "broker-2")]}}
    fs_env.config_path.write_text(yaml.safe_dump(doc))
    with_kafka(fs_env, sasl=False)
    before = snapshot_state(fs_env, tip_of(w))
    with fs_env.context() as ctx:
        assert ctx.config.kafka is not None
        ctx.cluster = ClusterAt(ctx.config.kafka, DEMO_CLUSTER_ID)
        with pytest.raises(DeletionUnprovenError, match=r"this process serves no broker .*--broker ID"):
            delete_partition(ctx, w.tp, topic_id=w.topic_id)
        assert snapshot_state(fs_env, tip_of(w)) == before
        forced = delete_partition(ctx, w.tp, topic_id=w.topic_id, force=True)
    assert (forced.state, forced.segments_deleted) == (FINISHED, 3)
