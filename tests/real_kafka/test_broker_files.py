"""What a real broker writes, against what our writer writes and what our reader accepts.

The writer (tiering_core/kafka/log_writer.py) makes every partition directory the other tests read.
Here it replays a real broker's batches (same records, producer ids, epochs, transactions and
markers, same segment and index settings) and must produce the same directory byte for byte:
``.log``, ``.index``, ``.timeindex`` (trimmed on roll, pre-allocated while active), ``.txnindex``,
producer snapshots at every roll, ``leader-epoch-checkpoint`` and ``partition.metadata``.
"""

from __future__ import annotations

import functools
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path

from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import OffsetSpec
from kafka.protocol.consumer.offsets import IsolationLevel

from tests.real_kafka.cluster import BROKER_SETTINGS, KafkaCluster
from tests.real_kafka.support import BesideKafka
from tiering_core.kafka.checkpoints import LOG_START_OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.partition_log import PartitionLog, discover_partitions
from tiering_core.kafka.records import ControlRecordType, RecordSpec, iter_batches

SEGMENT_BYTES = 16 * 1024
BROKER_INDEX_BYTES = 10 * 1024 * 1024  # segment.index.bytes: the broker's pre-allocation


def produce_every_kind(kafka: KafkaCluster, topic: str) -> int:
    """Plain and idempotent batches, null keys and values, headers, and transactions (committed,
    aborted, one spanning a roll); returns the log end offset."""
    plain = kafka.producer(linger_ms=20, batch_size=4096, enable_idempotence=False, acks=1)
    for i in range(600):
        key = None if i % 9 == 0 else f"k{i}".encode()
        value = None if i % 13 == 0 and key is not None else os.urandom(30).hex().encode()
        plain.send(topic, key=key, value=value, headers=[("h", b"x"), ("n", b"")] if i % 4 == 0 else [])
    plain.flush()
    plain.close()
    idempotent = kafka.producer(linger_ms=20, batch_size=4096, enable_idempotence=True)
    for i in range(600):
        idempotent.send(topic, key=f"i{i}".encode(), value=b"i" * 40)
    idempotent.flush()
    idempotent.close()
    txn = kafka.producer(transactional_id=f"{topic}-txn", linger_ms=5)
    txn.init_transactions()
    for n, commit in enumerate([True, False, True, False]):
        txn.begin_transaction()
        for i in range(150 * (n + 1)):  # the later ones span a roll
            txn.send(topic, key=f"t{n}-{i}".encode(), value=b"y" * 50)
        txn.flush()
        txn.commit_transaction() if commit else txn.abort_transaction()
    txn.close()
    return settled_end(kafka, topic)


def settled_end(kafka: KafkaCluster, topic: str) -> int:
    """The partition's end once the last transaction marker is in (the coordinator writes it after
    EndTxn returns): the high watermark, when the read_committed end (the LSO) has reached it."""
    tp = KafkaTopicPartition(topic, 0)

    def ends() -> tuple[int, int]:
        admin = kafka.admin()
        hw = admin.list_partition_offsets({tp: OffsetSpec.LATEST})[tp].offset
        lso = admin.list_partition_offsets({tp: OffsetSpec.LATEST}, isolation_level=IsolationLevel.READ_COMMITTED)
        return int(hw), int(lso[tp].offset)

    kafka.wait_until("the last transaction marker", lambda: len(set(ends())) == 1)
    return ends()[0]


def replay(log: PartitionLog, into: Path) -> PartitionWriter:
    """Our writer, fed the broker's batches one by one (markers through commit/abort)."""
    writer = PartitionWriter(
        into,
        log.topic_partition,
        topic_id=log.topic_id,
        segment_bytes=SEGMENT_BYTES,
        index_interval_bytes=int(BROKER_SETTINGS["log.index.interval.bytes"]),
        preallocate_index_bytes=BROKER_INDEX_BYTES,
    )
    for segment in log.segments:
        for header, records in iter_batches(segment.log_path):
            if header.is_control:
                marker = records[0]
                assert marker.key is not None and marker.value is not None
                kind = ControlRecordType(struct.unpack(">hh", marker.key)[1])
                coordinator_epoch = struct.unpack(">hi", marker.value[:6])[1]
                writer.clock = functools.partial(int, header.max_timestamp)
                end = writer.commit if kind == ControlRecordType.COMMIT else writer.abort
                end(header.producer_id, coordinator_epoch)
                continue
            if header.is_transactional and header.producer_id not in writer.in_transaction:
                writer.begin_transaction(header.producer_id, header.producer_epoch)
            writer.append(
                [RecordSpec(r.key, r.value, r.timestamp, r.headers) for r in records],
                producer_id=header.producer_id,
                producer_epoch=header.producer_epoch,
                transactional=header.is_transactional,
            )
    return writer


