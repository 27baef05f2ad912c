"""Typed exports end to end: values Confluent's AvroSerializer wrote through the real registry,
tiered by the platform's copy, exported, and every row read back by pyiceberg and DuckDB equal to
what Confluent's AvroDeserializer makes of the record's bytes; dead letters beside them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest
from confluent_kafka.schema_registry import record_subject_name_strategy
from confluent_kafka.serialization import MessageField

from tests.engine_support import TieringEnv
from tests.export.proto_files import F, Proto, descriptor_file, field, message, message_class
from tests.export.registry_server import RegistryServer
from tests.export.support import export_killed_at_commit, table_of, wait_until_table_is_free, with_lease_ms
from tests.export.typed_support import (
    PAYMENT,
    TIP_V1,
    TIP_V2,
    TIP_V3,
    Avro,
    Json,
    dead_letters_of,
    iceberg_types,
    payment,
    rows_by_offset,
    rows_by_offset_alone,
    tier,
    tier_records,
    tip,
    value_of,
    with_fields,
    with_typed_export,
)
from tiering_core.errors import ExportError
from tiering_core.export import run_export
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
        rows = rows_by_offset_alone(table_of(ctx, "refunds"))
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


def test_compatible_schema_changes_evolve_the_table_old_rows_keep_their_schema_id(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer
) -> None:
    avro = Avro(schema_registry, "tips")
    one = avro.serialize(TIP_V1, [tip(i, 1) for i in range(4)])
    two = avro.serialize(TIP_V2, [tip(i, 2) for i in range(4, 8)])
    three = avro.serialize(TIP_V3, [tip(i, 3) for i in range(8, 11)])
    schema_of = {
        WireValue.parse(v).schema_id: s for vs, s in ((one, TIP_V1), (two, TIP_V2), (three, TIP_V3)) for v in vs
    }
    assert len(schema_of) == 3
    # a segment per version, then one where an old producer's values follow the newest's
    sent = tier(tiering_env, "tips", [[*one], [*two], [three[0], one[0], three[1]], [one[1], three[2]]])
    with_typed_export(tiering_env, tmp_path, schema_registry, tips={"value": "avro"})
    with tiering_env.context() as ctx:
        result = run_export(ctx, "tips", commit_bytes=1)  # a commit per segment: the table evolves in them
        assert not result.failed and result.dead_letters == 0 and len(result.snapshots) == 4
        table = table_of(ctx, "tips")
        rows = rows_by_offset_alone(table)
    assert set(rows) == set(sent)
    for offset, row in rows.items():
        data = sent[offset] or b""
        writer = schema_of[WireValue.parse(data).schema_id]
        assert row["value_schema_id"] == WireValue.parse(data).schema_id
        assert value_of(row, writer) == avro.deserialize(data)
        added = {f["name"] for f in TIP_V2["fields"]} - {f["name"] for f in writer["fields"]}
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
        (with_fields(TIP_V1, amount="string"), {"amount": "x"}, False, "field amount changes from float to string"),
        (
            with_fields(TIP_V1, {"name": "region", "type": "string"}),
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
    first = avro.serialize(TIP_V1, [tip(i, 1) for i in range(5)])
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
    export_killed_at_commit(tiering_env.config_path, "orders-typed", tmp_path / "flag", commit=2)
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
        rows = rows_by_offset_alone(table_of(ctx, "counters_typed"))
        want = {o: avro.deserializer(v, avro.ctx) for o, v in sent.items()}
        assert {o: row["value"] for o, row in rows.items()} == want
        assert run_export(ctx, "counters").snapshots == []  # its own `value` column (a long) is no table of bytes


KEY: dict[str, Any] = {
    "type": "object",
    "properties": {"user": {"type": "integer"}, "region": {"type": "string"}},
    "required": ["user"],
}


def test_decoded_keys_are_a_column_beside_their_bytes_with_the_value_decoded_or_not(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer
) -> None:
    keys = Json(schema_registry, "keyed", MessageField.KEY)
    avro = Avro(schema_registry, "keyed")
    values = avro.serialize(PAYMENT, [payment(i) for i in range(6)])
    key_bytes = keys.serialize(KEY, [{"user": i} | ({"region": "eu"} if i % 2 else {}) for i in range(6)])
    refused_key = key_bytes[0][:5] + b'{"user": "x"}'
    records = [*zip(key_bytes, values, strict=True), (None, values[0]), (refused_key, values[1]), (key_bytes[1], b"x")]
    sent = tier_records(tiering_env, "keyed", [records[:4], records[4:]])
    Key = message_class(descriptor_file("k.proto", message("K", field("id", 1, F.TYPE_INT64))), name="shop.K")
    proto_keys = Proto(schema_registry, "keyed-bytes", MessageField.KEY)
    raw = proto_keys.serialize(Key, [Key(id=i) for i in range(3)])
    bytes_sent = tier_records(tiering_env, "keyed-bytes", [[(k, f"v{i}".encode()) for i, k in enumerate(raw)]])
    with_typed_export(
        tiering_env,
        tmp_path,
        schema_registry,
        keyed={"key": "json_schema", "value": "avro"},
        **{"keyed-bytes": {"key": "protobuf"}},
    )
    with tiering_env.context() as ctx:
        result = run_export(ctx, "keyed")
        assert not result.failed and result.rows == 7 and result.dead_letters == 2
        table = table_of(ctx, "keyed")
        rows = rows_by_offset_alone(table)
        dead = dead_letters_of(ctx, "keyed")
        assert run_export(ctx, "keyed-bytes").rows == 3
        plain = rows_by_offset_alone(table_of(ctx, "keyed-bytes"))
    for offset, row in rows.items():
        key, value = sent[offset]
        assert row["key"] == key and value_of(row, PAYMENT) == avro.deserialize(value or b"")
        if key is None:  # a null key is no dead letter: its columns are null
            assert row["key_fields"] is None and row["key_schema_id"] is None
        else:
            assert row["key_fields"] == keys.deserialize(key, KEY)
            assert row["key_schema_id"] == WireValue.parse(key).schema_id
    assert "the key: JSON payload for schema id" in dead[7]["reason"] and dead[7]["key"] == refused_key
    assert dead[8]["reason"].startswith("the value has 1 byte(s), fewer than")  # the value's, the key's good
    assert iceberg_types(table)["key_fields"] == "struct<user: long, region: string>"
    assert json.loads(table.properties["tiering.key-schema-ids"]) == [WireValue.parse(key_bytes[0]).schema_id]
    for offset, row in plain.items():
        key, value = bytes_sent[offset]
        assert row["value"] == value and row["key"] == key
        assert row["key_fields"] == proto_keys.deserialize(Key, key or b"") and "value_schema_id" not in row


def test_a_schema_outside_the_subject_the_strategy_names_is_a_dead_letter(
    tiering_env: TieringEnv, tmp_path: Path, schema_registry: RegistryServer
) -> None:
    by_record = Avro(schema_registry, "by-record", conf={"subject.name.strategy": record_subject_name_strategy})
    own = by_record.serialize(TIP_V1, [tip(i, 1) for i in range(3)])  # under the subject shop.Tip
    by_topic = Avro(schema_registry, "by-record").serialize(TIP_V2, [tip(9, 2)])[0]  # under by-record-value alone
    elsewhere = Avro(schema_registry, "elsewhere").serialize(TIP_V3, [tip(8, 3)])[0]  # under elsewhere-value alone
    sent = tier(tiering_env, "by-record", [[*own, by_topic]])
    sent_topic = tier(
        tiering_env, "by-topic", [[*Avro(schema_registry, "by-topic").serialize(TIP_V1, [tip(5, 1)]), elsewhere]]
    )
    tier(tiering_env, "unchecked", [[elsewhere]])  # no strategy set: ids alone, as before strategies
    with_typed_export(
        tiering_env,
        tmp_path,
        schema_registry,
        **{
            "by-record": {"value": "avro", "subject_strategy": "record"},
            "by-topic": {"value": "avro", "subject_strategy": "topic"},
            "unchecked": {"value": "avro"},
        },
    )
    with tiering_env.context() as ctx:
        assert run_export(ctx, "by-record").rows == 3 and run_export(ctx, "by-topic").rows == 1
        rows = rows_by_offset_alone(table_of(ctx, "by-record"))
        dead = dead_letters_of(ctx, "by-record")
        dead_topic = dead_letters_of(ctx, "by-topic")
        assert run_export(ctx, "unchecked").rows == 1 and dead_letters_of(ctx, "unchecked") == {}
    assert sorted(rows) == [0, 1, 2] and all(
        value_of(rows[o], TIP_V1) == by_record.deserialize(sent[o] or b"") for o in rows
    )
    by_topic_id, elsewhere_id = WireValue.parse(by_topic).schema_id, WireValue.parse(elsewhere).schema_id
    assert (
        dead[3]["reason"]
        == f"schema id {by_topic_id} is no version of the subject 'shop.Tip' (record subject strategy)"
    )
    assert dead_topic[1]["reason"] == (
        f"schema id {elsewhere_id} is no version of the subject 'by-topic-value' (topic subject strategy)"
    )
    assert dead_topic[1]["value"] == sent_topic[1] == elsewhere
