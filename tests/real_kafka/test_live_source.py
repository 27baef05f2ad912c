"""The live cluster as a source (``kafka: {bootstrap_servers: ...}``): the offsets, topic ids and
topic configs the platform takes from a real broker's admin API equal what the admin client and a
real consumer see, and win over the broker's files where those lag."""

from __future__ import annotations

import itertools
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.real_kafka.cluster import KafkaCluster
from tests.real_kafka.conftest import PrivateKafka
from tests.real_kafka.support import BesideKafka
from tests.services import free_port
from tiering_core.config import load_config
from tiering_core.context import TieringContext
from tiering_core.kafka.checkpoints import uuid_to_topic_id
from tiering_core.kafka.partition_log import PartitionLog
from tiering_core.tier.view import tier_view

Beside = Callable[..., BesideKafka]
SEGMENT = 16 * 1024
#: The broker's files lag: its checkpoints are written only every 10 minutes.
LAGGING_FILES = {
    "log.flush.start.offset.checkpoint.interval.ms": "600000",
    "replica.high.watermark.checkpoint.interval.ms": "600000",
    # ... and the segments below a DeleteRecords stay until the retention check, 10 minutes away.
    "log.retention.check.interval.ms": "600000",
}


def produce(cluster: KafkaCluster, topic: str, count: int, **config: Any) -> None:
    producer = cluster.producer(linger_ms=5, **config)
    try:
        for i in range(count):
            producer.send(topic, key=str(i).encode(), value=b"v" * 60)
        producer.flush()
    finally:
        producer.close()


def admin_offsets(cluster: KafkaCluster, topic: str) -> tuple[int, int, int]:
    """(log start, high watermark, LSO) as the admin client lists them."""
    from kafka import TopicPartition
    from kafka.admin import OffsetSpec

    tp = TopicPartition(topic, 0)
    admin = cluster.admin()
    start = admin.list_partition_offsets({tp: OffsetSpec.EARLIEST})[tp].offset
    hw = admin.list_partition_offsets({tp: OffsetSpec.LATEST})[tp].offset
    lso = admin.list_partition_offsets({tp: OffsetSpec.LATEST}, isolation_level="read_committed")[tp].offset
    return start, hw, lso


def consumer_ends(cluster: KafkaCluster, topic: str) -> tuple[int, int]:
    """(beginning, end) a read_uncommitted consumer sees, and the end a read_committed one sees."""
    from kafka import TopicPartition

    tp = TopicPartition(topic, 0)
    ends = []
    for isolation in ("read_uncommitted", "read_committed"):
        consumer = cluster.consumer(isolation_level=isolation)
        try:
            ends.append(consumer.end_offsets([tp])[tp])
        finally:
            consumer.close()
    return ends[0], ends[1]


def kafka_topic_id(created: str) -> str:
    return uuid_to_topic_id(uuid.UUID(created))


def test_live_offsets_topic_id_and_configs_equal_what_the_cluster_says(kafka: KafkaCluster, beside: Beside) -> None:
    """An open transaction keeps the live LSO below the HW; copy tiers nothing at or above it."""
    topic = "live-source-offsets"
    created = kafka.create_topic(topic, segment_bytes=SEGMENT, configs={"retention.ms": "86400000"})
    produce(kafka, topic, 1500)
    txn = kafka.producer(transactional_id="live-source-txn", linger_ms=5)
    try:
        txn.init_transactions()
        txn.begin_transaction()
        for i in range(400):
            txn.send(topic, key=b"t", value=str(i).encode() * 20)
        txn.flush()
        produce(kafka, topic, 600)  # after the open transaction: above the LSO
        platform = beside(kafka, 1, live=True)
        row = platform.status(topic)
        start, hw, lso = admin_offsets(kafka, topic)
        uncommitted_end, committed_end = consumer_ends(kafka, topic)
        assert lso < hw
        assert (row["high_watermark"], row["last_stable_offset"]) == (hw, lso) == (uncommitted_end, committed_end)
        assert row["log_start_offset"] == start == 0
        assert row["topic_id"] == kafka_topic_id(created)
        assert row["offsets_source"] == "broker" and row["error"] is None
        # The broker deletes its local segments by its effective retention: the local-retention mirror.
        assert row["local_retention_risk"]["local_retention_ms"] == 86400000
        assert row["local_retention_risk"]["local_retention_bytes"] == -1
        with TieringContext.open(load_config(platform.config_path)) as ctx:
            assert ctx.topic_config(topic).retention_ms == 86400000  # the topic's own value over "*"
        platform.ok("copy", "--topic", topic)
        copied = platform.status(topic)["highest_copied_offset"]
        assert 0 < copied < lso
        txn.commit_transaction()
    finally:
        txn.close()
    # The commit returns once the coordinator logged it; the markers reach the partition after.
    kafka.wait_until("the commit marker", lambda: admin_offsets(kafka, topic)[1:] == (2501, 2501))
    row = platform.status(topic)
    assert row["last_stable_offset"] == row["high_watermark"] == 2501  # 1500 + 400 + 600 + the marker


