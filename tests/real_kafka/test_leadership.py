"""Leadership moves on a real 3-node KRaft cluster, with the platform deployed beside every broker
(one metadata store and one bucket; a copy run reads one broker's log dirs).

A leader change (controlled shutdown) and an unclean election: the remote tier follows the
leader-epoch lineage (docs/kafka-rules.md sections 3, 5, 6 and 10), divergent segments are
never served, and ``fetch`` over the tiered range equals what a real consumer reads from the broker.
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


def consumed_leader_epochs(cluster: KafkaCluster, topic: str, end: int) -> list[tuple[int, int]]:
    """(offset, leader epoch) of every record below ``end`` as a real consumer sees them."""
    from kafka import TopicPartition as KafkaTP

    consumer = cluster.consumer(fetch_max_bytes=4 * 1024 * 1024)
    try:
        tp = KafkaTP(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        out: list[tuple[int, int]] = []
        deadline = time.monotonic() + 60
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                out.extend((r.offset, r.leader_epoch) for r in records if r.offset < end)
        return out
    finally:
        consumer.close()


def broker_offset_for_time(cluster: KafkaCluster, topic: str, timestamp: int) -> int | None:
    from kafka import TopicPartition as KafkaTP

    consumer = cluster.consumer()
    try:
        found = consumer.offsets_for_times({KafkaTP(topic, 0): timestamp})[KafkaTP(topic, 0)]
        return None if found is None else int(found.offset)
    finally:
        consumer.close()


def as_consumed(rows: list[dict[str, Any]]) -> list[ConsumedRecord]:
    return [ConsumedRecord.from_fetch(r) for r in rows]


def assert_tiered_once(rows: list[dict[str, Any]], resume_points: set[int]) -> None:
    """Finished segments cover their range without holes, and overlap only where a copy resumed
    inside a segment of the new leader (docs/kafka-rules.md section 5 step 3: the whole segment goes again)."""
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

        # the stopped old leader's files end at epoch 0: behind the lineage, not copied from
        (skipped,) = platform[old_leader].ok("copy", "--topic", topic, "--json").json()
        assert skipped["segments_copied"] == 0 and "behind the recorded lineage" in skipped["skipped_reason"]
        assert segments(on_new, topic) == rows

        fetched = on_new.remote_records(topic, 0, 0, end + 1)
        broker = consume(cluster, topic, 0, until=end + 1)
        assert len(broker) == end + 1
        assert as_consumed(fetched) == broker
        remote_epochs = [(r["offset"], r["leader_epoch"]) for r in fetched]
        assert remote_epochs == consumed_leader_epochs(cluster, topic, end + 1)
        assert {e for _, e in remote_epochs} == {old_epoch, new_epoch}
    print(f"leader change: {end + 1} records compared in {time.monotonic() - began:.1f} s")


def divergent_segments(rows: list[dict[str, Any]], divergence: int, old_epoch: int) -> list[dict[str, Any]]:
    """The old leader's segments of ``old_epoch`` only that end at or past the divergence point."""
    return [r for r in rows if set(r["leader_epochs"]) == {str(old_epoch)} and r["end_offset"] >= divergence]


def retention_with(beside: BesideKafka, topic: str, retention_ms: int) -> None:
    beside.document["topics"][topic] = {"retention.ms": retention_ms}
    beside.write()
    beside.ok("retention", "--topic", topic)


