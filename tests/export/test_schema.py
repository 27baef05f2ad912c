"""Arrow schemas as Iceberg schemas: the export's own columns keep their field ids, and a typed
table's structs, lists and maps get theirs, depth first."""

from __future__ import annotations

import uuid

import pyarrow as pa

from tiering_core.export import DATA_SCHEMA
from tiering_core.export.schema import iceberg_schema, storage_type, typed_array


def test_the_export_columns_keep_their_field_ids() -> None:
    schema = iceberg_schema(DATA_SCHEMA)
    assert [f.name for f in schema.fields] == DATA_SCHEMA.names
    assert [schema.find_field(n).field_id for n in ("topic", "partition", "offset", "timestamp")] == [1, 2, 3, 4]
    assert schema.find_field("headers").field_id == 8 and schema.find_field("leader_epoch").field_id == 12
    assert schema.find_field("offset").required and not schema.find_field("key").required


def test_structs_lists_and_maps_get_ids_depth_first() -> None:
    columns = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("who", pa.struct([pa.field("name", pa.string()), pa.field("tags", pa.list_(pa.string()))])),
            pa.field("lines", pa.map_(pa.string(), pa.struct([pa.field("qty", pa.int32())]))),
        ]
    )
    schema = iceberg_schema(columns)
    ids = {".".join(name): schema.find_field(".".join(name)).field_id for name in [("id",), ("who",), ("who", "name")]}
    assert ids == {"id": 1, "who": 2, "who.name": 3}
    assert str(schema.find_type("who.tags")) == "list<string>"
    lines = schema.find_field("lines")
    assert lines.field_id == 6 and str(lines.field_type).startswith("map<string, struct<")
    assert schema.find_field("lines.value.qty").field_id == 9


def test_uuids_nested_anywhere_are_built_through_their_bytes() -> None:
    ids = [uuid.UUID(int=i) for i in range(1, 4)]
    type_ = pa.struct(
        [
            pa.field("id", pa.uuid()),
            pa.field("seen", pa.list_(pa.uuid())),
            pa.field("by", pa.map_(pa.string(), pa.uuid())),
            pa.field("n", pa.int64()),
        ]
    )
    rows = [{"id": ids[0].bytes, "seen": [ids[1].bytes, None], "by": [("a", ids[2].bytes)], "n": 1}, None]
    built = typed_array(rows, type_)
    assert built.type == type_
    assert built.to_pylist() == [{"id": ids[0], "seen": [ids[1], None], "by": [("a", ids[2])], "n": 1}, None]
    assert storage_type(type_).field("by").type == pa.map_(pa.string(), pa.binary(16))
    assert typed_array([1, None], pa.int64()).to_pylist() == [1, None]  # no extension type: as built
    assert str(iceberg_schema(pa.schema([pa.field("u", pa.uuid())])).find_field("u").field_type) == "uuid"
