"""``tiering recover`` beside a real 3-node KRaft cluster (docs/upgrading.md, "Backup and recovery").

A partition lives a life on real brokers: an unclean election after the old leader's divergent
segments were tiered, retention by time past its first segments, a DeleteRecords applied through
the platform and the retention that follows it, a rewrite into another encoding, an export. Then
its metadata store is lost. A new, empty store over the same bucket, prefix and log dirs refuses
to write until ``tiering recover`` rebuilt it from the bucket alone; then ``segments`` and
``status`` say what the lost store said, ``fetch`` serves the same records (those a real consumer
reads from the broker), ``verify`` finds every object sound, the export adds no row twice, and the
next copy uploads nothing. The lost store, found again, no longer writes under the prefix.

After an unclean election the old leader's divergent segments and the new leader's can also cover
exactly the same offsets: recovery keeps both, as the lost store had them.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

from tests.export.support import offsets_by_partition, sqlite_catalog
from tests.real_kafka.cluster import KafkaCluster
from tests.real_kafka.conftest import PrivateKafka
from tests.real_kafka.support import BesideKafka, ConsumedRecord, beside_every_node, consume
from tests.real_kafka.test_leadership import (
    divergent_segments,
    partition_state,
    retention_with,
    segments,
    wait_checkpointed,
    wait_for_leader,
)
from tests.services import S3Endpoint
from tiering_core.config import load_config
from tiering_core.context import TieringContext
from tiering_core.export import load_catalog, open_table, table_name
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition

TOPIC = "recover"
SEGMENT_BYTES = 32 * 1024
HOUR_MS = 3_600_000


def produce(cluster: KafkaCluster, start: int, count: int, tag: str, timestamp_ms: int | None = None) -> None:
    """``count`` records keyed ``start..``, acknowledged by every in-sync replica; with
    ``timestamp_ms``, that CreateTime instead of now."""
    producer = cluster.producer(acks="all", linger_ms=5, retries=5)
    try:
        for i in range(start, start + count):
            value = f"{tag}-{i}-".encode() + b"x" * 120
            producer.send(TOPIC, key=str(i).encode(), value=value, timestamp_ms=timestamp_ms)
        producer.flush(timeout=60)
    finally:
        producer.close()


def bucket_objects(s3: S3Endpoint, beside: BesideKafka) -> dict[str, str]:
    """Every object under the platform's prefix, with its ETag."""
    remote = beside.document["remote"]
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=remote["bucket"], Prefix=remote["prefix"])
    return {obj["Key"]: obj["ETag"] for page in pages for obj in page.get("Contents", [])}


def exported_offsets(beside: BesideKafka) -> list[int]:
    """Every offset the topic's export table holds, duplicates kept."""
    config = load_config(beside.config_path)
    assert config.export is not None
    table = open_table(load_catalog(config), table_name(config.export, TOPIC), create=False)
    assert table is not None
    return offsets_by_partition(table).get(0, [])


def fetched(beside: BesideKafka, starts: list[int], end: int, count: int = 40) -> dict[int, list[dict[str, Any]]]:
    """``tiering fetch`` from each of ``starts``: up to ``count`` records, none past ``end``."""
    return {start: beside.remote_records(TOPIC, 0, start, min(count, end + 1 - start)) for start in starts}


def store_state(beside: BesideKafka, topic_id: str) -> dict[str, Any]:
    """What the store records of the partition beside its segments: the lineage, the remote log
    start, the DeleteRecords applied through the platform, the tiering gaps."""
    tip = TopicIdPartition(topic_id, TopicPartition(TOPIC, 0))
    with TieringContext.open(load_config(beside.config_path)) as ctx:
        store = ctx.metadata
        return {
            "lineage": store.get_recorded_lineage(tip),
            "remote_log_start": store.get_remote_log_start_offset(tip),
            "delete_records": store.get_delete_records_offset(tip),
            "gaps": [(g.start, g.end) for g in store.list_gaps(tip)],
        }


def with_store(beside: BesideKafka, name: str) -> BesideKafka:
    """The same config (log dirs, bucket, prefix, export catalog) on a new, empty SQLite store."""
    document = copy.deepcopy(beside.document)
    document["metadata"]["url"] = f"sqlite:///{beside.root / name}.db"
    other = BesideKafka(beside.root, beside.cluster, beside.node_id, beside.root / f"{name}.yaml", document)
    other.write()
    return other


