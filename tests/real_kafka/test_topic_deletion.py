"""Topic deletion on a real broker is the evidence partition removal acts on (docs/kafka-rules.md
section 7, DESIGN invariant 7): the controller's word, never the broker's directories.

While the topic lives, ``delete-partition`` refuses. Once the admin client deleted the topic and the
broker's KRaft metadata image holds the committed RemoveTopicRecord, removal deletes that topic id's
remote data, without ``--force``, and nothing of any other topic; with a ``kafka:`` section the
cluster's Metadata is the word, also once the broker removed the ``-delete`` directory; but only
the Metadata of the cluster the log dirs belong to (by its cluster id): another cluster's is not.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
from kafka import TopicPartition as KafkaTP

from tests.real_kafka.cluster import KafkaCluster
from tests.real_kafka.conftest import PrivateKafka
from tests.real_kafka.support import BesideKafka, ConsumedRecord, consume
from tiering_core.kafka.cluster_metadata import TopicIdState, read_cluster_metadata

#: The broker removes a ``-delete`` dir this long after the rename (a broker-wide setting).
DELETE_DELAY_MS = 6000
#: A node snapshots its metadata image this often (Kafka's default: an hour): the snapshot that
#: proves the deletion committed comes at once.
SNAPSHOT_INTERVAL_MS = 1000


def _produce(cluster: KafkaCluster, topic: str, count: int) -> None:
    producer = cluster.producer(linger_ms=5, batch_size=4096)
    for i in range(count):
        producer.send(topic, key=f"{topic}-{i}".encode(), value=f"{topic} value {i:05d} ".encode() * 8)
    producer.flush()
    producer.close()


def _keys(platform: BesideKafka) -> list[str]:
    remote = platform.document["remote"]
    s3: Any = boto3.client("s3", endpoint_url=remote["endpoint_url"], region_name=remote["region"])
    keys: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=remote["bucket"], Prefix=remote["prefix"]):
        keys.extend(o["Key"] for o in page.get("Contents", []))
    return keys


def _delete_dirs(log_dir: Path, topic: str, partition: int) -> list[Path]:
    pattern = re.compile(rf"{re.escape(topic)}-{partition}\.[0-9a-f]{{32}}-delete")
    return [p for p in log_dir.iterdir() if pattern.fullmatch(p.name)]


def test_topic_deletion_is_the_evidence_removal_acts_on(
    private_kafka: PrivateKafka, beside: Callable[..., BesideKafka]
) -> None:
    settings = {
        "log.segment.delete.delay.ms": str(DELETE_DELAY_MS),
        "metadata.log.max.snapshot.interval.ms": str(SNAPSHOT_INTERVAL_MS),
    }
    with private_kafka(settings=settings) as cluster:
        ids = {t: cluster.create_topic(t, segment_bytes=16 * 1024) for t in ("doomed", "bystander", "vanished")}
        platform = beside(cluster)
        for topic in ids:
            _produce(cluster, topic, 800)
        for topic in ids:
            cluster.wait_until(f"{topic}'s HW", lambda t=topic: platform.status(t)["high_watermark"] == 800)
        platform.ok("copy")
        segments = {t: platform.ok("segments", "--topic", t, "--partition", "0", "--json").json() for t in ids}
        assert all(len(s) > 2 for s in segments.values()), {t: len(s) for t, s in segments.items()}
        status = {t: platform.status(t) for t in ids}
        bystander_before = consume(cluster, "bystander", 0)
        keys_before = _keys(platform)
        prefix = {t: f"tier/{t}-{status[t]['topic_id']}/" for t in ids}
        assert all(any(k.startswith(prefix[t]) for k in keys_before) for t in ids), keys_before[:5]

        # The topic lives: removal refuses, naming the live topic id, and deletes nothing.
        refused = platform.run("delete-partition", "--topic", "doomed", "--partition", "0", "--yes")
        assert refused.code == 1, refused
        assert "doomed-0 is still in the broker's log dirs" in refused.stderr
        assert f"--topic-id {status['doomed']['topic_id']}" in refused.stderr
        assert _keys(platform) == keys_before

        log_dir = cluster.nodes[1].log_dirs[0]
        cluster.admin().delete_topics(["doomed", "vanished"])
        cluster.wait_until(
            "the broker's metadata image to hold the committed deletion",
            lambda: read_cluster_metadata(log_dir).state_of(status["doomed"]["topic_id"]) is TopicIdState.DELETED,
        )
        removed = platform.run("delete-partition", "--topic", "doomed", "--partition", "0", "--yes", "--json")
        assert removed.code == 0, removed  # in files mode, on the metadata image's word, without --force
        done = removed.json()
        assert done["topic_ids"] == [status["doomed"]["topic_id"]]
        assert done["segments_deleted"] == len(segments["doomed"])
        assert done["state"] == "DELETE_PARTITION_FINISHED"
        keys_after = _keys(platform)
        assert not any(k.startswith(prefix["doomed"]) for k in keys_after)
        assert sorted(keys_after) == sorted(k for k in keys_before if not k.startswith(prefix["doomed"]))
        # The other topics are untouched and still served.
        for topic in ("bystander", "vanished"):
            assert platform.ok("segments", "--topic", topic, "--partition", "0", "--json").json() == segments[topic]
        hco = status["bystander"]["highest_copied_offset"]
        served = platform.remote_records("bystander", 0, 0, hco + 1)
        assert [ConsumedRecord.from_fetch(r) for r in served] == bystander_before[: hco + 1]

        # The broker removes the -delete dir: no directory says anything any more, and none has to. With a
        # kafka: section the cluster's Metadata is the word.
        cluster.wait_until(
            "the broker removing the -delete dir",
            lambda: not _delete_dirs(log_dir, "vanished", 0),
            DELETE_DELAY_MS / 1000 + 30,
        )
        platform.document["kafka"] = {"bootstrap_servers": cluster.bootstrap_servers}
        platform.write()
        removed = platform.run("delete-partition", "--topic", "vanished", "--partition", "0", "--yes", "--json")
        assert removed.code == 0, removed
        assert removed.json()["segments_deleted"] == len(segments["vanished"])
        assert sorted(_keys(platform)) == sorted(k for k in keys_after if not k.startswith(prefix["vanished"]))
        assert (
            platform.ok("segments", "--topic", "bystander", "--partition", "0", "--json").json()
            == segments["bystander"]
        )


def test_a_metadata_answer_that_is_not_unknown_topic_is_not_the_controllers_word(
    private_kafka: PrivateKafka, beside: Callable[..., BesideKafka], monkeypatch: Any
) -> None:
    """The cluster answers Metadata for a topic the platform's principal may not describe with
    TOPIC_AUTHORIZATION_FAILED and no topic id: that says nothing of whether the topic exists, so
    removal refuses (naming the error) where it used to read the missing id as a deletion and
    delete a live topic's remote data."""
    secret = "acl-" + uuid.uuid4().hex
    variable = "TIERING_TEST_ACL_SASL_PASSWORD"
    settings = {
        # The brokers, the controller and the tests' own clients use PLAINTEXT (User:ANONYMOUS, a
        # super user); the platform's SASL user "tiering" has no ACL at all.
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
        "allow.everyone.if.no.acl.found": "false",
    }
    with private_kafka(settings=settings, sasl_users={"tiering": secret}) as cluster:
        cluster.create_topic("guarded", segment_bytes=16 * 1024)
        _produce(cluster, "guarded", 800)
        platform = beside(cluster)
        cluster.wait_until("guarded's HW", lambda: platform.status("guarded")["high_watermark"] == 800)
        platform.ok("copy")  # files mode: the platform's files are readable whatever the ACLs
        topic_id = platform.status("guarded")["topic_id"]
        segments = platform.ok("segments", "--topic", "guarded", "--partition", "0", "--json").json()
        assert len(segments) > 2
        keys_before = _keys(platform)

        monkeypatch.setenv(variable, secret)
        platform.document["kafka"] = cluster.sasl_kafka_section("tiering", variable)
        platform.write()
        described = cluster.admin().describe_topics(["guarded"])[0]  # as a super user: it lives
        assert described["error_code"] == 0
        refused = platform.run(
            "delete-partition", "--topic", "guarded", "--partition", "0", "--topic-id", topic_id, "--yes"
        )
        assert refused.code == 1, refused
        assert "TopicAuthorizationFailedError" in refused.stderr and "cannot tell" in refused.stderr, refused.stderr
        assert secret not in refused.stderr + refused.stdout
        assert _keys(platform) == keys_before
        assert platform.ok("segments", "--topic", "guarded", "--partition", "0", "--json").json() == segments


