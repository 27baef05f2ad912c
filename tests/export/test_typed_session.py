"""Typed exports end to end: values Confluent's AvroSerializer wrote through the real registry,
tiered by the platform's copy, exported, and every row read back by pyiceberg and DuckDB equal to
what Confluent's AvroDeserializer makes of the record's bytes; dead letters beside them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.engine_support import TieringEnv
from tests.export.proto_files import Proto, message_class, payment_file
from tests.export.proto_files import payment as proto_payment
from tests.export.registry_server import RegistryServer
from tests.export.support import table_of, wait_until_table_is_free, with_lease_ms
from tests.export.typed_support import (
    CART,
    CART_V2,
    PAYMENT,
    Avro,
    Json,
    cart,
    iceberg_types,
    payment,
    row_columns,
    rows_by_offset,
    tier,
    value_of,
    with_fields,
    with_typed_export,
)
from tiering_core.errors import ExportError
from tiering_core.export import TableName, load_catalog, open_table, run_export
from tiering_core.export.registry import WireValue
from tiering_core.export.typed import SchemaChangeError
from tiering_core.export.write import referenced_files
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.runs.copy import run_copy


def append(w: PartitionWriter, values: list[bytes], sent: dict[tuple[int, int], bytes]) -> None:
    """``values`` as one batch of keyed records, each remembered by its (partition, offset)."""
    first, _last = w.append([(f"k{i}".encode(), v) for i, v in enumerate(values)])
    for i, v in enumerate(values):
        sent[(w.tp.partition, first + i)] = v


def test_every_value_reads_back_as_the_deserializer_reads_it(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer
) -> None:
    avro = Avro(schema_registry, "payments")
    sent: dict[tuple[int, int], bytes] = {}
    writers = []
    for partition in (0, 1):
        w = tiering_env.writer("payments", partition)
        for part in range(3):
            append(w, avro.serialize(PAYMENT, [payment(100 * partition + 10 * part + i) for i in range(7)]), sent)
            w.roll()
        w.append([(None, avro.serialize(PAYMENT, [payment(999)])[0])])  # the active segment: never tiered
        w.set_high_watermark()
        writers.append(w)
    with_typed_export(tiering_env, tmp_path, schema_registry, payments={"value": "avro"})
    with tiering_env.context() as ctx:
        for w in writers:
            run_copy(ctx, w.tp)
        result = run_export(ctx, "payments")
        assert not result.failed and result.dead_letters == 0 and result.rows == len(sent)
        table = table_of(ctx, "payments")
        rows = rows_by_offset(table)
        assert set(rows) == set(sent)
        schema_id = WireValue.parse(next(iter(sent.values()))).schema_id
        for where, data in sent.items():
            row = rows[where]
            assert value_of(row, PAYMENT) == avro.deserialize(data), where
            assert row["value_schema_id"] == schema_id and row["key"] == f"k{where[1] % 7}".encode()
            assert "value" not in row
        types = iceberg_types(table)
        assert types["customer"] == (
            "struct<name: string, tags: list<string>, address: struct<city: string, zip: int>>"
        )
        assert types["lines"] == "map<string, long>" and types["state"] == "string" and types["ref"] == "string"
        assert types["at_ms"] == types["at_us"] == "timestamptz" and types["day"] == "date"
        assert types["price"] == "decimal(12, 3)" and types["id"] == "int" and types["amount"] == "float"
        assert types["note"] == "string" and types["value_schema_id"] == "int"
        # DuckDB over the table's data files
        files = [task.file.file_path for task in table.scan().plan_files()]
        got = duckdb.sql(
            'select partition, "offset", customer.address.city as city, price, state from read_parquet($files)',
            params={"files": files},
        ).fetchall()
        assert len(got) == len(sent)
        for partition, offset, city, price, state in got:
            want = avro.deserialize(sent[(partition, offset)])
            assert (city, price, state) == (want["customer"]["address"]["city"], want["price"], want["state"])
        # an export that is up to date commits nothing
        again = run_export(ctx, "payments")
        assert again.planned == [] and again.snapshots == []


def dead_letters_of(ctx: Any, topic: str) -> dict[int, dict[str, Any]]:
    """The topic's dead letters by offset (none without a dead-letter table)."""
    table = open_table(load_catalog(ctx.config), TableName("kafka", f"{topic}_dead_letters"), create=False)
    return {} if table is None else {o: row for (_p, o), row in rows_by_offset(table).items()}


