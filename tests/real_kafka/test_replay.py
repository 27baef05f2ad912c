"""``tiering replay`` into a real Kafka cluster: what a real consumer reads back from the target
equals the source's records (key, value, headers, timestamp) at both isolation levels, each with its
``tiering.source`` mark; a replay killed with SIGKILL at three points and run again holds every
source offset exactly once beside another writer's records; a deleted topic's tiered data replays
into a new topic (docs/replay.md)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.real_kafka.cluster import KafkaCluster
from tests.real_kafka.support import BesideKafka, ConsumedRecord, consume
from tiering_core.kafka.checkpoints import uuid_to_topic_id
from tiering_core.replay import SOURCE_HEADER, SourceMark

SEGMENT_BYTES = 8 * 1024
PARTITIONS = 2
#: Plain records per partition before the transactions (``_produce``).
RECORDS = 400
ROOT = Path(__file__).resolve().parents[2]
#: The test cluster as the config's replay target (the config has no kafka: section); the
#: refusals and the killed replays name it by its exact servers instead (--bootstrap-servers).
TARGET = "cluster"


def _produce(cluster: KafkaCluster, topic: str, count: int, *, txn_id: str) -> None:
    """Per partition: plain records (headers, a null key, a null value, old timestamps), then
    committed and aborted transactions, then plain records again (incompressible: the segment of
    the last marker rolls, so the tier alone decides every transaction)."""
    now = int(time.time() * 1000)
    plain = cluster.producer(linger_ms=5, batch_size=4096, compression_type="lz4")
    txn = cluster.producer(transactional_id=txn_id, linger_ms=5, batch_size=4096)
    txn.init_transactions()
    for p in range(PARTITIONS):
        for i in range(count):
            key = None if i % 17 == 0 else f"k-{p}-{i}".encode()
            value = None if i % 23 == 1 and key is not None else f"value {p}/{i} ".encode() * (1 + i % 5)
            headers = [("h", f"{i}".encode())] if i % 3 == 0 else []
            plain.send(topic, key=key, value=value, headers=headers, partition=p, timestamp_ms=now - (count - i) * 10)
        plain.flush()
        for n, commit in enumerate((True, False, True)):
            txn.begin_transaction()
            for i in range(count // 4):
                txn.send(topic, key=f"t-{p}-{n}-{i}".encode(), value=b"in a transaction", partition=p)
            if commit:
                txn.commit_transaction()
            else:
                txn.flush()
                txn.abort_transaction()
        for i in range(count // 2):
            plain.send(
                topic, key=f"tail-{p}-{i}".encode(), value=b"after the transactions " + os.urandom(100), partition=p
            )
        plain.flush()
    plain.close()
    txn.close()


def _last_marker(count: int) -> int:
    """The offset of the last transaction marker ``_produce(count)`` leaves in each partition: its
    plain records, then three transactions of ``count // 4`` records and a marker each."""
    return count + 3 * (count // 4 + 1) - 1


def _tiered(cluster: KafkaCluster, platform: BesideKafka, topic: str, count: int) -> dict[int, int]:
    """Copy the topic until every partition's tier holds its last transaction marker; each
    partition's highest copied offset. A copy runs again until the brokers have checkpointed their
    high watermarks (once a second): before that the LSO stops it short, and a tier that ends
    inside a transaction cannot decide it once the topic is gone."""
    copied: dict[int, int] = {}

    def all_copied() -> bool:
        platform.ok("copy", "--topic", topic)
        copied.update({p: platform.status(topic, p)["highest_copied_offset"] for p in range(PARTITIONS)})
        return all(h >= _last_marker(count) for h in copied.values())

    cluster.wait_until(f"every partition of {topic} copied", all_copied, timeout=60)
    return copied


def _replay(platform: BesideKafka, *args: str) -> dict:  # type: ignore[type-arg]
    result = platform.run("replay", "--target", TARGET, "--json", *args)
    assert result.code == 0, result
    return result.json()  # type: ignore[no-any-return]


def _outcomes(done: dict) -> str:  # type: ignore[type-arg]
    """Each partition's outcome, as a message pytest shows whole (it shortens a long object's repr)."""
    return "; ".join(
        f"partition {p['partition']}: {p['outcome']} ({p['detail']}), resumed after {p['resumed_after']}, "
        f"{p['records']} records of offsets {p['first_offset']}..{p['last_offset']}"
        for p in done["partitions"]
    )


def _unmarked(record: ConsumedRecord) -> tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...], int]:
    assert record.headers and record.headers[-1][0] == SOURCE_HEADER, record
    return record.key, record.value, record.headers[:-1], record.timestamp


