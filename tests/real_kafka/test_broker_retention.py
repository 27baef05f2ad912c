"""The broker's own retention beside the platform (docs/kafka-rules.md sections 6 and 10).

A real broker deletes its old local segments (topic ``retention.bytes``, checked every second):
what was tiered before still serves reads from the remote tier, equal to what a consumer read
before the deletion, and the platform's retention deletes nothing remote because of it. Data the
broker deletes before it was tiered is a tiering gap: shown by ``status``, reported by ``copy``
(exit 3, one line naming the offsets), recorded in the metadata, and what remains is copied; a
DeleteRecords through the platform past it makes it history, reported nowhere.
"""

from __future__ import annotations

from collections.abc import Callable

from kafka.admin import ConfigResource, ConfigResourceType

from tests.real_kafka.cluster import KafkaCluster
from tests.real_kafka.support import BesideKafka, ConsumedRecord, consume, offsets
from tiering_core.config import load_config
from tiering_core.context import TieringContext
from tiering_core.kafka.partition_log import PartitionLog
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.monitoring.collect import collect_metrics
from tiering_core.monitoring.overview import collect_overview

TOPIC = "broker-retention"
SEGMENT_BYTES = 16 * 1024
#: The broker's local retention in the test: about two segments.
RETENTION_BYTES = 2 * SEGMENT_BYTES


def _produce(cluster: KafkaCluster, start: int, count: int) -> None:
    producer = cluster.producer(linger_ms=5, batch_size=4096)
    for i in range(start, start + count):
        headers = [("n", str(i).encode())] if i % 7 == 0 else []
        key = None if i % 11 == 0 else f"k{i}".encode()
        producer.send(TOPIC, key=key, value=f"value-{i:06d}-".encode() * 6, headers=headers)
    producer.flush()
    producer.close()


def _local_log_start(cluster: KafkaCluster) -> int:
    return PartitionLog.open(cluster.partition_dir(1, TOPIC, 0)).segments[0].base_offset


def _retention_settled(cluster: KafkaCluster) -> bool:
    """The broker's size-based retention has deleted all it will (Kafka deletes the oldest segment
    while the log stays at least ``retention.bytes`` without it): the log start stops moving."""
    segments = PartitionLog.open(cluster.partition_dir(1, TOPIC, 0)).segments
    return sum(s.size_bytes for s in segments) - segments[0].size_bytes < RETENTION_BYTES


def _same(remote: list[dict[str, object]], consumed: list[ConsumedRecord]) -> None:
    assert [ConsumedRecord.from_fetch(r) for r in remote] == consumed


