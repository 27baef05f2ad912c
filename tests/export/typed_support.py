"""Typed exports' tiers: values written by Confluent's own AvroSerializer through the real
registry, tiered by the platform's copy, and the rows read back compared with what Confluent's
AvroDeserializer makes of the same bytes."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from decimal import Decimal
from typing import Any

import yaml
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.engine_support import TieringEnv
from tests.export.registry_server import RegistryServer
from tests.export.support import sqlite_catalog

#: A value of every kind the table maps: nested records, arrays, maps, enums, unions with null,
#: timestamps, dates, decimals, uuids.
PAYMENT: dict[str, Any] = {
    "type": "record",
    "name": "Payment",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "amount", "type": "float"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["NEW", "PAID", "VOID"]}},
        {
            "name": "customer",
            "type": {
                "type": "record",
                "name": "Customer",
                "fields": [
                    {"name": "name", "type": "string"},
                    {"name": "tags", "type": {"type": "array", "items": "string"}},
                    {
                        "name": "address",
                        "type": {
                            "type": "record",
                            "name": "Address",
                            "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": "int"}],
                        },
                    },
                ],
            },
        },
        {"name": "lines", "type": {"type": "map", "values": "long"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}},
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
    ],
}


CART: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Cart",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "total": {"type": "number"},
        "note": {"type": ["string", "null"]},
        "lines": {
            "type": "array",
            "items": {"type": "object", "properties": {"sku": {"type": "string"}, "n": {"type": "integer"}}},
        },
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
        "at": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "ref": {"type": "string", "format": "uuid"},
    },
    "required": ["id", "total", "lines", "at", "day", "ref"],
}
#: A compatible change: a property added that is not required.
CART_V2 = {**CART, "properties": {**CART["properties"], "coupon": {"type": "string"}}}


def cart(i: int, version: int = 1) -> dict[str, Any]:
    value: dict[str, Any] = {
        "id": 2**40 + i,
        "total": i + 0.5,
        "lines": [{"sku": f"s{j}", "n": j} for j in range(i % 3)],
        "counts": {"a": i} if i % 2 else {},
        "at": f"2026-11-29T1{i % 10}:00:00.{i:03d}+02:00",
        "day": f"2026-02-{1 + i % 28:02d}",
        "ref": str(uuid.UUID(int=i + 7)),
    }
    if i % 3:
        value["note"] = None if i % 3 == 1 else f"n{i}"
    if version == 2 and i % 2:
        value["coupon"] = f"c{i}"
    return value


def with_fields(schema: dict[str, Any], *fields: dict[str, Any], **types: Any) -> dict[str, Any]:
    """``schema`` with ``fields`` added and the named fields' types replaced."""
    changed = [{**f, "type": types[f["name"]]} if f["name"] in types else f for f in schema["fields"]]
    return {**schema, "fields": [*changed, *fields]}


def payment(i: int) -> dict[str, Any]:
    base = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
    return {
        "id": i,
        "amount": 0.5 * i,
        "note": None if i % 3 == 0 else f"note é {i}",
        "state": ["NEW", "PAID", "VOID"][i % 3],
        "customer": {
            "name": f"c{i}",
            "tags": [f"t{j}" for j in range(i % 4)],
            "address": {"city": f"city{i % 5}", "zip": 1000 + i},
        },
        "lines": {"sku-a": i, "sku-b": -i} if i % 2 else {},
        "day": dt.date(2026, 1, 1) + dt.timedelta(days=i),
        "at_ms": base + dt.timedelta(milliseconds=i),
        "at_us": base + dt.timedelta(microseconds=i),
        "price": Decimal(f"{i}.125"),
        "ref": str(uuid.UUID(int=i + 1)),
    }


TIP_V1: dict[str, Any] = {
    "type": "record",
    "name": "Tip",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "amount", "type": "float"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "customer", "type": {"type": "record", "name": "Who", "fields": [{"name": "name", "type": "string"}]}},
    ],
}
#: Compatible changes: a field with a default and an optional one added, then int and float widened.
TIP_V2 = with_fields(
    TIP_V1,
    {"name": "currency", "type": "string", "default": "EUR"},
    {"name": "rate", "type": ["null", "double"], "default": None},
)
TIP_V3 = with_fields(TIP_V2, id="long", amount="double")


