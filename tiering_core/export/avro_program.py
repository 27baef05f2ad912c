"""An Avro writer schema compiled into the flat program ``export.avro_kernel`` runs, and the
Arrow arrays built from the buffers it fills.

Each schema maps as ``export.avro``'s table says, into the same Arrow types (the caller's
``arrow_type``): a record is a struct column (its validity), an array or map a list column
(offsets, then its items'), a union with null the value's column with a null where the branch is
null, each leaf a column of Arrow's own layout (a boolean a byte per value until it is packed,
an enum its symbol's index until it is taken). ``compile_program`` returns None for a schema the
program does not express: one whose array items may take no bytes (a record without fields), as
a block's item count is bounded by the bytes left; such a schema is decoded by fastavro.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from tiering_core.export.avro_kernel import (
    DUPLICATE_MAP_KEY,
    OP_BOOL,
    OP_COPY,
    OP_DECIMAL,
    OP_ENUM,
    OP_LIST,
    OP_LIST_END,
    OP_RECORD,
    OP_UNION,
    OP_VAR,
    OP_VARINT,
    PROGRAM_WIDTH,
    decode_rows,
)

#: The microseconds since the epoch a Python datetime holds (years 1 to 9999): fastavro's
#: timestamps, dates and times are Python's, and a value outside them does not decode.
_EPOCH = dt.datetime(1970, 1, 1)
MIN_MICROS = (dt.datetime.min - _EPOCH) // dt.timedelta(microseconds=1)
MAX_MICROS = (dt.datetime.max - _EPOCH) // dt.timedelta(microseconds=1)
_DAYS_SHIFT = dt.date(1970, 1, 1).toordinal()
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_DAY_MILLIS = 86_400_000
#: (range of the value written, multiplier into the column, column bytes) of each varint type.
_VARINTS: dict[tuple[str, str | None], tuple[tuple[int, int], int, int]] = {
    ("int", None): (_INT32, 1, 4),
    ("long", None): (_INT64, 1, 8),
    ("int", "date"): ((1 - _DAYS_SHIFT, dt.date.max.toordinal() - _DAYS_SHIFT), 1, 4),
    ("int", "time-millis"): ((0, _DAY_MILLIS - 1), 1000, 8),
    ("long", "time-micros"): ((0, _DAY_MILLIS * 1000 - 1), 1, 8),
    ("long", "timestamp-millis"): ((-(-MIN_MICROS // 1000), MAX_MICROS // 1000), 1000, 8),
    ("long", "local-timestamp-millis"): ((-(-MIN_MICROS // 1000), MAX_MICROS // 1000), 1000, 8),
    ("long", "timestamp-micros"): ((MIN_MICROS, MAX_MICROS), 1, 8),
    ("long", "local-timestamp-micros"): ((MIN_MICROS, MAX_MICROS), 1, 8),
}
_FIXED_BYTES = {"float": 4, "double": 8}


@dataclass(frozen=True)
class Column:
    """One column's buffers: ``width`` bytes a slot (0: none), offsets or not, bytes or not."""

    width: int = 0
    offsets: bool = False
    variable: bool = False


@dataclass(frozen=True)
class Node:
    """A column of the Arrow value: its kind (``record``, ``list``, ``map``, ``enum``, ``bool``,
    ``leaf``), its buffers' column and its children's nodes (a map's: key, value)."""

    kind: str
    column: int
    children: tuple[Node, ...] = ()
    symbols: tuple[str, ...] = ()


@dataclass(frozen=True)
class AvroProgram:
    """A schema's program (``PROGRAM_WIDTH`` integers an instruction), its columns and its root."""

    code: np.ndarray
    columns: tuple[Column, ...]
    root: Node


