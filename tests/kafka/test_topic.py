"""Topic partitions and Kafka's rules for topic names (``tiering_core/kafka/topic.py``): what
Kafka accepts and nothing else (every object key stays inside its prefix), internal topics,
partition directories matched whole."""

from __future__ import annotations

import pytest

from tiering_core.errors import InvalidTopicError
from tiering_core.kafka.topic import (
    MAX_TOPIC_NAME_LENGTH,
    TopicIdPartition,
    TopicPartition,
    is_internal_topic,
    validate_topic_name,
)


@pytest.mark.parametrize("name", ["orders-0\n", "orders-00", "orders-1\n", "orders-"])
def test_partition_directory_names_are_matched_whole(name: str) -> None:
    with pytest.raises(InvalidTopicError, match="is not <topic>-<partition>"):
        TopicPartition.from_dir_name(name)
    assert TopicPartition.from_dir_name("orders-10") == TopicPartition("orders", 10)


@pytest.mark.parametrize("partition", [True, False, "7", 7.0, None])
def test_partition_must_be_an_int(partition: object) -> None:
    with pytest.raises(InvalidTopicError, match="is not an integer"):
        TopicPartition("orders", partition)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("topic", "problem"),
    [
        ("", "topic name is empty"),
        (".", "topic name '.' is not allowed"),
        ("..", "topic name '..' is not allowed"),
        ("x" * (MAX_TOPIC_NAME_LENGTH + 1), f"is {MAX_TOPIC_NAME_LENGTH + 1} characters, more than 249"),
        ("orders/0", "has characters Kafka does not allow"),
        ("ordérs", "has characters Kafka does not allow"),
        (7, "topic name 7 is not a string"),
    ],
)
def test_a_topic_name_kafka_refuses_is_refused_naming_the_problem(topic: object, problem: str) -> None:
    with pytest.raises(InvalidTopicError, match=problem):
        validate_topic_name(topic)  # type: ignore[arg-type]


def test_every_name_kafka_accepts_is_accepted_as_it_is() -> None:
    for topic in ("orders", "orders.v1", "__consumer_offsets", "a-b_c.d", "...", "x" * MAX_TOPIC_NAME_LENGTH):
        assert validate_topic_name(topic) == topic


def test_kafka_s_internal_topics_and_only_those_are_internal() -> None:
    assert all(is_internal_topic(t) for t in ("__consumer_offsets", "__transaction_state", "__share_group_state"))
    assert not any(is_internal_topic(t) for t in ("orders", "_consumer_offsets", "__consumer_offsets-0"))


def test_partitions_name_their_directory_and_their_topic_id() -> None:
    tp = TopicPartition("orders.v1", 12)
    assert str(tp) == "orders.v1-12" and TopicPartition.from_dir_name(str(tp)) == tp
    assert TopicPartition.from_dir_name("my-topic-3") == TopicPartition("my-topic", 3)  # the last '-' splits
    tip = TopicIdPartition("AbCdEfGhIjKlMnOpQr_-12", tp)
    assert (tip.topic, tip.partition, str(tip)) == ("orders.v1", 12, "orders.v1-12(AbCdEfGhIjKlMnOpQr_-12)")
    assert sorted([TopicPartition("b", 0), TopicPartition("a", 10), TopicPartition("a", 2)]) == [
        TopicPartition("a", 2),
        TopicPartition("a", 10),
        TopicPartition("b", 0),
    ]
    with pytest.raises(InvalidTopicError, match="partition -1 of 'orders' is negative"):
        TopicPartition("orders", -1)
