"""A typed export from a real broker: confluent-kafka's Producer with its AvroSerializer writes
through the real registry to Kafka 4.4.0, the platform tiers the closed segments and exports them,
and every tiered record is in the typed table, read back as Confluent's AvroDeserializer reads what
a real consumer gets from the broker, or, when it was not Avro, in the dead-letter table with its
bytes, once."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.export.registry_server import RegistryServer
from tests.export.support import sqlite_catalog
from tests.export.typed_support import PAYMENT, Avro, payment, rows_by_offset, value_of
from tests.real_kafka.cluster import KafkaCluster
from tests.real_kafka.support import BesideKafka
from tiering_core.config import load_config
from tiering_core.export import TableName, load_catalog, open_table

TOPIC = "typed-payments"
RECORDS = 400


def produce(cluster: KafkaCluster, registry: RegistryServer) -> None:
    """``RECORDS`` Avro values through Confluent's serializer, every 50th a value that is not."""
    serialize = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(PAYMENT))
    ctx = SerializationContext(TOPIC, MessageField.VALUE)
    # batches well below the segment size: the broker refuses a batch larger than a segment
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5, "batch.size": 4096}
    )
    failed: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failed.append(str(error))

    for i in range(RECORDS):
        value = f"not avro {i}".encode() if i % 50 == 7 else serialize(payment(i), ctx)
        producer.produce(TOPIC, key=f"k{i}".encode(), value=value, on_delivery=delivered)
    assert producer.flush(60) == 0 and failed == []


def consumed(cluster: KafkaCluster) -> dict[int, bytes]:
    """What a real consumer reads of the partition, value by offset."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "typed-export-check",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([TOPIC])
    found: dict[int, bytes] = {}
    try:
        for _ in range(600):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                found[message.offset()] = message.value()
            if len(found) == RECORDS:
                break
    finally:
        consumer.close()
    assert len(found) == RECORDS
    return found


def table(beside: BesideKafka, name: str) -> Any:
    config = load_config(beside.config_path)
    found = open_table(load_catalog(config), TableName("kafka", name), create=False)
    assert found is not None
    return found


def test_a_typed_export_of_what_confluent_produced_equals_what_a_consumer_reads(
    kafka: KafkaCluster, beside: Callable[..., BesideKafka], schema_registry: RegistryServer
) -> None:
    kafka.create_topic(TOPIC, replication_factor=1, segment_bytes=16 * 1024)
    produce(kafka, schema_registry)
    platform = beside(kafka, 1)
    platform.document["export"] = {
        "catalog": sqlite_catalog(platform.root),
        "topics": {TOPIC: {"value": "avro"}},
        "schema_registry": {"url": schema_registry.url},
    }
    platform.write()
    seen: dict[str, Any] = {}

    def checkpointed() -> bool:  # the broker checkpoints its high watermark every second
        seen.update(platform.status(TOPIC))
        return (seen["high_watermark"] or 0) >= RECORDS

    try:
        kafka.wait_until(f"{TOPIC}-0 checkpointed up to {RECORDS}", checkpointed, timeout=30)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the status last seen: {seen}") from None
    platform.ok("copy", "--topic", TOPIC)
    tiered_end = platform.status(TOPIC)["highest_copied_offset"]
    assert tiered_end is not None and 0 < tiered_end < RECORDS - 1  # several segments, the active one not tiered
    summary = platform.ok("export", "--topic", TOPIC, "--json").json()
    assert summary[0]["failed"] == [] if isinstance(summary, list) else summary["failed"] == []

    sent = consumed(kafka)
    avro = Avro(schema_registry, TOPIC)
    rows = {o: row for (_p, o), row in rows_by_offset(table(platform, TOPIC)).items()}
    dead = {o: row for (_p, o), row in rows_by_offset(table(platform, f"{TOPIC}_dead_letters")).items()}
    assert set(rows) | set(dead) == set(range(tiered_end + 1)) and not set(rows) & set(dead)
    assert sorted(dead) == [o for o in range(tiered_end + 1) if o % 50 == 7]
    for offset, row in rows.items():
        assert value_of(row, PAYMENT) == avro.deserialize(sent[offset]), offset
        assert row["key"] == f"k{offset}".encode()
    for offset, row in dead.items():
        assert row["value"] == sent[offset] and "magic byte" in row["reason"]
    # up to date: a second export commits nothing
    again = platform.ok("export", "--topic", TOPIC, "--json").json()
    assert (again[0] if isinstance(again, list) else again)["snapshots"] == []
