"""``tiering replay`` of a forged segment into a real Kafka 4.4.0 cluster (docs/segment-format.md,
"Integrity"): a partition's first tiered segment (copied encrypted) replaced, by someone who can
write to the bucket and holds no private key, with the records of the other partition's first
segment (from offset 0 too, other keys and values), as a manifest downgraded to format 1, as
format-2 plaintext chunks with every checksum right, as chunks sealed under a data key wrapped
again with the public key, and as the other segment's own objects under a renamed manifest. Each
replay fails that partition naming the segment, and the target topic receives nothing."""

from __future__ import annotations

import time
import uuid

from tests.real_kafka.cluster import KafkaCluster
from tests.real_kafka.support import BesideKafka, consume
from tests.storage.forgery_support import downgrade_to_format_1, rewrap_with_public_key, strip_encryption, swap_in
from tests.storage.keys_support import write_key_pair
from tiering_core.config import load_config
from tiering_core.context import TieringContext
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.kafka.checkpoints import uuid_to_topic_id
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.storage.layout import ObjectKind

TARGET = "cluster"


def _first_segment(ctx: TieringContext, tip: TopicIdPartition):  # type: ignore[no-untyped-def]
    finished = [s for s in ctx.metadata.list_segments(tip) if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
    return min(finished, key=lambda s: s.start_offset)


def test_a_forged_segment_is_never_replayed(kafka: KafkaCluster, beside, tmp_path) -> None:  # type: ignore[no-untyped-def]
    topic = f"forged-{uuid.uuid4().hex[:8]}"
    topic_id = uuid_to_topic_id(uuid.UUID(kafka.create_topic(topic, partitions=2, segment_bytes=8 * 1024)))
    producer = kafka.producer(linger_ms=5, batch_size=4096)
    now = int(time.time() * 1000)
    for p in range(2):
        for i in range(400):
            producer.send(
                topic, key=f"k-{p}-{i}".encode(), value=f"value {p}/{i} ".encode() * 4, partition=p, timestamp_ms=now
            )
    producer.flush()
    producer.close()
    platform: BesideKafka = beside(kafka)
    platform.document["replay"] = {"targets": {TARGET: {"bootstrap_servers": kafka.bootstrap_servers}}}
    key = write_key_pair(tmp_path / "keys", "k1")
    platform.document["remote"].update(
        compression="zstd",
        chunk_size=8192,
        encryption={"key_id": "k1", "public_key_file": str(key.public), "private_key_files": {"k1": str(key.private)}},
    )
    platform.write()
    ours, theirs = (TopicIdPartition(topic_id, TopicPartition(topic, p)) for p in range(2))

    def both_copied() -> bool:
        platform.ok("copy", "--topic", topic)
        with TieringContext.open(load_config(platform.config_path)) as ctx:
            return all(
                any(s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED for s in ctx.metadata.list_segments(tip))
                for tip in (ours, theirs)
            )

    kafka.wait_until(f"both partitions of {topic} copied", both_copied, timeout=60)
    with TieringContext.open(load_config(platform.config_path)) as ctx:
        segment, other = _first_segment(ctx, ours), _first_segment(ctx, theirs)
        theirs_ref = segment_ref(other)
        manifest = ctx.storage.read_manifest(theirs_ref)
        assert manifest is not None
        forged = {kind: ctx.storage.fetch(theirs_ref, kind) for kind in manifest.objects}
    assert forged[ObjectKind.LOG] != (ctx.storage.fetch(segment_ref(segment), ObjectKind.LOG))

    target = f"{topic}-target"
    kafka.create_topic(target, partitions=2)
    for forge in (
        lambda storage, ref: downgrade_to_format_1(storage, ref, forged),
        lambda storage, ref: strip_encryption(storage, ref, forged),
        lambda storage, ref: rewrap_with_public_key(key.public, "k1")(storage, ref, forged),
        lambda storage, ref: swap_in(storage, ref, theirs_ref),
    ):
        with TieringContext.open(load_config(platform.config_path)) as ctx:
            forge(ctx.storage, segment_ref(segment))
        args = ("--topic", topic, "--partition", "0", "--from-offset", "0", "--target-topic", target)
        result = platform.run("replay", "--target", TARGET, "--json", *args)
        assert result.code != 0 and f"replay of {topic}-0 failed" in result.stderr, result
        assert str(segment.segment_id) in result.stderr and "nothing of the segment is served" in result.stderr
        assert consume(kafka, target, 0) == [] and consume(kafka, target, 1) == []  # nothing replayed
