"""The Kafka fixture itself: a real KRaft cluster starts, writes a partition directory our reader
accepts, and leaves no broker process behind."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.real_kafka.cluster import KafkaCluster, KafkaDistribution, kafka_cluster, kafka_distribution, kafka_version
from tests.real_kafka.support import consume
from tests.services import ServiceUnavailable
from tiering_core.kafka.log_dirs import read_log_dir_identity
from tiering_core.kafka.partition_log import PartitionLog


def test_pom_pins_a_kafka_4_release() -> None:
    major, *_ = kafka_version().split(".")
    assert int(major) == 4


def test_single_node_writes_a_partition_dir_with_small_segments(kafka: KafkaCluster) -> None:
    kafka.create_topic("fixture-small-segments", segment_bytes=16 * 1024)
    producer = kafka.producer(linger_ms=2)
    for i in range(3000):
        producer.send("fixture-small-segments", key=str(i).encode(), value=b"v" * 40)
    producer.flush()
    producer.close()
    path = kafka.partition_dir(1, "fixture-small-segments", 0)
    log = PartitionLog.open(path)
    assert len(log.segments) > 5, "16 KiB segments must roll many times for 3000 records"
    assert log.log_end_offset == 3000
    identity = read_log_dir_identity(path.parent)
    assert identity.node_id == 1 and identity.cluster_id == kafka.cluster_id
    assert [r.offset for r in consume(kafka, "fixture-small-segments", 0)] == list(range(3000))


def test_a_killed_test_process_leaves_no_broker(kafka_dist: KafkaDistribution, tmp_path: Path) -> None:
    """SIGKILL the process that started a node: the parent-death signal stops the broker too."""
    marker = tmp_path / "started"
    script = textwrap.dedent(
        f"""
        import os, signal, pathlib
        from tests.real_kafka.cluster import kafka_cluster
        with kafka_cluster(1) as c:
            pathlib.Path({str(marker)!r}).write_text(str(c.nodes[1].process.proc.pid))
            os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, timeout=300
    )
    assert proc.returncode == -9
    pid = int(marker.read_text())
    for _ in range(600):  # a minute: a broker shutting down on a busy machine takes its time
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        import time

        time.sleep(0.1)
    else:
        pytest.fail(f"Kafka node {pid} outlived the killed test process")


def test_kafka_home_runs_an_existing_distribution(kafka_dist: KafkaDistribution, tmp_path: Path) -> None:
    """``KAFKA_HOME`` names a Kafka distribution (its ``libs/``) to run instead of the cached jars."""
    home = tmp_path / "kafka_2.13-dist"
    home.mkdir()
    (home / "libs").symlink_to(kafka_dist.libs, target_is_directory=True)
    dist = kafka_distribution(environ={"KAFKA_HOME": str(home)})
    assert (dist.version, dist.source) == (kafka_dist.version, f"KAFKA_HOME ({home})")
    with kafka_cluster(1, distribution=dist) as cluster:
        cluster.create_topic("from-kafka-home")
        assert cluster.live_brokers() == {1}


def test_kafka_home_without_the_broker_jar_is_refused(tmp_path: Path) -> None:
    (tmp_path / "libs").mkdir()
    with pytest.raises(ServiceUnavailable, match="not a Kafka distribution"):
        kafka_distribution(environ={"KAFKA_HOME": str(tmp_path)})