@dataclass
class _Compiler:
    rows: list[list[int]] = field(default_factory=list)
    columns: list[Column] = field(default_factory=list)
    named: dict[str, Any] = field(default_factory=dict)

    def emit(self, op: int, column: Column | None, *operands: int) -> int:
        col = -1
        if column is not None:
            col = len(self.columns)
            self.columns.append(column)
        self.rows.append([op, col, *operands, *[0] * (PROGRAM_WIDTH - 2 - len(operands))])
        return len(self.rows) - 1

    def node(self, schema: Any, namespace: str) -> tuple[Node, int] | None:
        """``schema``'s node and the fewest bytes a value of it takes (None: not expressible)."""
        if isinstance(schema, list):
            null = schema.index("null") if "null" in schema else -1
            branch = next(i for i, b in enumerate(schema) if b != "null")
            at = self.emit(OP_UNION, None, null, 0, branch)
            inner = self.node(schema[branch], namespace)
            self.rows[at][3] = len(self.rows)
            return None if inner is None else (inner[0], 1)
        if isinstance(schema, str):
            return self.named_node(schema, namespace)
        kind, logical = schema["type"], schema.get("logicalType")
        if logical == "decimal" and kind in ("bytes", "fixed"):
            size = int(schema["size"]) if kind == "fixed" else -1
            if kind == "fixed":
                self.define(schema, namespace)
            at = self.emit(OP_DECIMAL, Column(width=16), int(schema["precision"]), size)
            return Node("leaf", self.rows[at][1]), max(size, 1)
        if isinstance(kind, str) and (kind, logical) in _VARINTS:
            return self.varint(kind, logical)
        if kind in ("record", "error"):
            return self.record(schema, namespace)
        if kind == "enum":
            self.define(schema, namespace)
            at = self.emit(OP_ENUM, Column(width=4), len(schema["symbols"]))
            return Node("enum", self.rows[at][1], symbols=tuple(schema["symbols"])), 1
        if kind == "fixed":
            self.define(schema, namespace)
            at = self.emit(OP_COPY, Column(width=int(schema["size"])), int(schema["size"]))
            return Node("leaf", self.rows[at][1]), int(schema["size"])
        if kind in ("array", "map"):
            return self.list_node(schema, namespace)
        return self.node(kind, namespace)

    def varint(self, kind: str, logical: str | None) -> tuple[Node, int]:
        (low, high), multiplier, width = _VARINTS.get((kind, logical)) or _VARINTS[(kind, None)]
        at = self.emit(OP_VARINT, Column(width=width), low, high, multiplier, width)
        return Node("leaf", self.rows[at][1]), 1

    def named_node(self, name: str, namespace: str) -> tuple[Node, int] | None:
        if name in ("int", "long"):
            return self.varint(name, None)
        if name == "boolean":
            at = self.emit(OP_BOOL, Column(width=1))
            return Node("bool", self.rows[at][1]), 1
        if name in _FIXED_BYTES:
            at = self.emit(OP_COPY, Column(width=_FIXED_BYTES[name]), _FIXED_BYTES[name])
            return Node("leaf", self.rows[at][1]), _FIXED_BYTES[name]
        if name in ("string", "bytes"):
            at = self.emit(OP_VAR, Column(offsets=True, variable=True), 1 if name == "string" else 0, 0)
            return Node("leaf", self.rows[at][1]), 1
        full = name if "." in name or not namespace else f"{namespace}.{name}"
        definition = self.named.get(full) or self.named[name]
        return self.node(definition, str(definition.get("namespace", namespace)))

    def define(self, schema: dict[str, Any], namespace: str) -> str:
        name = str(schema["name"])
        inner = str(schema.get("namespace", namespace if "." not in name else name.rsplit(".", 1)[0]))
        full = name if "." in name or not inner else f"{inner}.{name}"
        definition = {**schema, "namespace": inner}
        self.named[full] = definition
        self.named.setdefault(name, definition)
        return inner

    def record(self, schema: dict[str, Any], namespace: str) -> tuple[Node, int] | None:
        inner = self.define(schema, namespace)
        at = self.emit(OP_RECORD, Column())
        children, least = [], 0
        for f in schema.get("fields", ()):
            child = self.node(f["type"], inner)
            if child is None:
                return None
            children.append(child[0])
            least += child[1]
        return Node("record", self.rows[at][1], tuple(children)), least

    def list_node(self, schema: dict[str, Any], namespace: str) -> tuple[Node, int] | None:
        is_map = schema["type"] == "map"
        at = self.emit(OP_LIST, Column(offsets=True), 0, 1 if is_map else 0)
        children: list[Node] = []
        if is_map:
            key = self.emit(OP_VAR, Column(offsets=True, variable=True), 1, 1)
            children.append(Node("leaf", self.rows[key][1]))
        item = self.node(schema["values" if is_map else "items"], namespace)
        if item is None or (item[1] == 0 and not is_map):
            return None  # items of no bytes: a block count bounds nothing
        children.append(item[0])
        self.emit(OP_LIST_END, None, at)
        self.rows[at][2] = len(self.rows)
        return Node("map" if is_map else "list", self.rows[at][1], tuple(children)), 1


def compile_program(schema: Any, wrapped: bool) -> AvroProgram | None:
    """The program decoding ``schema`` (parsed JSON, uuids plain strings; ``wrapped``: its value
    is the one field of a record), or None when it cannot be expressed."""
    compiler = _Compiler()
    if wrapped:
        at = compiler.emit(OP_RECORD, Column())
        inner = compiler.node(schema, "")
        built = None if inner is None else (Node("record", compiler.rows[at][1], (inner[0],)), inner[1])
    else:
        built = compiler.node(schema, "")
    if built is None:
        return None
    code = np.array(compiler.rows, np.int64).reshape(-1, PROGRAM_WIDTH)
    return AvroProgram(code, tuple(compiler.columns), built[0])


@dataclass(frozen=True)
class ProgramRun:
    """A batch through a program: each payload's status (``avro_kernel``'s code), the byte it
    stopped at and the value its error names; and the struct array of those that decoded, in
    order (None when a payload asked for another decoder: ``DUPLICATE_MAP_KEY``)."""

    status: np.ndarray
    where: np.ndarray
    value: np.ndarray
    array: pa.Array | None


