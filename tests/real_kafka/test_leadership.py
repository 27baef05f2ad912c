"""Leadership moves on a real 3-node KRaft cluster, with the platform deployed beside every broker
(one metadata store and one bucket; a copy run reads one broker's log dirs).

A leader change (controlled shutdown) and an unclean election: the remote tier follows the
leader-epoch lineage (KAFKA_SEMANTICS 3, 5, 6, 10), divergent segments are never served, and
``fetch`` over the tiered range equals what a real consumer reads from the broker.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

from tests.real_kafka.cluster import KafkaCluster
from tests.real_kafka.conftest import PrivateKafka
from tests.real_kafka.support import BesideKafka, ConsumedRecord, beside_every_node, consume
from tiering_core.kafka.epoch import EpochEntry
from tiering_core.kafka.partition_log import PartitionLog

SEGMENT_BYTES = 32 * 1024


def produce(cluster: KafkaCluster, topic: str, start: int, count: int, tag: str) -> None:
    """``count`` records keyed ``start..``, acknowledged by every in-sync replica."""
    producer = cluster.producer(acks="all", linger_ms=5, retries=5)
    try:
        for i in range(start, start + count):
            producer.send(topic, key=str(i).encode(), value=f"{tag}-{i}-".encode() + b"x" * 120)
        producer.flush(timeout=60)
    finally:
        producer.close()


def partition_state(cluster: KafkaCluster, topic: str) -> dict[str, Any]:
    return dict(cluster.admin().describe_topics([topic])[0]["partitions"][0])


def wait_for_leader(
    cluster: KafkaCluster, topic: str, check: Callable[[dict[str, Any]], bool], timeout: float = 30
) -> dict[str, Any]:
    state: dict[str, Any] = {}

    def elected() -> bool:
        nonlocal state
        try:
            state = partition_state(cluster, topic)
        except Exception:
            return False
        return state["leader_id"] >= 0 and check(state)

    cluster.wait_until(f"a leader of {topic}-0", elected, timeout=timeout)
    return state


def wait_checkpointed(beside: BesideKafka, topic: str, end: int) -> dict[str, Any]:
    """Until the node's files show ``end`` as high watermark: the broker checkpoints it every
    second (replica.high.watermark.checkpoint.interval.ms), so the files lag what clients see."""
    status: dict[str, Any] = {}

    def reached() -> bool:
        nonlocal status
        status = beside.status(topic)
        return (status["high_watermark"] or 0) >= end

    beside.cluster.wait_until(f"node {beside.node_id} checkpointing {topic}-0 up to {end}", reached, timeout=20)
    return status


def epoch_cache(cluster: KafkaCluster, node_id: int, topic: str) -> list[EpochEntry]:
    """The node's leader-epoch-checkpoint as our reader reads it."""
    return PartitionLog.open(cluster.partition_dir(node_id, topic, 0)).leader_epoch_entries


def segments(beside: BesideKafka, topic: str, state: str = "COPY_SEGMENT_FINISHED") -> list[dict[str, Any]]:
    rows = beside.ok("segments", "--topic", topic, "--partition", "0", "--json").json()
    return sorted((r for r in rows if r["state"] == state), key=lambda r: (r["start_offset"], r["end_offset"]))


def as_consumed(rows: list[dict[str, Any]]) -> list[ConsumedRecord]:
    return [ConsumedRecord.from_fetch(r) for r in rows]


def assert_tiered_once(rows: list[dict[str, Any]], resume_points: set[int]) -> None:
    """Finished segments cover their range without holes, and overlap only where a copy resumed
    inside a segment of the new leader (KAFKA_SEMANTICS 5.3: the whole segment goes again)."""
    for a, b in itertools.pairwise(rows):
        if b["start_offset"] != a["end_offset"] + 1:
            assert b["start_offset"] <= a["end_offset"] + 1, f"hole between {a} and {b}"
            assert a["end_offset"] + 1 in resume_points, f"{b} overlaps {a} away from a resume point"


def test_leader_change_the_remote_tier_follows_the_lineage(
    private_kafka: PrivateKafka, beside: Callable[..., BesideKafka]
) -> None:
    began = time.monotonic()
    topic = "lead-change"
    with private_kafka(nodes=3) as cluster:
        cluster.create_topic(topic, replication_factor=3, segment_bytes=SEGMENT_BYTES)
        platform = beside_every_node(beside(cluster, 1))
        produce(cluster, topic, 0, 1500, "e0")
        first = partition_state(cluster, topic)
        old_leader, old_epoch = first["leader_id"], first["leader_epoch"]
        wait_checkpointed(platform[old_leader], topic, 1500)
        platform[old_leader].ok("copy", "--topic", topic)
        before = segments(platform[old_leader], topic)
        assert before, "the old leader's closed segments are tiered"
        copied_by_old = before[-1]["end_offset"]

        cluster.stop_node(old_leader)  # controlled shutdown: the controller moves leadership first
        state = wait_for_leader(cluster, topic, lambda s: s["leader_id"] != old_leader)
        new_leader, new_epoch = state["leader_id"], state["leader_epoch"]
        assert new_epoch > old_epoch
        produce(cluster, topic, 1500, 1500, "e1")
        on_new = platform[new_leader]
        wait_checkpointed(on_new, topic, 3000)
        # the new leader's cache gains the new epoch at its log end when elected
        assert epoch_cache(cluster, new_leader, topic) == [EpochEntry(old_epoch, 0), EpochEntry(new_epoch, 1500)]
        on_new.ok("copy", "--topic", topic)

        status = on_new.status(topic)
        assert status["leader_epoch"] == new_epoch
        rows = segments(on_new, topic)
        assert rows[: len(before)] == before, "what the old leader tiered stays as it was"
        epochs = {int(e) for s in rows for e in s["leader_epochs"]}
        assert {old_epoch, new_epoch} <= epochs, rows
        assert_tiered_once(rows, {copied_by_old + 1})
        end = rows[-1]["end_offset"]
        assert rows[0]["start_offset"] == 0 and end >= 1500
        assert status["highest_copied_offset"] == end

        remote = as_consumed(on_new.remote_records(topic, 0, 0, end + 1))
        broker = consume(cluster, topic, 0, until=end + 1)
        assert len(broker) == end + 1
        assert remote == broker
    print(f"leader change: {end + 1} records compared in {time.monotonic() - began:.1f} s")
