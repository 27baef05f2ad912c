"""Replica choice on a real 3-node KRaft cluster: one deployment (one store, one bucket, a
``brokers:`` config of the three nodes' log dirs) with a copy run on every node, each with its
broker id. Only the best replica (the leader's) copies; the followers skip with their reason; after
the leader stops, the new leader's node copies, and ``fetch`` equals a real consumer.

The partition's replicas are assigned [1, 2, 3], so node 1 leads first and node 2 (the first live
in-sync replica of the assignment) after it: with caught-up followers equal to the leader, ties go
to the lowest broker id, which is then the leader's.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

from tests.real_kafka.cluster import KafkaCluster
from tests.real_kafka.conftest import PrivateKafka
from tests.real_kafka.support import BesideKafka, ConsumedRecord, consume

SEGMENT_BYTES = 32 * 1024
TOPIC = "replica-choice"


def produce(cluster: KafkaCluster, start: int, count: int) -> None:
    producer = cluster.producer(acks="all", linger_ms=5, retries=5)
    try:
        for i in range(start, start + count):
            producer.send(TOPIC, key=str(i).encode(), value=f"r-{i}-".encode() + b"y" * 120)
        producer.flush(timeout=60)
    finally:
        producer.close()


def create_topic(cluster: KafkaCluster) -> None:
    """One partition on nodes [1, 2, 3] in this order (the preferred leader first)."""
    from kafka.admin import NewTopic

    configs = {"internal.segment.bytes": str(SEGMENT_BYTES)}
    cluster.admin().create_topics([NewTopic(TOPIC, -1, -1, replica_assignments={0: [1, 2, 3]}, topic_configs=configs)])
    cluster.wait_until(f"node 1 leading {TOPIC}-0", lambda: leader(cluster) == 1, timeout=30)


def leader(cluster: KafkaCluster) -> int:
    try:
        return cluster.leader(TOPIC, 0)
    except Exception:
        return -1


def status(platform: BesideKafka, broker: int) -> dict[str, Any]:
    (row,) = platform.ok("status", "--broker", str(broker), "--topic", TOPIC, "--json").json()
    return dict(row)


def wait_checkpointed(platform: BesideKafka, broker: int, end: int) -> None:
    platform.cluster.wait_until(
        f"node {broker} checkpointing {TOPIC}-0 up to {end}",
        lambda: (status(platform, broker)["high_watermark"] or 0) >= end,
        timeout=20,
    )


def copy(platform: BesideKafka, broker: int) -> dict[str, Any]:
    (result,) = platform.ok("copy", "--broker", str(broker), "--topic", TOPIC, "--json").json()
    return dict(result)


def finished(platform: BesideKafka) -> list[tuple[int, int]]:
    rows = platform.ok("segments", "--topic", TOPIC, "--partition", "0", "--json").json()
    return sorted((r["start_offset"], r["end_offset"]) for r in rows if r["state"] == "COPY_SEGMENT_FINISHED")


def test_only_the_best_replica_copies_and_the_new_leader_takes_over(
    private_kafka: PrivateKafka, beside: Callable[..., BesideKafka]
) -> None:
    began = time.monotonic()
    with private_kafka(nodes=3) as cluster:
        create_topic(cluster)
        platform = beside(cluster, 1)
        del platform.document["log_dirs"]
        platform.document["brokers"] = {
            n: {"log_dirs": [str(d) for d in node.log_dirs]} for n, node in cluster.nodes.items()
        }
        platform.write()

        produce(cluster, 0, 1500)
        for node in (1, 2, 3):
            wait_checkpointed(platform, node, 1500)
        results = {node: copy(platform, node) for node in (3, 2, 1)}  # followers first
        results.update({node: copy(platform, node) for node in (3, 2)})  # ... and after the leader
        assert results[1]["skipped_reason"] is None and results[1]["segments_copied"] > 0
        for node in (2, 3):
            assert results[node]["segments_copied"] == 0
            assert results[node]["skipped_reason"].startswith("broker 1 holds "), results[node]
        first = finished(platform)
        assert first[0][0] == 0 and all(b[0] == a[1] + 1 for a, b in itertools.pairwise(first))

        cluster.stop_node(1)  # controlled shutdown: leadership moves to node 2
        cluster.wait_until(f"a new leader of {TOPIC}-0", lambda: leader(cluster) in (2, 3), timeout=30)
        new_leader = leader(cluster)
        produce(cluster, 1500, 1500)
        for node in (2, 3):
            wait_checkpointed(platform, node, 3000)
        old = copy(platform, 1)  # the stopped node's files end at the old epoch
        assert old["segments_copied"] == 0 and "holds a more advanced replica (leader epoch " in old["skipped_reason"]
        follower = 5 - new_leader
        if new_leader == 2:  # the follower, caught up or behind, never wins over the lower id
            skipped = copy(platform, follower)
            assert skipped["segments_copied"] == 0 and skipped["skipped_reason"].startswith("broker 2 holds ")
        took_over = copy(platform, new_leader)
        assert took_over["skipped_reason"] is None and took_over["segments_copied"] > 0
        rows = finished(platform)
        assert rows[: len(first)] == first
        for a, b in itertools.pairwise(rows):
            assert b[0] <= a[1] + 1, f"hole between {a} and {b}"
        end = rows[-1][1]
        assert end >= 1500

        cluster_view = platform.ok("status", "--cluster", "--topic", TOPIC, "--json").json()
        (row,) = cluster_view
        assert row["best_broker"] == new_leader and row["highest_copied_offset"] == end

        fetched = [ConsumedRecord.from_fetch(r) for r in platform.remote_records(TOPIC, 0, 0, end + 1)]
        broker = consume(cluster, TOPIC, 0, until=end + 1)
        assert len(broker) == end + 1
        assert fetched == broker
    print(f"replica choice: {end + 1} records compared in {time.monotonic() - began:.1f} s")
