"""A typed export from a real broker: confluent-kafka's Producer with its AvroSerializer writes
through the real registry to Kafka 4.4.0, the platform tiers the closed segments and exports them,
and every tiered record is in the typed table, read back as Confluent's AvroDeserializer reads what
a real consumer gets from the broker, or, when it was not Avro, in the dead-letter table with its
bytes, once."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from typing import Any

import duckdb
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.export.proto_files import Proto, message_class, payment_file
from tests.export.proto_files import payment as proto_payment
from tests.export.registry_server import RegistryServer
from tests.export.spark_reader import spark_rows
from tests.export.support import export_killed_at_commit, sqlite_catalog, table_of, wait_until_table_is_free
from tests.export.typed_support import (
    CART,
    CART_V2,
    PAYMENT,
    TIP_V1,
    TIP_V2,
    TIP_V3,
    Avro,
    Json,
    cart,
    dead_letters_of,
    payment,
    row_columns,
    rows_by_offset,
    rows_by_offset_alone,
    tip,
    value_of,
    with_fields,
)
from tests.real_kafka.cluster import KafkaCluster
from tests.real_kafka.support import BesideKafka
from tiering_core.config import load_config
from tiering_core.export import TableName, load_catalog, open_table
from tiering_core.export.registry import WireValue

TOPIC = "typed-payments"
RECORDS = 400


def produce(cluster: KafkaCluster, registry: RegistryServer) -> None:
    """``RECORDS`` Avro values through Confluent's serializer, every 50th a value that is not."""
    serialize = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(PAYMENT))
    ctx = SerializationContext(TOPIC, MessageField.VALUE)
    send(
        cluster,
        TOPIC,
        [f"not avro {i}".encode() if i % 50 == 7 else serialize(payment(i), ctx) for i in range(RECORDS)],
    )


def send(cluster: KafkaCluster, topic: str, values: list[bytes], batch_size: int = 4096) -> None:
    """``values`` produced in order to the topic's partition 0, keyed ``k<i>`` from 0 on."""
    # batches well below the segment size: the broker refuses a batch larger than a segment
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5, "batch.size": batch_size}
    )
    failed: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failed.append(str(error))

    for i, value in enumerate(values):
        producer.produce(topic, key=f"k{i}".encode(), value=value, partition=0, on_delivery=delivered)
    assert producer.flush(60) == 0 and failed == []


def consumed(cluster: KafkaCluster, topic: str = TOPIC, records: int = RECORDS) -> dict[int, bytes]:
    """What a real consumer reads of the partition, value by offset."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"{topic}-check",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    found: dict[int, bytes] = {}
    try:
        for _ in range(600):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                found[message.offset()] = message.value()
            if len(found) == records:
                break
    finally:
        consumer.close()
    assert len(found) == records
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


TIPS, PAYMENTS, CARTS = "typed-tips", "typed-payments-proto", "typed-carts"
SEGMENT_BYTES = 2048
#: The schema each of the Avro topic's good values is written with: three versions, then the first.
TIP_WRITERS = [TIP_V1] * 3 + [TIP_V2] * 3 + [TIP_V3] * 3 + [TIP_V1]
UNKNOWN_ID = 2**31 - 3


def with_damage(good: list[bytes]) -> tuple[list[bytes], int]:
    """``good`` with a value of a schema id the registry never gave after its second and a corrupt
    one (the header and two bytes of a payload) after its fifth, then ``good`` again until twice a
    segment's bytes follow them, so that every value before is in a closed segment; and how many
    values come before that filler."""
    unknown_id = b"\x00" + UNKNOWN_ID.to_bytes(4, "big") + good[0][5:]
    values = [*good[:2], unknown_id, *good[2:5], good[1][:7], *good[5:]]
    damaged = len(values)
    while sum(map(len, values[damaged:])) < 2 * SEGMENT_BYTES:
        values += good
    return values, damaged


def as_read_by_pyiceberg(value: Any, like: Any) -> Any:
    """A value another reader gave, in the Python form pyiceberg gives ``like``: a uuid from its
    16 bytes or its text, a map's dict as its (key, value) pairs, nested values likewise."""
    if isinstance(like, uuid.UUID) and isinstance(value, bytes | str):
        return uuid.UUID(bytes=value) if isinstance(value, bytes) else uuid.UUID(value)
    if isinstance(like, dict) and isinstance(value, dict):
        return {k: as_read_by_pyiceberg(value.get(k), like[k]) for k in like} | {
            k: v for k, v in value.items() if k not in like
        }
    if isinstance(like, list) and isinstance(value, dict):
        value = list(value.items())
    if isinstance(like, list) and isinstance(value, list) and len(like) == len(value):
        return [as_read_by_pyiceberg(v, w) for v, w in zip(value, like, strict=True)]
    if isinstance(like, tuple) and isinstance(value, tuple | list) and len(like) == len(value):
        return tuple(as_read_by_pyiceberg(v, w) for v, w in zip(value, like, strict=True))
    return value


