"""Replay benchmark: ``tiering replay`` against kafka-python producing the same records from memory.

A tier of ``--partitions`` partitions of ``--records`` records each (``--value-bytes`` random values,
a key and a header each, in 1 MiB segments written in Kafka's format and copied to a filesystem
tier) is replayed into a topic of a real Kafka cluster (this process's own single KRaft node, or
``--bootstrap-servers``) by the replay driver (``tiering_core.replay.replay``: read through the
reader, decoded by the Arrow path, transactions per partition, ``--concurrency`` partitions in
flight). Beside it, the client's own limit: the same records, already decoded in memory with their
``tiering.source`` headers made, sent by kafka-python's transactional producers with the same
settings (batch size = ``max.request.size``), the same transaction sizes and the same number of
partitions in flight. Printed: records/s of each and their ratio (target >= 0.8). The sides take
turns going first; the best of ``--rounds`` is kept. Each run writes a topic of its own.

    python bench/bench_replay.py [--partitions 4] [--records 100000] [--value-bytes 200] [--rounds 2]
                                 [--bootstrap-servers HOST:PORT] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tiering_core.config import KafkaConfig, load_config  # noqa: E402
from tiering_core.context import TieringContext  # noqa: E402
from tiering_core.kafka.checkpoints import uuid_to_topic_id  # noqa: E402
from tiering_core.kafka.isolation import IsolationLevel  # noqa: E402
from tiering_core.kafka.log_writer import PartitionWriter  # noqa: E402
from tiering_core.kafka.records import RecordSpec  # noqa: E402
from tiering_core.kafka.topic import TopicPartition  # noqa: E402
from tiering_core.replay import RangeRequest, ReplayRequest, replay  # noqa: E402
from tiering_core.replay import run as replay_run  # noqa: E402
from tiering_core.replay.source import open_source, source_partitions, source_topic_id  # noqa: E402
from tiering_core.replay.target import SOURCE_HEADER, SourceMark, record_bytes  # noqa: E402
from tiering_core.runs.copy import run_copy  # noqa: E402

TOPIC = "bench"
TARGET = 0.8
MAX_REQUEST_SIZE = 1024 * 1024


def build_tier(root: Path, partitions: int, records: int, value_bytes: int) -> Path:
    """The source partitions in Kafka's format, copied to a filesystem tier; the config's path."""
    log_dir, tier = root / "logs", root / "tier"
    log_dir.mkdir()
    tier.mkdir()
    now = int(time.time() * 1000)
    topic_id = uuid_to_topic_id(uuid.uuid4())  # one topic: every partition has its id
    for p in range(partitions):
        w = PartitionWriter(
            log_dir, TopicPartition(TOPIC, p), topic_id=topic_id, segment_bytes=1 << 20, clock=lambda: now
        )
        for start in range(0, records, 100):
            values = os.urandom(value_bytes * 100)
            w.append(
                [
                    RecordSpec(
                        f"key-{p}-{n}".encode(),
                        values[(n - start) * value_bytes : (n - start + 1) * value_bytes],
                        now - records + n,
                        (("trace", f"{n:08d}".encode()),),
                    )
                    for n in range(start, min(records, start + 100))
                ]
            )
        w.roll()
        w.set_high_watermark()
    config = root / "tiering.yaml"
    doc = {
        "log_dirs": [str(log_dir)],
        "metadata": {"url": f"sqlite:///{root / 'metadata.db'}"},
        "remote": {"backend": "filesystem", "root": str(tier)},
    }
    config.write_text(yaml.safe_dump(doc))
    with TieringContext.open(load_config(config)) as ctx:
        for p in range(partitions):
            run_copy(ctx, TopicPartition(TOPIC, p))
    return config


@contextmanager
def cluster(servers: str | None) -> Iterator[str]:
    if servers is not None:
        yield servers
        return
    from tests.real_kafka.cluster import kafka_cluster

    with kafka_cluster(1) as started:
        yield started.bootstrap_servers


def create_topic(servers: str, partitions: int) -> str:
    from kafka.admin import KafkaAdminClient, NewTopic

    name = f"bench-replay-{uuid.uuid4().hex[:10]}"
    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:
        admin.create_topics([NewTopic(name, partitions, 1, topic_configs={"retention.ms": "-1"})])
        deadline = time.monotonic() + 30
        while True:
            parts = admin.describe_topics([name])[0].get("partitions") or []
            if len(parts) == partitions and all(p["leader_id"] >= 0 for p in parts):
                return name
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {name} has no leader for every partition")
            time.sleep(0.1)
    finally:
        admin.close()


def timed(fn: Callable[[], int]) -> float:
    """Records per second of ``fn`` (which returns the records it sent)."""
    started = time.perf_counter()
    records = fn()
    return records / (time.perf_counter() - started)


def run_replay(config: Path, servers: str, concurrency: int) -> int:
    target = create_topic(servers, concurrency)
    request = ReplayRequest(
        TOPIC, target, RangeRequest(from_offset=0), concurrency=concurrency, max_request_size=MAX_REQUEST_SIZE
    )
    with TieringContext.open(load_config(config)) as ctx:
        result = replay(ctx, request, KafkaConfig(bootstrap_servers=tuple(servers.split(","))))
    assert not result.failed, result.failed
    return result.records


def in_memory(config: Path) -> list[list[tuple[Any, ...]]]:
    """Each partition's records as the producer takes them, their marks made: the client's input."""
    out = []
    with TieringContext.open(load_config(config)) as ctx:
        topic_id = source_topic_id(ctx, TOPIC)
        for tip in source_partitions(ctx, TOPIC, topic_id):
            reader = open_source(ctx, tip)
            records = reader.read(0, 1 << 30, IsolationLevel.READ_COMMITTED)
            out.append(
                [
                    (
                        r.key,
                        r.value,
                        [*r.headers, (SOURCE_HEADER, SourceMark(topic_id, tip.partition, r.offset).encode())],
                        r.timestamp,
                        record_bytes(r),
                    )
                    for r in records
                ]
            )
    return out


def run_producers(records: list[list[tuple[Any, ...]]], servers: str) -> int:
    """kafka-python's transactional producers, one thread per partition, transactions sized as the
    replay sizes them."""
    from kafka import KafkaProducer

    target = create_topic(servers, len(records))
    errors: list[BaseException] = []

    def produce(partition: int) -> None:
        try:
            producer = KafkaProducer(
                bootstrap_servers=servers,
                transactional_id=f"{target}-{partition}",
                max_request_size=MAX_REQUEST_SIZE,
                batch_size=MAX_REQUEST_SIZE,
                linger_ms=5,
            )
            producer.init_transactions()
            mine, at, wanted = records[partition], 0, min(1000, replay_run.TRANSACTION_RECORDS)
            while at < len(mine):
                chunk = mine[at : at + wanted]
                producer.begin_transaction()
                for key, value, headers, timestamp, _size in chunk:
                    producer.send(
                        target, value=value, key=key, headers=headers, partition=partition, timestamp_ms=timestamp
                    )
                producer.commit_transaction()
                at += len(chunk)
                average = max(1, sum(c[4] for c in chunk) // len(chunk))
                wanted = max(1, min(replay_run.TRANSACTION_RECORDS, replay_run.TRANSACTION_BYTES // average))
            producer.close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(len(records))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(len(r) for r in records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=4, help="source partitions, all in flight at once")
    parser.add_argument("--records", type=int, default=100_000, help="records per partition")
    parser.add_argument("--value-bytes", type=int, default=200, help="each record's value")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, sides alternating first (best is kept)")
    parser.add_argument("--bootstrap-servers", default=None, help="a running cluster (default: start one)")
    parser.add_argument("--quick", action="store_true", help="2 partitions of 5,000 records, 1 round: a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.partitions, args.records, args.rounds = 2, 5_000, 1
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp, cluster(args.bootstrap_servers) as servers:
        config = build_tier(Path(tmp), args.partitions, args.records, args.value_bytes)
        print(
            f"tier: {args.partitions} partition(s) x {args.records:,} records of {args.value_bytes} B values, "
            f"copied to a filesystem tier; cluster at {servers}"
        )
        memory = in_memory(config)
        replayed: list[float] = []
        produced: list[float] = []
        for n in range(args.rounds):
            sides = [
                lambda: replayed.append(timed(lambda: run_replay(config, servers, args.partitions))),
                lambda: produced.append(timed(lambda: run_producers(memory, servers))),
            ]
            for side in sides if n % 2 == 0 else reversed(sides):
                side()
        replay_rps, producer_rps = max(replayed), max(produced)
        print(f"replay:   {replay_rps:,.0f} records/s (tiering replay, read from the tier)")
        print(f"producer: {producer_rps:,.0f} records/s (kafka-python, the same records from memory)")
        print(f"RATIO replay/producer = {replay_rps / producer_rps:.2f} (target >= {TARGET})")
        print(json.dumps({"replay_records_per_s": replay_rps, "producer_records_per_s": producer_rps}))


if __name__ == "__main__":
    main()
