"""Records as ``tiering fetch`` prints them: as ``kafka-console-consumer`` does with its default
formatter (``DefaultMessageFormatter``), so that a person, ``grep`` and ``cut`` read them alike.

One record per line: by default its value alone; ``print.timestamp`` (``CreateTime:<ms>``),
``print.partition`` (``Partition:<n>``), ``print.offset`` (``Offset:<n>``), ``print.headers``
(``k1:v1,k2:v2`` or ``NO_HEADERS``) and ``print.key`` put those fields before it, in that order,
each followed by ``key.separator`` (a tab by default). An absent key, value or header value is
``null``. Bytes are printed as UTF-8 text; so that a record stays on its line and a terminal shows
what it holds, a byte that is not printable UTF-8 text is escaped as ``\\xNN`` (a newline, a tab
and a carriage return as ``\\n``, ``\\t``, ``\\r``, a backslash as ``\\\\``). ``--json`` prints the
raw fields instead (base64).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tiering_core.read.reader import FetchedRecord

#: Kafka's ``null.literal``: what an absent key, value or header value prints as.
NULL_LITERAL = "null"
#: Kafka's ``headers.separator`` and ``headers.key.separator``.
HEADERS_SEPARATOR, HEADERS_KEY_SEPARATOR = ",", ":"
_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\"}


@dataclass(frozen=True)
class RecordFormat:
    """The ``DefaultMessageFormatter`` properties ``fetch`` takes as flags (``--print-key``, ...)."""

    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    key_separator: str = "\t"


def printable(data: bytes | None) -> str:
    """``data`` as text on one line: UTF-8, every byte that is not printable text escaped."""
    if data is None:
        return NULL_LITERAL
    out: list[str] = []
    text = data.decode("utf-8", errors="surrogateescape")
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif "\udc80" <= char <= "\udcff":  # a byte that is not UTF-8
            out.append(f"\\x{ord(char) - 0xDC00:02x}")
        elif not char.isprintable() and char != " ":
            out.extend(f"\\x{byte:02x}" for byte in char.encode("utf-8"))
        else:
            out.append(char)
    return "".join(out)


def record_line(record: FetchedRecord, partition: int, fmt: RecordFormat) -> str:
    """One record's line, fields in Kafka's order, the value last."""
    fields: list[str] = []
    if fmt.print_timestamp:
        fields.append(f"{record.timestamp_type}:{record.timestamp}")
    if fmt.print_partition:
        fields.append(f"Partition:{partition}")
    if fmt.print_offset:
        fields.append(f"Offset:{record.offset}")
    if fmt.print_headers:
        fields.append(
            HEADERS_SEPARATOR.join(
                f"{printable(k.encode())}{HEADERS_KEY_SEPARATOR}{printable(v)}" for k, v in record.headers
            )
            or "NO_HEADERS"
        )
    if fmt.print_key:
        fields.append(printable(record.key))
    fields.append(printable(record.value))
    return fmt.key_separator.join(fields)


def format_records(records: Iterable[FetchedRecord], partition: int, fmt: RecordFormat) -> str:
    """The lines of ``fetch``: one per record, nothing for none."""
    return "\n".join(record_line(record, partition, fmt) for record in records)
