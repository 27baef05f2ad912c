"""A partition reassigned away from a broker leaves on it the same trace a deleted one does: its
directory renamed ``<topic>-<partition>.<uuid>-delete`` (``LogManager.asyncDelete`` on StopReplica).
Removal run beside that broker, inside the window the directory stays (``log.segment.delete.delay.ms``),
must never take it for a deletion: the controller's word (the KRaft metadata image on the broker's
disk, or the cluster itself with a ``kafka:`` section) still has the topic (docs/kafka-rules.md
section 7)."""

from __future__ import annotations

import os
from collections.abc import Callable

from kafka import TopicPartition as KafkaTP

from tests.real_kafka.conftest import PrivateKafka
from tests.real_kafka.support import BesideKafka
from tiering_core.kafka.log_dirs import deleted_topic_ids
from tiering_core.kafka.topic import TopicPartition


def test_a_partition_reassigned_away_is_not_a_deletion(
    private_kafka: PrivateKafka, beside: Callable[..., BesideKafka]
) -> None:
    topic = "reassigned"
    tp = TopicPartition(topic, 0)
    settings = {"log.segment.delete.delay.ms": "600000"}  # the -delete directory stays for the whole test
    with private_kafka(3, settings=settings) as cluster:
        cluster.create_topic(topic, segment_bytes=16 * 1024)  # one replica, on the broker it is moved from
        source = cluster.leader(topic, 0)
        producer = cluster.producer(linger_ms=5)
        for _ in range(2000):
            producer.send(topic, value=os.urandom(40).hex().encode())
        producer.flush()
        producer.close()
        platform = beside(cluster, source)
        cluster.wait_until("the HW checkpoint", lambda: platform.status(topic)["high_watermark"] == 2000)
        platform.ok("copy")
        status = platform.status(topic)
        topic_id = status["topic_id"]
        segments = platform.ok("segments", "--topic", topic, "--partition", "0", "--json").json()
        assert status["highest_copied_offset"] > 0 and segments

        target = next(node for node in cluster.nodes if node != source)
        admin = cluster.admin()
        assert admin.alter_partition_reassignments({KafkaTP(topic, 0): [target]}) == {KafkaTP(topic, 0): None}
        log_dir = cluster.nodes[source].log_dirs[0]
        cluster.wait_until(
            "the reassignment, and the source broker's -delete rename",
            lambda: not admin.list_partition_reassignments() and topic_id in deleted_topic_ids(log_dir, tp),
        )
        assert not (log_dir / f"{topic}-0").exists()  # gone from the broker, its -delete trace left: as a deletion

        for named in ((), ("--topic-id", topic_id)):
            refused = platform.run("delete-partition", "--topic", topic, "--partition", "0", "--yes", *named)
            assert refused.code == 1, refused
            assert f"still has topic id {topic_id} (topic '{topic}'): Kafka has not deleted it" in refused.stderr
            assert "--force" in refused.stderr and refused.stderr.count("\n") == 1
        platform.document["kafka"] = {"bootstrap_servers": cluster.bootstrap_servers}
        platform.write()
        refused = platform.run("delete-partition", "--topic", topic, "--partition", "0", "--yes")
        assert refused.code == 1, refused
        assert f"still reports topic '{topic}' with topic id {topic_id}" in refused.stderr
        # Nothing was removed: the tier still holds what was copied, and the partition lives on the broker it
        # moved to.
        assert platform.ok("segments", "--topic", topic, "--partition", "0", "--json").json() == segments
        assert cluster.leader(topic, 0) == target
