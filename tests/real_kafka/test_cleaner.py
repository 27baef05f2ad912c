"""The cleaner's batch filter on a real broker's segments, judged by Kafka itself.

Real producers write plain, lz4, zstd and transactional batches (committed and aborted) to a
Kafka 4.4.0 broker; every closed segment is filtered of some keys; Kafka's ``DumpLogSegments``
checks every rewritten batch's CRC and lists its records and index entries; then the rewritten
segments replace the broker's own (the broker stopped), and a restarted broker serves every
kept record at its original offset to a real consumer, and no record of an erased key.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from kafka import TopicPartition as KafkaTopicPartition

from tests.real_kafka.cluster import BROKER_SETTINGS, KafkaCluster
from tests.real_kafka.conftest import PrivateKafka
from tests.real_kafka.test_broker_files import settled_end
from tiering_core.kafka.cleaner import CleanedLog, clean_log, offsets_of_keys
from tiering_core.kafka.records import Record, iter_batches

TOPIC = "erasure"
SEGMENT_BYTES = 16 * 1024
ERASED = {b"user-3", b"user-7", b"user-11"}
INDEX_INTERVAL = int(BROKER_SETTINGS["log.index.interval.bytes"])
_BATCH_LINE = re.compile(r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .* isvalid: (\w+)$")
_RECORD_LINE = re.compile(r"^\| offset: (\d+) .* key: (\S*) payload:")


def produce(cluster: KafkaCluster) -> int:
    """Every kind of batch, erased keys among them, then filler that closes their segments;
    returns the partition's settled end."""
    for codec in (None, "lz4", "zstd"):
        producer = cluster.producer(linger_ms=20, batch_size=2048, compression_type=codec)
        for i in range(150):
            producer.send(TOPIC, key=f"user-{i % 20}".encode(), value=f"{codec}-{i}".encode() * 4)
        producer.flush()
        producer.send(TOPIC, key=b"user-3", value=f"{codec}-alone".encode())  # a batch of only an erased key
        producer.flush()
        producer.close()
    plain = cluster.producer(linger_ms=20, enable_idempotence=False, acks=1)  # no producer id
    plain.send(TOPIC, key=b"user-7", value=b"plain-alone")
    plain.flush()
    plain.close()
    txn = cluster.producer(transactional_id=f"{TOPIC}-txn", linger_ms=5, compression_type="gzip")
    txn.init_transactions()
    for n, commit in enumerate([True, False, True, False]):
        txn.begin_transaction()
        for i in range(40):
            kind = "committed" if commit else "aborted"
            txn.send(TOPIC, key=f"user-{(i + n) % 20}".encode(), value=f"{kind}-{n}-{i}".encode())
        txn.flush()
        txn.commit_transaction() if commit else txn.abort_transaction()
    txn.close()
    filler = cluster.producer(linger_ms=20, batch_size=4096)
    for i in range(300):
        filler.send(TOPIC, key=f"filler-{i}".encode(), value=b"f" * 150)
    filler.flush()
    filler.close()
    return settled_end(cluster, TOPIC)


def data_records(log_path: Path) -> list[Record]:
    return [r for header, records in iter_batches(log_path) if not header.is_control for r in records]


