"""Whose word the cluster at ``kafka.bootstrap_servers`` is (``tiering_core/live/identity.py``): only
the cluster the log dirs belong to, by its cluster id; log dirs that name no cluster, or two, and a
process that serves no broker have nothing to compare with, and the cluster is not even asked.
(Two real clusters: tests/real_kafka/test_topic_deletion.py.)"""

from __future__ import annotations

import pytest
import yaml

from tests.engine_support import TieringEnv
from tests.live.test_source import with_kafka
from tiering_core.config import KafkaConfig, PlatformConfig, load_config
from tiering_core.kafka.log_writer import DEMO_CLUSTER_ID
from tiering_core.kafka.topic import TopicPartition
from tiering_core.live.identity import foreign_cluster
from tiering_core.live.partition import LivePartition, unknown_partition
from tiering_core.live.source import ClusterSource

#: The cluster id of a cluster the log dirs do not belong to (``kafka-storage random-uuid`` form).
OTHER_CLUSTER_ID = "Zq3oJc1TS0qYbR0x9dVt8w"


class ClusterAt(ClusterSource):
    """Injected: a ``kafka:`` section that reaches a cluster answering DescribeCluster with
    ``cluster_id``, which knows no topic. Asked about its id, it counts the question."""

    def __init__(self, config: KafkaConfig, cluster_id: str) -> None:
        super().__init__(config)
        self.answers = cluster_id
        self.asked = 0

    def cluster_id(self) -> str:
        self.asked += 1
        return self.answers

    def partition(self, tp: TopicPartition) -> LivePartition:
        return unknown_partition(tp, None)


def live_config(env: TieringEnv) -> tuple[PlatformConfig, KafkaConfig]:
    with_kafka(env, sasl=False)
    config = load_config(env.config_path)
    assert config.kafka is not None
    return config, config.kafka


def test_only_the_cluster_the_log_dirs_belong_to_is_heard(fs_env: TieringEnv) -> None:
    fs_env.writer()  # the log dir's meta.properties: cluster DEMO_CLUSTER_ID
    config, kafka = live_config(fs_env)
    assert foreign_cluster(config, ClusterAt(kafka, DEMO_CLUSTER_ID)) is None
    reason = foreign_cluster(config, ClusterAt(kafka, OTHER_CLUSTER_ID))
    servers = ",".join(kafka.bootstrap_servers)
    assert reason == (
        f"the cluster at {servers} has cluster id {OTHER_CLUSTER_ID}, but the log dirs belong to cluster "
        f"{DEMO_CLUSTER_ID}: its word is not this cluster's"
    )


@pytest.mark.parametrize(
    ("meta", "alone", "why"),
    [
        pytest.param("version=1\nnode.id=1\n", True, "names no cluster.id", id="no-cluster-id"),
        pytest.param(
            f"version=1\nnode.id=1\ncluster.id={OTHER_CLUSTER_ID}\n",
            False,
            "belong to more than one broker or cluster",
            id="two-clusters",
        ),
    ],
)
def test_log_dirs_that_name_no_cluster_or_two_are_not_compared(
    fs_env: TieringEnv, meta: str, alone: bool, why: str
) -> None:
    """A log dir without a cluster id, or beside one of another cluster: the cluster (nothing
    listens at its address) is not asked."""
    fs_env.writer()
    disk = fs_env.root / "second-disk"
    disk.mkdir()
    (disk / "meta.properties").write_text(meta)
    doc = yaml.safe_load(fs_env.config_path.read_text())
    doc["log_dirs"] = [str(disk)] if alone else [str(fs_env.log_dir), str(disk)]
    fs_env.config_path.write_text(yaml.safe_dump(doc))
    config, kafka = live_config(fs_env)
    cluster = ClusterAt(kafka, DEMO_CLUSTER_ID)
    reason = foreign_cluster(config, cluster)
    assert reason is not None and why in reason and "cannot be checked" in reason, reason
    assert cluster.asked == 0