def duckdb_rows(table: Any) -> dict[int, dict[str, Any]]:
    """The table's rows as DuckDB reads its current snapshot's data files (by column name, files of
    older schemas beside newer ones), by offset."""
    files = [task.file.file_path.removeprefix("file://") for task in table.scan().plan_files()]
    got = duckdb.sql("select * from read_parquet($files, union_by_name = true)", params={"files": files})
    return {row["offset"]: row for row in got.to_arrow_table().to_pylist()}


def test_three_formats_evolve_dead_letter_and_read_alike_in_pyiceberg_duckdb_and_spark(
    kafka: KafkaCluster, beside: Callable[..., BesideKafka], schema_registry: RegistryServer, spark: Any
) -> None:
    """Avro across three schema versions, Protobuf and JSON Schema across two, each produced to the
    broker by Confluent's serializer with an unknown schema id and a corrupt payload among them:
    each tiered record is a row equal to the deserializer's value, read alike by pyiceberg, DuckDB
    and Spark, or a dead letter with its reason; a JSON Schema export killed with SIGKILL between
    its commits and run again holds each offset once across its two tables; an incompatible Avro
    change then stops that topic's export with nothing written."""
    avro, proto, js = Avro(schema_registry, TIPS), Proto(schema_registry, PAYMENTS), Json(schema_registry, CARTS)
    v1, v2 = (message_class(payment_file(v), name="shop.Payment") for v in (1, 2))
    good = {
        TIPS: avro.serialize(TIP_V1, [tip(i, 1) for i in range(3)])
        + avro.serialize(TIP_V2, [tip(i, 2) for i in range(3, 6)])
        + avro.serialize(TIP_V3, [tip(i, 3) for i in range(6, 9)])
        + avro.serialize(TIP_V1, [tip(9, 1)]),  # an old producer after the newest
        PAYMENTS: proto.serialize(v1, [proto_payment(v1, i) for i in range(4)])
        + proto.serialize(v2, [proto_payment(v2, i, 2) for i in range(4, 8)]),
        CARTS: js.serialize(CART, [cart(i) for i in range(4)])
        + js.serialize(CART_V2, [cart(i, 2) for i in range(4, 8)]),
    }
    writers = {
        TIPS: {WireValue.parse(v).schema_id: s for v, s in zip(good[TIPS], TIP_WRITERS, strict=True)},
        PAYMENTS: {WireValue.parse(good[PAYMENTS][0]).schema_id: v1, WireValue.parse(good[PAYMENTS][4]).schema_id: v2},
        CARTS: {WireValue.parse(good[CARTS][0]).schema_id: CART, WireValue.parse(good[CARTS][4]).schema_id: CART_V2},
    }
    assert [len(w) for w in writers.values()] == [3, 2, 2]
    produced: dict[str, int] = {}
    damaged: dict[str, int] = {}
    for topic, values in good.items():
        kafka.create_topic(topic, replication_factor=1, segment_bytes=SEGMENT_BYTES)
        to_send, damaged[topic] = with_damage(values)
        send(kafka, topic, to_send, batch_size=512)
        produced[topic] = len(to_send)
    platform = beside(kafka, 1)
    platform.document["metadata"]["lease_ms"] = 5_000  # how long the killed export's table lease outlives it
    platform.document["export"] = {
        "catalog": sqlite_catalog(platform.root),
        "topics": {TIPS: {"value": "avro"}, PAYMENTS: {"value": "protobuf"}, CARTS: {"value": "json_schema"}},
        "schema_registry": {"url": schema_registry.url},
    }
    platform.write()
    tiered: dict[str, int] = {}
    for topic in good:
        kafka.wait_until(
            f"{topic}-0 checkpointed", lambda t=topic: (platform.status(t)["high_watermark"] or 0) >= produced[t]
        )
        platform.ok("copy", "--topic", topic)
        tiered[topic] = platform.status(topic)["highest_copied_offset"]
        assert damaged[topic] <= tiered[topic] < produced[topic] - 1  # the damage tiered, the active segment not

    for topic in (TIPS, PAYMENTS):
        summary = platform.ok("export", "--topic", topic, "--json").json()
        assert (summary[0] if isinstance(summary, list) else summary)["failed"] == []
    export_killed_at_commit(platform.config_path, CARTS, platform.root / "killed", commit=2)
    with platform.context() as ctx:
        killed = set(rows_by_offset_alone(table_of(ctx, CARTS))) | set(dead_letters_of(ctx, CARTS))
    assert killed and len(killed) < tiered[CARTS] + 1  # a commit in, the rest not
    wait_until_table_is_free(platform, f"kafka.{CARTS}")
    platform.ok("export", "--topic", CARTS)

    for topic in good:
        sent = consumed(kafka, topic, produced[topic])
        with platform.context() as ctx:
            table = table_of(ctx, topic)
            rows = rows_by_offset_alone(table)  # asserts each offset once
            dead = dead_letters_of(ctx, topic)
            by_duckdb = duckdb_rows(table)
            by_spark = {row["offset"]: row for row in spark_rows(spark, table)}
        assert set(rows) | set(dead) == set(range(tiered[topic] + 1)) and not set(rows) & set(dead), topic
        assert {sent[o] for o in dead} == {sent[2], sent[6]} and len(dead) == 2, topic
        assert f"schema id {UNKNOWN_ID} is unknown" in dead[2]["reason"] and dead[2]["schema_id"] == UNKNOWN_ID
        assert dead[6]["reason"] and dead[6]["value"] == sent[6]
        for offset, row in rows.items():
            data = sent[offset]
            writer = writers[topic][WireValue.parse(data).schema_id]
            assert row["value_schema_id"] == WireValue.parse(data).schema_id and row["key"] == f"k{offset}".encode()
            if topic == TIPS:
                assert value_of(row, writer) == avro.deserialize(data), (topic, offset)
            elif topic == PAYMENTS:
                want = proto.deserialize(writer, data)
                assert {k: row[k] for k in want} == want, (topic, offset)
            else:
                want = js.deserialize(data, writer)
                assert row_columns({k: row[k] for k in want}) == want, (topic, offset)
        assert set(by_duckdb) == set(by_spark) == set(rows), topic
        for offset, row in rows.items():
            assert as_read_by_pyiceberg(by_duckdb[offset], row) == row, (topic, offset, "duckdb")
            assert as_read_by_pyiceberg(by_spark[offset], row) == row, (topic, offset, "spark")
    with platform.context() as ctx:
        assert json.loads(table_of(ctx, TIPS).properties["tiering.value-schema-ids"]) == list(writers[TIPS])

    # an incompatible change: the Avro topic's export stops before it, naming both schema ids
    bad = avro.serialize(with_fields(TIP_V1, amount="string"), [{**tip(20, 1), "amount": "x"}])[0]
    filler = with_damage(good[TIPS])[0][damaged[TIPS] :]
    send(kafka, TIPS, [bad, *filler], batch_size=512)
    kafka.wait_until(
        f"{TIPS}-0 checkpointed", lambda: platform.status(TIPS)["high_watermark"] >= produced[TIPS] + 1 + len(filler)
    )
    platform.ok("copy", "--topic", TIPS)
    assert platform.status(TIPS)["highest_copied_offset"] >= produced[TIPS]  # the incompatible value tiered
    old, new = WireValue.parse(good[TIPS][6]).schema_id, WireValue.parse(bad).schema_id  # the newest's columns
    for _run in range(2):  # a rerun stops at the same place
        refused = platform.run("export", "--topic", TIPS)
        assert refused.code != 0 and f"value schema id {new} cannot evolve the table's columns" in refused.stderr
        assert f"(from schema id {old})" in refused.stderr and "amount changes from double to string" in refused.stderr
        found = re.search(r"\(offsets (\d+)-\d+", refused.stderr)
        assert found is not None and int(found.group(1)) <= produced[TIPS], refused.stderr
        with platform.context() as ctx:
            exported = set(rows_by_offset_alone(table_of(ctx, TIPS))) | set(dead_letters_of(ctx, TIPS))
        assert exported == set(range(int(found.group(1)))), "the segments before it in, nothing of it"
