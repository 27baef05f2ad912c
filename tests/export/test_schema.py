"""Arrow schemas as Iceberg schemas: the export's own columns keep their field ids, and a typed
table's structs, lists and maps get theirs, depth first."""

from __future__ import annotations

import pyarrow as pa

from tiering_core.export import DATA_SCHEMA
from tiering_core.export.schema import iceberg_schema


def test_the_export_columns_keep_their_field_ids() -> None:
    schema = iceberg_schema()
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