def test_broker_retention_keeps_remote_reads_and_records_a_gap(
    kafka: KafkaCluster, beside: Callable[..., BesideKafka]
) -> None:
    kafka.create_topic(TOPIC, segment_bytes=SEGMENT_BYTES, configs={"file.delete.delay.ms": "1000"})
    platform = beside(kafka)
    _produce(kafka, 0, 2000)
    kafka.wait_until("the high watermark checkpoint", lambda: platform.status(TOPIC)["high_watermark"] == 2000)
    before = consume(kafka, TOPIC, 0)
    assert offsets(before) == list(range(2000))

    platform.ok("copy", "--topic", TOPIC)
    copied = platform.status(TOPIC)
    hco = copied["highest_copied_offset"]
    assert copied["remote_segments"] > 5 and 1000 < hco < 2000
    assert copied["gaps"] == []

    # The broker's retention: keep ~2 segments locally.
    admin = kafka.admin()
    admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, TOPIC, configs={"retention.bytes": str(RETENTION_BYTES)})]
    )
    kafka.wait_until("the broker deleting its old local segments", lambda: _local_log_start(kafka) > 1000)
    after = platform.status(TOPIC)
    assert after["local_log_start_offset"] > 1000
    assert after["remote_segments"] == copied["remote_segments"]
    assert after["highest_copied_offset"] == hco
    assert after["gaps"] == []

    # Offsets the broker no longer holds are read from the remote tier, as a consumer read them.
    _same(platform.remote_records(TOPIC, 0, 0, hco + 1), before[: hco + 1])
    for probe in (0, 1, 517, hco):
        target = before[probe].timestamp
        found = platform.ok("find-offset", "--topic", TOPIC, "--partition", "0", "--timestamp", str(target), "--json")
        expected = next(r for r in before if r.timestamp >= target)
        assert found.json()["offset"] == expected.offset
        assert found.json()["timestamp"] == expected.timestamp

    # The platform's retention (retention.ms/bytes -1) deletes nothing because the broker dropped data.
    kept = platform.ok("retention", "--topic", TOPIC, "--json").json()
    assert kept[0]["segments_deleted"] == 0
    assert platform.status(TOPIC)["remote_segments"] == copied["remote_segments"]
    _same(platform.remote_records(TOPIC, 0, 0, 50), before[:50])

    # Now the broker deletes data that was never tiered: produce, let retention drop it, then copy.
    _produce(kafka, 2000, 2000)
    kafka.wait_until("the broker deleting segments never tiered", lambda: _local_log_start(kafka) > 3000)
    kafka.wait_until("the broker's retention settling", lambda: _retention_settled(kafka))
    kafka.wait_until("the high watermark checkpoint", lambda: platform.status(TOPIC)["high_watermark"] == 4000)
    pending = platform.status(TOPIC)
    local_start = pending["local_log_start_offset"]
    assert pending["gaps"] == [[hco + 1, local_start - 1]], pending

    failed = platform.run("copy", "--topic", TOPIC)
    assert failed.code == 3, failed
    assert f"tiering gap: offsets {hco + 1}..{local_start - 1}" in failed.stderr
    assert "deleted by the broker before they were tiered" in failed.stderr

    state = platform.status(TOPIC)
    assert state["gaps"] and state["gaps"][0][0] == hco + 1 and state["gaps"][0][1] >= local_start - 1
    with TieringContext.open(load_config(platform.config_path)) as ctx:  # recorded, not only seen
        tip = TopicIdPartition(state["topic_id"], TopicPartition(TOPIC, 0))
        assert (hco + 1, local_start - 1) in [(g.start, g.end) for g in ctx.metadata.list_gaps(tip)]
    assert state["highest_copied_offset"] > local_start, "what remains after the gap is copied"
    gap_end = state["gaps"][0][1]
    # Both sides of the gap are served; the gap itself is skipped, not invented.
    tail = consume(kafka, TOPIC, 0, start=gap_end + 1, until=state["highest_copied_offset"] + 1)
    _same(platform.remote_records(TOPIC, 0, gap_end + 1, len(tail)), tail)
    _same(platform.remote_records(TOPIC, 0, 0, hco + 1), before[: hco + 1])
    around = platform.remote_records(TOPIC, 0, hco - 2, 6)
    assert [r["offset"] for r in around] == [hco - 2, hco - 1, hco, gap_end + 1, gap_end + 2, gap_end + 3]

    # The gap stays recorded; the next copy has no new gap and succeeds.
    again = platform.run("copy", "--topic", TOPIC)
    assert again.code == 0, again
    assert platform.status(TOPIC)["gaps"] == state["gaps"]

    # A DeleteRecords through the platform (sent to the cluster too) into the gap: what it deleted
    # is history, the rest of the gap is still lost; one past the gap leaves nothing to report.
    (gap,) = state["gaps"]
    platform.document["kafka"] = {"bootstrap_servers": kafka.bootstrap_servers}
    platform.write()
    select = ("--topic", TOPIC, "--partition", "0", "--yes", "--json")
    inside = (gap[0] + gap[1]) // 2
    assert platform.ok("delete-records", *select, "--before-offset", str(inside)).json()["sent_to_cluster"]
    assert platform.status(TOPIC)["gaps"] == [[inside, gap[1]]]
    assert f"GAP {inside}..{gap[1]}" in platform.ok("status", "--topic", TOPIC).stdout
    platform.ok("delete-records", *select, "--before-offset", str(gap[1] + 1))
    assert platform.status(TOPIC)["gaps"] == [] and "GAP " not in platform.ok("status", "--topic", TOPIC).stdout
    with TieringContext.open(load_config(platform.config_path)) as ctx:
        (partition,) = [p for p in collect_metrics(ctx).partitions if p.topic == TOPIC]
        assert (partition.gap_count, partition.gap_offsets) == (0, 0)
        assert collect_overview(ctx).gaps == []