def test_a_store_recovered_from_the_bucket_equals_the_lost_one(
    private_kafka: PrivateKafka, beside: Callable[..., BesideKafka], s3_endpoint: S3Endpoint
) -> None:
    began = time.monotonic()
    with private_kafka(nodes=3) as cluster:
        cluster.create_topic(
            TOPIC,
            replication_factor=2,
            segment_bytes=SEGMENT_BYTES,
            configs={"unclean.leader.election.enable": "true", "min.insync.replicas": "1"},
        )
        platform = beside_every_node(beside(cluster, 1))
        first = partition_state(cluster, TOPIC)
        old_leader, old_epoch = first["leader_id"], first["leader_epoch"]
        (lagging,) = [n for n in first["replica_nodes"] if n != old_leader]

        # -- a life: an unclean election, retention, a DeleteRecords, a rewrite, an export ---------
        produce(cluster, 0, 700, "old", timestamp_ms=int(time.time() * 1000) - HOUR_MS)  # retention's prey
        produce(cluster, 700, 300, "shared")
        wait_checkpointed(platform[lagging], TOPIC, 1000)
        cluster.stop_node(lagging)  # out of sync from now on: the leader goes on alone
        wait_for_leader(cluster, TOPIC, lambda s: s["isr_nodes"] == [old_leader] and s["leader_id"] == old_leader)
        produce(cluster, 1000, 1000, "divergent")
        wait_checkpointed(platform[old_leader], TOPIC, 2000)
        platform[old_leader].ok("copy", "--topic", TOPIC)
        assert divergent_segments(segments(platform[old_leader], TOPIC), 1000, old_epoch)

        cluster.stop_node(old_leader, kill=True)
        cluster.start_node(lagging)
        state = wait_for_leader(cluster, TOPIC, lambda s: s["leader_id"] == lagging, timeout=40)
        new_epoch = state["leader_epoch"]
        assert new_epoch > old_epoch
        produce(cluster, 1000, 700, "new")
        on_new = platform[lagging]
        wait_checkpointed(on_new, TOPIC, 1700)
        on_new.ok("copy", "--topic", TOPIC)
        copied = segments(on_new, TOPIC)
        divergent = divergent_segments(copied, 1000, old_epoch)
        assert divergent, "the old leader's divergent segments stay in the tier"

        # retention by time: the hour-old records' segments go; divergent segments never by time
        retention_with(on_new, TOPIC, HOUR_MS // 2)
        after_time = segments(on_new, TOPIC)
        expired = [r for r in copied if r not in after_time]
        assert expired and all(r["end_offset"] < 700 for r in expired), expired
        retention_with(on_new, TOPIC, -1)

        # a DeleteRecords through the platform (a kafka: section), inside the second segment left
        on_new.document["kafka"] = {"bootstrap_servers": cluster.bootstrap_servers}
        on_new.write()
        lineage = [r for r in after_time if r not in divergent]
        second = lineage[1]
        # Below the divergence: a log start past it would leave the new leader's epoch the
        # lineage's first, and retention rightly deletes every older-epoch segment (the divergent
        # ones among them) as Kafka does. Where the second segment straddles 1000, its midpoint
        # would be past it.
        target = min(second["start_offset"] + (second["end_offset"] - second["start_offset"]) // 2, 999)
        assert lineage[0]["end_offset"] < target < 1000, (lineage[:2], target)
        applied = on_new.ok(
            "delete-records", "--topic", TOPIC, "--partition", "0", "--before-offset", str(target), "--yes", "--json"
        ).json()
        assert (applied["log_start_offset"], applied["sent_to_cluster"]) == (target, True)
        (deleted,) = on_new.ok("retention", "--topic", TOPIC, "--json").json()
        assert deleted["segments_deleted"] >= 1

        # a rewrite: every segment left, divergent ones too, copied again as zstd in 8 KiB chunks
        on_new.document["remote"].update(compression="zstd", chunk_size=8192)
        on_new.write()
        left = segments(on_new, TOPIC)
        (rewritten,) = on_new.ok("rewrite", "--topic", TOPIC, "--partition", "0", "--json").json()
        assert rewritten["segments_rewritten"] == len(left)
        lived = segments(on_new, TOPIC)
        assert not {r["segment_id"] for r in lived} & {r["segment_id"] for r in left}, "new segment ids"
        assert len(divergent_segments(lived, 1000, old_epoch)) == len(divergent)

        on_new.document["export"] = {"catalog": sqlite_catalog(on_new.root)}
        on_new.write()
        exported = on_new.ok("export", "--topic", TOPIC, "--json").json()
        assert exported["rows"] > 0 and not exported["failed"]
        exported_before = exported_offsets(on_new)
        assert min(exported_before) == target, "nothing below the DeleteRecords' log start is exported"

        # -- what the lost store says --------------------------------------------------------------
        selector = ("--topic", TOPIC, "--partition", "0")
        lost_segments = on_new.ok("--json", "segments", *selector).json()
        lost_status = on_new.ok("--json", "status", *selector).json()
        (lost_row,) = lost_status
        assert lost_row["remote_log_start_offset"] == lost_row["log_start_offset"] == target
        assert lost_row["leader_epoch"] == new_epoch and lost_row["error"] is None
        hco = lost_row["highest_copied_offset"]
        assert hco >= 1000
        lost_state = store_state(on_new, lost_row["topic_id"])
        assert lost_state["delete_records"] == target and lost_state["lineage"][-1].epoch == new_epoch
        starts = [target, lived[0]["end_offset"], 999, 1000, hco - 10]
        lost_records = fetched(on_new, starts, hco)

        # -- the store is lost: a new, empty one over the same bucket, prefix and log dirs ---------
        recovered = with_store(on_new, "recovered")
        objects = bucket_objects(s3_endpoint, on_new)
        refused = recovered.run("copy", "--topic", TOPIC)
        assert refused.code == 1, refused
        (line,) = refused.stderr.strip().splitlines()
        assert "tiering recover" in line, line
        assert bucket_objects(s3_endpoint, on_new) == objects, "the refused copy wrote nothing"

        result = recovered.ok("--json", "recover").json()
        assert result["bound"] and not result["dry_run"]
        (part,) = result["partitions"]
        assert (part["topic"], part["partition"], part["state_object"]) == (TOPIC, 0, True)
        assert part["recorded"] == part["segments"] and part["from_objects"] == [] and part["unreadable"] == []
        assert part["delete_records_offset"] == target

        assert recovered.ok("--json", "segments", *selector).json() == lost_segments
        assert store_state(recovered, lost_row["topic_id"]) == lost_state
        # status compared whole: its one clock-dependent field, local_retention_risk's
        # oldest_uncopied_age_ms, is null while every closed segment is copied
        assert lost_row["local_retention_risk"]["oldest_uncopied_age_ms"] is None
        assert recovered.ok("--json", "status", *selector).json() == lost_status
        recovered_objects = bucket_objects(s3_endpoint, on_new)
        identity = f"{on_new.document['remote']['prefix']}tiering-store.json"
        changed = {k for k in objects.keys() | recovered_objects.keys() if objects.get(k) != recovered_objects.get(k)}
        assert changed == {identity}, "recovery writes the prefix's identity object only"

        # -- and the platform goes on with it as before ---------------------------------------------
        assert fetched(recovered, starts, hco) == lost_records
        served = [ConsumedRecord.from_fetch(r) for r in recovered.remote_records(TOPIC, 0, target, hco + 1 - target)]
        broker = consume(cluster, TOPIC, 0, start=target, until=hco + 1)
        assert served == broker and len(broker) == hco + 1 - target
        assert not any(r.value is not None and r.value.startswith(b"divergent") for r in served)

        verified = recovered.ok("--json", "verify", *selector).json()
        assert len(verified) == len(lived) and all(v["ok"] for v in verified), verified

        again = recovered.ok("export", "--topic", TOPIC, "--json").json()
        assert again["rows"] == 0 and again["exported_segments"] == 0 and not again["failed"], again
        offsets = exported_offsets(recovered)
        assert offsets == exported_before and len(offsets) == len(set(offsets)), "no row exported twice"

        (next_copy,) = recovered.ok("copy", "--topic", TOPIC, "--json").json()
        assert next_copy["segments_copied"] == 0, next_copy
        assert bucket_objects(s3_endpoint, on_new) == recovered_objects, "no new object under the prefix"

        # the lost store, found again, no longer writes there
        stale = on_new.run("retention", "--topic", TOPIC)
        assert stale.code == 1 and "binds the prefix to metadata store" in stale.stderr, stale
    print(f"recover: {len(lived)} segment(s), offsets {target}..{hco} compared in {time.monotonic() - began:.1f} s")


def produce_one_by_one(cluster: KafkaCluster, topic: str, start: int, count: int, tag: str) -> None:
    """``count`` records keyed ``start..``, each in a batch and a request of its own: with tags of
    one length, two leaders appending them after the same log roll their segments at the same
    offsets."""
    producer = cluster.producer(acks="all", linger_ms=0, retries=5)
    try:
        for i in range(start, start + count):
            producer.send(topic, key=str(i).encode(), value=f"{tag}-{i}-".encode() + b"x" * 120).get(timeout=30)
    finally:
        producer.close()


def test_divergent_and_new_segments_of_the_same_offsets_are_both_recovered(
    private_kafka: PrivateKafka, beside: Callable[..., BesideKafka], s3_endpoint: S3Endpoint
) -> None:
    """After an unclean election the old leader's divergent segments and the new leader's can
    cover exactly the same offsets: two histories, not a rewrite's two copies of one segment.
    Recovery keeps both as the lost store had them (the divergent ones finished, out of the
    lineage, kept until retention's lineage rule deletes them)."""
    began = time.monotonic()
    topic = "recover-same-offsets"
    with private_kafka(nodes=3) as cluster:
        cluster.create_topic(
            topic,
            replication_factor=2,
            segment_bytes=SEGMENT_BYTES,
            configs={"unclean.leader.election.enable": "true", "min.insync.replicas": "1"},
        )
        platform = beside_every_node(beside(cluster, 1))
        first = partition_state(cluster, topic)
        old_leader, old_epoch = first["leader_id"], first["leader_epoch"]
        (lagging,) = [n for n in first["replica_nodes"] if n != old_leader]
        produce_one_by_one(cluster, topic, 0, 100, "shr")  # in the first segment of both replicas
        wait_checkpointed(platform[lagging], topic, 100)
        cluster.stop_node(lagging)
        wait_for_leader(cluster, topic, lambda s: s["isr_nodes"] == [old_leader] and s["leader_id"] == old_leader)
        produce_one_by_one(cluster, topic, 100, 600, "old")
        wait_checkpointed(platform[old_leader], topic, 700)
        platform[old_leader].ok("copy", "--topic", topic)
        cluster.stop_node(old_leader, kill=True)
        cluster.start_node(lagging)
        wait_for_leader(cluster, topic, lambda s: s["leader_id"] == lagging, timeout=40)
        produce_one_by_one(cluster, topic, 100, 600, "new")
        on_new = platform[lagging]
        wait_checkpointed(on_new, topic, 700)
        on_new.ok("copy", "--topic", topic)
        rows = segments(on_new, topic)
        divergent = divergent_segments(rows, 100, old_epoch)
        lineage = [r for r in rows if r not in divergent]
        offsets_of = [(r["start_offset"], r["end_offset"]) for r in divergent]
        assert divergent and offsets_of == [(r["start_offset"], r["end_offset"]) for r in lineage], rows

        selector = ("--topic", topic, "--partition", "0")
        lost_segments = on_new.ok("--json", "segments", *selector).json()
        lost_status = on_new.ok("--json", "status", *selector).json()
        hco = lost_status[0]["highest_copied_offset"]
        assert hco == lineage[-1]["end_offset"]

        recovered = with_store(on_new, "recovered")
        objects = bucket_objects(s3_endpoint, on_new)
        (part,) = recovered.ok("--json", "recover").json()["partitions"]
        assert part["recorded"] == len(rows) and part["from_objects"] == [] and part["unreadable"] == []

        served = [ConsumedRecord.from_fetch(r) for r in recovered.remote_records(topic, 0, 0, hco + 1)]
        assert served == consume(cluster, topic, 0, until=hco + 1)
        assert not any(r.value is not None and r.value.startswith(b"old") for r in served)

        # Same offsets, two histories: each recovered as the lost store had it (finished).
        assert recovered.ok("--json", "segments", *selector).json() == lost_segments
        assert recovered.ok("--json", "status", *selector).json() == lost_status
        verified = recovered.ok("--json", "verify", *selector).json()
        assert len(verified) == len(rows) and all(v["ok"] for v in verified), verified

        (next_copy,) = recovered.ok("copy", "--topic", topic, "--json").json()
        assert (next_copy["segments_copied"], next_copy["segments_cleaned_up"]) == (0, 0), next_copy
        assert bucket_objects(s3_endpoint, on_new).keys() == objects.keys(), "nothing uploaded, nothing deleted"
    print(f"recover after an unclean election: {len(rows)} segment(s) in {time.monotonic() - began:.1f} s")