def test_unclean_election_divergent_segments_are_never_served(
    private_kafka: PrivateKafka, beside: Callable[..., BesideKafka]
) -> None:
    began = time.monotonic()
    topic = "unclean"
    with private_kafka(nodes=3) as cluster:
        cluster.create_topic(
            topic,
            replication_factor=2,
            segment_bytes=SEGMENT_BYTES,
            configs={"unclean.leader.election.enable": "true", "min.insync.replicas": "1"},
        )
        platform = beside_every_node(beside(cluster, 1))
        first = partition_state(cluster, topic)
        old_leader, old_epoch = first["leader_id"], first["leader_epoch"]
        (lagging,) = [n for n in first["replica_nodes"] if n != old_leader]
        produce(cluster, topic, 0, 1000, "shared")
        wait_checkpointed(platform[lagging], topic, 1000)
        cluster.stop_node(lagging)  # out of sync from now on: the leader goes on alone
        # The controller's shrink of the ISR reaches the brokers' metadata a moment after the stop.
        wait_for_leader(cluster, topic, lambda s: s["isr_nodes"] == [old_leader] and s["leader_id"] == old_leader)
        divergent_from_ms = int(time.time() * 1000)
        time.sleep(0.05)
        produce(cluster, topic, 1000, 1000, "divergent")
        old_epoch_until_ms = int(time.time() * 1000)  # every record so far is older
        wait_checkpointed(platform[old_leader], topic, 2000)
        platform[old_leader].ok("copy", "--topic", topic)
        old_rows = segments(platform[old_leader], topic)
        assert old_rows[-1]["end_offset"] > 1000, "the remote tier holds offsets the lagging replica lacks"
        divergent = divergent_segments(old_rows, 1000, old_epoch)
        divergent_ids = {r["segment_id"] for r in divergent}

        cluster.stop_node(old_leader, kill=True)
        cluster.start_node(lagging)
        # With the topic's unclean.leader.election.enable the controller elects the out-of-sync
        # replica by itself once the killed leader's session expires (no ElectLeaders needed).
        state = wait_for_leader(cluster, topic, lambda s: s["leader_id"] == lagging, timeout=40)
        new_epoch = state["leader_epoch"]
        assert new_epoch > old_epoch and state["isr_nodes"] == [lagging]
        time.sleep(0.5)  # new records come at least the broker session timeout (6 s) after the old
        produce(cluster, topic, 1000, 700, "new")
        on_new = platform[lagging]
        wait_checkpointed(on_new, topic, 1700)
        assert epoch_cache(cluster, lagging, topic) == [EpochEntry(old_epoch, 0), EpochEntry(new_epoch, 1000)]
        on_new.ok("copy", "--topic", topic)

        status = on_new.status(topic)
        assert status["leader_epoch"] == new_epoch
        rows = segments(on_new, topic)
        assert {r["segment_id"] for r in rows} >= divergent_ids, "divergent segments stay until retention's rules"
        lineage_rows = [r for r in rows if r["segment_id"] not in divergent_ids]
        assert {old_epoch, new_epoch} <= {int(e) for r in lineage_rows for e in r["leader_epochs"]}
        # The new leader resumes after the old leader's last copy in the shared lineage: where the
        # old leader's segment happened to end at 999 (it rolled at the divergence), the new
        # leader's segment holding 1000 begins below it and goes again whole.
        shared = [r["end_offset"] for r in old_rows if r["segment_id"] not in divergent_ids]
        assert_tiered_once(lineage_rows, {max(shared) + 1} if shared else set())
        end = lineage_rows[-1]["end_offset"]
        assert end >= 1000 and status["highest_copied_offset"] == end

        fetched = on_new.remote_records(topic, 0, 0, end + 1)
        remote = as_consumed(fetched)
        broker = consume(cluster, topic, 0, until=end + 1)
        assert len(broker) == end + 1
        assert remote == broker
        assert not any(r.value is not None and r.value.startswith(b"divergent") for r in remote)
        assert [(r["offset"], r["leader_epoch"]) for r in fetched] == consumed_leader_epochs(cluster, topic, end + 1)
        # by timestamp (docs/kafka-rules.md section 8): the divergent records' times lead to the new epoch's first
        found = on_new.ok(
            "find-offset", "--topic", topic, "--partition", "0", "--timestamp", str(divergent_from_ms), "--json"
        ).json()
        assert found["offset"] == broker_offset_for_time(cluster, topic, divergent_from_ms) == 1000, found
        assert found["leader_epoch"] == new_epoch

        # the killed old leader's files still end epoch 0 at 2000: that stale cache must not
        # override the lineage recorded since, so reads through its node serve no divergent record
        assert epoch_cache(cluster, old_leader, topic) == [EpochEntry(old_epoch, 0)]
        assert as_consumed(platform[old_leader].remote_records(topic, 0, 0, end + 1)) == broker

        # the old leader comes back as a follower and truncates to the new lineage
        cluster.start_node(old_leader)
        wait_for_leader(cluster, topic, lambda s: sorted(s["isr_nodes"]) == sorted([old_leader, lagging]), 40)
        cluster.wait_until(
            f"node {old_leader} following the new lineage",
            lambda: epoch_cache(cluster, old_leader, topic) == epoch_cache(cluster, lagging, topic),
            timeout=20,
        )
        # the truncation renamed the divergent segments *.deleted (deleted after file.delete.delay.ms),
        # some beside a refetched segment of the same base: the platform reads the dir all the same
        truncated = cluster.partition_dir(old_leader, topic, 0)
        assert any(p.name.endswith(".log.deleted") for p in truncated.iterdir())
        assert platform[old_leader].status(topic)["log_end_offset"] == on_new.status(topic)["log_end_offset"]

        # retention (docs/kafka-rules.md section 6): divergent segments are outside the lineage, so no time
        # breach deletes them and they never stop the walk; they go once their epoch has left it
        retention_with(on_new, topic, -1)
        assert segments(on_new, topic) == rows
        # the old epoch's records expire, the new epoch's (seconds younger) are kept
        retention_with(on_new, topic, int(time.time() * 1000) - old_epoch_until_ms - 300)
        kept = segments(on_new, topic)
        assert {r["segment_id"] for r in kept} >= divergent_ids, "a time breach never deletes divergent segments"
        kept_lineage = [r for r in kept if r["segment_id"] not in divergent_ids]
        assert kept_lineage == [r for r in lineage_rows if str(new_epoch) in r["leader_epochs"]]
        # Kafka's log start: one past the last deleted segment's end. Where the new leader's first
        # segment was copied whole from below the old leader's last shared one, it begins below that.
        expired = [r for r in lineage_rows if r not in kept_lineage]
        log_start = max(r["end_offset"] for r in expired) + 1
        assert log_start == kept_lineage[0]["start_offset"] or log_start - 1 in set(shared), (expired, kept_lineage)
        assert on_new.status(topic)["remote_log_start_offset"] == log_start
        assert as_consumed(on_new.remote_records(topic, 0, log_start, end + 1 - log_start)) == [
            r for r in broker if r.offset >= log_start
        ]
        # everything expires: the lineage's segments go and the log start passes the divergence;
        # the divergent ones (of an epoch still in this run's lineage) are due at the next run
        retention_with(on_new, topic, 1)
        assert {r["segment_id"] for r in segments(on_new, topic)} == divergent_ids
        assert on_new.status(topic)["delete_lag_segments"] == len(divergent_ids)
        retention_with(on_new, topic, 1)
        assert segments(on_new, topic) == []
    print(f"unclean election: {end + 1} records compared in {time.monotonic() - began:.1f} s")
