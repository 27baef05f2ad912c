"""Arrow schemas as Iceberg schemas: the export writes Arrow (Parquet files without field ids,
mapped to the table's columns by name), and a table is created from the Arrow schema of its rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa


def iceberg_schema(columns: pa.Schema) -> Any:
    """``columns`` (the export's ``DATA_SCHEMA``, a typed table's columns beside it) as an Iceberg
    schema, field ids assigned in order (depth first: a struct's, list's or map's children follow it)."""
    from pyiceberg.io.pyarrow import pyarrow_to_schema
    from pyiceberg.table.name_mapping import MappedField, NameMapping

    next_id = iter(range(1, 1_000_000))

    def mapped(arrow_field: pa.Field) -> MappedField:
        field_id = next(next_id)
        children: list[MappedField] = []
        type_ = arrow_field.type
        if pa.types.is_list(type_) or pa.types.is_large_list(type_):
            children = [mapped(pa.field("element", type_.value_type, nullable=type_.value_field.nullable))]
        elif pa.types.is_map(type_):
            children = [mapped(type_.key_field.with_name("key")), mapped(type_.item_field.with_name("value"))]
        elif pa.types.is_struct(type_):
            children = [mapped(type_.field(i)) for i in range(type_.num_fields)]
        return MappedField.model_validate({"field-id": field_id, "names": [arrow_field.name], "fields": children})

    fields = [mapped(f) for f in columns]
    return pyarrow_to_schema(columns, name_mapping=NameMapping(fields))


def storage_type(type_: pa.DataType) -> pa.DataType:
    """``type_`` with each extension type (a uuid) replaced by its storage type, nested ones too."""
    if isinstance(type_, pa.BaseExtensionType):
        return type_.storage_type
    if pa.types.is_struct(type_):
        return pa.struct([f.with_type(storage_type(f.type)) for f in type_])
    if pa.types.is_list(type_):
        return pa.list_(type_.value_field.with_type(storage_type(type_.value_type)))
    if pa.types.is_map(type_):
        return pa.map_(type_.key_field, type_.item_field.with_type(storage_type(type_.item_type)))
    return type_


def typed_array(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    """Python values as an array of ``type_``: Arrow builds no extension type (a uuid column) from
    Python values, so they are built as its storage (a uuid's 16 bytes) and cast."""
    storage = storage_type(type_)
    array = pa.array(values, type=storage)
    return array if storage.equals(type_) else array.cast(type_)
