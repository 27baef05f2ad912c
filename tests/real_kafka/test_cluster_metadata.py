"""The KRaft metadata image reader (``tiering_core.kafka.cluster_metadata``) against Apache Kafka itself:
every record of a real 3-node cluster's ``__cluster_metadata-0`` (snapshot and log) decoded as Kafka's
own decoder (``DumpLogSegments --cluster-metadata-decoder``) decodes it, with topics created,
deleted, reassigned and their leaders moved, an active controller stopped; the image each node's
disk holds equals what the cluster reports (Metadata), and what it proves committed never passes
the quorum's high watermark. The writer the unit tests use is decoded by Kafka the same way."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kafka import TopicPartition as KafkaTP

from tests.real_kafka.cluster import KafkaCluster, KafkaDistribution
from tests.real_kafka.conftest import PrivateKafka
from tiering_core.kafka.checkpoints import uuid_to_topic_id
from tiering_core.kafka.cluster_metadata import (
    CLUSTER_METADATA_DIR,
    ClusterMetadataImage,
    TopicIdState,
    latest_snapshot,
    read_cluster_metadata,
)
from tiering_core.kafka.metadata_log_writer import ClusterMetadataWriter
from tiering_core.kafka.metadata_records import (
    NO_LEADER_CHANGE,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
    iter_metadata_records,
)
from tiering_core.kafka.topic import TopicPartition

#: Snapshots after every ~16 KiB of metadata records (Kafka's default: 20 MiB or an hour): the
#: big topic below makes one, and what follows it stays in the log after it.
SNAPSHOT_BYTES = 16 * 1024
_RECORD_LINE = re.compile(r"^\| offset: (\d+) .* payload: (\{.*\})$")


def api_keys(dist: KafkaDistribution) -> dict[str, int]:
    """Kafka's name of each metadata record type (``MetadataRecordType``: TOPIC_RECORD, ...) -> its api
    key, from the message definitions in Kafka's own jar."""
    jar = next(dist.libs.glob("kafka-metadata-*.jar"))
    keys: dict[str, int] = {}
    with zipfile.ZipFile(jar) as z:
        for name in z.namelist():
            if name.startswith("common/metadata/") and name.endswith(".json"):
                text = "\n".join(
                    line for line in z.read(name).decode().splitlines() if not line.strip().startswith("//")
                )
                spec = json.loads(text)
                keys[re.sub(r"(?<!^)(?=[A-Z])", "_", spec["name"]).upper()] = int(spec["apiKey"])
    return keys


