"""Copy while producers write to a real broker: every closed segment below the LSO is tiered, never
the active one nor anything at or above the LSO (an open transaction holds it), and what the remote
tier serves equals what a real consumer reads from the broker, offset by offset, at both isolation
levels, and for offsets by timestamp."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from tests.real_kafka.cluster import KafkaCluster
from tests.real_kafka.support import BesideKafka, ConsumedRecord, consume
from tiering_core.kafka.index import read_txn_index
from tiering_core.kafka.partition_log import PartitionLog
from tiering_core.kafka.records import iter_batches

TOPIC = "copy-while-producing"
SEGMENT_BYTES = 16 * 1024
CODECS = (None, "gzip", "snappy", "lz4", "zstd")
RECORD_BUDGET = 5000  # what the background producers write at most, whatever the machine's speed
COPIES = 4


@dataclass
class Producing:
    """Producers of every codec (two idempotent) and a transactional one, writing from a thread:
    headers, null keys, null values, old timestamps, committed and aborted transactions."""

    cluster: KafkaCluster
    stop: threading.Event = field(default_factory=threading.Event)
    written: int = 0
    error: BaseException | None = None
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="producing", daemon=True)
        self.thread.start()

    def finish(self) -> None:
        self.stop.set()
        assert self.thread is not None
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the producer thread did not stop"
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:  # reported by finish()
            self.error = exc

    def _produce(self) -> None:
        producers = [
            self.cluster.producer(
                compression_type=codec,
                linger_ms=5,
                batch_size=4096,
                acks="all",
                enable_idempotence=codec in (None, "zstd"),
            )
            for codec in CODECS
        ]
        txn = self.cluster.producer(transactional_id="cwp-background", compression_type="snappy", linger_ms=2)
        txn.init_transactions()
        round_ = 0
        rng = random.Random(21)
        try:
            while not self.stop.is_set() and self.written < RECORD_BUDGET:
                producer = producers[round_ % len(producers)]
                for j in range(25):
                    n = self.written + j
                    key = None if n % 7 == 0 else f"k{n}".encode()
                    value = None if n % 11 == 0 and key is not None else rng.randbytes(20 + n % 60).hex().encode()
                    headers = [("n", str(n).encode()), ("empty", b"")] if n % 3 == 0 else []
                    old = int(time.time() * 1000) - 3_600_000 + n if n % 13 == 0 else None
                    producer.send(TOPIC, key=key, value=value, headers=headers, timestamp_ms=old)
                self.written += 25
                if round_ % 4 == 3:
                    txn.begin_transaction()
                    for j in range(12):
                        txn.send(TOPIC, key=f"t{round_}-{j}".encode(), value=b"in a transaction " * 3)
                    txn.flush()
                    if round_ % 8 == 3:
                        txn.abort_transaction()
                    else:
                        txn.commit_transaction()
                    self.written += 12
                round_ += 1
                time.sleep(0.02)
        finally:
            for p in [*producers, txn]:
                p.flush()
                p.close()


def broker_offsets(cluster: KafkaCluster) -> tuple[int, int]:
    """(HW, LSO) as the broker answers ListOffsets at each isolation level."""
    from kafka import TopicPartition as KafkaTP

    tp = KafkaTP(TOPIC, 0)
    out = []
    for level in ("read_uncommitted", "read_committed"):
        consumer = cluster.consumer(isolation_level=level)
        try:
            out.append(consumer.end_offsets([tp])[tp])
        finally:
            consumer.close()
    return out[0], out[1]


def check_tier(platform: BesideKafka, cluster: KafkaCluster) -> tuple[list[dict[str, Any]], PartitionLog]:
    """After a copy: every remote segment is exactly one of the broker's closed segments, ends below
    the LSO and the active segment's base."""
    remote = platform.ok("segments", "--topic", TOPIC, "--partition", "0", "--json").json()
    status = platform.status(TOPIC)
    log = PartitionLog.open(cluster.partition_dir(1, TOPIC, 0))
    closed = {s.base_offset: (nxt.base_offset - 1, s.size_bytes) for s, nxt in pairwise(log.segments)}
    active = log.active_segment.base_offset
    for seg in remote:
        assert seg["state"] == "COPY_SEGMENT_FINISHED", seg
        assert seg["end_offset"] < status["last_stable_offset"] <= status["high_watermark"], (seg, status)
        assert seg["end_offset"] < active, (seg, active)
        assert closed.get(seg["start_offset"]) == (seg["end_offset"], seg["size_bytes"]), (seg, closed)
    return remote, log


