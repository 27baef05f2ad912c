"""A follower's log start is its leader's, inside a segment of its own (docs/kafka-rules.md section 10
item 1), on a real 3-node KRaft cluster.

The leader (node 1) rolls 1 MiB segments, the followers 1.5 MiB ones (their broker default), so
their segments start at offsets of their own. Records of the first MiB or so carry timestamps two
days old; the topic's ``retention.ms`` then becomes one hour and the leader deletes its first
segment, all old. Each follower copies the new log start (``ReplicaFetcherThread`` ->
``maybeIncrementLogStartOffset``), which lands inside its own first segment (old and new records,
so its retention keeps it) and is checkpointed in ``log-start-offset-checkpoint``; a follower that
becomes leader keeps it, and the cluster's log start is then that one. The platform's own
retention (``retention.ms: -1`` for the topic in its YAML) must delete nothing of what it tiered,
from a follower's log dir (the files, or the cluster as a source) and from the new leader's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.real_kafka.cluster import KafkaCluster
from tests.real_kafka.conftest import PrivateKafka
from tests.real_kafka.support import BesideKafka, ConsumedRecord, beside_every_node, consume
from tiering_core.kafka.partition_log import PartitionLog

TOPIC = "follower-log-start"
MIB = 1024 * 1024
#: The followers' broker default; the leader keeps the 1 MiB of every test cluster.
FOLLOWER_SEGMENT_BYTES = 3 * MIB // 2
OLD, NEW = 1300, 2200
VALUE = 1000


def produce(cluster: KafkaCluster) -> None:
    """``OLD`` records two days old, then ``NEW`` records of now, acknowledged by every replica."""
    old = int(time.time() * 1000) - 2 * 86_400_000
    producer = cluster.producer(acks="all", linger_ms=5, retries=5)
    try:
        for i in range(OLD + NEW):
            stamp = old + i if i < OLD else None
            producer.send(TOPIC, key=str(i).encode(), value=str(i).encode().ljust(VALUE, b"."), timestamp_ms=stamp)
        producer.flush(timeout=120)
    finally:
        producer.close()


def bases(cluster: KafkaCluster, node_id: int) -> list[int]:
    return [s.base_offset for s in PartitionLog.open(cluster.partition_dir(node_id, TOPIC, 0)).segments]


def log_start_entry(cluster: KafkaCluster, node_id: int) -> int | None:
    return PartitionLog.open(cluster.partition_dir(node_id, TOPIC, 0)).log_start_offset_checkpoint


def remote(platform: BesideKafka) -> list[tuple[str, int, int]]:
    rows = platform.ok("segments", "--topic", TOPIC, "--partition", "0", "--json").json()
    return [
        (r["segment_id"], r["start_offset"], r["end_offset"]) for r in rows if r["state"] == "COPY_SEGMENT_FINISHED"
    ]


def retention_deletes_nothing(platform: BesideKafka, tiered: list[tuple[str, int, int]], log_start: int) -> None:
    """Retention from this node's log dir deletes nothing; status says what only the tier holds."""
    result = platform.ok("retention", "--topic", TOPIC, "--json").json()[0]
    assert (result["segments_deleted"], result["planned"]) == (0, []), result
    assert remote(platform) == tiered
    row = platform.status(TOPIC)
    assert (row["local_log_start_offset"], row["log_start_offset"], row["remote_log_start_offset"]) == (
        log_start,
        0,
        0,
    )
    assert row["remote_only_offsets"] == [0, log_start - 1] and row["gaps"] == []


def test_a_log_start_inherited_from_the_leaders_retention_deletes_nothing_remote(
    private_kafka: PrivateKafka, beside: Callable[..., BesideKafka]
) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType

    follower_settings = {"log.segment.bytes": str(FOLLOWER_SEGMENT_BYTES)}
    with private_kafka(nodes=3, node_settings={2: follower_settings, 3: follower_settings}) as cluster:
        cluster.create_topic(TOPIC, replica_assignments={0: [1, 2, 3]})
        cluster.wait_until("node 1 leading", lambda: cluster.leader(TOPIC, 0) == 1)
        produce(cluster)
        end = OLD + NEW
        keep = {TOPIC: {"retention.ms": -1, "retention.bytes": -1}}  # the platform keeps everything tiered
        platform = beside_every_node(beside(cluster, 1, topics=keep))
        cluster.wait_until(
            "the leader's checkpointed high watermark", lambda: platform[1].status(TOPIC)["high_watermark"] == end
        )
        platform[1].ok("copy", "--topic", TOPIC)
        tiered = remote(platform[1])
        leader_bases, follower_bases = bases(cluster, 1), bases(cluster, 2)
        assert [start for _, start, _ in tiered] == leader_bases[:-1]
        assert leader_bases[1] < OLD < leader_bases[2], "the leader's first segment alone is all old"
        assert follower_bases[0] == 0 and follower_bases[1] > OLD, "a follower's first segment holds new records"
        before = consume(cluster, TOPIC, 0, until=leader_bases[1])

        # The leader's own retention deletes its first segment; the followers take its log start.
        cluster.admin().alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, TOPIC, configs={"retention.ms": "3600000"})]
        )
        log_start = leader_bases[1]
        cluster.wait_until("the leader's retention", lambda: bases(cluster, 1)[0] == log_start)
        for node in (2, 3):
            cluster.wait_until(
                f"node {node} checkpointing its leader's log start",
                lambda n=node: log_start_entry(cluster, n) == log_start,
            )
            assert bases(cluster, node)[0] == 0 < log_start < bases(cluster, node)[1]  # inside its own segment

        retention_deletes_nothing(platform[2], tiered, log_start)  # a follower's files
        platform[3].document["kafka"] = {"bootstrap_servers": cluster.bootstrap_servers}
        platform[3].write()
        retention_deletes_nothing(platform[3], tiered, log_start)  # a follower, the cluster as a source
        assert platform[3].status(TOPIC)["offsets_source"] == "broker"
        served = platform[2].remote_records(TOPIC, 0, 0, log_start)  # below the log start: from the tier
        assert [ConsumedRecord.from_fetch(r) for r in served] == before

        # A leadership change: the new leader keeps the log start inside its own segment, and the
        # cluster's log start is now that leader's.
        cluster.stop_node(1)  # controlled shutdown: the controller moves leadership first
        cluster.wait_until("a new leader", lambda: cluster.leader(TOPIC, 0) in (2, 3))
        new_leader = cluster.leader(TOPIC, 0)
        on_leader = platform[new_leader]
        on_leader.document["kafka"] = {"bootstrap_servers": cluster.bootstrap_servers}
        on_leader.write()
        assert bases(cluster, new_leader)[0] == 0 and log_start_entry(cluster, new_leader) == log_start
        retention_deletes_nothing(on_leader, tiered, log_start)
        other = platform[5 - new_leader]
        other.document.pop("kafka", None)
        other.write()
        retention_deletes_nothing(other, tiered, log_start)  # the other node's files, a follower again
        with_start: dict[str, Any] = on_leader.status(TOPIC)
        assert with_start["offsets_source"] == "broker" and with_start["local_log_start_offset"] == log_start