def run_program(program: AvroProgram, arrow_type: pa.DataType, buf: np.ndarray, starts: np.ndarray,
                ends: np.ndarray) -> ProgramRun:  # fmt: skip
    """The payloads ``buf[starts[i]:ends[i]]`` decoded into an array of ``arrow_type``."""
    rows, ncol = len(starts), len(program.columns)
    status, where, value = (np.zeros(rows, np.int64) for _ in range(3))
    slots, items, dlen = (np.zeros(ncol, np.int64) for _ in range(3))
    empty8, empty32, bases = np.zeros(0, np.uint8), np.zeros(0, np.int32), np.zeros(ncol, np.int64)
    args = (slots, items, dlen, empty8, bases, empty8, bases, bases, empty32, bases, empty8, bases)
    decode_rows(program.code, buf, starts, ends, False, status, where, value, *args)
    if np.any(status == DUPLICATE_MAP_KEY):
        return ProgramRun(status, where, value, None)
    width = np.array([c.width for c in program.columns], np.int64)
    has_offsets = np.array([c.offsets for c in program.columns], np.bool_)
    vbase = _starts(slots)
    fbase = _starts(slots * width)
    obase = np.where(has_offsets, _starts(np.where(has_offsets, slots + 1, 0)), -1)
    dbase = _starts(dlen)
    pools = Pools(
        np.zeros(int(slots.sum()), np.uint8),
        np.zeros(int((slots * width).sum()), np.uint8),
        np.zeros(int(np.where(has_offsets, slots + 1, 0).sum()), np.int32),
        np.empty(int(dlen.sum()), np.uint8),  # every byte written
    )
    slots[:], items[:], dlen[:] = 0, 0, 0
    decode_rows(program.code, buf, starts, ends, True, status, where, value, slots, items, dlen, pools.valid,
                vbase, pools.fixed, fbase, width, pools.offsets, obase, pools.data, dbase)  # fmt: skip
    layout = Layout(slots, dlen, vbase, fbase, width, obase, dbase)  # what pass 2 wrote: no more
    return ProgramRun(status, where, value, build(program.root, arrow_type, pools, layout))


def _starts(sizes: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)


@dataclass(frozen=True)
class Pools:
    """The buffers every column of a batch shares, each column a region of each."""

    valid: np.ndarray
    fixed: np.ndarray
    offsets: np.ndarray
    data: np.ndarray


@dataclass(frozen=True)
class Layout:
    """Each column's slots, bytes and where its regions start in the pools."""

    slots: np.ndarray
    dlen: np.ndarray
    vbase: np.ndarray
    fbase: np.ndarray
    width: np.ndarray
    obase: np.ndarray
    dbase: np.ndarray


def build(node: Node, type_: pa.DataType, pools: Pools, layout: Layout) -> pa.Array:
    """The array of ``node``'s column, of ``type_``, from its regions of the pools."""
    col = node.column
    n = int(layout.slots[col])
    v0 = int(layout.vbase[col])
    valid = pools.valid[v0 : v0 + n]
    nulls = n - int(np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    f0 = int(layout.fbase[col])
    fixed = pools.fixed[f0 : f0 + n * int(layout.width[col])]
    o0 = int(layout.obase[col])
    offsets = pa.py_buffer(pools.offsets[o0 : o0 + n + 1]) if o0 >= 0 else None
    if node.kind == "record":
        children = [build(c, f.type, pools, layout) for c, f in zip(node.children, type_, strict=True)]
        return pa.Array.from_buffers(type_, n, [bitmap], nulls, children=children)
    if node.kind == "list":
        item = build(node.children[0], type_.value_type, pools, layout)
        return pa.Array.from_buffers(type_, n, [bitmap, offsets], nulls, children=[item])
    if node.kind == "map":
        keys = build(node.children[0], type_.key_type, pools, layout)
        values = build(node.children[1], type_.item_type, pools, layout)
        entries = pa.StructArray.from_arrays([keys, values], fields=[type_.key_field, type_.item_field])
        return pa.Array.from_buffers(type_, n, [bitmap, offsets], nulls, children=[entries])
    if node.kind == "enum":
        indices = pa.Array.from_buffers(pa.int32(), n, [bitmap, pa.py_buffer(fixed)], nulls)
        return pa.array(node.symbols, pa.string()).take(indices)
    if node.kind == "bool":
        return pa.Array.from_buffers(type_, n, [bitmap, pa.py_buffer(np.packbits(fixed, bitorder="little"))], nulls)
    if offsets is not None:
        d0 = int(layout.dbase[col])
        data = pa.py_buffer(pools.data[d0 : d0 + int(layout.dlen[col])])
        return pa.Array.from_buffers(type_, n, [bitmap, offsets, data], nulls)
    return pa.Array.from_buffers(type_, n, [bitmap, pa.py_buffer(fixed)], nulls)