def test_live_values_win_over_lagging_files_and_the_yaml_topic_entry_wins_over_the_cluster(
    private_kafka: PrivateKafka, beside: Beside
) -> None:
    """A DeleteRecords made on the cluster and the high watermark are seen live long before the
    checkpoint files show them: the log start is the local log start at once (the segments wholly
    below it are not copied), never a DeleteRecords the platform records."""
    topic = "live-source-lagging"
    with private_kafka(settings=LAGGING_FILES) as cluster:
        cluster.create_topic(
            topic, segment_bytes=SEGMENT, configs={"retention.ms": "3600000", "local.retention.ms": "600000"}
        )
        produce(cluster, topic, 3000)
        path = cluster.partition_dir(1, topic, 0)
        bases = [s.base_offset for s in PartitionLog.open(path).segments]
        assert len(bases) > 4
        # Strictly inside a segment from the third on (a busy broker may roll one-batch segments).
        holding = next(b for b, after in itertools.pairwise(bases[2:]) if after - b > 7)
        target = holding + 7
        from kafka import TopicPartition

        cluster.admin().delete_records({TopicPartition(topic, 0): target})
        cluster.wait_until("the DeleteRecords", lambda: admin_offsets(cluster, topic)[0] == target)
        log = PartitionLog.open(path)
        assert log.log_start_offset_checkpoint is None  # the file does not show it yet

        platform = beside(cluster, 1)  # the files alone
        files = platform.status(topic)
        assert files["offsets_source"] == "files"
        assert files["log_start_offset"] < target
        live_doc = {"bootstrap_servers": cluster.bootstrap_servers}
        platform.document["kafka"] = live_doc
        platform.write()
        row = platform.status(topic)
        start, hw, lso = admin_offsets(cluster, topic)
        assert start == target
        assert (row["log_start_offset"], row["high_watermark"], row["last_stable_offset"]) == (target, hw, lso)
        assert files["high_watermark"] != hw  # the replication-offset checkpoint lags (or lacks the partition)
        assert row["local_retention_risk"]["local_retention_ms"] == 600000  # the topic-level value

        assert PartitionLog.open(path).segments[0].base_offset == 0  # still there, wholly below the log start
        platform.ok("copy", "--topic", topic)  # copies from the segment holding the log start on
        with TieringContext.open(load_config(platform.config_path)) as ctx:
            tip = tier_view(ctx, ctx.partitions(topic, 0)[0]).tip
            starts = [s.start_offset for s in ctx.metadata.list_segments(tip)]
            assert min(starts) == holding
            assert ctx.metadata.get_delete_records_offset(tip) is None  # the cluster's log start: never one
            assert ctx.topic_config(topic).retention_ms == 3600000  # the cluster's topic value over "*"
        # The segment holding the log start was copied with epochs from there: the tier starts there.
        assert platform.status(topic)["remote_log_start_offset"] == target

        platform.document["topics"][topic] = {"retention.ms": 7200000, "local.retention.ms": 1000}
        platform.write()
        with TieringContext.open(load_config(platform.config_path)) as ctx:
            config = ctx.topic_config(topic)
            assert (config.retention_ms, config.local_retention_ms) == (7200000, 1000)  # the YAML entry wins


