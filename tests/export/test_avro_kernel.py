"""The compiled Avro decoder's loop: blocks with byte sizes and empty ones, damaged and hostile
payloads (each a dead letter naming why, the rest of the batch decoded), and a map holding a key
twice (decoded as fastavro reads it), each checked against fastavro's decode of the same bytes."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from tests.export.avro_values import (
    EVERY_TYPE,
    STATE,
    batch_of,
    encode,
    fastavro_reads,
    generate,
    same_as_fastavro,
    zigzag,
)
from tiering_core.export.avro import AvroColumns
from tiering_core.export.avro_program import MAX_MICROS


def test_blocks_with_byte_sizes_and_empty_arrays_decode_as_fastavro_reads_them() -> None:
    schema = {"type": "array", "items": {"type": "map", "values": "long"}}
    entry = zigzag(2) + b"ab" + zigzag(7)
    one = zigzag(-1) + zigzag(len(entry)) + entry + zigzag(0)  # a map of one entry, in a sized block
    payloads = [
        zigzag(0),
        zigzag(-2) + zigzag(2 * len(one)) + one + one + zigzag(1) + one + zigzag(0),
        zigzag(1) + zigzag(0) + zigzag(-1) + zigzag(1) + zigzag(0) + zigzag(0),  # an empty map, then another
    ]
    columns = same_as_fastavro(schema, payloads)
    assert [len(v["value"]) for v in columns.decode_batch(*batch_of(payloads)).array.to_pylist()] == [0, 3, 2]


def test_what_fastavro_cannot_read_the_program_cannot_either() -> None:
    rng = random.Random(99)
    payloads = encode(EVERY_TYPE, [generate(EVERY_TYPE, rng) for _ in range(30)])
    damaged = [p[:cut] for p in payloads[:6] for cut in range(len(p))]  # every cut short
    damaged += [p + b"\x00" for p in payloads[:3]]  # a byte left over
    for p in payloads[6:]:  # bytes flipped at random
        flipped = bytearray(p)
        for _ in range(3):
            flipped[rng.randrange(len(flipped))] = rng.randrange(256)
        damaged.append(bytes(flipped))
    columns = AvroColumns.of(7, json.dumps(EVERY_TYPE))
    batch = columns.decode_batch(*batch_of(damaged))
    _, fastavro_ok = fastavro_reads(columns, damaged)
    program_ok = batch.ok.tolist()
    assert not any(ok and not read for ok, read in zip(program_ok, fastavro_ok, strict=True))
    assert sum(program_ok) == len(batch.array) and len(batch.reasons) == len(damaged) - sum(program_ok)
    both = [p for p, ok in zip(damaged, program_ok, strict=True) if ok]
    assert batch.array.equals(columns.to_arrow(fastavro_reads(columns, both)[0]))
    assert all(why.startswith("corrupt Avro payload for schema id 7: ") for why in batch.reasons.values())
    left = columns.decode_batch(*batch_of([payloads[0] + b"\x00\x00"]))
    assert "2 byte(s) left after the value" in left.reasons[0]


@pytest.mark.parametrize(
    ("schema", "payload", "reason"),
    [
        ("string", zigzag(2**62) + b"ab", "a length of 4611686018427387904 runs past the end"),
        ("bytes", zigzag(-5) + b"abcdef", "a negative length -5"),
        ({"type": "array", "items": "long"}, zigzag(2**40) + b"\x02", "a block count of 1099511627776 is more"),
        ({"type": "array", "items": "long"}, zigzag(-(2**63)) + b"\x00", "a block count of"),
        ({"type": "array", "items": "long"}, zigzag(-1) + zigzag(-3) + b"\x02\x00", "a block size of -3"),
        ({"type": "map", "values": "long"}, zigzag(1) + b"\x02\xff\x02\x00", "not valid UTF-8"),
        ("long", b"\xff" * 11, "a varint is longer than 10 bytes"),
        ("int", zigzag(2**31), "the value 2147483648 is out of its type's range"),
        (STATE, zigzag(3), "enum index 3"),
        (STATE, zigzag(-1), "enum index -1"),
        (["null", "long"], zigzag(2) + b"\x02", "union branch 2"),
        (["null", "long"], zigzag(-1) + b"\x02", "union branch -1"),  # fastavro reads the last branch
        ({"type": "int", "logicalType": "time-millis"}, zigzag(-1), "the value -1 is out"),  # fastavro: 00:00:00.999
        ({"type": "int", "logicalType": "time-millis"}, zigzag(86_400_000), "out of its type's range"),
        ({"type": "int", "logicalType": "date"}, zigzag(-719163), "out of its type's range"),
        ({"type": "long", "logicalType": "timestamp-micros"}, zigzag(MAX_MICROS + 1), "out of its type's range"),
        ({"type": "bytes", "logicalType": "decimal", "precision": 2}, zigzag(1) + b"\x64", "more digits than its"),
        ({"type": "bytes", "logicalType": "decimal", "precision": 38}, zigzag(17) + b"\x01" + bytes(16), "digits"),
        ("double", b"\x00" * 7, "runs past the end of the payload"),
    ],
)  # fmt: skip
def test_hostile_payloads_are_dead_letters_naming_why(schema: Any, payload: bytes, reason: str) -> None:
    columns = AvroColumns.of(3, json.dumps(schema))
    batch = columns.decode_batch(*batch_of([payload, *encode(schema, [generate(schema, random.Random(1))])]))
    assert batch.ok.tolist() == [False, True] and len(batch.array) == 1
    assert reason in batch.reasons[0] and batch.reasons[0].startswith("corrupt Avro payload for schema id 3: ")


def test_a_map_holding_a_key_twice_keeps_the_last_as_fastavro_does() -> None:
    schema = {"type": "map", "values": "long"}
    twice = zigzag(3) + b"\x02a" + zigzag(1) + b"\x02b" + zigzag(2) + b"\x02a" + zigzag(3) + zigzag(0)
    columns = same_as_fastavro(schema, [twice, *encode(schema, [{"x": 1}])])
    assert dict(columns.decode_batch(*batch_of([twice])).array.to_pylist()[0]["value"]) == {"a": 3, "b": 2}
