"""Schema Registry-encoded record values: the Confluent wire format and the registry's schemas.

A producer's serializer (Confluent's Avro, Protobuf and JSON Schema serializers, and the
registries that speak its API) writes each value as one magic byte 0, the schema's id as a 4-byte
big-endian integer, then the payload. An export decodes a value with the schema its id names,
fetched once per id from the registry's Confluent-compatible API (``GET /schemas/ids/{id}``; a
Protobuf schema as its serialized file descriptor, ``?format=serialized``) and kept for the run: a
schema id never changes its schema.

What cannot be decoded is never dropped: ``UndecodableValue`` says why (bad magic, too short,
an id the registry does not know), so the caller can keep the record's raw bytes as a dead letter.
The registry's answers are bounded in size and time; its credentials never appear in a message.
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tiering_core.errors import TieringError, one_line

#: The Confluent wire format's magic byte, and its header: the magic byte and a 4-byte schema id.
MAGIC_BYTE = 0
HEADER_SIZE = 5
#: A schema's document may be large (a generated Protobuf file), never this large.
MAX_SCHEMA_BYTES = 4 * 1024 * 1024
#: How long one request to the registry may take.
REQUEST_TIMEOUT_S = 10.0
#: The schema types the Confluent API names (``schemaType``; absent means Avro).
AVRO = "AVRO"
PROTOBUF = "PROTOBUF"
JSON_SCHEMA = "JSON"
SCHEMA_TYPES = (AVRO, PROTOBUF, JSON_SCHEMA)


class SchemaRegistryError(TieringError):
    """The registry could not be asked, or answered something that is not a schema."""


class UndecodableValue(TieringError):
    """A value that cannot be decoded with its schema: ``reason`` is what a dead letter keeps."""

    def __init__(self, reason: str, schema_id: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.schema_id = schema_id


class UnknownSchemaError(UndecodableValue):
    """The registry holds no schema of this id (deleted, or a value from another registry)."""

    def __init__(self, schema_id: int) -> None:
        super().__init__(f"schema id {schema_id} is unknown to the schema registry", schema_id)


@dataclass(frozen=True)
class WireValue:
    """A value in the Confluent wire format: the schema id it names and its payload."""

    schema_id: int
    payload: bytes

    @classmethod
    def parse(cls, value: bytes | None) -> WireValue:
        if value is None:
            raise UndecodableValue("the value is null (a tombstone): no schema id")
        if len(value) < HEADER_SIZE:
            raise UndecodableValue(f"the value has {len(value)} byte(s), fewer than the wire format's {HEADER_SIZE}")
        if value[0] != MAGIC_BYTE:
            raise UndecodableValue(f"the value starts with byte {value[0]}, not the wire format's magic byte 0")
        return cls(int.from_bytes(value[1:HEADER_SIZE], "big"), bytes(value[HEADER_SIZE:]))


@dataclass(frozen=True)
class WireFrames:
    """A column of wire-format values split in one pass over Arrow's buffers, not value by value:
    each value's schema id and payload, both None where ``WireValue.parse`` refuses the value (it
    says why)."""

    schema_ids: list[int | None]
    payloads: list[bytes | None]

    @classmethod
    def of(cls, values: pa.Array) -> WireFrames:
        lengths = pc.binary_length(values)
        framed = pc.fill_null(
            pc.and_(
                pc.greater_equal(lengths, HEADER_SIZE),
                pc.equal(pc.binary_slice(values, 0, 1), pa.scalar(bytes([MAGIC_BYTE]), values.type)),
            ),
            False,
        )
        headers = pc.binary_slice(values.filter(framed), 1, HEADER_SIZE).cast(pa.binary(HEADER_SIZE - 1))
        found = iter(np.frombuffer(headers.buffers()[1], ">u4", len(headers), headers.offset * 4).tolist())
        ids: list[int | None] = [next(found) if ok else None for ok in framed.to_pylist()]
        longest = max(int(pc.max(lengths).as_py() or 0), HEADER_SIZE)  # binary_slice wants a stop
        payloads = pc.if_else(framed, pc.binary_slice(values, HEADER_SIZE, longest), None).to_pylist()
        return cls(ids, payloads)


@dataclass(frozen=True)
class WireColumn:
    """A column of wire-format values as numpy views of Arrow's buffers, no object per value:
    the bytes, each payload's start and end in them, and each value's schema id (-1 where
    ``WireValue.parse`` refuses the value: it says why)."""

    data: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    schema_ids: np.ndarray

    @classmethod
    def of(cls, values: pa.Array) -> WireColumn:
        values = values.cast(pa.large_binary())  # 64-bit offsets, the bytes shared
        n = len(values)
        buffers = values.buffers()
        offsets = np.frombuffer(buffers[1], np.int64, n + 1, values.offset * 8)
        data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
        starts, ends = offsets[:-1], offsets[1:]
        framed = (ends - starts >= HEADER_SIZE) & values.is_valid().to_numpy(zero_copy_only=False)
        ids = np.zeros(n, np.int64)
        if framed.any():  # then the bytes hold a header: index 0 reads where a value is not framed
            head = np.where(framed, starts, 0)
            framed &= data[head] == MAGIC_BYTE
            for k in range(1, HEADER_SIZE):
                ids = (ids << 8) | data[head + k].astype(np.int64)
        return cls(data, starts + HEADER_SIZE, ends, np.where(framed, ids, -1))


@dataclass(frozen=True)
class RegisteredSchema:
    """One schema as the registry serves it by id."""

    schema_id: int
    schema_type: str
    text: str
    references: tuple[Mapping[str, object], ...] = ()


@dataclass(frozen=True)
class RegistryEndpoint:
    """Where the registry is and who asks it (the password is never printed)."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SchemaRegistryError(f"schema registry url {self.shown!r} is not an http(s) URL")
        if parts.username or parts.password:
            raise SchemaRegistryError("the schema registry url must not carry credentials: give username and password")

    @property
    def shown(self) -> str:
        """The URL as messages name it: without any user information."""
        parts = urllib.parse.urlsplit(self.url)
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class SchemaRegistry:
    """The schemas of a Confluent-compatible registry by id, each fetched once."""

    def __init__(self, endpoint: RegistryEndpoint, *, timeout: float = REQUEST_TIMEOUT_S) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self._schemas: dict[int, RegisteredSchema] = {}
        self._references: dict[tuple[str, int], RegisteredSchema] = {}
        self._subjects: dict[int, frozenset[str]] = {}
        self._lock = threading.Lock()

    def schema(self, schema_id: int) -> RegisteredSchema:
        with self._lock:
            known = self._schemas.get(schema_id)
        if known is not None:
            return known
        fetched = self._fetch(schema_id)
        with self._lock:
            return self._schemas.setdefault(schema_id, fetched)

    def _fetch(self, schema_id: int) -> RegisteredSchema:
        what = f"schema id {schema_id}"
        text, schema_type, references = self._parse(self._get(f"/schemas/ids/{schema_id}", schema_id), what)
        if schema_type == PROTOBUF:  # its file as a FileDescriptorProto, not .proto text to parse
            path = f"/schemas/ids/{schema_id}?format=serialized"
            text, schema_type, references = self._parse(self._get(path, schema_id), what)
        return RegisteredSchema(schema_id, schema_type, text, references)

    def subjects(self, schema_id: int, *, fresh: bool = False) -> frozenset[str]:
        """The subjects the schema of ``schema_id`` is a version of (``GET
        /schemas/ids/{id}/versions``), fetched once, or again when ``fresh`` (a schema registered
        under one more subject keeps its id: the list grows)."""
        with self._lock:
            known = None if fresh else self._subjects.get(schema_id)
        if known is not None:
            return known
        raw = self._get(f"/schemas/ids/{schema_id}/versions", schema_id)
        try:
            fetched = frozenset(str(v["subject"]) for v in json.loads(raw))
        except (ValueError, KeyError, TypeError) as exc:
            raise SchemaRegistryError(
                f"schema registry {self.endpoint.shown}: schema id {schema_id}: not a list of subject versions "
                f"({one_line(exc)})"
            ) from exc
        with self._lock:
            self._subjects[schema_id] = fetched
        return fetched

    def reference(self, subject: str, version: int) -> RegisteredSchema:
        """A schema's reference (a Protobuf file it imports) by its subject and version, fetched
        once, serialized as ids are (``schema_id`` is the registry's id of that version)."""
        with self._lock:
            known = self._references.get((subject, version))
        if known is not None:
            return known
        what = f"subject {subject!r} version {version}"
        path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/{int(version)}?format=serialized"
        raw = self._get(path, None, what)
        text, schema_type, references = self._parse(raw, what)
        try:
            schema_id = int(json.loads(raw).get("id", -1))
        except (ValueError, TypeError, AttributeError):
            schema_id = -1
        fetched = RegisteredSchema(schema_id, schema_type, text, references)
        with self._lock:
            return self._references.setdefault((subject, version), fetched)

    def _parse(self, raw: bytes, what: str) -> tuple[str, str, tuple[Mapping[str, object], ...]]:
        try:
            answer = json.loads(raw)
            text = answer["schema"]
            schema_type = answer.get("schemaType") or AVRO
            references = tuple(answer.get("references") or ())
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SchemaRegistryError(
                f"schema registry {self.endpoint.shown}: {what}: not a schema ({one_line(exc)})"
            ) from exc
        if not isinstance(text, str) or schema_type not in SCHEMA_TYPES:
            raise SchemaRegistryError(
                f"schema registry {self.endpoint.shown}: {what} has type {schema_type!r}, "
                f"not one of {', '.join(SCHEMA_TYPES)}"
            )
        return text, schema_type, references

    def _get(self, path: str, schema_id: int | None, what: str | None = None) -> bytes:
        what = what or f"schema id {schema_id}"
        request = urllib.request.Request(self.endpoint.url.rstrip("/") + path)
        request.add_header("Accept", "application/vnd.schemaregistry.v1+json, application/json")
        if self.endpoint.username is not None:
            token = f"{self.endpoint.username}:{self.endpoint.password or ''}".encode()
            request.add_header("Authorization", "Basic " + base64.b64encode(token).decode())
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body: bytes = response.read(MAX_SCHEMA_BYTES + 1)
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and schema_id is not None:
                raise UnknownSchemaError(schema_id) from exc
            raise SchemaRegistryError(
                f"schema registry {self.endpoint.shown}: {what}: HTTP {exc.code} {exc.reason}"
            ) from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SchemaRegistryError(
                f"schema registry {self.endpoint.shown} did not answer: {one_line(reason)}"
            ) from exc
        if len(body) > MAX_SCHEMA_BYTES:
            raise SchemaRegistryError(
                f"schema registry {self.endpoint.shown}: {what} is larger than {MAX_SCHEMA_BYTES} bytes"
            )
        return body
