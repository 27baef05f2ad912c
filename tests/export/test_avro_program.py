"""The compiled Avro decoder reads what fastavro reads: values generated from a fixed seed for
every type the table maps, encoded by fastavro, decode column at a time into the same Arrow
array fastavro's values build; what fastavro cannot read, the program cannot either."""

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
import pytest

from tiering_core.export.avro import AvroColumns
from tiering_core.export.avro_program import MAX_MICROS, MIN_MICROS, compile_program
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


def _named(schema: Any, named: dict[str, Any]) -> dict[str, Any]:
    """The named types ``schema`` defines, by name."""
    if isinstance(schema, list):
        for branch in schema:
            _named(branch, named)
    elif isinstance(schema, dict):
        if "name" in schema and "type" in schema and schema["type"] in ("record", "enum", "fixed"):
            named[schema["name"]] = schema
        for key in ("type", "items", "values"):
            _named(schema.get(key), named)
        for f in schema.get("fields", ()):
            _named(f["type"], named)
    return named


def _generate(schema: Any, rng: random.Random, named: dict[str, Any] | None = None) -> Any:
    """A random value of ``schema`` (parsed JSON) in the Python types fastavro writes."""
    named = _named(schema, {}) if named is None else named
    if isinstance(schema, list):
        return _generate(rng.choice(schema), rng, named)
    if isinstance(schema, str):
        return _primitive(schema, rng) if schema in _PRIMITIVES else _generate(named[schema], rng, named)
    kind, logical = schema["type"], schema.get("logicalType")
    if logical is not None:
        return _logical(schema, rng)
    if kind == "record":
        return {f["name"]: _generate(f["type"], rng, named) for f in schema["fields"]}
    if kind == "enum":
        return rng.choice(schema["symbols"])
    if kind == "fixed":
        return rng.randbytes(schema["size"])
    if kind == "array":
        return [_generate(schema["items"], rng, named) for _ in range(rng.choice([0, 1, 2, 5]))]
    if kind == "map":
        return {
            f"k{rng.randint(0, 9)}{TEXT[rng.randint(0, 6)]}": _generate(schema["values"], rng, named)
            for _ in range(rng.randint(0, 4))
        }
    return _generate(kind, rng, named)


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


def _encode(schema: Any, values: list[Any]) -> list[bytes]:
    parsed = fastavro.parse_schema(schema)
    out = []
    for value in values:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, value)
        out.append(buffer.getvalue())
    return out


