"""A typed part decoded: Avro values and keys of several writer schemas, a batch per schema, land
in the table's merged columns at their rows; a null key is null fields, not a dead letter; a
key or value that cannot be decoded is a dead letter naming why, the key's reason first."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from tests.export.registry_server import RegistryServer
from tests.export.typed_support import Avro, Json, with_fields
from tiering_core.config.export_topics import AVRO, JSON_SCHEMA
from tiering_core.export.registry import RegistryEndpoint, WireValue
from tiering_core.export.typed import KEY, VALUE, TypedColumns, ValueColumns, ValueSchemas
from tiering_core.export.typed_decode import ARROW_CHUNK, decode_part

READING: dict[str, Any] = {
    "type": "record",
    "name": "Reading",
    "fields": [{"name": "sensor", "type": "string"}, {"name": "level", "type": "int"}],
}
WIDE = with_fields(READING, {"name": "unit", "type": ["null", "string"], "default": None}, level="long")
USER: dict[str, Any] = {"type": "record", "name": "User", "fields": [{"name": "user", "type": "long"}]}
USER_REGION = with_fields(USER, {"name": "region", "type": ["null", "string"], "default": None})


def test_avro_values_and_keys_of_several_schemas_land_at_their_rows(schema_registry: RegistryServer) -> None:
    avro = Avro(schema_registry, "decode-part")
    narrow = avro.serialize(READING, [{"sensor": f"s{i}", "level": i} for i in range(5)])
    (wide,) = avro.serialize(WIDE, [{"sensor": "w", "level": 2**40, "unit": "mm"}])
    users = avro.serialize(USER, [{"user": i} for i in range(3)])
    (regional,) = avro.serialize(USER_REGION, [{"user": 7, "region": "eu"}])
    rows = [
        (users[0], narrow[0]),
        (None, narrow[1]),  # a null key: null fields
        (b"\x01junk", narrow[2]),  # the key's reason, the value not decoded
        (users[1], b"x"),  # the value's reason
        (users[2][:5], narrow[3]),  # a key without its payload
        (regional, wide),
        (users[2], narrow[4] + b"\x00"),  # a byte left after the value
    ]
    part = pa.RecordBatch.from_pydict(
        {"key": [k for k, _ in rows], "value": [v for _, v in rows]},
        schema=pa.schema([pa.field("key", pa.binary()), pa.field("value", pa.binary())]),
    )
    endpoint = RegistryEndpoint(schema_registry.url)
    values, keys = ValueSchemas(endpoint, AVRO, VALUE), ValueSchemas(endpoint, AVRO, KEY)
    decoded = decode_part(part, values, keys, TypedColumns())
    ids = {name: WireValue.parse(v).schema_id for name, v in [("narrow", narrow[0]), ("wide", wide)]}
    user_id, regional_id = WireValue.parse(users[0]).schema_id, WireValue.parse(regional).schema_id

    assert decoded.good == [0, 1, 5] and decoded.bad == [2, 3, 4, 6]
    assert decoded.ids == [ids["narrow"], ids["narrow"], ids["wide"]]
    assert decoded.key_ids == [user_id, None, regional_id]
    value_type = values.merged([ids["narrow"], ids["wide"]]).value_type
    assert decoded.value_array(value_type).to_pylist() == [
        {"sensor": "s0", "level": 0, "unit": None},
        {"sensor": "s1", "level": 1, "unit": None},
        {"sensor": "w", "level": 2**40, "unit": "mm"},
    ]
    key_type = keys.merged([user_id, regional_id], side=KEY).value_type
    assert decoded.key_array(key_type).to_pylist() == [{"user": 0, "region": None}, None, {"user": 7, "region": "eu"}]
    reasons = dict(zip(decoded.bad, decoded.reasons, strict=True))
    assert reasons[2] == "the key: the value starts with byte 1, not the wire format's magic byte 0"
    assert reasons[3].startswith("the value has 1 byte(s)")
    assert reasons[4].startswith(f"the key: corrupt Avro payload for schema id {user_id}: ")
    left = "1 byte(s) left after the value (at byte 4)"
    assert reasons[6] == f"corrupt Avro payload for schema id {ids['narrow']}: {left}"
    assert decoded.bad_ids == [None, None, user_id, ids["narrow"]]


def test_values_of_other_formats_are_built_into_arrow_a_chunk_at_a_time(schema_registry: RegistryServer) -> None:
    json_values = Json(schema_registry, "decode-part-json")
    narrow_schema = {
        "type": "object",
        "properties": {"sensor": {"type": "string"}, "level": {"type": "integer"}},
        "required": ["sensor", "level"],
    }
    wide_schema = {**narrow_schema, "properties": {**narrow_schema["properties"], "unit": {"type": "string"}}}
    count = ARROW_CHUNK + 50
    narrow = json_values.serialize(narrow_schema, [{"sensor": f"s{i}", "level": i} for i in range(count)])
    (wide,) = json_values.serialize(wide_schema, [{"sensor": "w", "level": -1, "unit": "mm"}])
    column = [*narrow[:ARROW_CHUNK], wide, *narrow[ARROW_CHUNK:]]
    part = pa.RecordBatch.from_pydict({"key": [None] * len(column), "value": column})
    values = ValueSchemas(RegistryEndpoint(schema_registry.url), JSON_SCHEMA, VALUE)
    decoded = decode_part(part, values, None, TypedColumns(ValueColumns()))
    assert decoded.columnar is None and len(decoded.chunks) == 1  # the first chunk built as it came
    merged = values.merged([WireValue.parse(narrow[0]).schema_id, WireValue.parse(wide).schema_id]).value_type
    rows = [{"sensor": f"s{i}", "level": i, "unit": None} for i in range(count)]
    want = [*rows[:ARROW_CHUNK], {"sensor": "w", "level": -1, "unit": "mm"}, *rows[ARROW_CHUNK:]]
    assert decoded.value_array(merged).to_pylist() == want and decoded.bad == []