def dump(cluster: KafkaCluster, files: list[Path]) -> str:
    """Kafka's own ``DumpLogSegments --deep-iteration`` over ``files`` (logs and their indexes)."""
    command = cluster.distribution.java(
        "org.apache.kafka.tools.DumpLogSegments",
        "--deep-iteration",
        "--print-data-log",
        "--files",
        ",".join(str(f) for f in files),
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def dumped(output: str) -> tuple[list[str], list[tuple[int, str]]]:
    """The validity of each batch and the (offset, key) of each data record the tool printed."""
    valid = [m.group(4) for line in output.splitlines() if (m := _BATCH_LINE.match(line))]
    records = [
        (int(m.group(1)), m.group(2))
        for line in output.splitlines()
        if "endTxnMarker" not in line and (m := _RECORD_LINE.match(line))
    ]
    return valid, records


def consume(cluster: KafkaCluster, end: int, isolation_level: str) -> list[tuple[int, bytes | None, bytes | None]]:
    tp = KafkaTopicPartition(TOPIC, 0)
    consumer = cluster.consumer(isolation_level=isolation_level)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[tuple[int, bytes | None, bytes | None]] = []
        polls = 0
        while consumer.position(tp) < end:
            polls += 1
            assert polls < 120, f"the consumer stopped at {consumer.position(tp)} of {end}"
            for records in consumer.poll(timeout_ms=1000).values():
                got.extend((r.offset, r.key, r.value) for r in records)
        return got
    finally:
        consumer.close()


def clean_closed_segments(partition: Path, into: Path) -> dict[int, tuple[bytes, CleanedLog]]:
    """Each closed segment's original bytes and its cleaned form, written to ``into``."""
    logs = sorted(partition.glob("*.log"))
    assert len(logs) >= 3, "the records should span several closed segments"
    cleaned: dict[int, tuple[bytes, CleanedLog]] = {}
    for log_path in logs[:-1]:
        base = int(log_path.stem)
        original = log_path.read_bytes()
        result = clean_log(original, ERASED, base, where=log_path, index_interval_bytes=INDEX_INTERVAL)
        assert offsets_of_keys(log_path, ERASED) == result.result.removed_offsets  # the erasure's local scan
        (into / log_path.name).write_bytes(result.log)
        (into / f"{log_path.stem}.index").write_bytes(result.offset_index)
        (into / f"{log_path.stem}.timeindex").write_bytes(result.time_index)
        cleaned[base] = (original, result)
    assert not any(r.key in ERASED for r in data_records(logs[-1])), "the active segment holds no erased key"
    return cleaned


def test_cleaned_segments_pass_kafkas_dump_tool_and_a_restarted_broker_serves_them(
    private_kafka: PrivateKafka, tmp_path: Path
) -> None:
    out = tmp_path / "cleaned"
    out.mkdir()
    with private_kafka() as cluster:
        cluster.create_topic(TOPIC, segment_bytes=SEGMENT_BYTES)
        end = produce(cluster)
        partition = cluster.partition_dir(1, TOPIC, 0)
        before = sorted((r.offset, r.key, r.value) for p in partition.glob("*.log") for r in data_records(p))
        cluster.stop_node(1)  # a controlled shutdown: closed segments are final
        cleaned = clean_closed_segments(partition, out)
        results = [c.result for _original, c in cleaned.values()]
        assert sum(r.records_removed for r in results) == sum(1 for _o, k, _v in before if k in ERASED)
        assert sum(r.batches_rewritten for r in results) > 0
        assert sum(r.batches_dropped for r in results) > 0  # the plain producer's lone erased record
        assert sum(r.batches_kept_empty for r in results) > 0  # an idempotent producer's last batch
        untouched = [base for base, (original, c) in cleaned.items() if c.log == original]
        assert untouched, "the filler's segments hold no erased key"
        for base in untouched:  # their indexes, rebuilt as for the others, are the broker's own
            _original, c = cleaned[base]
            assert c.offset_index == (partition / f"{base:020d}.index").read_bytes()
            assert c.time_index == (partition / f"{base:020d}.timeindex").read_bytes()

        files = [f for base in cleaned for f in sorted(out.glob(f"{base:020d}.*"))]
        output = dump(cluster, files)
        valid, listed = dumped(output)
        assert valid and set(valid) == {"true"}, "Kafka finds every rewritten batch's CRC valid"
        assert "mismatch" not in output.lower(), "Kafka finds the rebuilt indexes agree with the logs"
        kept = [(o, k, v) for o, k, v in before if k not in ERASED]
        active_base = int(sorted(partition.glob("*.log"))[-1].stem)
        assert listed == [(o, (k or b"").decode()) for o, k, _v in kept if o < active_base]

        first_log = f"{min(cleaned):020d}.log"
        damaged = bytearray((out / first_log).read_bytes())
        damaged[17] ^= 0xFF  # the first batch's stored CRC
        (tmp_path / first_log).write_bytes(damaged)
        assert "isvalid: false" in dump(cluster, [tmp_path / first_log])  # the tool does catch damage

        for base in cleaned:
            for suffix in (".log", ".index", ".timeindex"):
                name = f"{base:020d}{suffix}"
                (partition / name).write_bytes((out / name).read_bytes())
        cluster.start_node(1)
        cluster.wait_ready()
        cluster.wait_until("the partition's leader", lambda: cluster.leader(TOPIC, 0) == 1)
        assert consume(cluster, end, "read_uncommitted") == kept
        committed = [(o, k, v) for o, k, v in kept if not (v or b"").startswith(b"aborted")]
        assert consume(cluster, end, "read_committed") == committed
