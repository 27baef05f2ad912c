"""What a broker's log dir says about itself (``tiering_core/kafka/log_dirs.py``): the broker
owning it by its ``meta.properties`` (KRaft and ZooKeeper forms, or a clear error naming what is
missing), and the ``-delete`` and ``-future`` traces of a partition, found only under the names a
broker gives them (docs/kafka-rules.md sections 1 and 7)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from tiering_core.kafka.checkpoints import PARTITION_METADATA, new_topic_id, write_partition_metadata
from tiering_core.kafka.log_dirs import (
    META_PROPERTIES,
    LogDirError,
    LogDirIdentity,
    delete_dir_name,
    deleted_topic_ids,
    future_topic_ids,
    parse_properties,
    read_log_dir_identity,
)
from tiering_core.kafka.topic import TopicPartition

ORDERS_3 = TopicPartition("orders", 3)


def test_properties_are_read_as_java_writes_them() -> None:
    text = "#Thu Nov 27 2026\n! also a comment\n\n  node.id = 7 \nversion=1\ncluster.id:abc\nextra=a=b\n"
    assert parse_properties(text) == {"node.id": "7", "version": "1", "cluster.id": "abc", "extra": "a=b"}


@pytest.mark.parametrize(
    ("text", "identity"),
    [
        ("version=1\nnode.id=2\ncluster.id=c1\ndirectory.id=d1\n", (2, "c1", "d1")),  # KRaft
        ("version=0\nbroker.id=5\ncluster.id=c0\nnode.id=9\n", (5, "c0", None)),  # ZooKeeper: broker.id
    ],
)
def test_the_owning_broker_comes_from_meta_properties(
    tmp_path: Path, text: str, identity: tuple[int, str, str | None]
) -> None:
    (tmp_path / META_PROPERTIES).write_text(text)
    assert read_log_dir_identity(tmp_path) == LogDirIdentity(tmp_path, *identity)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (None, "has no meta.properties: not a live Kafka log dir"),
        ("version=2\nnode.id=1\n", "has no supported version \\(got '2'\\)"),
        ("node.id=1\n", "has no supported version \\(got None\\)"),
        ("version=1\nbroker.id=1\n", "names no broker \\(node.id is missing\\)"),
        ("version=0\nbroker.id=-1\n", "names no broker \\(broker.id is -1\\)"),
        ("version=1\nnode.id=\u0661\n", "names no broker"),  # digits of another script are no broker id
    ],
)
def test_a_log_dir_that_names_no_broker_is_an_error_saying_why(tmp_path: Path, text: str | None, problem: str) -> None:
    if text is not None:
        (tmp_path / META_PROPERTIES).write_text(text)
    with pytest.raises(LogDirError, match=f"log dir {re.escape(str(tmp_path))}.*{problem}"):
        read_log_dir_identity(tmp_path)


def trace(log_dir: Path, name: str, topic_id: str | None) -> Path:
    path = log_dir / name
    path.mkdir()
    if topic_id is not None:
        write_partition_metadata(path / PARTITION_METADATA, topic_id)
    return path


def test_the_traces_of_a_partition_are_found_by_the_names_a_broker_gives_them(tmp_path: Path) -> None:
    deleted, moving = new_topic_id(), new_topic_id()
    gone = trace(tmp_path, delete_dir_name(ORDERS_3), deleted)
    future = trace(tmp_path, f"orders-3.{uuid.uuid4().hex}-future", moving)
    trace(tmp_path, delete_dir_name(TopicPartition("orders", 30)), new_topic_id())  # another partition
    trace(tmp_path, delete_dir_name(TopicPartition("orders.v2", 3)), new_topic_id())  # another topic
    trace(tmp_path, f"ord-3.{uuid.uuid4().hex}-delete", new_topic_id())  # a topic cut short, yet not at 255
    trace(tmp_path, f"orders-3.{uuid.uuid4().hex}-delete", None)  # no topic id to read: proves nothing
    (tmp_path / f"orders-3.{uuid.uuid4().hex}-delete").touch()  # a file, not a directory
    assert deleted_topic_ids(tmp_path, ORDERS_3) == {deleted: gone}
    assert future_topic_ids(tmp_path, ORDERS_3) == {moving: future}
    assert deleted_topic_ids(tmp_path / "absent", ORDERS_3) == {}


def test_a_deleted_directory_s_name_is_kafka_s() -> None:
    name = delete_dir_name(ORDERS_3)
    assert re.fullmatch(r"orders-3\.[0-9a-f]{32}-delete", name)
    long = delete_dir_name(TopicPartition("t" * 249, 12))
    assert len(long) == 255 and re.fullmatch(r"t+-12\.[0-9a-f]{32}-delete", long)
