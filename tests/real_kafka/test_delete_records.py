"""DeleteRecords through a real admin client (docs/kafka-rules.md section 10 item 1).

The broker moves its log start inside a segment and writes it to ``log-start-offset-checkpoint``
(every second in the fixture); the platform reads that entry as a DeleteRecords, records it, and
its retention deletes the remote segments wholly below the new log start. Reads below it are
refused as out of range; the remote log start follows it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from kafka import TopicPartition as KafkaTP
from kafka.admin import ConfigResource, ConfigResourceType

from tests.real_kafka.cluster import KafkaCluster
from tests.real_kafka.support import BesideKafka, ConsumedRecord, consume, offsets
from tiering_core.kafka.partition_log import PartitionLog

TOPIC = "delete-records"


def test_delete_records_moves_the_remote_log_start(kafka: KafkaCluster, beside: Callable[..., BesideKafka]) -> None:
    kafka.create_topic(TOPIC, segment_bytes=16 * 1024)
    platform = beside(kafka)
    producer = kafka.producer(linger_ms=5, batch_size=4096, compression_type="gzip")
    for i in range(3000):
        producer.send(TOPIC, key=f"k{i % 50}".encode(), value=hashlib.sha256(str(i).encode()).hexdigest().encode() * 2)
    producer.flush()
    producer.close()
    kafka.wait_until("the high watermark checkpoint", lambda: platform.status(TOPIC)["high_watermark"] == 3000)
    before = consume(kafka, TOPIC, 0)
    assert offsets(before) == list(range(3000))
    platform.ok("copy", "--topic", TOPIC)
    copied = platform.status(TOPIC)
    remote = platform.ok("segments", "--topic", TOPIC, "--partition", "0", "--json").json()
    assert len(remote) == copied["remote_segments"] > 6

    # Inside the fifth remote segment: the four before it lie wholly below the new log start.
    fifth = remote[4]
    target = fifth["start_offset"] + (fifth["end_offset"] - fifth["start_offset"]) // 2
    assert fifth["start_offset"] < target <= fifth["end_offset"]
    answer = kafka.admin().delete_records({KafkaTP(TOPIC, 0): target})
    assert answer, answer
    path = kafka.partition_dir(1, TOPIC, 0)
    kafka.wait_until(
        "the log-start-offset checkpoint", lambda: PartitionLog.open(path).log_start_offset_checkpoint == target
    )
    # The broker deletes its local segments below the new log start on its own (every second).
    kafka.wait_until(
        "the broker deleting segments below the log start",
        lambda: PartitionLog.open(path).segments[0].base_offset == fifth["start_offset"],
    )
    seen = platform.status(TOPIC)
    assert seen["log_start_offset"] == target
    assert seen["remote_segments"] == copied["remote_segments"], "status deletes nothing"

    result = platform.ok("retention", "--topic", TOPIC, "--json").json()[0]
    assert result["segments_deleted"] == 4
    after = platform.status(TOPIC)
    assert after["remote_segments"] == copied["remote_segments"] - 4
    assert after["remote_log_start_offset"] == target
    assert after["log_start_offset"] == target
    left = platform.ok("segments", "--topic", TOPIC, "--partition", "0", "--json").json()
    assert [s["segment_id"] for s in left] == [s["segment_id"] for s in remote[4:]]

    # Below the log start: out of range, as the broker says too.
    below = platform.run("fetch", "--topic", TOPIC, "--partition", "0", "--offset", str(target - 1), "--json")
    assert below.code != 0
    assert f"offset {target - 1} is below the log start offset {target}" in below.stderr
    for offset in (0, fifth["start_offset"]):  # a deleted segment, and the kept one holding the start
        refused = platform.run("fetch", "--topic", TOPIC, "--partition", "0", "--offset", str(offset), "--json")
        assert refused.code != 0 and "below the log start offset" in refused.stderr
    hco = after["highest_copied_offset"]
    served = platform.remote_records(TOPIC, 0, target, hco + 1 - target)
    assert [ConsumedRecord.from_fetch(r) for r in served] == before[target : hco + 1]
    earliest = kafka.consumer()
    try:
        tp = KafkaTP(TOPIC, 0)
        assert earliest.beginning_offsets([tp])[tp] == target
    finally:
        earliest.close()
    # find-offset from the log start: the first timestamp answered is at or above the new start.
    found = platform.ok(
        "find-offset", "--topic", TOPIC, "--partition", "0", "--timestamp", str(before[0].timestamp), "--json"
    ).json()
    assert found["offset"] == target

    again = platform.ok("retention", "--topic", TOPIC, "--json").json()[0]
    assert again["segments_deleted"] == 0

    # The DeleteRecords is kept once recorded: the broker's retention then deletes the local segment
    # holding it, its checkpoint entry goes, and the remote log start stays where it was.
    kafka.admin().alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, TOPIC, configs={"retention.bytes": str(32 * 1024)})]
    )
    kafka.wait_until(
        "the broker deleting the segment holding the log start",
        lambda: (
            PartitionLog.open(path).segments[0].base_offset > target
            and PartitionLog.open(path).log_start_offset_checkpoint is None
        ),
    )
    later = platform.status(TOPIC)
    assert later["remote_log_start_offset"] == target and later["log_start_offset"] == target
    assert platform.ok("retention", "--topic", TOPIC, "--json").json()[0]["segments_deleted"] == 0
    refused = platform.run("fetch", "--topic", TOPIC, "--partition", "0", "--offset", str(target - 1), "--json")
    assert refused.code != 0 and "below the log start offset" in refused.stderr
    assert ConsumedRecord.from_fetch(platform.remote_records(TOPIC, 0, target, 1)[0]) == before[target]