def kafka_decoded(dist: KafkaDistribution, files: list[Path]) -> dict[Path, list[tuple[int, dict[str, Any]]]]:
    """Every metadata record of ``files`` as Kafka's DumpLogSegments decodes it: (offset, payload)."""
    proc = subprocess.run(
        dist.java(
            "org.apache.kafka.tools.DumpLogSegments",
            "--cluster-metadata-decoder",
            "--files",
            ",".join(map(str, files)),
        ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out: dict[Path, list[tuple[int, dict[str, Any]]]] = {}
    current: list[tuple[int, dict[str, Any]]] | None = None
    for line in proc.stdout.splitlines():
        if line.startswith("Dumping "):
            current = out.setdefault(Path(line[len("Dumping ") :].strip()), [])
        elif (match := _RECORD_LINE.match(line)) is not None:
            assert current is not None
            current.append((int(match.group(1)), json.loads(match.group(2))))
    assert set(out) == set(files), (sorted(out), files)
    return out


def expected_body(payload: dict[str, Any]) -> Any:
    """The record Kafka decoded, as this reader represents it (None for the types it does not decode)."""
    data = payload["data"]

    def ids(name: str) -> tuple[int, ...] | None:
        return tuple(data[name]) if data.get(name) is not None else None

    kind = payload["type"]
    if kind == "TOPIC_RECORD":
        return TopicRecord(data["name"], data["topicId"])
    if kind == "REMOVE_TOPIC_RECORD":
        return RemoveTopicRecord(data["topicId"])
    if kind == "PARTITION_RECORD":
        return PartitionRecord(
            data["topicId"],
            data["partitionId"],
            *(tuple(data[n]) for n in ("replicas", "isr", "removingReplicas", "addingReplicas")),
            data["leader"],
            data["leaderEpoch"],
            data["partitionEpoch"],
        )
    if kind == "PARTITION_CHANGE_RECORD":
        return PartitionChangeRecord(
            data["topicId"],
            data["partitionId"],
            ids("isr"),
            data.get("leader", NO_LEADER_CHANGE),
            ids("replicas"),
            ids("removingReplicas"),
            ids("addingReplicas"),
        )
    return None


def assert_decoded_as_kafka_does(dist: KafkaDistribution, directory: Path) -> dict[str, int]:
    """Every file of a metadata log directory read by both decoders, record by record; the count
    of each record type seen. The node may append to its active segment in between: Kafka, which
    reads second, may see more records there, never others."""
    files = sorted(p for p in directory.iterdir() if p.suffix in (".log", ".checkpoint"))
    keys = api_keys(dist)
    ours: dict[Path, list[MetadataRecord]] = {path: list(iter_metadata_records(path)) for path in files}
    theirs = kafka_decoded(dist, files)
    active = max(p for p in files if p.suffix == ".log")
    seen: dict[str, int] = {}
    for path in files:
        decoded = theirs[path] if path != active else theirs[path][: len(ours[path])]
        assert [r.offset for r in ours[path]] == [offset for offset, _ in decoded], path
        for record, (offset, payload) in zip(ours[path], decoded, strict=True):
            where = f"{path.name} offset {offset} ({payload['type']})"
            assert keys[payload["type"]] == record.api_key, where
            assert payload["version"] == record.version, where
            assert record.body == expected_body(payload), where
            seen[payload["type"]] = seen.get(payload["type"], 0) + 1
    return seen


def topic_id(described: str) -> str:
    """Kafka's own form of a topic id (``Uuid.toString``) from the admin client's UUID string."""
    return uuid_to_topic_id(uuid.UUID(described))


def cluster_view(cluster: KafkaCluster, topics: list[str]) -> dict[str, tuple[str, dict[int, tuple]]] | None:
    """What the cluster reports (Metadata): topic -> (topic id, partition -> (leader, leader epoch,
    replicas, ISR)); None while it answers with an error (a node restarting)."""
    out = {}
    for t in cluster.admin().describe_topics(topics):
        if t["error_code"] or any(p["error_code"] for p in t["partitions"]):
            return None
        parts = {
            p["partition_index"]: (p["leader_id"], p["leader_epoch"], tuple(p["replica_nodes"]), tuple(p["isr_nodes"]))
            for p in t["partitions"]
        }
        out[t["name"]] = (topic_id(str(t["topic_id"])), parts)
    return out


def answered_view(cluster: KafkaCluster, topics: list[str]) -> dict[str, tuple[str, dict[int, tuple]]]:
    """``cluster_view`` once the cluster answers without an error."""
    views: list[dict[str, tuple[str, dict[int, tuple]]] | None] = [None]

    def answered() -> bool:
        views[0] = cluster_view(cluster, topics)
        return views[0] is not None

    cluster.wait_until(f"the cluster's view of {topics}", answered)
    assert views[0] is not None
    return views[0]


def image_view(image: ClusterMetadataImage, topics: list[str]) -> dict[str, tuple[str, dict[int, tuple]]]:
    out = {}
    for name in topics:
        topic = image.topic_named(name)
        assert topic is not None, name
        parts = {p.partition: (p.leader, p.leader_epoch, p.replicas, p.isr) for p in topic.partitions.values()}
        out[name] = (topic.topic_id, parts)
    return out


def quorum(cluster: KafkaCluster) -> dict[str, int]:
    """The metadata log's leader (the active controller) and high watermark, as the quorum reports them."""
    (partition,) = cluster.admin().describe_metadata_quorum()["topics"][0]["partitions"]
    return {"leader_id": int(partition["leader_id"]), "high_watermark": int(partition["high_watermark"])}


def metadata_dirs(cluster: KafkaCluster) -> Iterator[tuple[int, Path]]:
    for node_id, node in cluster.nodes.items():
        yield node_id, node.log_dirs[0]  # metadata.log.dir: by default the first log dir


def test_the_reader_decodes_a_real_clusters_metadata_log_as_kafka_does(
    private_kafka: PrivateKafka, kafka_dist: KafkaDistribution
) -> None:
    settings = {"metadata.log.max.record.bytes.between.snapshots": str(SNAPSHOT_BYTES)}
    with private_kafka(3, settings=settings) as cluster:
        admin = cluster.admin()
        # The big topic makes the snapshot; it lives on the two nodes the test keeps running, so that
        # stopping the active controller below changes none of its partitions (their ISR changes
        # would add up to another snapshot, and leave no log after it to read).
        active = quorum(cluster)["leader_id"]
        kept = [b for b in (1, 2, 3) if b != active]
        bulk = {p: kept[p % 2 :] + kept[: p % 2] for p in range(200)}
        ids = {
            "bulk": topic_id(cluster.create_topic("bulk", replica_assignments=bulk)),  # then a snapshot
            "moved": topic_id(cluster.create_topic("moved", partitions=2, replication_factor=2)),
            "early": topic_id(cluster.create_topic("early")),
        }
        admin.delete_topics(["early"])
        for node_id, log_dir in metadata_dirs(cluster):
            cluster.wait_until(
                f"node {node_id}'s snapshot of the big topic",
                lambda d=log_dir: (s := latest_snapshot(d / CLUSTER_METADATA_DIR)) is not None and s.end_offset > 0,
            )
        snapshots = {n: latest_snapshot(d / CLUSTER_METADATA_DIR) for n, d in metadata_dirs(cluster)}

        # After the snapshot: a reassignment, a topic created and deleted, leaders moved by stopping the
        # active controller (a new leader epoch of the metadata log, a new active controller).
        described = answered_view(cluster, ["moved"])["moved"][1][0]  # (leader, leader epoch, replicas, ISR)
        new_replicas = [b for b in (1, 2, 3) if b not in described[2]] + [described[2][0]]
        assert admin.alter_partition_reassignments({KafkaTP("moved", 0): new_replicas}) == {KafkaTP("moved", 0): None}
        cluster.wait_until("the reassignment", lambda: not admin.list_partition_reassignments())
        ids["late"] = topic_id(cluster.create_topic("late"))
        admin.delete_topics(["late"])
        cluster.stop_node(active)  # the node the big topic avoids (still the active controller, as a rule)
        cluster.wait_until("a new active controller", lambda: quorum(cluster)["leader_id"] not in (active, -1))
        cluster.start_node(active)
        cluster.wait_ready()

        live = ["bulk", "moved"]
        for node_id, log_dir in metadata_dirs(cluster):
            directory = log_dir / CLUSTER_METADATA_DIR

            def converged(d: Path = log_dir) -> bool:
                image = read_cluster_metadata(d)
                return image_view(image, live) == cluster_view(cluster, live) and all(
                    image.state_of(ids[t]) is TopicIdState.DELETED for t in ("early", "late")
                )

            cluster.wait_until(f"node {node_id}'s image to match the cluster's", converged)
            image = read_cluster_metadata(log_dir)
            assert image.committed_offset <= quorum(cluster)["high_watermark"]  # never more than Kafka committed
            assert image.snapshot is not None and image.snapshot >= snapshots[node_id]  # type: ignore[operator]
            assert image.end_offset > image.snapshot.end_offset  # and the log after it was read too
            assert set(image.topics) == {ids["bulk"], ids["moved"]}
            assert image.removed[ids["late"]].offset >= snapshots[node_id].end_offset  # type: ignore[union-attr]
            seen = assert_decoded_as_kafka_does(kafka_dist, directory)
            for kind in ("TOPIC_RECORD", "PARTITION_RECORD", "PARTITION_CHANGE_RECORD", "REMOVE_TOPIC_RECORD"):
                assert seen.get(kind), (node_id, kind, seen)
            moved = image.partition(TopicPartition("moved", 0))
            assert moved is not None and sorted(moved.replicas) == sorted(new_replicas)


def test_the_writer_the_tests_use_is_decoded_by_kafka(kafka_dist: KafkaDistribution, tmp_path: Path) -> None:
    w = ClusterMetadataWriter(tmp_path / "logs", voters=(1, 2, 3))
    orders = w.create_topic("orders", 3, replicas=(1, 2))
    w.change_leader(TopicPartition("orders", 1), 2, isr=(2,))
    w.append([PartitionChangeRecord(orders, 2, replicas=(2, 3, 1), removing_replicas=(1,), adding_replicas=(3,))])
    w.snapshot()
    w.roll()
    with w.transaction():
        gone = w.create_topic("gone")
    w.remove_topic(gone)
    w.elect(2)
    w.no_op()
    seen = assert_decoded_as_kafka_does(kafka_dist, w.path)
    assert seen["PARTITION_CHANGE_RECORD"] == 2 and seen["BEGIN_TRANSACTION_RECORD"] == 1