def _batch(payloads: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    sizes = np.array([len(p) for p in payloads], np.int64)
    ends = np.cumsum(sizes)
    return np.frombuffer(b"".join(payloads) or b"\x00", np.uint8), ends - sizes, ends


def _fastavro(columns: AvroColumns, payloads: list[bytes]) -> tuple[list[Any], list[bool]]:
    """fastavro's decode of each payload: the values of those it reads, and which it reads."""
    values, ok = [], []
    for payload in payloads:
        try:
            values.append(columns.decode(payload))
            ok.append(True)
        except UndecodableValue:
            ok.append(False)
    return values, ok


def _same_as_fastavro(schema: Any, payloads: list[bytes]) -> AvroColumns:
    columns = AvroColumns.of(7, json.dumps(schema))
    assert columns.program is not None
    batch = columns.decode_batch(*_batch(payloads))
    want, fastavro_ok = _fastavro(columns, payloads)
    assert batch.array.type.equals(columns.arrow_type)
    batch.array.validate(full=True)
    assert batch.array.equals(columns.to_arrow(want))
    assert batch.ok.tolist() == fastavro_ok
    return columns


def test_every_mapped_type_decodes_as_fastavro_reads_it() -> None:
    rng = random.Random(20261130)
    values = [_generate(EVERY_TYPE, rng) for _ in range(400)]
    columns = _same_as_fastavro(EVERY_TYPE, _encode(EVERY_TYPE, values))
    assert (
        columns.decode_batch(*_batch(_encode(EVERY_TYPE, values[:1]))).array.to_pylist()[0]["state"] in STATE["symbols"]
    )


@pytest.mark.parametrize(
    "schema",
    [
        "string",
        "boolean",
        ["null", "long"],
        ["long", "null"],
        {"type": "array", "items": "int"},
        {"type": "map", "values": ["null", "string"]},
        STATE,
        {"type": "fixed", "name": "F", "size": 0},
        {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 4},
        ["null", LINE],
    ],
)
def test_a_value_that_is_not_a_record_is_one_column(schema: Any) -> None:
    rng = random.Random(7)
    _same_as_fastavro(schema, _encode(schema, [_generate(schema, rng) for _ in range(200)]))


def _zigzag(n: int) -> bytes:
    z, out = (n << 1) ^ (n >> 63), bytearray()
    z &= (1 << 64) - 1
    while z >= 0x80:
        out.append(z & 0x7F | 0x80)
        z >>= 7
    return bytes([*out, z])


def test_blocks_with_byte_sizes_and_empty_arrays_decode_as_fastavro_reads_them() -> None:
    schema = {"type": "array", "items": {"type": "map", "values": "long"}}
    entry = _zigzag(2) + b"ab" + _zigzag(7)
    one = _zigzag(-1) + _zigzag(len(entry)) + entry + _zigzag(0)  # a map of one entry, in a sized block
    payloads = [
        _zigzag(0),
        _zigzag(-2) + _zigzag(2 * len(one)) + one + one + _zigzag(1) + one + _zigzag(0),
        _zigzag(1) + _zigzag(0) + _zigzag(-1) + _zigzag(1) + _zigzag(0) + _zigzag(0),  # an empty map, then another
    ]
    columns = _same_as_fastavro(schema, payloads)
    assert [len(v["value"]) for v in columns.decode_batch(*_batch(payloads)).array.to_pylist()] == [0, 3, 2]


def test_what_fastavro_cannot_read_the_program_cannot_either() -> None:
    rng = random.Random(99)
    payloads = _encode(EVERY_TYPE, [_generate(EVERY_TYPE, rng) for _ in range(30)])
    damaged = [p[:cut] for p in payloads[:6] for cut in range(len(p))]  # every cut short
    damaged += [p + b"\x00" for p in payloads[:3]]  # a byte left over
    for p in payloads[6:]:  # bytes flipped at random
        flipped = bytearray(p)
        for _ in range(3):
            flipped[rng.randrange(len(flipped))] = rng.randrange(256)
        damaged.append(bytes(flipped))
    columns = AvroColumns.of(7, json.dumps(EVERY_TYPE))
    batch = columns.decode_batch(*_batch(damaged))
    _, fastavro_ok = _fastavro(columns, damaged)
    program_ok = batch.ok.tolist()
    assert not any(ok and not read for ok, read in zip(program_ok, fastavro_ok, strict=True))
    assert sum(program_ok) == len(batch.array) and len(batch.reasons) == len(damaged) - sum(program_ok)
    both = [p for p, ok in zip(damaged, program_ok, strict=True) if ok]
    assert batch.array.equals(columns.to_arrow(_fastavro(columns, both)[0]))
    assert all(why.startswith("corrupt Avro payload for schema id 7: ") for why in batch.reasons.values())
    left = columns.decode_batch(*_batch([payloads[0] + b"\x00\x00"]))
    assert "2 byte(s) left after the value" in left.reasons[0]


@pytest.mark.parametrize(
    ("schema", "payload", "reason"),
    [
        ("string", _zigzag(2**62) + b"ab", "a length of 4611686018427387904 runs past the end"),
        ("bytes", _zigzag(-5) + b"abcdef", "a negative length -5"),
        ({"type": "array", "items": "long"}, _zigzag(2**40) + b"\x02", "a block count of 1099511627776 is more"),
        ({"type": "array", "items": "long"}, _zigzag(-(2**63)) + b"\x00", "a block count of"),
        ({"type": "array", "items": "long"}, _zigzag(-1) + _zigzag(-3) + b"\x02\x00", "a block size of -3"),
        ({"type": "map", "values": "long"}, _zigzag(1) + b"\x02\xff\x02\x00", "not valid UTF-8"),
        ("long", b"\xff" * 11, "a varint is longer than 10 bytes"),
        ("int", _zigzag(2**31), "the value 2147483648 is out of its type's range"),
        (STATE, _zigzag(3), "enum index 3"),
        (STATE, _zigzag(-1), "enum index -1"),
        (["null", "long"], _zigzag(2) + b"\x02", "union branch 2"),
        (["null", "long"], _zigzag(-1) + b"\x02", "union branch -1"),  # fastavro reads the last branch
        ({"type": "int", "logicalType": "time-millis"}, _zigzag(-1), "the value -1 is out"),  # fastavro: 00:00:00.999
        ({"type": "int", "logicalType": "time-millis"}, _zigzag(86_400_000), "out of its type's range"),
        ({"type": "int", "logicalType": "date"}, _zigzag(-719163), "out of its type's range"),
        ({"type": "long", "logicalType": "timestamp-micros"}, _zigzag(MAX_MICROS + 1), "out of its type's range"),
        ({"type": "bytes", "logicalType": "decimal", "precision": 2}, _zigzag(1) + b"\x64", "more digits than its"),
        ({"type": "bytes", "logicalType": "decimal", "precision": 38}, _zigzag(17) + b"\x01" + bytes(16), "digits"),
        ("double", b"\x00" * 7, "runs past the end of the payload"),
    ],
)  # fmt: skip
def test_hostile_payloads_are_dead_letters_naming_why(schema: Any, payload: bytes, reason: str) -> None:
    columns = AvroColumns.of(3, json.dumps(schema))
    batch = columns.decode_batch(*_batch([payload, *_encode(schema, [_generate(schema, random.Random(1))])]))
    assert batch.ok.tolist() == [False, True] and len(batch.array) == 1
    assert reason in batch.reasons[0] and batch.reasons[0].startswith("corrupt Avro payload for schema id 3: ")


def test_a_map_holding_a_key_twice_keeps_the_last_as_fastavro_does() -> None:
    schema = {"type": "map", "values": "long"}
    twice = _zigzag(3) + b"\x02a" + _zigzag(1) + b"\x02b" + _zigzag(2) + b"\x02a" + _zigzag(3) + _zigzag(0)
    columns = _same_as_fastavro(schema, [twice, *_encode(schema, [{"x": 1}])])
    assert dict(columns.decode_batch(*_batch([twice])).array.to_pylist()[0]["value"]) == {"a": 3, "b": 2}


def test_a_schema_the_program_cannot_express_is_decoded_by_fastavro() -> None:
    schema = {"type": "array", "items": {"type": "record", "name": "Empty", "fields": []}}
    columns = AvroColumns.of(4, json.dumps(schema))
    assert columns.program is None and compile_program(schema, wrapped=True) is None
    payloads = [_zigzag(3) + _zigzag(0), b"\x01"]
    batch = columns.decode_batch(*_batch(payloads))
    assert batch.ok.tolist() == [True, False] and batch.array.to_pylist() == [{"value": [{}, {}, {}]}]
    assert "corrupt Avro payload for schema id 4" in batch.reasons[1]


def test_a_batch_of_more_bytes_than_offsets_hold_decodes_in_halves_the_same() -> None:
    rng = random.Random(5)
    payloads = _encode(EVERY_TYPE, [_generate(EVERY_TYPE, rng) for _ in range(41)])
    payloads[7] = payloads[7][:-1]  # a dead letter in one half
    columns = AvroColumns.of(7, json.dumps(EVERY_TYPE))
    whole = columns.decode_batch(*_batch(payloads))
    halves = columns.decode_batch(*_batch(payloads), max_bytes=len(payloads[0]) * 3)
    assert halves.array.equals(whole.array) and halves.ok.tolist() == whole.ok.tolist()
    assert halves.reasons == whole.reasons and list(whole.reasons) == [7]