def wait_for(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def wait_for_hw(platform: BesideKafka, hw: int) -> None:
    """Until the broker's HW checkpoint (what ``status`` reads) reaches ``hw``."""
    wait_for(f"the HW checkpoint at {hw}", lambda: platform.status(TOPIC)["high_watermark"] >= hw)


def test_copy_while_producing_serves_what_a_consumer_reads(kafka: KafkaCluster, beside: Any) -> None:
    started = time.monotonic()
    rng = random.Random(20)
    kafka.create_topic(TOPIC, segment_bytes=SEGMENT_BYTES)
    platform: BesideKafka = beside(kafka, 1)

    # Transactions of their own: committed, aborted, and an aborted one spanning segment rolls.
    txn = kafka.producer(transactional_id="cwp-spanning", linger_ms=2)
    txn.init_transactions()
    for outcome in ("commit", "abort"):
        txn.begin_transaction()
        for j in range(5):
            txn.send(TOPIC, key=f"{outcome}-{j}".encode(), value=f"small {outcome}".encode())
        txn.flush()  # kafka-python's abort_transaction drops what it has not sent yet
        getattr(txn, f"{outcome}_transaction")()
    txn.begin_transaction()
    spanning_first = txn.send(TOPIC, key=b"span-0", value=b"s" * 200).get(timeout=30).offset
    for j in range(1, 200):  # ~45 KB: more than two 16 KiB segments
        txn.send(TOPIC, key=f"span-{j}".encode(), value=rng.randbytes(200))
    txn.flush()
    txn.abort_transaction()

    producing = Producing(kafka)
    producing.start()
    opener = kafka.producer(transactional_id="cwp-open", linger_ms=0)
    opener.init_transactions()
    open_first: int | None = None
    try:
        for i in range(COPIES):
            time.sleep(1.2)
            if i == 1:  # an open transaction from now on holds the LSO
                opener.begin_transaction()
                open_first = opener.send(TOPIC, key=b"open-0", value=b"held open").get(timeout=30).offset
                opener.send(TOPIC, key=b"open-1", value=b"held open").get(timeout=30)
                wait_for_hw(platform, broker_offsets(kafka)[0])
            platform.ok("copy", "--topic", TOPIC)
            remote, _log = check_tier(platform, kafka)
            if open_first is not None:
                status = platform.status(TOPIC)
                assert status["last_stable_offset"] <= open_first < status["high_watermark"], status
                assert all(seg["end_offset"] < open_first for seg in remote), (open_first, remote)
                assert broker_offsets(kafka)[1] <= open_first
        # The scenario below needs the open transaction to span a roll: a busy machine may spend the
        # background producers' budget before it, so records go on until the broker rolled past it.
        assert open_first is not None
        filler = kafka.producer(linger_ms=5)
        try:

            def rolled_past_the_open_transaction() -> bool:
                if PartitionLog.open(kafka.partition_dir(1, TOPIC, 0)).active_segment.base_offset > open_first:
                    return True
                for j in range(20):
                    filler.send(TOPIC, key=f"filler-{j}".encode(), value=b"f" * 200)
                filler.flush()
                return False

            wait_for("a segment rolled past the open transaction", rolled_past_the_open_transaction, timeout=120)
        finally:
            filler.close()
    finally:
        producing.finish()
    txn.close()
    # Its ABORT marker lands many segments after its data, in the active segment: never tiered, so
    # read_committed learns of it from the broker's local .txnindex only.
    opener.abort_transaction()
    opener.close()

    # The producers stopped: once the files caught up with the broker, one last copy tiers every
    # closed segment (all below the LSO now), never the active one.
    wait_for("the ABORT markers written (the LSO at the HW)", lambda: len(set(broker_offsets(kafka))) == 1)
    lso = broker_offsets(kafka)[1]
    wait_for("the HW checkpoint at the broker's HW", lambda: platform.status(TOPIC)["last_stable_offset"] == lso)
    platform.ok("copy", "--topic", TOPIC)
    remote, log = check_tier(platform, kafka)
    assert sorted(s["start_offset"] for s in remote) == [s.base_offset for s in log.segments[:-1]]
    assert len(remote) > 10, "16 KiB segments must roll many times"
    top = max(s["end_offset"] for s in remote)
    assert top == log.active_segment.base_offset - 1

    # The scenario is what it says: aborted transactions whose marker lies in a later segment.
    aborted = [t for s in log.segments if s.txn_index_path is not None for t in read_txn_index(s.txn_index_path)]
    bases = [s.base_offset for s in log.segments]
    spans = [t for t in aborted if any(t.first_offset < b <= t.last_offset for b in bases)]
    assert {t.first_offset for t in spans} >= {spanning_first, open_first}, (spans, spanning_first, open_first)
    assert [t.last_offset > top for t in spans if t.first_offset == open_first] == [True]

    compared = 0
    for level in ("read_uncommitted", "read_committed"):
        want = consume(kafka, TOPIC, 0, isolation_level=level, until=top + 1)
        got = [
            ConsumedRecord.from_fetch(r) for r in platform.remote_records(TOPIC, 0, 0, len(want), "--isolation", level)
        ]
        assert len(got) == len(want), (level, len(got), len(want))
        for g, w in zip(got, want, strict=True):
            assert g == w, (level, g, w)
        compared += len(want)
    committed = {r.offset for r in consume(kafka, TOPIC, 0, isolation_level="read_committed", until=top + 1)}
    assert open_first not in committed and spanning_first not in committed

    # find-offset equals the broker's offsetsForTimes inside the tiered range, transaction markers
    # included (a marker is the answer when it is the first record at or after the timestamp).
    records = consume(kafka, TOPIC, 0, until=top + 1)
    consumed = {r.offset for r in records}
    batches = [(h, rs) for s in log.segments[:-1] for h, rs in iter_batches(s.log_path)]
    assert {h.codec for h, _ in batches} == {0, 1, 2, 3, 4}
    kinds = {(h.has_producer_id, h.is_transactional, h.is_control) for h, _ in batches}
    assert kinds == {(False, False, False), (True, False, False), (True, True, False), (True, True, True)}, kinds
    markers = [r.timestamp for h, rs in batches if h.is_control for r in rs]
    stamps = sorted({t + d for r in records[:: max(1, len(records) // 10)] for t in [r.timestamp] for d in (-1, 0, 1)})
    stamps += markers[:: max(1, len(markers) // 8)]
    from kafka import TopicPartition as KafkaTP

    tp = KafkaTP(TOPIC, 0)
    consumer = kafka.consumer()
    committed_consumer = kafka.consumer(isolation_level="read_committed")
    answers: list[tuple[int, Any, Any]] = []
    try:
        for ts in stamps:
            broker = consumer.offsets_for_times({tp: ts})[tp]
            assert committed_consumer.offsets_for_times({tp: ts})[tp] == broker  # isolation plays no part
            if broker is None or broker.offset > top:
                continue
            found = platform.ok(
                "find-offset", "--topic", TOPIC, "--partition", "0", "--timestamp", str(ts), "--json"
            ).json()
            answers.append((ts, (broker.offset, broker.timestamp), found and (found["offset"], found["timestamp"])))
    finally:
        consumer.close()
        committed_consumer.close()
    assert [a for a in answers if a[1] != a[2]] == []
    assert len(answers) >= 20 and any(a[1][0] not in consumed for a in answers), "no marker was an answer"
    elapsed = time.monotonic() - started
    print(f"copy while producing: {compared} records compared, {len(answers)} timestamps, {elapsed:.1f} s")
