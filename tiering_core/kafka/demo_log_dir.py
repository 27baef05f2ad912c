"""The demo's Kafka log dir: a few topics and partitions written with ``PartitionWriter``."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

from tiering_core.kafka.batch import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
)
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.topic import TopicPartition


def build_demo_log_dir(log_dir: Path, *, seed: int = 0) -> list[TopicPartition]:
    """A few topics and partitions for the demo, timestamps over the last hour, high watermarks checkpointed.

    ``orders`` (3 partitions, uncompressed): a leader-epoch change half way. ``payments``
    (2 partitions, zstd): committed and aborted transactions, and on partition 0 a transaction
    left open (its LSO stays at its first offset). ``clicks`` (1 partition, lz4): many small
    segments. Record contents follow ``seed``; timestamps follow the wall clock.
    """
    rng = random.Random(seed)
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    start = int(time.time() * 1000) - 3_600_000
    made: list[TopicPartition] = []

    def clock_from(t0: int) -> Callable[[], int]:
        state = {"t": t0}

        def tick() -> int:
            state["t"] += rng.randint(10, 200)
            return state["t"]

        return tick

    def writer(tp: TopicPartition, segment_bytes: int, codec: int) -> PartitionWriter:
        return PartitionWriter(
            log_dir, tp, segment_bytes=segment_bytes, codec=codec, clock=clock_from(start), seed=rng.getrandbits(32)
        )

    for partition in range(3):
        tp = TopicPartition("orders", partition)
        w = writer(tp, 16 * 1024, CODEC_NONE)
        w.append_records(300, value_size=120)
        w.become_leader(1)
        w.append_records(200, value_size=120)
        w.set_high_watermark()
        made.append(tp)
    for partition in range(2):
        tp = TopicPartition("payments", partition)
        w = writer(tp, 8 * 1024, CODEC_ZSTD)
        w.append_records(100, value_size=80)
        pid = 1000 + partition
        for txn in range(6):
            w.begin_transaction(pid)
            w.append(
                [(f"txn-{txn}-{i}".encode(), b"amount=%d" % rng.randint(1, 999)) for i in range(20)], producer_id=pid
            )
            if txn % 3 == 2:
                w.abort(pid)
            else:
                w.commit(pid)
            w.append_records(40, value_size=80)
        if partition == 0:
            w.begin_transaction(2000)
            w.append([(b"open-txn", b"pending", [("source", b"demo")])], producer_id=2000, codec=CODEC_SNAPPY)
            w.append_records(120, value_size=80)
        w.set_high_watermark()
        made.append(tp)
    tp = TopicPartition("clicks", 0)
    w = writer(tp, 32 * 1024, CODEC_LZ4)
    w.append_records(800, value_size=60, per_batch=25)
    w.append([(b"gzip", b"compressed" * 20)], codec=CODEC_GZIP)
    w.set_high_watermark()
    made.append(tp)
    return made