def tip(i: int, version: int) -> dict[str, Any]:
    value: dict[str, Any] = {
        "id": i,
        "amount": i + 0.25,
        "note": None if i % 2 else f"n{i}",
        "customer": {"name": f"c{i}"},
    }
    if version >= 2:
        value |= {"currency": "USD" if i % 2 else "EUR", "rate": None if i % 3 else i / 7}
    if version >= 3:
        value["id"] = 2**40 + i  # needs the long
    return value


class Avro:
    """Confluent's serializer and deserializer of one topic's values, on the real registry."""

    def __init__(self, registry: RegistryServer, topic: str, conf: dict[str, Any] | None = None) -> None:
        self.client = SchemaRegistryClient({"url": registry.url})
        self.ctx = SerializationContext(topic, MessageField.VALUE)
        self.deserializer = AvroDeserializer(self.client)
        self.conf = {"auto.register.schemas": True, **(conf or {})}

    def serialize(self, schema: dict[str, Any], values: list[dict[str, Any]]) -> list[bytes]:
        serializer = AvroSerializer(self.client, json.dumps(schema), conf=self.conf)
        out = [serializer(v, self.ctx) for v in values]
        assert all(o is not None for o in out)
        return [bytes(o) for o in out if o is not None]

    def serialize_values(self, schema: Any, values: list[Any]) -> list[bytes]:
        """``values`` of any schema (a primitive's name, such as ``"long"``)."""
        serializer = AvroSerializer(self.client, json.dumps(schema), conf={"auto.register.schemas": True})
        return [bytes(serializer(v, self.ctx) or b"") for v in values]

    def deserialize(self, data: bytes) -> dict[str, Any]:
        value = self.deserializer(data, self.ctx)
        assert isinstance(value, dict)
        return plain(value)


class Json:
    """Confluent's JSON Schema serializer and deserializer of one topic's values, on the real
    registry."""

    def __init__(self, registry: RegistryServer, topic: str, part: str = MessageField.VALUE) -> None:
        self.client = SchemaRegistryClient({"url": registry.url})
        self.ctx = SerializationContext(topic, part)
        self.deserializer = JSONDeserializer(None, schema_registry_client=self.client)

    def serialize(self, schema: dict[str, Any], values: list[Any]) -> list[bytes]:
        serializer = JSONSerializer(json.dumps(schema), self.client, conf={"auto.register.schemas": True})
        return [bytes(serializer(v, self.ctx) or b"") for v in values]

    def deserialize(self, data: bytes, schema: dict[str, Any]) -> Any:
        """The deserializer's value in the Python values a row holds for ``schema`` (``json_columns``)."""
        return json_columns(self.deserializer(data, self.ctx), schema)


def plain(value: Any) -> Any:
    """A value in the plain Python types a table's rows read back as (maps as dicts, uuids as
    strings)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {k: plain(v) for k, v in value}
        return [plain(v) for v in value]
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def json_columns(value: Any, schema: dict[str, Any]) -> Any:
    """A value as Confluent's JSONDeserializer gives it, in the Python values a typed table's row
    holds for ``schema`` (local ``$ref``\\ s followed): dates and instants parsed (an instant equals
    itself at any UTC offset), a property left out null, a map as its (key, value) pairs."""
    return _json_columns(value, schema, schema)


def _json_columns(value: Any, schema: dict[str, Any], root: dict[str, Any]) -> Any:
    if "$ref" in schema:
        node: Any = root
        for part in schema["$ref"].lstrip("#").strip("/").split("/"):
            node = node[part] if part else node
        return _json_columns(value, node, root)
    for combinator in ("anyOf", "oneOf"):
        if combinator in schema:
            kept = [b for b in schema[combinator] if b.get("type") != "null"]
            return _json_columns(value, kept[0], root)
    if value is None:
        return None
    fmt = schema.get("format")
    if fmt == "date":
        return dt.date.fromisoformat(value)
    if fmt == "date-time":
        return dt.datetime.fromisoformat(value)
    if "properties" in schema:
        return {k: _json_columns(value.get(k), sub, root) for k, sub in schema["properties"].items()}
    if isinstance(schema.get("additionalProperties"), dict):
        return [(k, _json_columns(v, schema["additionalProperties"], root)) for k, v in value.items()]
    if schema.get("type") == "array" or (isinstance(schema.get("type"), list) and "array" in schema["type"]):
        return [_json_columns(v, schema["items"], root) for v in value]
    if schema.get("type") == "number" or (isinstance(schema.get("type"), list) and "number" in schema["type"]):
        return float(value)
    return value


def row_columns(value: Any) -> Any:
    """A typed table's row (or a part of it) with its uuids as their strings, as JSON holds them."""
    if isinstance(value, dict):
        return {k: row_columns(v) for k, v in value.items()}
    if isinstance(value, list):
        return [row_columns(v) for v in value]
    if isinstance(value, tuple):
        return tuple(row_columns(v) for v in value)
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def with_typed_export(env: TieringEnv, root: Any, registry: RegistryServer, **topics: dict[str, Any]) -> None:
    """An ``export`` section with ``topics`` (``export.topics``) and the registry."""
    doc = yaml.safe_load(env.config_path.read_text())
    doc["export"] = {"catalog": sqlite_catalog(root), "topics": topics, "schema_registry": {"url": registry.url}}
    env.config_path.write_text(yaml.safe_dump(doc))


