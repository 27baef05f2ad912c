"""Avro values for the compiled decoder's tests: a schema of every type the table maps, values
generated for any schema from a seeded random, fastavro's encoding of them, and fastavro's own
decode of a batch to compare with."""

from __future__ import annotations

import datetime as dt
import io
import json
import random
import uuid
from decimal import Context, Decimal
from typing import Any

import fastavro
import numpy as np

from tiering_core.export.avro import AvroColumns
from tiering_core.export.avro_program import MAX_MICROS, MIN_MICROS
from tiering_core.export.registry import UndecodableValue

STATE = {"type": "enum", "name": "State", "symbols": ["NEW", "PAID", "VOID"]}
LINE = {
    "type": "record",
    "name": "Line",
    "fields": [{"name": "sku", "type": "string"}, {"name": "qty", "type": ["null", "int"]}],
}
EVERY_TYPE: dict[str, Any] = {
    "type": "record",
    "name": "Every",
    "namespace": "test.v1",
    "fields": [
        {"name": "flag", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "s", "type": "string"},
        {"name": "b", "type": "bytes"},
        {"name": "state", "type": STATE},
        {"name": "was", "type": ["State", "null"]},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 3}},
        {"name": "maybe_digest", "type": ["null", "Digest"]},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "clock_ms", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "clock_us", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local_ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "local_us", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}},
        {"name": "wide", "type": {"type": "bytes", "logicalType": "decimal", "precision": 38, "scale": 10}},
        {
            "name": "fixed_price",
            "type": {
                "type": "fixed",
                "name": "Price",
                "size": 9,
                "logicalType": "decimal",
                "precision": 20,
                "scale": 2,
            },
        },
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "count", "type": ["long", "null"]},
        {"name": "only", "type": ["double"]},
        {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
        {
            "name": "customer",
            "type": {
                "type": "record",
                "name": "Customer",
                "fields": [
                    {"name": "name", "type": "string"},
                    {"name": "tags", "type": {"type": "array", "items": "string"}},
                    {
                        "name": "home",
                        "type": [
                            "null",
                            {
                                "type": "record",
                                "name": "Home",
                                "fields": [
                                    {"name": "city", "type": "string"},
                                    {"name": "zip", "type": ["null", "long"]},
                                ],
                            },
                        ],
                    },
                ],
            },
        },
        {"name": "lines", "type": {"type": "array", "items": LINE}},
        {"name": "more_lines", "type": ["null", {"type": "array", "items": "Line"}]},
        {"name": "totals", "type": {"type": "map", "values": "long"}},
        {"name": "by_sku", "type": ["null", {"type": "map", "values": "Line"}]},
        {"name": "grid", "type": {"type": "array", "items": {"type": "array", "items": ["null", "double"]}}},
        {"name": "groups", "type": {"type": "map", "values": {"type": "array", "items": "State"}}},
    ],
}
TEXT = "aZ é€😀\x00"


def named_types(schema: Any, named: dict[str, Any]) -> dict[str, Any]:
    """The named types ``schema`` defines, by name."""
    if isinstance(schema, list):
        for branch in schema:
            named_types(branch, named)
    elif isinstance(schema, dict):
        if "name" in schema and "type" in schema and schema["type"] in ("record", "enum", "fixed"):
            named[schema["name"]] = schema
        for key in ("type", "items", "values"):
            named_types(schema.get(key), named)
        for f in schema.get("fields", ()):
            named_types(f["type"], named)
    return named


def generate(schema: Any, rng: random.Random, named: dict[str, Any] | None = None) -> Any:
    """A random value of ``schema`` (parsed JSON) in the Python types fastavro writes."""
    named = named_types(schema, {}) if named is None else named
    if isinstance(schema, list):
        return generate(rng.choice(schema), rng, named)
    if isinstance(schema, str):
        return _primitive(schema, rng) if schema in _PRIMITIVES else generate(named[schema], rng, named)
    kind, logical = schema["type"], schema.get("logicalType")
    if logical is not None:
        return _logical(schema, rng)
    if kind == "record":
        return {f["name"]: generate(f["type"], rng, named) for f in schema["fields"]}
    if kind == "enum":
        return rng.choice(schema["symbols"])
    if kind == "fixed":
        return rng.randbytes(schema["size"])
    if kind == "array":
        return [generate(schema["items"], rng, named) for _ in range(rng.choice([0, 1, 2, 5]))]
    if kind == "map":
        return {
            f"k{rng.randint(0, 9)}{TEXT[rng.randint(0, 6)]}": generate(schema["values"], rng, named)
            for _ in range(rng.randint(0, 4))
        }
    return generate(kind, rng, named)


_PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "string", "bytes")


def _primitive(kind: str, rng: random.Random) -> Any:
    if kind == "null":
        return None
    if kind == "boolean":
        return rng.random() < 0.5
    if kind in ("int", "long"):
        bits = 31 if kind == "int" else 63
        return rng.choice(
            [0, -1, 1, 2**bits - 1, -(2**bits), rng.randint(-(2**bits), 2**bits - 1), rng.randint(-300, 300)]
        )
    if kind in ("float", "double"):
        return rng.choice([0.0, -0.0, 1.5, -2.25e30, rng.uniform(-1e6, 1e6), float("inf")])
    if kind == "string":
        return "".join(rng.choice(TEXT) for _ in range(rng.choice([0, 1, 3, 20])))
    return rng.randbytes(rng.choice([0, 1, 7]))


def _logical(schema: dict[str, Any], rng: random.Random) -> Any:
    logical = schema["logicalType"]
    if logical == "date":
        return dt.date.fromordinal(rng.choice([1, 719163, 3652059, rng.randint(1, 3652059)]))
    if logical in ("time-millis", "time-micros"):
        micros = rng.randint(0, 86_400_000_000 - 1)
        micros -= micros % 1000 if logical == "time-millis" else 0
        return (dt.datetime.min + dt.timedelta(microseconds=micros)).time()
    if logical == "decimal":
        precision, scale = schema["precision"], schema.get("scale", 0)
        top = 10**precision - 1
        return Decimal(rng.choice([0, top, -top, -1, rng.randint(-top, top)])).scaleb(-scale, Context(prec=40))
    if logical == "uuid":
        return str(uuid.UUID(int=rng.getrandbits(128)))
    micros = rng.choice([MIN_MICROS, MAX_MICROS, 0, rng.randint(MIN_MICROS, MAX_MICROS)])
    if logical.endswith("millis"):
        micros = micros // 1000 * 1000 if micros >= 0 else -(-micros // 1000 * 1000)
    at = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=micros)
    return at if logical.startswith("local") else at.replace(tzinfo=dt.UTC)


def encode(schema: Any, values: list[Any]) -> list[bytes]:
    parsed = fastavro.parse_schema(schema)
    out = []
    for value in values:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, value)
        out.append(buffer.getvalue())
    return out


def batch_of(payloads: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    sizes = np.array([len(p) for p in payloads], np.int64)
    ends = np.cumsum(sizes)
    return np.frombuffer(b"".join(payloads) or b"\x00", np.uint8), ends - sizes, ends


def fastavro_reads(columns: AvroColumns, payloads: list[bytes]) -> tuple[list[Any], list[bool]]:
    """fastavro's decode of each payload: the values of those it reads, and which it reads."""
    values, ok = [], []
    for payload in payloads:
        try:
            values.append(columns.decode(payload))
            ok.append(True)
        except UndecodableValue:
            ok.append(False)
    return values, ok


def same_as_fastavro(schema: Any, payloads: list[bytes]) -> AvroColumns:
    columns = AvroColumns.of(7, json.dumps(schema))
    assert columns.program is not None
    batch = columns.decode_batch(*batch_of(payloads))
    want, fastavro_ok = fastavro_reads(columns, payloads)
    assert batch.array.type.equals(columns.arrow_type)
    batch.array.validate(full=True)
    assert batch.array.equals(columns.to_arrow(want))
    assert batch.ok.tolist() == fastavro_ok
    return columns


def zigzag(n: int) -> bytes:
    z, out = (n << 1) ^ (n >> 63), bytearray()
    z &= (1 << 64) - 1
    while z >= 0x80:
        out.append(z & 0x7F | 0x80)
        z >>= 7
    return bytes([*out, z])