def test_undecodable_values_are_dead_letters_each_record_once(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer
) -> None:
    avro = Avro(schema_registry, "refunds")
    good = avro.serialize(PAYMENT, [payment(i) for i in range(4)])
    unknown_id = b"\x00" + (2**31 - 7).to_bytes(4, "big") + good[0][5:]
    corrupt = good[1][:9]  # the header and a payload cut short
    trailing = good[2] + b"\x01\x02"  # a value and bytes after it
    sent = tier(
        tiering_env,
        "refunds",
        [[good[0], b"plain text", good[1]], [unknown_id, good[2], corrupt, None, trailing, good[3], b"\x00\x01"]],
    )
    with_typed_export(tiering_env, tmp_path, schema_registry, refunds={"value": "avro"})
    with tiering_env.context() as ctx:
        result = run_export(ctx, "refunds")
        assert not result.failed and result.dead_letters == 6 and result.rows == 4
        rows = {o: row for (_p, o), row in rows_by_offset(table_of(ctx, "refunds")).items()}
        dead = dead_letters_of(ctx, "refunds")
    assert set(rows) | set(dead) == set(sent) and not set(rows) & set(dead)  # each record in one table
    for offset, row in rows.items():
        assert value_of(row, PAYMENT) == avro.deserialize(sent[offset] or b"")
    reasons = {offset: row["reason"] for offset, row in dead.items()}
    for offset, row in dead.items():
        assert row["value"] == sent[offset] and row["key"] == f"k{offset - (0 if offset < 3 else 3)}".encode()
        assert row["topic"] == "refunds" and row["partition"] == 0 and row["timestamp"] is not None
    by_value = {sent[o]: reasons[o] for o in dead}
    assert "not the wire format's magic byte 0" in by_value[b"plain text"]
    assert f"schema id {2**31 - 7} is unknown" in by_value[unknown_id]
    assert dead[next(o for o in dead if sent[o] == unknown_id)]["schema_id"] == 2**31 - 7
    assert "corrupt Avro payload" in by_value[corrupt] and "left after the value" in by_value[trailing]
    assert "tombstone" in by_value[None] and "fewer than" in by_value[b"\x00\x01"]