def rows_by_offset(table: Any) -> dict[tuple[int, int], dict[str, Any]]:
    """The table's rows by (partition, offset), each offset at most once (asserted)."""
    table.refresh()
    got = table.scan().to_arrow().to_pylist() if table.current_snapshot() is not None else []
    found: dict[tuple[int, int], dict[str, Any]] = {}
    for row in got:
        key = (row["partition"], row["offset"])
        assert key not in found, f"offset {key} twice in {table.name()}"
        found[key] = row
    return found


def rows_by_offset_alone(table: Any) -> dict[int, dict[str, Any]]:
    """The rows of a one-partition topic's table by offset, each at most once (asserted)."""
    return {offset: row for (_partition, offset), row in rows_by_offset(table).items()}


def value_of(row: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """The value fields of ``schema`` out of a table row, as the deserializer gives them (a map's
    (key, value) pairs as a dict)."""
    found = {}
    for f in schema["fields"]:
        is_map = isinstance(f["type"], dict) and f["type"].get("type") == "map"
        found[f["name"]] = dict(row[f["name"]]) if is_map else plain(row[f["name"]])
    return found


def dead_letters_of(ctx: Any, topic: str) -> dict[int, dict[str, Any]]:
    """The topic's dead letters by offset (none without a dead-letter table)."""
    from tiering_core.export import TableName, load_catalog, open_table

    table = open_table(load_catalog(ctx.config), TableName("kafka", f"{topic}_dead_letters"), create=False)
    return {} if table is None else rows_by_offset_alone(table)


def iceberg_types(table: Any) -> dict[str, str]:
    """The table's columns' Iceberg types, as Iceberg prints them (field ids left out)."""
    noise = re.compile(r"\d+: | \(required\)|required |optional ")
    return {f.name: noise.sub("", str(f.field_type)) for f in table.schema().fields}


def tier(
    env: TieringEnv, topic: str, segments: list[list[bytes | None]], partition: int = 0
) -> dict[int, bytes | None]:
    """Each list of values as one closed segment of keyed records (and an active segment after
    them, never tiered), tiered by the platform's copy; the values by offset."""
    keyed = [[(f"k{i}".encode(), v) for i, v in enumerate(values)] for values in segments]
    return {offset: value for offset, (_key, value) in tier_records(env, topic, keyed, partition).items()}


def tier_records(
    env: TieringEnv, topic: str, segments: list[list[tuple[bytes | None, bytes | None]]], partition: int = 0
) -> dict[int, tuple[bytes | None, bytes | None]]:
    """Each list of (key, value) as one closed segment (and an active segment after them, never
    tiered), tiered by the platform's copy; the records by offset."""
    from tiering_core.runs.copy import run_copy

    w = env.writer(topic, partition)
    sent: dict[int, tuple[bytes | None, bytes | None]] = {}
    for records in segments:
        first, _last = w.append(records)
        sent.update({first + i: r for i, r in enumerate(records)})
        w.roll()
    w.append([(b"active", b"never tiered")])
    w.set_high_watermark()
    with env.context() as ctx:
        run_copy(ctx, w.tp)
    return sent
