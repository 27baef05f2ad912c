"""A partition moved between a broker's log dirs (AlterReplicaLogDirs) leaves the same trace a
deleted one does: its old directory renamed ``<topic>-<partition>.<uuid>-delete``
(``replaceCurrentWithFutureLog``). Removal, run inside the window the directory stays
(``log.segment.delete.delay.ms``), must never take that for a deletion while the partition lives on
in another log dir: the controller's word, not a directory, decides (docs/kafka-rules.md section 7)."""

from __future__ import annotations

import os
from collections.abc import Callable

from tests.real_kafka.conftest import PrivateKafka
from tests.real_kafka.support import BesideKafka
from tiering_core.kafka.log_dirs import deleted_topic_ids
from tiering_core.kafka.partition_log import PartitionLog
from tiering_core.kafka.topic import TopicPartition


def test_a_log_dir_move_is_not_a_deletion(private_kafka: PrivateKafka, beside: Callable[..., BesideKafka]) -> None:
    topic = "moved"
    settings = {"log.segment.delete.delay.ms": "600000"}  # the -delete directory stays for the whole test
    with private_kafka(1, settings=settings, log_dirs_per_node=2) as cluster:
        cluster.create_topic(topic, segment_bytes=16 * 1024)
        producer = cluster.producer(linger_ms=5)
        for _ in range(2000):
            producer.send(topic, value=os.urandom(40).hex().encode())
        producer.flush()
        producer.close()
        platform = beside(cluster, 1)  # both log dirs of the broker
        cluster.wait_until("the HW checkpoint", lambda: platform.status(topic)["high_watermark"] == 2000)
        platform.ok("copy")
        copied = platform.status(topic)["highest_copied_offset"]
        assert copied > 0

        source = cluster.partition_dir(1, topic, 0)
        target = next(d for d in cluster.nodes[1].log_dirs if d != source.parent)
        answer = cluster.admin().alter_replica_log_dirs({(topic, 0, 1): str(target)})
        assert all(error.__name__ == "NoError" for error in answer.values()), answer
        tp = TopicPartition(topic, 0)
        cluster.wait_until("the move", lambda: (target / f"{topic}-0").is_dir() and not source.exists())
        trace = deleted_topic_ids(source.parent, tp)
        assert list(trace) == [
            PartitionLog.open(target / f"{topic}-0").topic_id
        ]  # the deletion's trace, of a live partition
        assert str(trace[next(iter(trace))].name).endswith("-delete")

        refused = platform.run("delete-partition", "--topic", topic, "--partition", "0", "--yes")
        assert refused.code != 0
        assert "still in the broker's log dirs" in refused.stderr
        row = platform.status(topic)
        assert row["highest_copied_offset"] == copied and row["remote_segments"] > 0

        # Configured with the old log dir only, the partition is gone from the files and its -delete
        # trace is there, as after a deletion. Without a kafka: section the broker's KRaft metadata
        # image (in its first log dir, its metadata.log.dir) still has the topic: refused.
        topic_id = PartitionLog.open(target / f"{topic}-0").topic_id
        platform.document["log_dirs"] = [str(source.parent)]
        platform.document["metadata_log_dir"] = str(cluster.nodes[1].log_dirs[0])
        platform.write()
        assert (source.parent / f"{topic}-0").exists() is False and deleted_topic_ids(source.parent, tp)
        for named in ((), ("--topic-id", topic_id)):
            refused = platform.run("delete-partition", "--topic", topic, "--partition", "0", "--yes", *named)
            assert refused.code == 1, refused
            assert f"still has topic id {topic_id} (topic 'moved'): Kafka has not deleted it" in refused.stderr
        # With a kafka: section the cluster itself still reports the topic id.
        platform.document["kafka"] = {"bootstrap_servers": cluster.bootstrap_servers}
        platform.write()
        refused = platform.run("delete-partition", "--topic", topic, "--partition", "0", "--yes")
        assert refused.code != 0
        assert "still reports topic 'moved' with topic id" in refused.stderr
        assert "Kafka has not deleted it" in refused.stderr
        segments = platform.ok("segments", "--topic", topic, "--partition", "0", "--json").json()
        assert len([s for s in segments if s["state"] == "COPY_SEGMENT_FINISHED"]) == row["remote_segments"]