V1: dict[str, Any] = {
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
V2 = with_fields(
    V1,
    {"name": "currency", "type": "string", "default": "EUR"},
    {"name": "rate", "type": ["null", "double"], "default": None},
)
V3 = with_fields(V2, id="long", amount="double")


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


def test_compatible_schema_changes_evolve_the_table_old_rows_keep_their_schema_id(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer
) -> None:
    avro = Avro(schema_registry, "tips")
    one = avro.serialize(V1, [tip(i, 1) for i in range(4)])
    two = avro.serialize(V2, [tip(i, 2) for i in range(4, 8)])
    three = avro.serialize(V3, [tip(i, 3) for i in range(8, 11)])
    schema_of = {WireValue.parse(v).schema_id: s for vs, s in ((one, V1), (two, V2), (three, V3)) for v in vs}
    assert len(schema_of) == 3
    # a segment per version, then one where an old producer's values follow the newest's
    sent = tier(tiering_env, "tips", [[*one], [*two], [three[0], one[0], three[1]], [one[1], three[2]]])
    with_typed_export(tiering_env, tmp_path, schema_registry, tips={"value": "avro"})
    with tiering_env.context() as ctx:
        result = run_export(ctx, "tips", commit_bytes=1)  # a commit per segment: the table evolves in them
        assert not result.failed and result.dead_letters == 0 and len(result.snapshots) == 4
        table = table_of(ctx, "tips")
        rows = {o: row for (_p, o), row in rows_by_offset(table).items()}
    assert set(rows) == set(sent)
    for offset, row in rows.items():
        data = sent[offset] or b""
        writer = schema_of[WireValue.parse(data).schema_id]
        assert row["value_schema_id"] == WireValue.parse(data).schema_id
        assert value_of(row, writer) == avro.deserialize(data)
        added = {f["name"] for f in V2["fields"]} - {f["name"] for f in writer["fields"]}
        assert all(row[name] is None for name in added)  # a row keeps what its schema wrote
    types = iceberg_types(table)
    assert (types["id"], types["amount"], types["currency"], types["rate"]) == ("long", "double", "string", "double")
    assert json.loads(table.properties["tiering.value-schema-ids"]) == list(schema_of)
    # each schema change is in the commit of the rows that brought it
    schemas = [s.schema_id for s in table.snapshots()]
    assert len(set(schemas)) >= 3


@pytest.mark.parametrize(
    ("change", "override", "mixed", "says"),
    [
        (with_fields(V1, amount="string"), {"amount": "x"}, False, "field amount changes from float to string"),
        (
            with_fields(V1, {"name": "region", "type": "string"}),
            {"region": "eu"},
            True,
            "field region is added as required without a default",
        ),
    ],
)
def test_an_incompatible_schema_change_stops_the_export_naming_both_ids(
    tiering_env: TieringEnv,
    tmp_path: Path,
    schema_registry: RegistryServer,
    change: dict[str, Any],
    override: dict[str, Any],
    mixed: bool,
    says: str,
) -> None:
    topic = f"changes-{'mixed' if mixed else 'own'}"
    avro = Avro(schema_registry, topic)
    first = avro.serialize(V1, [tip(i, 1) for i in range(5)])
    bad = avro.serialize(change, [{**tip(9, 1), **override}])[0]
    old, new = WireValue.parse(first[0]).schema_id, WireValue.parse(bad).schema_id
    # the incompatible value with a dead letter beside it: neither table takes anything of its segment
    second = [first[3], bad, b"not avro"] if mixed else [bad, b"not avro"]
    sent = tier(tiering_env, topic, [first[:3], second, [first[4]]])
    with_typed_export(tiering_env, tmp_path, schema_registry, **{topic: {"value": "avro"}})
    with tiering_env.context() as ctx:
        for _run in range(2):  # a rerun stops at the same place
            with pytest.raises(SchemaChangeError) as caught:
                run_export(ctx, topic, commit_bytes=1)
            message = str(caught.value)
            assert "\n" not in message and says in message
            assert f"value schema id {new} cannot evolve the table's columns (from schema id {old})" in message
            table = table_of(ctx, topic)
            assert sorted(o for _p, o in rows_by_offset(table)) == [0, 1, 2]
            assert len(table.snapshots()) == 1
            assert dead_letters_of(ctx, topic) == {}
    assert len(sent) == 3 + len(second) + 1


_KILLED_BETWEEN_THE_TABLES = """
import sys, time
from pathlib import Path
import tiering_core.export.run as run
import tiering_core.export.session as session

run.COMMIT_BYTES = 1  # a commit after every segment
flag = Path(sys.argv[1])
real = session.commit_segments
calls = []

def commit_segments(table, pending, **kwargs):
    calls.append(1)
    if len(calls) == 2:  # killed after the dead letters' commit of the second segment, before its rows'
        flag.write_text("ready")
        time.sleep(600)
    return real(table, pending, **kwargs)

session.commit_segments = commit_segments
from tiering_core.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_kill_9_between_the_two_tables_then_rerun_is_exactly_once(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer
) -> None:
    avro = Avro(schema_registry, "orders-typed")
    good = avro.serialize(PAYMENT, [payment(i) for i in range(9)])
    sent = tier(
        tiering_env, "orders-typed", [[good[3 * s], b"bad", good[3 * s + 1], good[3 * s + 2]] for s in range(3)]
    )
    with_typed_export(tiering_env, tmp_path, schema_registry, **{"orders-typed": {"value": "avro"}})
    with_lease_ms(tiering_env, 5_000)
    flag = tmp_path / "flag"
    command = ["--config", str(tiering_env.config_path), "export", "--topic", "orders-typed"]
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_BETWEEN_THE_TABLES, str(flag), *command],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 300
    while not flag.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with tiering_env.context() as ctx:
        rows = {o for _p, o in rows_by_offset(table_of(ctx, "orders-typed"))}
        dead = dead_letters_of(ctx, "orders-typed")
    assert sorted(rows) == [0, 2, 3] and sorted(dead) == [1, 5]  # the second segment's dead letter only
    wait_until_table_is_free(tiering_env, "kafka.orders-typed")
    with tiering_env.context() as ctx:
        result = run_export(ctx, "orders-typed")
        assert not result.failed and result.dead_letters == 1  # the third segment's; the second's was in
        rows = {o for _p, o in rows_by_offset(table_of(ctx, "orders-typed"))}  # asserts no offset twice
        dead = dead_letters_of(ctx, "orders-typed")
        assert rows | set(dead) == set(sent) and not rows & set(dead)
        assert sorted(dead) == [o for o, v in sent.items() if v == b"bad"]
        assert run_export(ctx, "orders-typed").snapshots == []  # up to date: nothing more
        # the killed attempts' uncommitted files of both tables were removed by the rerun
        referenced = referenced_files(table_of(ctx, "orders-typed")) | referenced_files(
            table_of(ctx, "orders-typed_dead_letters")
        )
    on_disk = {f"file://{p}" for p in (tmp_path / "warehouse").rglob("*.parquet")}
    assert on_disk == referenced


def test_a_topic_turned_typed_needs_a_table_of_its_own(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer
) -> None:
    avro = Avro(schema_registry, "counters")
    values = avro.serialize_values("long", [7, 2**40, -1])
    sent = tier(tiering_env, "counters", [values[:2], values[2:]])
    with_typed_export(tiering_env, tmp_path, schema_registry)
    with tiering_env.context() as ctx:
        assert run_export(ctx, "counters").rows == 3  # as bytes
        before = len(table_of(ctx, "counters").snapshots())
    with_typed_export(tiering_env, tmp_path, schema_registry, counters={"value": "avro"})
    with tiering_env.context() as ctx:
        with pytest.raises(ExportError, match=r"^the table kafka\.counters holds the value as bytes: .*table\)$"):
            run_export(ctx, "counters")
        assert len(table_of(ctx, "counters").snapshots()) == before
    with_typed_export(tiering_env, tmp_path, schema_registry, counters={"value": "avro", "table": "counters_typed"})
    with tiering_env.context() as ctx:
        assert run_export(ctx, "counters").rows == 3
        rows = {o: row for (_p, o), row in rows_by_offset(table_of(ctx, "counters_typed")).items()}
        want = {o: avro.deserializer(v, avro.ctx) for o, v in sent.items()}
        assert {o: row["value"] for o, row in rows.items()} == want
        assert run_export(ctx, "counters").snapshots == []  # its own `value` column (a long) is no table of bytes


def test_json_schema_values_read_back_as_the_deserializer_reads_them_dead_letters_and_evolution(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer
) -> None:
    js = Json(schema_registry, "carts")
    one = js.serialize(CART, [cart(i) for i in range(5)])
    two = js.serialize(CART_V2, [cart(i, 2) for i in range(5, 10)])
    schema_of = {WireValue.parse(v).schema_id: s for vs, s in ((one, CART), (two, CART_V2)) for v in vs}
    assert len(schema_of) == 2
    header = one[0][:5]
    refused = header + json.dumps({**cart(0), "id": "seven"}).encode()  # JSON its schema refuses
    not_json = header + b'{"id": 1,'
    no_date = header + json.dumps({**cart(3), "day": "someday"}).encode()
    unknown_id = b"\x00" + (2**31 - 9).to_bytes(4, "big") + one[0][5:]
    avro_id = Avro(schema_registry, "carts-avro").serialize(PAYMENT, [payment(1)])[0]  # not the topic's format
    dead_values = [refused, not_json, no_date, unknown_id, avro_id]
    sent = tier(
        tiering_env,
        "carts",
        [[*one[:3], refused, not_json], [*two[:3], one[3]], [no_date, unknown_id, avro_id, *two[3:], one[4]]],
    )
    with_typed_export(tiering_env, tmp_path, schema_registry, carts={"value": "json_schema"})
    with tiering_env.context() as ctx:
        result = run_export(ctx, "carts", commit_bytes=1)
        assert not result.failed and result.dead_letters == len(dead_values) and result.rows == 10
        table = table_of(ctx, "carts")
        rows = {o: row for (_p, o), row in rows_by_offset(table).items()}
        dead = dead_letters_of(ctx, "carts")
    assert set(rows) | set(dead) == set(sent) and not set(rows) & set(dead)
    for offset, row in rows.items():
        data = sent[offset] or b""
        writer = schema_of[WireValue.parse(data).schema_id]
        assert row["value_schema_id"] == WireValue.parse(data).schema_id
        want = js.deserialize(data, writer)
        assert {k: row_columns(row[k]) for k in want} == want, offset
        if writer is CART:
            assert row["coupon"] is None
    by_value = {sent[o]: row["reason"] for o, row in dead.items()}
    assert "fails its schema at id: 'seven' is not of type 'integer'" in by_value[refused]
    assert "is not JSON" in by_value[not_json] and "has no column value" in by_value[no_date]
    assert f"schema id {2**31 - 9} is unknown" in by_value[unknown_id]
    assert (
        f"schema id {WireValue.parse(avro_id).schema_id} is a AVRO schema, not the topic's json_schema"
        in by_value[avro_id]
    )
    assert all(row["value"] == sent[o] for o, row in dead.items())
    types = iceberg_types(table)
    assert (types["id"], types["total"], types["at"], types["day"], types["ref"]) == (
        "long",
        "double",
        "timestamptz",
        "date",
        "uuid",
    )
    assert types["lines"] == "list<struct<sku: string, n: long>>" and types["counts"] == "map<string, long>"
    assert types["coupon"] == "string" and "value" not in types
    assert json.loads(table.properties["tiering.value-schema-ids"]) == list(schema_of)


def test_an_incompatible_json_schema_change_stops_the_export(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer
) -> None:
    js = Json(schema_registry, "carts-required")
    first = js.serialize(CART, [cart(i) for i in range(3)])
    required = {**CART_V2, "required": [*CART["required"], "coupon"]}
    bad = js.serialize(required, [{**cart(4), "coupon": "c"}])[0]
    tier(tiering_env, "carts-required", [first[:2], [bad, first[2]]])
    with_typed_export(tiering_env, tmp_path, schema_registry, **{"carts-required": {"value": "json_schema"}})
    with tiering_env.context() as ctx:
        with pytest.raises(SchemaChangeError) as caught:
            run_export(ctx, "carts-required", commit_bytes=1)
        old, new = WireValue.parse(first[0]).schema_id, WireValue.parse(bad).schema_id
        assert f"value schema id {new} cannot evolve the table's columns (from schema id {old})" in str(caught.value)
        assert "field coupon is added as required without a default" in str(caught.value)
        assert sorted(o for _p, o in rows_by_offset(table_of(ctx, "carts-required"))) == [0, 1]


def test_protobuf_values_read_back_as_the_deserializer_reads_them_dead_letters_and_evolution(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer
) -> None:
    proto = Proto(schema_registry, "proto-payments")
    v1, v2 = message_class(payment_file(1), name="shop.Payment"), message_class(payment_file(2), name="shop.Payment")
    one = proto.serialize(v1, [proto_payment(v1, i) for i in range(6)])
    two = proto.serialize(v2, [proto_payment(v2, i, 2) for i in range(6, 12)])
    class_of = {WireValue.parse(v).schema_id: c for vs, c in ((one, v1), (two, v2)) for v in vs}
    assert len(class_of) == 2
    corrupt = one[0][:6] + b"\x0a\xff"  # a length beyond the payload
    other_message = one[0][:5] + b"\x02\x02" + one[0][6:]  # names the file's second message
    unknown_id = b"\x00" + (2**31 - 11).to_bytes(4, "big") + one[0][5:]
    json_id = Json(schema_registry, "proto-json").serialize(CART, [cart(1)])[0]
    dead_values = [corrupt, other_message, unknown_id, json_id]
    segments = [[*one[:4], corrupt], [*two[:3], one[4], other_message], [unknown_id, json_id, *two[3:], one[5]]]
    sent = tier(tiering_env, "proto-payments", segments)
    with_typed_export(tiering_env, tmp_path, schema_registry, **{"proto-payments": {"value": "protobuf"}})
    with tiering_env.context() as ctx:
        result = run_export(ctx, "proto-payments", commit_bytes=1)
        assert not result.failed and result.dead_letters == len(dead_values) and result.rows == 12
        table = table_of(ctx, "proto-payments")
        rows = {o: row for (_p, o), row in rows_by_offset(table).items()}
        dead = dead_letters_of(ctx, "proto-payments")
    assert set(rows) | set(dead) == set(sent) and not set(rows) & set(dead)
    for offset, row in rows.items():
        data = sent[offset] or b""
        cls = class_of[WireValue.parse(data).schema_id]
        want = proto.deserialize(cls, data)
        assert {k: row[k] for k in want} == want and row["value_schema_id"] == WireValue.parse(data).schema_id
        if cls is v1:
            assert row["channel"] is None
    by_value = {sent[o]: row["reason"] for o, row in dead.items()}
    assert "corrupt Protobuf payload" in by_value[corrupt] and "names message [1]" in by_value[other_message]
    assert f"schema id {2**31 - 11} is unknown" in by_value[unknown_id]
    assert "is a JSON schema, not the topic's protobuf" in by_value[json_id]
    types = iceberg_types(table)
    assert (types["big"], types["at"], types["state"], types["count"]) == (
        "decimal(20, 0)",
        "timestamptz",
        "string",
        "int",
    )
    assert types["counts"] == "map<string, long>" and types["channel"] == "string"
    assert json.loads(table.properties["tiering.value-schema-ids"]) == list(class_of)
