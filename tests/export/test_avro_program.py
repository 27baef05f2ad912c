"""The compiled Avro decoder reads what fastavro reads: values generated from a fixed seed for
every type the table maps, encoded by fastavro, decode column at a time into the same Arrow
array fastavro's values build; a schema the program cannot express is decoded by fastavro."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from tests.export.avro_values import (
    EVERY_TYPE,
    LINE,
    STATE,
    batch_of,
    encode,
    generate,
    same_as_fastavro,
    zigzag,
)
from tiering_core.export.avro import AvroColumns
from tiering_core.export.avro_program import compile_program


def test_every_mapped_type_decodes_as_fastavro_reads_it() -> None:
    rng = random.Random(20261130)
    values = [generate(EVERY_TYPE, rng) for _ in range(400)]
    columns = same_as_fastavro(EVERY_TYPE, encode(EVERY_TYPE, values))
    assert (
        columns.decode_batch(*batch_of(encode(EVERY_TYPE, values[:1]))).array.to_pylist()[0]["state"]
        in STATE["symbols"]
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
    same_as_fastavro(schema, encode(schema, [generate(schema, rng) for _ in range(200)]))


def test_a_schema_the_program_cannot_express_is_decoded_by_fastavro() -> None:
    schema = {"type": "array", "items": {"type": "record", "name": "Empty", "fields": []}}
    columns = AvroColumns.of(4, json.dumps(schema))
    assert columns.program is None and compile_program(schema, wrapped=True) is None
    payloads = [zigzag(3) + zigzag(0), b"\x01"]
    batch = columns.decode_batch(*batch_of(payloads))
    assert batch.ok.tolist() == [True, False] and batch.array.to_pylist() == [{"value": [{}, {}, {}]}]
    assert "corrupt Avro payload for schema id 4" in batch.reasons[1]


def test_a_batch_of_more_bytes_than_offsets_hold_decodes_in_halves_the_same() -> None:
    rng = random.Random(5)
    payloads = encode(EVERY_TYPE, [generate(EVERY_TYPE, rng) for _ in range(41)])
    payloads[7] = payloads[7][:-1]  # a dead letter in one half
    columns = AvroColumns.of(7, json.dumps(EVERY_TYPE))
    whole = columns.decode_batch(*batch_of(payloads))
    halves = columns.decode_batch(*batch_of(payloads), max_bytes=len(payloads[0]) * 3)
    assert halves.array.equals(whole.array) and halves.ok.tolist() == whole.ok.tolist()
    assert halves.reasons == whole.reasons and list(whole.reasons) == [7]
