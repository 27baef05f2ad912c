"""Restore as disaster recovery on a real broker: the node stops, the partition's directory is
lost, ``tiering restore`` writes it back into the node's log dir from the remote tier, the node
starts again and a real consumer reads every tiered offset from the broker, equal to what it
read before, with both isolation levels.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable

from tests.real_kafka.cluster import KafkaCluster
from tests.real_kafka.conftest import PrivateKafka
from tests.real_kafka.support import BesideKafka, consume
from tiering_core.kafka.partition_log import PartitionLog
from tiering_core.kafka.topic import TopicPartition
from tiering_core.read.restore import staging_dir

TOPIC = "restored"


def _noise(seed: str) -> bytes:
    """A value gzip does not shrink much, so that compressed batches still fill segments."""
    return hashlib.sha256(seed.encode()).hexdigest().encode() * 2


def _produce(cluster: KafkaCluster) -> None:
    """Plain, compressed and transactional records (committed and aborted), several segments."""
    plain = cluster.producer(linger_ms=5, batch_size=4096)
    for i in range(600):
        headers = [("h", str(i).encode()), ("empty", b"")] if i % 5 == 0 else []
        plain.send(
            TOPIC, key=None if i % 9 == 0 else f"k{i}".encode(), value=f"plain {i} ".encode() * 9, headers=headers
        )
    plain.flush()
    plain.close()
    txn = cluster.producer(transactional_id="restore-txn", linger_ms=5, batch_size=4096, compression_type="gzip")
    txn.init_transactions()
    for round_ in range(6):
        txn.begin_transaction()
        for i in range(120):
            txn.send(TOPIC, key=f"t{round_}-{i}".encode(), value=_noise(f"txn {round_} {i}"))
        txn.flush()  # in the log before the marker: an abort must have something to abort
        if round_ % 3 == 1:
            txn.abort_transaction()
        else:
            txn.commit_transaction()
    txn.close()
    tail = cluster.producer(linger_ms=5, batch_size=4096, compression_type="gzip")
    for i in range(400):
        tail.send(TOPIC, key=f"tail{i}".encode(), value=None if i % 13 == 0 else _noise(f"tail {i}"))
    tail.flush()
    tail.close()


def test_restore_brings_a_lost_partition_back_for_the_broker(
    private_kafka: PrivateKafka, beside: Callable[..., BesideKafka]
) -> None:
    with private_kafka(settings={"log.segment.delete.delay.ms": "1000"}) as cluster:
        cluster.create_topic(TOPIC, segment_bytes=16 * 1024)
        platform = beside(cluster)
        _produce(cluster)
        end = consume(cluster, TOPIC, 0)[-1].offset + 1
        cluster.wait_until("the checkpointed LSO", lambda: platform.status(TOPIC)["last_stable_offset"] >= end)
        before = {
            level: consume(cluster, TOPIC, 0, isolation_level=level) for level in ("read_uncommitted", "read_committed")
        }
        assert len(before["read_committed"]) < len(before["read_uncommitted"])  # aborted records are hidden
        platform.ok("copy", "--topic", TOPIC)
        tiered = platform.status(TOPIC)
        hco = tiered["highest_copied_offset"]
        assert tiered["remote_segments"] > 5 and hco > 1000, tiered

        path = cluster.partition_dir(1, TOPIC, 0)
        log_dir = path.parent
        cluster.stop_node(1)  # controlled shutdown
        shutil.rmtree(path)  # the disk holding the partition is lost

        refused = platform.run("restore", "--topic", TOPIC, "--partition", "0", "--to", str(log_dir))
        assert refused.code == 1 and "--force" in refused.stderr, refused
        restored = platform.ok(
            "restore", "--topic", TOPIC, "--partition", "0", "--to", str(log_dir), "--force", "--json"
        ).json()
        assert restored["end_offset"] == hco and restored["log_start_offset"] == 0
        assert PartitionLog.open(path).log_end_offset == hco + 1

        # What a restore killed midway leaves in a broker's log dir: the broker starts anyway and
        # deletes it (a hidden directory there would stop the broker from starting).
        leftover = staging_dir(log_dir, TopicPartition(TOPIC, 0), broker_log_dir=True)
        leftover.mkdir()
        first = path / f"{0:020d}.log"
        (leftover / first.name).write_bytes(first.read_bytes()[:5000])

        cluster.start_node(1)
        cluster.wait_ready()
        cluster.wait_until("the broker deleting what a killed restore left", lambda: not leftover.exists(), 30)
        # The broker serves every tiered offset again, as it did before the loss.
        for level, records in before.items():
            wanted = [r for r in records if r.offset <= hco]
            after = consume(cluster, TOPIC, 0, isolation_level=level, until=hco + 1)
            assert after == wanted, level
        # And it goes on from there: new records follow the restored end.
        producer = cluster.producer()
        producer.send(TOPIC, value=b"after the restore").get(timeout=30)
        producer.close()
        last = consume(cluster, TOPIC, 0, start=hco + 1)
        assert [r.value for r in last] == [b"after the restore"]
        assert last[0].offset == hco + 1