def _source(record: ConsumedRecord) -> tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...], int]:
    return record.key, record.value, record.headers, record.timestamp


def _marks(records: list[ConsumedRecord]) -> list[SourceMark]:
    marks = [SourceMark.of(r.headers) for r in records]
    assert all(m is not None for m in marks)
    return [m for m in marks if m is not None]


@pytest.fixture()
def source(kafka: KafkaCluster, beside: Callable[..., BesideKafka], request: pytest.FixtureRequest) -> tuple:  # type: ignore[type-arg]
    topic = f"replay-src-{request.node.name[5:30]}".replace("_", "-")
    topic_id = uuid_to_topic_id(
        uuid.UUID(kafka.create_topic(topic, partitions=PARTITIONS, segment_bytes=SEGMENT_BYTES))
    )
    _produce(kafka, topic, RECORDS, txn_id=f"{topic}-txn")
    platform = beside(kafka)
    platform.document["replay"] = {"targets": {TARGET: {"bootstrap_servers": kafka.bootstrap_servers}}}
    platform.write()
    copied = _tiered(kafka, platform, topic, RECORDS)
    return topic, topic_id, platform, copied


def test_replayed_records_equal_the_source_at_both_isolations(kafka: KafkaCluster, source: tuple) -> None:  # type: ignore[type-arg]
    topic, _topic_id, platform, copied = source
    for isolation in ("read_committed", "read_uncommitted"):
        target = f"{topic}-{isolation.replace('_', '-')}"
        kafka.create_topic(target, partitions=PARTITIONS)
        done = _replay(
            platform, "--topic", topic, "--from-offset", "0", "--target-topic", target, "--isolation", isolation
        )
        assert [p["outcome"] for p in done["partitions"]] == ["replayed"] * PARTITIONS, done
        for p in range(PARTITIONS):
            want = consume(kafka, topic, p, isolation_level=isolation, until=copied[p] + 1)
            got = consume(kafka, target, p, isolation_level="read_committed")
            assert [_unmarked(r) for r in got] == [_source(r) for r in want], (isolation, p)
            assert [(m.partition, m.offset) for m in _marks(got)] == [(p, r.offset) for r in want]
            assert done["partitions"][p]["records"] == len(want)
        if isolation == "read_committed":
            aborted = consume(kafka, topic, 0, isolation_level="read_uncommitted", until=copied[0] + 1)
            assert len(aborted) > len(consume(kafka, topic, 0, isolation_level="read_committed", until=copied[0] + 1))

    # A range by offsets of one partition, and a rerun that finds everything there already.
    target = f"{topic}-range"
    kafka.create_topic(target, partitions=PARTITIONS)
    args = ("--topic", topic, "--partition", "1", "--from-offset", "50", "--to-offset", "149", "--target-topic", target)
    first = _replay(platform, *args)
    assert first["records"] == 100 and first["partitions"][0]["partition"] == 1, first
    again = _replay(platform, *args)
    assert again["partitions"][0]["outcome"] == "up to date" and again["records"] == 0, again
    assert again["partitions"][0]["resumed_after"] == 149
    got = consume(kafka, target, 1)
    assert [m.offset for m in _marks(got)] == list(range(50, 150))
    assert consume(kafka, target, 0) == []

    # By key: the producer's partitioner places each record; together they are the source's.
    target = f"{topic}-by-key"
    kafka.create_topic(target, partitions=3)
    done = _replay(platform, "--topic", topic, "--from-offset", "0", "--target-topic", target, "--partitions", "key")
    got = [r for p in range(3) for r in consume(kafka, target, p)]
    want = [
        r
        for p in range(PARTITIONS)
        for r in consume(kafka, topic, p, isolation_level="read_committed", until=copied[p] + 1)
    ]
    assert sorted(map(_unmarked, got), key=repr) == sorted(map(_source, want), key=repr)
    keyed: dict[bytes, set[int]] = {}
    for p in range(3):
        for r in consume(kafka, target, p):
            if r.key is not None:
                keyed.setdefault(r.key, set()).add(p)
    assert all(len(ps) == 1 for ps in keyed.values())

    # Refusals name the problem and write nothing.
    small = f"{topic}-small"
    kafka.create_topic(small, partitions=1)
    servers = kafka.bootstrap_servers
    refused = platform.run(
        "replay", "--bootstrap-servers", servers, "--topic", topic, "--from-offset", "0", "--target-topic", small
    )
    assert refused.code == 1 and "has 1 partition(s), fewer than the source's" in refused.stderr, refused
    assert consume(kafka, small, 0) == []
    missing = platform.run(
        "replay", "--bootstrap-servers", servers, "--topic", topic, "--from-offset", "0", "--target-topic", "nope"
    )
    assert missing.code == 1 and "target topic nope does not exist" in missing.stderr, missing
    itself = platform.run(
        "replay", "--bootstrap-servers", servers, "--topic", topic, "--from-offset", "0", "--target-topic", topic
    )
    assert itself.code == 1 and "is the source topic itself" in itself.stderr, itself


