"""A typed segment's files: values decoded into the table's columns, files of wider columns opened
once a group brings a wider schema (those before keep theirs), dead letters in files of their own,
and a segment that cannot be written (a schema without columns, a registry that does not answer)
failing whole, its files deleted."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.engine_support import TieringEnv
from tests.export.registry_server import RegistryServer
from tests.export.typed_support import Avro, with_fields
from tiering_core.export import ExportedRanges, ExportSegment, SegmentExportError, plan_export
from tiering_core.export.registry import RegistryEndpoint, WireValue
from tiering_core.export.typed_decode import ARROW_CHUNK
from tiering_core.export.typed_write import SegmentSchemaError, TypedWrite, write_typed_segment_files
from tiering_core.export.write import ExportAttempt
from tiering_core.kafka.arrow import GroupBounds
from tiering_core.runs.copy import run_copy

NARROW: dict[str, Any] = {
    "type": "record",
    "name": "Reading",
    "fields": [{"name": "sensor", "type": "string"}, {"name": "level", "type": "int"}],
}
WIDE = with_fields(NARROW, {"name": "unit", "type": ["null", "string"], "default": None}, level="long")


def one_segment(env: TieringEnv, topic: str, values: list[bytes]) -> ExportSegment:
    """``values`` as one tiered segment of one record per batch; its export plan."""
    w = env.writer(topic, 0)
    for v in values:
        w.append([(None, v)])
    w.roll()
    w.append([(None, b"active")])
    w.set_high_watermark()
    with env.context() as ctx:
        run_copy(ctx, w.tp)
        (segment,) = plan_export(ctx, topic, 0, done=ExportedRanges())
    return segment


def attempts(root: Path) -> tuple[ExportAttempt, ExportAttempt]:
    (root / "table").mkdir(parents=True)
    (root / "dead").mkdir()
    return (
        ExportAttempt("a", "u", f"file://{root / 'table'}"),
        ExportAttempt("d", "v", f"file://{root / 'dead'}"),
    )


def read(url: str) -> Any:
    return pq.read_table(url.removeprefix("file://"))


def test_a_wider_schema_opens_wider_files_and_dead_letters_go_apart(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer
) -> None:
    avro = Avro(schema_registry, "readings")
    narrow = avro.serialize(NARROW, [{"sensor": f"s{i}", "level": i} for i in range(3)])
    wide = avro.serialize(WIDE, [{"sensor": "w", "level": 2**40, "unit": "mm"}])
    segment = one_segment(tiering_env, "readings", [narrow[0], narrow[1], b"junk", wide[0], narrow[2]])
    table, dead = attempts(tmp_path)
    narrow_id, wide_id = WireValue.parse(narrow[0]).schema_id, WireValue.parse(wide[0]).schema_id
    with tiering_env.context() as ctx:
        out = write_typed_segment_files(
            ctx.storage,
            segment,
            table,
            TypedWrite(RegistryEndpoint(schema_registry.url), (), dead),
            bounds=GroupBounds(max_batches=1),  # a group per record: the widening comes mid-segment
        )
    assert out.schema_ids == (narrow_id, wide_id) and out.rows == 4 and out.dead_letters == 1
    first, second = (read(f) for f in out.files)
    assert first.column_names[-2:] == ["sensor", "level"] and str(first.schema.field("level").type) == "int32"
    assert second.column_names[-3:] == ["sensor", "level", "unit"] and str(second.schema.field("level").type) == "int64"
    assert first["offset"].to_pylist() == [0, 1] and second["offset"].to_pylist() == [3, 4]
    assert second["value_schema_id"].to_pylist() == [wide_id, narrow_id]
    assert second.select(["sensor", "level", "unit"]).to_pylist() == [
        {"sensor": "w", "level": 2**40, "unit": "mm"},
        {"sensor": "s2", "level": 2, "unit": None},
    ]
    (letters,) = (read(f) for f in out.dead_letter_files)
    assert letters["offset"].to_pylist() == [2] and letters["value"].to_pylist() == [b"junk"]
    assert out.dead_letter_files[0].startswith(dead.location)


def test_values_built_into_arrow_as_they_come_read_as_one_build(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer
) -> None:
    avro = Avro(schema_registry, "chunked")
    count = ARROW_CHUNK + 50  # more values in one group than one chunk holds
    narrow = avro.serialize(NARROW, [{"sensor": f"s{i}", "level": i} for i in range(count)])
    wide_values = [{"sensor": f"w{i}", "level": 2**40 + i, "unit": "mm"} for i in range(3)]
    wide = avro.serialize(WIDE, wide_values)
    wide_id = WireValue.parse(wide[0]).schema_id
    corrupt = b"\x00" + wide_id.to_bytes(4, "big")  # the wide schema's id, no payload
    one_group = GroupBounds(max_batches=10 * count)
    endpoint = RegistryEndpoint(schema_registry.url)
    # a schema whose every value in the group is a dead letter widens nothing, though it came first
    segment = one_segment(tiering_env, "chunked", [corrupt, *narrow, corrupt])
    table, dead = attempts(tmp_path / "corrupt")
    with tiering_env.context() as ctx:
        out = write_typed_segment_files(ctx.storage, segment, table, TypedWrite(endpoint, (), dead), bounds=one_group)
    (rows,) = (read(f) for f in out.files)
    assert out.schema_ids == (WireValue.parse(narrow[0]).schema_id,) and (out.rows, out.dead_letters) == (count, 2)
    assert str(rows.schema.field("level").type) == "int32" and "unit" not in rows.column_names
    assert rows.select(["sensor", "level"]).to_pylist() == [{"sensor": f"s{i}", "level": i} for i in range(count)]
    # the wide schema's values in the first chunk, the middle and the last: one file of the wide columns
    mixed = [wide[0], *narrow[:ARROW_CHUNK], wide[1], *narrow[ARROW_CHUNK:], wide[2]]
    segment = one_segment(tiering_env, "chunked-mixed", mixed)
    table, dead = attempts(tmp_path / "mixed")
    with tiering_env.context() as ctx:
        out = write_typed_segment_files(ctx.storage, segment, table, TypedWrite(endpoint, (), dead), bounds=one_group)
    (rows,) = (read(f) for f in out.files)
    assert (out.rows, out.dead_letters) == (count + 3, 0) and str(rows.schema.field("level").type) == "int64"
    narrow_rows = [{"sensor": f"s{i}", "level": i, "unit": None} for i in range(count)]
    expected = [wide_values[0], *narrow_rows[:ARROW_CHUNK], wide_values[1], *narrow_rows[ARROW_CHUNK:], wide_values[2]]
    assert rows.select(["sensor", "level", "unit"]).to_pylist() == expected


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_segment_that_cannot_be_written_fails_whole_its_files_deleted(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer
) -> None:
    avro = Avro(schema_registry, "gauges")
    good = avro.serialize(NARROW, [{"sensor": "a", "level": 1}])
    union = {"type": "record", "name": "G", "fields": [{"name": "x", "type": ["int", "string"]}]}
    odd = avro.serialize(union, [{"x": 3}])
    segment = one_segment(tiering_env, "gauges", [good[0], b"junk", odd[0]])
    table, dead = attempts(tmp_path)
    with tiering_env.context() as ctx:
        with pytest.raises(SegmentSchemaError, match=r"segment .* not exported: .*field x: a union of 2 non-null"):
            write_typed_segment_files(
                ctx.storage,
                segment,
                table,
                TypedWrite(RegistryEndpoint(schema_registry.url), (), dead),
                bounds=GroupBounds(max_batches=1),
            )
        gone = RegistryEndpoint(f"http://127.0.0.1:{_closed_port()}", "tiering", "pw-not-shown")
        with pytest.raises(SegmentExportError, match="did not answer") as caught:
            write_typed_segment_files(ctx.storage, segment, table, TypedWrite(gone, (), dead))
        assert "pw-not-shown" not in str(caught.value) + repr(TypedWrite(gone, (), dead))
    assert list(tmp_path.rglob("*.parquet")) == []
    assert "\n" not in str(caught.value)
