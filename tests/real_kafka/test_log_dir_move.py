"""A partition moved between a broker's log dirs (AlterReplicaLogDirs) leaves the same trace a
deleted one does: its old directory renamed ``<topic>-<partition>.<uuid>-delete``. Removal must
never take that for a deletion while the partition lives on in another log dir."""

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
    with private_kafka(1, log_dirs_per_node=2) as cluster:
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

        # Configured with the old log dir only, the files alone would show a deletion, proven by
        # its -delete trace; the cluster (the kafka: section) still reports the topic id.
        platform.document["log_dirs"] = [str(source.parent)]
        platform.document["kafka"] = {"bootstrap_servers": cluster.bootstrap_servers}
        platform.write()
        refused = platform.run("delete-partition", "--topic", topic, "--partition", "0", "--yes")
        assert refused.code != 0
        assert "still reports topic 'moved' with topic id" in refused.stderr
        assert "it was not deleted" in refused.stderr
        segments = platform.ok("segments", "--topic", topic, "--partition", "0", "--json").json()
        assert len([s for s in segments if s["state"] == "COPY_SEGMENT_FINISHED"]) == row["remote_segments"]