def test_the_word_of_another_cluster_is_not_the_controllers(
    kafka: KafkaCluster, private_kafka: PrivateKafka, beside: Callable[..., BesideKafka]
) -> None:
    """The platform beside one cluster with ``kafka.bootstrap_servers`` at another (formatted with
    its own cluster id): that cluster does not know the topic, which used to read as the
    controller's word that it was deleted, and removal deleted a live topic's remote data. Removal
    and DeleteRecords now refuse, naming both cluster ids, also once the other cluster has a topic of
    that name: nothing remote is deleted, nothing is applied on either cluster."""
    topic = f"elsewhere-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, segment_bytes=16 * 1024)
    platform = beside(kafka)
    _produce(kafka, topic, 800)
    kafka.wait_until(f"{topic}'s HW", lambda: platform.status(topic)["high_watermark"] == 800)
    platform.ok("copy", "--topic", topic)
    topic_id = platform.status(topic)["topic_id"]
    select = ("--topic", topic, "--partition", "0")
    segments = platform.ok("segments", *select, "--json").json()
    assert len(segments) > 2
    keys_before = _keys(platform)

    with private_kafka() as other:
        assert other.cluster_id != kafka.cluster_id
        platform.document["kafka"] = {"bootstrap_servers": other.bootstrap_servers}
        platform.write()
        reason = (
            f"the cluster at {other.bootstrap_servers} has cluster id {other.cluster_id}, but the log dirs "
            f"belong to cluster {kafka.cluster_id}: its word is not this cluster's"
        )
        removal = ("delete-partition", *select, "--topic-id", topic_id, "--yes")
        refused = platform.run(*removal)
        assert refused.code == 1 and reason in refused.stderr, refused
        assert "nothing deleted" in refused.stderr

        other.create_topic(topic)  # its own topic of that name, under another topic id
        _produce(other, topic, 10)
        for argv in (removal, ("delete-records", *select, "--before-offset", "5", "--yes")):
            refused = platform.run(*argv)
            assert refused.code == 1 and reason in refused.stderr, refused
        consumer = other.consumer()
        try:
            assert consumer.beginning_offsets([KafkaTP(topic, 0)]) == {KafkaTP(topic, 0): 0}
        finally:
            consumer.close()

    assert _keys(platform) == keys_before
    del platform.document["kafka"]
    platform.write()
    assert platform.ok("segments", *select, "--json").json() == segments
    assert platform.status(topic)["log_start_offset"] == 0