def test_the_writer_replays_a_real_partition_dir_byte_for_byte(kafka: KafkaCluster, tmp_path: Path) -> None:
    topic = "broker-files-replay"
    kafka.create_topic(topic, segment_bytes=SEGMENT_BYTES)
    produce_every_kind(kafka, topic)
    real = kafka.partition_dir(1, topic, 0)
    kafka.wait_until(
        "the broker's files to hold every batch",
        lambda: PartitionLog.open(real).log_end_offset == settled_end(kafka, topic),
    )
    log = PartitionLog.open(real)
    assert len(log.segments) >= 8
    assert any(s.has_txn_index for s in log.segments), "an aborted transaction must make a .txnindex"

    writer = replay(log, tmp_path / "writer")
    names = sorted(set(os.listdir(real)) | set(os.listdir(writer.path)))
    differing = []
    for name in names:
        ours, theirs = writer.path / name, real / name
        if not ours.exists() or not theirs.exists():
            differing.append(f"{name}: only in {'ours' if ours.exists() else 'the broker'}")
        elif ours.read_bytes() != theirs.read_bytes():
            differing.append(f"{name}: {ours.stat().st_size} bytes vs {theirs.stat().st_size}")
    assert not differing, differing
    kinds = {Path(n).suffix for n in names}
    assert {".log", ".index", ".timeindex", ".txnindex", ".snapshot"} <= kinds
    assert len(names) > 30


def test_broker_root_files_and_internal_dirs_are_read_or_skipped(
    kafka: KafkaCluster, beside: Callable[..., BesideKafka]
) -> None:
    """``__cluster_metadata-0`` (a Raft log) is never a partition; internal topics are listed but
    never tiered; the broker's ``meta.properties`` (with its comment lines) names the node."""
    topic = "broker-files-root"
    kafka.create_topic(topic, segment_bytes=SEGMENT_BYTES)
    producer = kafka.producer(transactional_id="broker-files-root", linger_ms=5)
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(400):
        producer.send(topic, value=f"v{i}".encode() * 50)
    producer.commit_transaction()
    producer.close()
    log_dir = kafka.nodes[1].log_dirs[0]
    assert (log_dir / "__cluster_metadata-0").is_dir()
    assert (log_dir / "meta.properties").read_text().startswith("#")
    found = {p.topic_partition.topic for p in discover_partitions([log_dir])}
    assert "__cluster_metadata" not in found
    assert {topic, "__transaction_state"} <= found

    platform = beside(kafka, 1)
    kafka.wait_until("the HW checkpoint", lambda: platform.status(topic)["high_watermark"] == 401)
    platform.ok("copy")
    assert platform.ok("segments", "--topic", topic, "--partition", "0", "--json").json()
    assert platform.ok("segments", "--topic", "__transaction_state", "--partition", "0", "--json").json() == []


def test_segments_the_broker_deletes_are_renamed_first_and_never_read(
    kafka: KafkaCluster, beside: Callable[..., BesideKafka]
) -> None:
    """The broker's retention renames a segment's files to ``*.deleted`` and removes them
    ``file.delete.delay.ms`` later; meanwhile they are not segments of the partition."""
    topic = "broker-files-deleted"
    kafka.create_topic(
        topic,
        segment_bytes=SEGMENT_BYTES,
        configs={"retention.bytes": str(4 * SEGMENT_BYTES), "file.delete.delay.ms": "600000"},
    )
    producer = kafka.producer(linger_ms=5)
    for i in range(2000):
        producer.send(topic, key=f"k{i}".encode(), value=b"z" * 60)
    producer.flush()
    producer.close()
    path = kafka.partition_dir(1, topic, 0)
    kafka.wait_until("the broker to delete old segments", lambda: any(path.glob("*.log.deleted")), timeout=30)
    seen = time.time()
    checkpoints = [path.parent / REPLICATION_OFFSET_CHECKPOINT, path.parent / LOG_START_OFFSET_CHECKPOINT]
    kafka.wait_until(  # written every second: each once more since
        "its checkpoints to follow", lambda: all(c.exists() and c.stat().st_mtime > seen for c in checkpoints)
    )
    log = PartitionLog.open(path)
    deleted = sorted(int(p.name[:20]) for p in path.glob("*.log.deleted"))
    assert deleted and log.segments[0].base_offset > max(deleted)
    assert {".index.deleted", ".timeindex.deleted"} <= {"." + p.name.split(".", 1)[1] for p in path.glob("*.deleted")}
    platform = beside(kafka, 1)
    row = platform.status(topic)
    assert row["log_start_offset"] == log.segments[0].base_offset
    assert row["gaps"] == []  # never tiered: what the broker dropped before is history