def test_a_stale_directory_of_a_recreated_topic_is_refused_naming_both_ids(
    kafka: KafkaCluster, beside: Beside, tmp_path: Path
) -> None:
    topic = "live-source-recreated"
    old = kafka_topic_id(kafka.create_topic(topic, segment_bytes=SEGMENT))
    produce(kafka, topic, 300)
    stale = tmp_path / "stale-log-dir"
    shutil.copytree(kafka.partition_dir(1, topic, 0), stale / f"{topic}-0")
    kafka.admin().delete_topics([topic])
    deadline = time.monotonic() + 60
    while True:
        try:
            new = kafka_topic_id(kafka.create_topic(topic, segment_bytes=SEGMENT))
            break
        except Exception:  # the deletion is still under way
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    assert new != old
    platform = beside(kafka, 1, live=True)
    platform.document["log_dirs"] = [str(stale)]
    platform.write()
    row = platform.status(topic)
    assert row["topic_id"] == old and row["high_watermark"] is None
    assert old in row["error"] and new in row["error"]
    result = platform.run("copy", "--topic", topic)
    assert result.code != 0 and old in result.stderr and new in result.stderr
    assert platform.status(topic)["remote_segments"] == 0


def test_an_unreachable_cluster_is_a_one_line_error(kafka: KafkaCluster, beside: Beside) -> None:
    topic = "live-source-unreachable"
    kafka.create_topic(topic, segment_bytes=SEGMENT)
    produce(kafka, topic, 50)
    platform = beside(kafka, 1)
    platform.document["kafka"] = {"bootstrap_servers": f"127.0.0.1:{free_port()}", "request_timeout_ms": 1500}
    platform.write()
    for command in ("copy", "status", "retention"):
        started = time.monotonic()
        result = platform.run(command, "--topic", topic)
        assert result.code != 0, command
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, (command, result.stderr)
        assert "did not answer" in lines[0] and "fall back to the files" in lines[0]
        assert time.monotonic() - started < 30


def test_the_brokers_own_retention_racing_the_runs_is_never_a_delete_records(
    kafka: KafkaCluster, beside: Beside
) -> None:
    """The broker deletes segments by its retention (checked every second) while copy and status
    list the directory and ask the cluster: the live log start moves from segment base to segment
    base, and no DeleteRecords is ever recorded (the global log start never moves)."""
    topic = "live-source-retention-race"
    kafka.create_topic(topic, segment_bytes=SEGMENT, configs={"retention.bytes": str(3 * SEGMENT)})
    platform = beside(kafka, 1, live=True, topics={topic: {"retention.bytes": -1}})  # the YAML keeps remote data
    starts = set()
    deadline = time.monotonic() + 120  # a busy machine produces and runs slowly: more time, not fewer rounds
    while len(starts) < 3 and time.monotonic() < deadline:
        produce(kafka, topic, 600)
        for _ in range(3):
            result = platform.run("copy", "--topic", topic)
            assert result.code in (0, 3), result.stderr  # 3: the broker deleted data before it was tiered
            assert platform.status(topic)["offsets_source"] == "broker"
            starts.add(admin_offsets(kafka, topic)[0])
            time.sleep(0.2)
    assert len(starts) >= 2, f"the broker's retention did not move the log start: {starts}"
    with TieringContext.open(load_config(platform.config_path)) as ctx:
        view = tier_view(ctx, ctx.partitions(topic, 0)[0])
        assert ctx.metadata.get_delete_records_offset(view.tip) is None
        assert ctx.metadata.delete_records_observations(view.tip) == []
        assert view.global_log_start_offset == view.remote_log_start_offset  # only the platform's own
        assert ctx.topic_config(topic).retention_bytes == -1  # the YAML entry over the topic's value
        assert ctx.topic_config(topic).effective_local_retention_bytes() == 3 * SEGMENT  # the broker's