_KILLABLE = """
import os, sys, threading, time
import tiering_core.replay.run as run
import tiering_core.replay.target as target

stopped_fd, point, partitions = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
run.TRANSACTION_RECORDS = int(sys.argv[4])  # many transactions
lock, writes, stopped = threading.Lock(), {}, set()

def stop_here(partition):
    # Every partition stops at the point, each on a thread of its own (the replay's concurrency is
    # at least the partitions): once the last has, the test is told and kills the process.
    with lock:
        stopped.add(partition)
        if len(stopped) == partitions:
            os.write(stopped_fd, point.encode())
    threading.Event().wait()

real_write = target.PartitionWriter.write
def write(self, records):
    partition = self.tip.partition
    with lock:
        writes[partition] = n = writes.get(partition, 0) + 1
    if point == "in-transaction" and n == 3:  # sent and flushed to the broker, never committed
        def hang():
            self.producer.flush()
            stop_here(partition)
        self.producer.commit_transaction = hang
    real_write(self, records)
    if point == "after-commit" and n == 4:  # committed, the next not begun
        stop_here(partition)
target.PartitionWriter.write = write

real_last = target.PartitionWriter.last_replayed
def last_replayed(self, clock=time.monotonic):
    found = real_last(self, clock)
    if point == "resuming":  # the earlier producer fenced, where it stopped read, nothing sent
        stop_here(self.tip.partition)
    return found
target.PartitionWriter.last_replayed = last_replayed

from tiering_core.cli import main
sys.exit(main(sys.argv[5:]))
"""


def _kill_at(platform: BesideKafka, point: str, args: list[str], tmp_path: Path, transaction_records: int) -> None:
    """Run the replay until every partition has stopped at ``point`` (each counts its own
    transactions), then kill it with SIGKILL."""
    reached, stopped = os.pipe()
    log = tmp_path / f"replay-{point}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _KILLABLE,
                str(stopped),
                point,
                str(PARTITIONS),
                str(transaction_records),
                "replay",
                "--config",
                str(platform.config_path),
                *args,
            ],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            pass_fds=(stopped,),
        )
    os.close(stopped)
    try:
        ready, _, _ = select.select([reached], [], [], 180)
        said = os.read(reached, 64) if ready else b""  # empty: it ended, or never got there
    finally:
        os.close(reached)
    os.kill(proc.pid, signal.SIGKILL)
    code = proc.wait(timeout=30)
    assert said == point.encode(), f"the replay never stopped at {point} (exit {code}): {log.read_text()[-3000:]}"


