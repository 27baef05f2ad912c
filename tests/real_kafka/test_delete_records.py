"""DeleteRecords on a real broker (docs/kafka-rules.md section 10 item 1).

Made directly with an admin client, a DeleteRecords only moves the broker's log start (inside a
segment, written to ``log-start-offset-checkpoint`` every second in the fixture): it is the
platform's local log start, nothing remote is deleted, and ``status`` says the records below it
are still readable from the tier. Made with ``tiering delete-records`` (a ``kafka:`` section), it
is sent to the cluster through the admin API and recorded: the global log start moves, retention
deletes the remote segments wholly below it, reads below it are refused as out of range, and the
recorded offset outlives the broker's checkpoint entry.
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


def beginning(kafka: KafkaCluster) -> int:
    consumer = kafka.consumer()
    try:
        tp = KafkaTP(TOPIC, 0)
        return int(consumer.beginning_offsets([tp])[tp])
    finally:
        consumer.close()


def test_a_delete_records_moves_the_remote_log_start_only_through_the_platform(
    kafka: KafkaCluster, beside: Callable[..., BesideKafka]
) -> None:
    kafka.create_topic(TOPIC, segment_bytes=16 * 1024)
    # The topic's own YAML entry: the remote tier keeps everything, whatever the cluster's topic says.
    platform = beside(kafka, topics={TOPIC: {"retention.ms": -1, "retention.bytes": -1}})
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
    hco = copied["highest_copied_offset"]

    # Directly with the admin client, inside the third remote segment: the broker's log start only.
    third = remote[2]
    direct = third["start_offset"] + (third["end_offset"] - third["start_offset"]) // 2
    assert kafka.admin().delete_records({KafkaTP(TOPIC, 0): direct})
    path = kafka.partition_dir(1, TOPIC, 0)
    kafka.wait_until(
        "the log-start-offset checkpoint", lambda: PartitionLog.open(path).log_start_offset_checkpoint == direct
    )
    kafka.wait_until(  # the broker deletes its local segments below the new log start on its own
        "the broker deleting segments below the log start",
        lambda: PartitionLog.open(path).segments[0].base_offset == third["start_offset"],
    )
    for live in (False, True):
        if live:
            platform.document["kafka"] = {"bootstrap_servers": kafka.bootstrap_servers}
            platform.write()
        assert platform.ok("retention", "--topic", TOPIC, "--json").json()[0]["segments_deleted"] == 0
        seen = platform.status(TOPIC)
        assert (seen["local_log_start_offset"], seen["log_start_offset"], seen["remote_log_start_offset"]) == (
            direct,
            0,
            0,
        )
        assert seen["remote_segments"] == copied["remote_segments"] and seen["gaps"] == []
        assert seen["remote_only_offsets"] == [0, direct - 1]  # readable from the tier only
        text = platform.ok("status", "--topic", TOPIC).stdout
        assert f"remote only 0..{direct - 1}" in text
    assert [ConsumedRecord.from_fetch(r) for r in platform.remote_records(TOPIC, 0, 0, direct)] == before[:direct]
    assert beginning(kafka) == direct

    # With tiering delete-records, inside the fifth remote segment: sent to the cluster, recorded.
    fifth = remote[4]
    target = fifth["start_offset"] + (fifth["end_offset"] - fifth["start_offset"]) // 2
    assert fifth["start_offset"] < target <= fifth["end_offset"]
    select = ("--topic", TOPIC, "--partition", "0")
    refused = platform.run("delete-records", *select, "--before-offset", "3001", "--yes")
    assert refused.code == 1 and "offset 3001 is beyond the cluster's high watermark 3000" in refused.stderr
    dry = platform.ok("delete-records", *select, "--before-offset", str(target), "--dry-run", "--json").json()
    assert (dry["dry_run"], dry["log_start_offset"], dry["sent_to_cluster"]) == (True, target, False)
    assert beginning(kafka) == direct  # a dry run sends nothing
    for _ in range(2):  # again: the same answer from both
        applied = platform.ok("delete-records", *select, "--before-offset", str(target), "--yes", "--json").json()
        assert (applied["log_start_offset"], applied["sent_to_cluster"], applied["cluster_log_start_offset"]) == (
            target,
            True,
            target,
        )
    assert beginning(kafka) == target
    kafka.wait_until(
        "the broker deleting segments below the log start",
        lambda: PartitionLog.open(path).segments[0].base_offset == fifth["start_offset"],
    )

    result = platform.ok("retention", "--topic", TOPIC, "--json").json()[0]
    assert result["segments_deleted"] == 4
    after = platform.status(TOPIC)
    assert after["remote_segments"] == copied["remote_segments"] - 4
    assert (after["remote_log_start_offset"], after["log_start_offset"], after["remote_only_offsets"]) == (
        target,
        target,
        None,
    )
    left = platform.ok("segments", "--topic", TOPIC, "--partition", "0", "--json").json()
    assert [s["segment_id"] for s in left] == [s["segment_id"] for s in remote[4:]]

    # Below the log start: out of range, as the broker says too.
    below = platform.run("fetch", *select, "--offset", str(target - 1), "--json")
    assert below.code != 0
    assert f"offset {target - 1} is below the log start offset {target}" in below.stderr
    for offset in (0, fifth["start_offset"]):  # a deleted segment, and the kept one holding the start
        refused = platform.run("fetch", *select, "--offset", str(offset), "--json")
        assert refused.code != 0 and "below the log start offset" in refused.stderr
    served = platform.remote_records(TOPIC, 0, target, hco + 1 - target)
    assert [ConsumedRecord.from_fetch(r) for r in served] == before[target : hco + 1]
    # find-offset from the log start: the first timestamp answered is at or above the new start.
    found = platform.ok("find-offset", *select, "--timestamp", str(before[0].timestamp), "--json").json()
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
    refused = platform.run("fetch", *select, "--offset", str(target - 1), "--json")
    assert refused.code != 0 and "below the log start offset" in refused.stderr
    assert ConsumedRecord.from_fetch(platform.remote_records(TOPIC, 0, target, 1)[0]) == before[target]