def test_a_named_metadata_log_dir_of_another_cluster_is_not_compared(fs_env: TieringEnv) -> None:
    fs_env.writer()
    metadata_dir = fs_env.root / "metadata-disk"
    metadata_dir.mkdir()
    (metadata_dir / "meta.properties").write_text(f"version=1\nnode.id=1\ncluster.id={OTHER_CLUSTER_ID}\n")
    doc = yaml.safe_load(fs_env.config_path.read_text())
    doc["metadata_log_dir"] = str(metadata_dir)
    fs_env.config_path.write_text(yaml.safe_dump(doc))
    config, kafka = live_config(fs_env)
    reason = foreign_cluster(config, ClusterAt(kafka, OTHER_CLUSTER_ID))
    assert reason is not None and "the log dirs and the metadata log dir belong to more than one" in reason


def test_a_process_serving_no_broker_has_no_cluster_id_to_compare(
    fs_env: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The removal DAG's default-queue worker reads no log dir, and the metadata store records no
    cluster id: no cluster's word is this cluster's there."""
    monkeypatch.delenv("TIERING_BROKER_ID", raising=False)
    fs_env.writer()
    doc = yaml.safe_load(fs_env.config_path.read_text())
    doc["brokers"] = {1: {"log_dirs": doc.pop("log_dirs")}, 2: {"log_dirs": [str(fs_env.root / "broker-2")]}}
    fs_env.config_path.write_text(yaml.safe_dump(doc))
    config, kafka = live_config(fs_env)
    assert config.serves_no_broker
    cluster = ClusterAt(kafka, DEMO_CLUSTER_ID)
    reason = foreign_cluster(config, cluster)
    assert reason is not None and "this process serves no broker (brokers 1, 2 are configured" in reason
    assert "--broker ID or TIERING_BROKER_ID" in reason and cluster.asked == 0


def test_kafka_cluster_id_is_the_operator_s_word_where_no_log_dir_says_it(
    fs_env: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``kafka.cluster_id`` names the cluster: on a process serving no broker the cluster's word counts
    when it answers with that id, never when it answers with another; where log dirs are read, a
    configured id they do not hold is refused before the cluster is asked."""
    monkeypatch.delenv("TIERING_BROKER_ID", raising=False)
    fs_env.writer()
    with_kafka(fs_env, sasl=False)
    doc = yaml.safe_load(fs_env.config_path.read_text())
    doc["kafka"]["cluster_id"] = DEMO_CLUSTER_ID
    log_dirs = doc.pop("log_dirs")
    doc["brokers"] = {1: {"log_dirs": log_dirs}, 2: {"log_dirs": [str(fs_env.root / "broker-2")]}}
    fs_env.config_path.write_text(yaml.safe_dump(doc))
    config = load_config(fs_env.config_path)
    assert config.serves_no_broker and config.kafka is not None
    assert foreign_cluster(config, ClusterAt(config.kafka, DEMO_CLUSTER_ID)) is None
    servers = ",".join(config.kafka.bootstrap_servers)
    assert foreign_cluster(config, ClusterAt(config.kafka, OTHER_CLUSTER_ID)) == (
        f"the cluster at {servers} has cluster id {OTHER_CLUSTER_ID}, but kafka.cluster_id is {DEMO_CLUSTER_ID}: "
        "its word is not this cluster's"
    )
    doc["kafka"]["cluster_id"] = OTHER_CLUSTER_ID
    doc["log_dirs"] = log_dirs
    del doc["brokers"]
    fs_env.config_path.write_text(yaml.safe_dump(doc))
    config = load_config(fs_env.config_path)
    assert config.kafka is not None
    cluster = ClusterAt(config.kafka, OTHER_CLUSTER_ID)
    assert foreign_cluster(config, cluster) == (
        f"kafka.cluster_id is {OTHER_CLUSTER_ID}, but the log dirs belong to cluster {DEMO_CLUSTER_ID}"
    )
    assert cluster.asked == 0


def test_kafka_cluster_id_must_look_like_one(fs_env: TieringEnv) -> None:
    from tiering_core.errors import ConfigError

    with_kafka(fs_env, sasl=False)
    doc = yaml.safe_load(fs_env.config_path.read_text())
    doc["kafka"]["cluster_id"] = "not-an-id"
    fs_env.config_path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"^kafka\.cluster_id: 'not-an-id' is not a Kafka cluster id"):
        load_config(fs_env.config_path)