def test_kill_9_at_three_points_then_rerun_is_exactly_once(kafka: KafkaCluster, source: tuple, tmp_path: Path) -> None:  # type: ignore[type-arg]
    topic, topic_id, platform, copied = source
    target = f"{topic}-target"
    kafka.create_topic(target, partitions=PARTITIONS)
    other = kafka.producer(linger_ms=0)

    def foreign(n: int) -> None:  # another writer of the target, with and without a foreign mark
        for p in range(PARTITIONS):
            other.send(target, value=b"not a replay", partition=p)
            other.send(
                target, value=b"another source", partition=p, headers=[(SOURCE_HEADER, f"X:{p}:{10**6 + n}".encode())]
            )
        other.flush()

    want = {
        p: consume(kafka, topic, p, isolation_level="read_committed", until=copied[p] + 1) for p in range(PARTITIONS)
    }
    # Every partition has ten transactions or more; the kills end at most seven of them (three, the
    # third left open, then four), so each is replayed in part before the last run, none in full.
    transaction_records = min(map(len, want.values())) // 10
    foreign(0)
    args = [
        "--bootstrap-servers",
        kafka.bootstrap_servers,
        "--topic",
        topic,
        "--from-offset",
        "0",
        "--target-topic",
        target,
    ]
    for n, point in enumerate(("in-transaction", "after-commit", "resuming"), start=1):
        _kill_at(platform, point, args, tmp_path, transaction_records)
        foreign(n)
    done = _replay(platform, *args[2:])
    assert all(p["outcome"] == "replayed" for p in done["partitions"]), _outcomes(done)
    assert all(p["resumed_after"] is not None for p in done["partitions"]), _outcomes(done)
    other.close()
    uncommitted = 0
    for p in range(PARTITIONS):
        got = consume(kafka, target, p, isolation_level="read_committed")
        uncommitted += len(consume(kafka, target, p, isolation_level="read_uncommitted")) - len(got)
        ours = [r for r in got if (m := SourceMark.of(r.headers)) is not None and m.topic_id == topic_id]
        assert [SourceMark.of(r.headers).offset for r in ours] == [r.offset for r in want[p]]  # type: ignore[union-attr]
        assert [_unmarked(r) for r in ours] == [_source(r) for r in want[p]]
        assert len(got) - len(ours) == 2 * 4  # the other writer's records, all kept
    assert uncommitted > 0  # the killed transaction's records are there, aborted: read_committed skips them


def test_replay_of_a_deleted_topic_into_a_new_topic(kafka: KafkaCluster, source: tuple) -> None:  # type: ignore[type-arg]
    topic, topic_id, platform, copied = source
    want = {
        p: consume(kafka, topic, p, isolation_level="read_committed", until=copied[p] + 1) for p in range(PARTITIONS)
    }
    kafka.admin().delete_topics([topic])
    kafka.wait_until("the topic's deletion", lambda: kafka.leader(topic, 0) == -1)
    log_dir = kafka.nodes[1].log_dirs[0]
    kafka.wait_until("its directory renamed", lambda: not (log_dir / f"{topic}-0").exists())
    target = f"{topic}-rebuilt"
    kafka.create_topic(target, partitions=PARTITIONS)
    done = _replay(platform, "--topic", topic, "--from-offset", "0", "--target-topic", target)
    assert done["topic_id"] == topic_id
    for p in range(PARTITIONS):
        got = consume(kafka, target, p)
        assert [_unmarked(r) for r in got] == [_source(r) for r in want[p]]
