"""The Confluent wire format and schemas by id, against a real registry written to by Confluent's
own serializer."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient, record_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.export.registry_server import RegistryServer
from tiering_core.export.registry import (
    MAX_SCHEMA_BYTES,
    RegistryEndpoint,
    SchemaRegistry,
    SchemaRegistryError,
    UndecodableValue,
    UnknownSchemaError,
    WireColumn,
    WireFrames,
    WireValue,
)

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "note", "type": ["null", "string"], "default": None}],
}


def _serialize(registry: RegistryServer, topic: str, schema: dict, value: object) -> bytes:  # type: ignore[type-arg]
    serializer = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(schema))
    out = serializer(value, SerializationContext(topic, MessageField.VALUE))
    assert out is not None
    return out


def test_a_serialized_value_names_the_schema_the_registry_serves(schema_registry: RegistryServer) -> None:
    data = _serialize(schema_registry, "registry-orders", ORDER, {"id": 7, "note": "x"})
    wire = WireValue.parse(data)
    registry = SchemaRegistry(RegistryEndpoint(schema_registry.url))
    got = registry.schema(wire.schema_id)
    assert got.schema_id == wire.schema_id and got.schema_type == "AVRO"
    assert json.loads(got.text)["name"] in ("Order", "shop.Order")
    assert wire.payload == data[5:]
    assert registry.schema(wire.schema_id) is got  # fetched once


def test_the_subjects_of_a_schema_id_are_those_it_was_registered_under(schema_registry: RegistryServer) -> None:
    client = SchemaRegistryClient({"url": schema_registry.url})
    schema = {**ORDER, "name": "Receipt"}
    ctx = SerializationContext("registry-receipts", MessageField.VALUE)
    by_topic = AvroSerializer(client, json.dumps(schema))({"id": 1, "note": None}, ctx)
    registry = SchemaRegistry(RegistryEndpoint(schema_registry.url))
    schema_id = WireValue.parse(by_topic).schema_id
    assert registry.subjects(schema_id) == {"registry-receipts-value"}
    conf = {"subject.name.strategy": record_subject_name_strategy}
    by_record = AvroSerializer(client, json.dumps(schema), conf=conf)({"id": 2, "note": None}, ctx)
    assert WireValue.parse(by_record).schema_id == schema_id  # the same schema: the same id
    assert registry.subjects(schema_id) == {"registry-receipts-value"}  # kept
    assert registry.subjects(schema_id, fresh=True) == {"registry-receipts-value", "shop.Receipt"}  # asked again
    assert registry.subjects(schema_id) == {"registry-receipts-value", "shop.Receipt"}
    with pytest.raises(UnknownSchemaError):
        registry.subjects(987655)


def test_an_unknown_id_is_a_dead_letter_reason_not_a_failure(schema_registry: RegistryServer) -> None:
    registry = SchemaRegistry(RegistryEndpoint(schema_registry.url))
    with pytest.raises(UnknownSchemaError, match="schema id 987654 is unknown") as caught:
        registry.schema(987654)
    assert isinstance(caught.value, UndecodableValue) and caught.value.schema_id == 987654


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "null"),
        (b"\x00\x00\x01", "fewer than the wire format's 5"),
        (b'{"json": 1}', "not the wire format's magic byte 0"),
    ],
)
def test_values_outside_the_wire_format_are_named(value: bytes | None, reason: str) -> None:
    with pytest.raises(UndecodableValue, match=reason):
        WireValue.parse(value)


@pytest.mark.parametrize("value_type", [pa.binary(), pa.large_binary()])
def test_a_column_split_at_once_reads_as_each_value_parsed_alone(value_type: pa.DataType) -> None:
    values = [
        b"\x00" + (258).to_bytes(4, "big") + b"payload",
        None,
        b"\x00\x00\x01",
        b"",
        b"\x01" + bytes(9),
        b"\x00" + (2**32 - 1).to_bytes(4, "big"),
        b"\x00" + (7).to_bytes(4, "big") + bytes(300),
    ]
    column = pa.array([b"-", *values, b"-"], value_type).slice(1, len(values))  # an offset into shared buffers
    frames = WireFrames.of(column)
    for value, schema_id, payload in zip(values, frames.schema_ids, frames.payloads, strict=True):
        try:
            wire = WireValue.parse(value)
        except UndecodableValue:
            assert (schema_id, payload) == (None, None), value
        else:
            assert (schema_id, payload) == (wire.schema_id, wire.payload), value
    assert frames.schema_ids.count(None) == 4
    wire = WireColumn.of(column)  # the same split, as views of the column's buffers
    for i, (schema_id, payload) in enumerate(zip(frames.schema_ids, frames.payloads, strict=True)):
        assert int(wire.schema_ids[i]) == (-1 if schema_id is None else schema_id), values[i]
        if payload is not None:
            assert wire.data[wire.starts[i] : wire.ends[i]].tobytes() == payload


def test_an_empty_column_splits_into_nothing() -> None:
    assert WireFrames.of(pa.array([], pa.binary())) == WireFrames([], [])
    assert len(WireColumn.of(pa.array([], pa.binary())).schema_ids) == 0
    assert WireColumn.of(pa.array([None, b""], pa.binary())).schema_ids.tolist() == [-1, -1]


class _Answers(BaseHTTPRequestHandler):
    body = b""
    status = 200
    seen_auth: list[str] = []
    seen_paths: list[str] = []

    def do_GET(self) -> None:
        self.seen_auth.append(self.headers.get("Authorization", ""))
        self.seen_paths.append(self.path)
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def fake_registry() -> Iterator[tuple[str, type[_Answers]]]:
    """A registry that answers what a test sets: for faults the real one never shows."""
    handler = type("Answers", (_Answers,), {"seen_auth": [], "seen_paths": []})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_hostile_answers_are_bounded_and_named(fake_registry: tuple[str, type[_Answers]]) -> None:
    url, handler = fake_registry
    handler.body = b"x" * (MAX_SCHEMA_BYTES + 10)
    with pytest.raises(SchemaRegistryError, match="larger than"):
        SchemaRegistry(RegistryEndpoint(url)).schema(1)
    handler.body = b'{"schema": "{}", "schemaType": "XML"}'
    with pytest.raises(SchemaRegistryError, match="has type 'XML'"):
        SchemaRegistry(RegistryEndpoint(url)).schema(2)
    handler.body, handler.status = b"oops", 500
    with pytest.raises(SchemaRegistryError, match="HTTP 500"):
        SchemaRegistry(RegistryEndpoint(url)).schema(3)


def test_credentials_are_sent_and_never_shown(fake_registry: tuple[str, type[_Answers]]) -> None:
    url, handler = fake_registry
    handler.body, handler.status = b"nope", 401
    endpoint = RegistryEndpoint(url, username="exporter", password="s3cret-pass")
    with pytest.raises(SchemaRegistryError) as caught:
        SchemaRegistry(endpoint).schema(1)
    assert "s3cret" not in str(caught.value) and "s3cret" not in repr(endpoint)
    assert handler.seen_auth == ["Basic ZXhwb3J0ZXI6czNjcmV0LXBhc3M="]
    with pytest.raises(SchemaRegistryError, match="must not carry credentials") as refused:
        RegistryEndpoint("http://user:s3cret-pass@127.0.0.1:1")
    assert "s3cret" not in str(refused.value)
    with pytest.raises(SchemaRegistryError, match="not an http"):
        RegistryEndpoint("file:///etc/passwd")


def test_an_unreachable_registry_is_one_line() -> None:
    from tests.services import free_port

    registry = SchemaRegistry(RegistryEndpoint(f"http://127.0.0.1:{free_port()}/apis/ccompat/v7"), timeout=2)
    with pytest.raises(SchemaRegistryError, match="did not answer") as caught:
        registry.schema(1)
    assert "\n" not in str(caught.value)


def test_a_protobuf_schema_and_its_references_are_asked_serialized(fake_registry: tuple[str, type[_Answers]]) -> None:
    url, handler = fake_registry
    handler.body = b'{"schema": "CgFh", "schemaType": "PROTOBUF", "id": 4, "references": [{"name": "b.proto"}]}'
    registry = SchemaRegistry(RegistryEndpoint(url + "/ccompat"))
    got = registry.schema(4)
    assert (got.schema_type, got.text, got.references) == ("PROTOBUF", "CgFh", ({"name": "b.proto"},))
    reference = registry.reference("shop/b.proto", 2)
    assert registry.reference("shop/b.proto", 2) is reference and reference.schema_id == 4  # fetched once
    assert handler.seen_paths == [
        "/ccompat/schemas/ids/4",
        "/ccompat/schemas/ids/4?format=serialized",
        "/ccompat/subjects/shop%2Fb.proto/versions/2?format=serialized",
    ]


def test_a_missing_reference_names_its_subject_and_version(schema_registry: RegistryServer) -> None:
    registry = SchemaRegistry(RegistryEndpoint(schema_registry.url))
    with pytest.raises(SchemaRegistryError, match=r"subject 'no/such\.proto' version 3: HTTP 404") as caught:
        registry.reference("no/such.proto", 3)
    assert not isinstance(caught.value, UndecodableValue)