def test_the_sasl_password_is_read_when_the_source_connects_to_a_sasl_plain_broker(
    private_kafka: PrivateKafka, beside: Beside, monkeypatch: Any, caplog: Any
) -> None:
    """A broker whose only client listener for the platform is SASL_PLAINTEXT (PLAIN): the config
    parses without the password's variable; a run that asks the cluster without it fails with one
    line naming the variable; a wrong password is the cluster's refusal, never echoed; with it, the
    run takes the cluster's offsets."""
    import logging

    secret = "sasl-" + uuid.uuid4().hex
    variable = "TIERING_TEST_SASL_PASSWORD"
    topic = "live-source-sasl"
    monkeypatch.delenv(variable, raising=False)
    caplog.set_level(logging.DEBUG)
    with private_kafka(sasl_users={"tiering": secret}) as cluster:
        cluster.create_topic(topic, segment_bytes=SEGMENT)
        produce(cluster, topic, 800)
        platform = beside(cluster, 1)
        platform.document["kafka"] = cluster.sasl_kafka_section("tiering", variable)
        platform.write()
        assert load_config(platform.config_path).kafka is not None  # no password needed to parse
        for command in ("status", "copy"):
            result = platform.run(command, "--topic", topic)
            assert result.code == 1 and result.stdout == "", (command, result)
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1, (command, result.stderr)
            assert f"kafka.sasl_password_env: the environment variable {variable} is not set" in lines[0]
        monkeypatch.setenv(variable, "wrong-" + secret)
        refused = platform.run("status", "--topic", topic)
        assert refused.code == 1 and len(refused.stderr.strip().splitlines()) == 1, refused
        assert "did not answer" in refused.stderr and "wrong-" not in refused.stderr
        monkeypatch.setenv(variable, secret)
        row = platform.status(topic)
        start, hw, lso = admin_offsets(cluster, topic)
        assert row["offsets_source"] == "broker" and row["error"] is None
        assert (row["log_start_offset"], row["high_watermark"], row["last_stable_offset"]) == (start, hw, lso)
        assert hw == 800
        platform.ok("copy", "--topic", topic)
        assert platform.status(topic)["highest_copied_offset"] > 0
    assert secret not in caplog.text


def test_kip_1257_percents_take_the_cluster_s_topic_configs_and_the_yaml_entry_wins(
    kafka: KafkaCluster, beside: Beside
) -> None:
    """``retention.bytes`` and ``local.retention.bytes`` set on a real topic are the limits of the
    percents the platform's single-broker form (its broker id from node 1's ``meta.properties``)
    records and serves; a topic's own YAML entry wins over the cluster's value."""
    from tiering_core.monitoring.collect import collect_metrics
    from tiering_core.monitoring.exposition import render

    topic = "live-source-percents"
    limits = {"retention.bytes": str(64 * SEGMENT), "local.retention.bytes": str(8 * SEGMENT)}
    kafka.create_topic(topic, segment_bytes=SEGMENT, configs=limits)
    produce(kafka, topic, 1500)
    platform = beside(kafka, 1, live=True)
    path = kafka.partition_dir(1, topic, 0)

    def local_bytes() -> int:
        return sum(s.size_bytes for s in PartitionLog.open(path).segments)

    def recorded() -> tuple[int | None, int | None, str]:
        with TieringContext.open(load_config(platform.config_path)) as ctx:
            tip = tier_view(ctx, ctx.partitions(topic, 0)[0]).tip
            replicas, _ = ctx.metadata.observations_of(tip)
            text = render(collect_metrics(ctx, topic, tasks=False))
        assert list(replicas) == [1]  # node 1's, by its meta.properties: no --broker given
        seen = replicas[1]
        return seen.retention_size_percent, seen.local_retention_size_percent, text

    before = local_bytes()
    platform.status(topic)
    after = local_bytes()
    assert before == after > 0  # nothing produced meanwhile: the status saw these bytes
    retention, local, text = recorded()
    assert retention == after * 100 // (64 * SEGMENT) and local == after * 100 // (8 * SEGMENT) > 0
    assert f'tiering_retention_size_in_percent{{topic="{topic}",partition="0"}} {retention}\n' in text
    assert f'tiering_local_retention_size_in_percent{{topic="{topic}",partition="0"}} {local}\n' in text

    platform.ok("copy", "--topic", topic)  # copied bytes count as remote: the total stays
    assert recorded()[:2] == (retention, local)

    platform.document["topics"][topic] = {"retention.bytes": -1, "local.retention.bytes": -2}
    platform.write()
    platform.status(topic)
    assert recorded()[:2] == (0, 0)  # the YAML entry wins: unlimited, and the same as the total
