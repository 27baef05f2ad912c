"""Log-dir root offset checkpoints and the per-partition ``partition.metadata`` file.

Offset checkpoints (``replication-offset-checkpoint``, ``log-start-offset-checkpoint``,
``recovery-point-offset-checkpoint``) are read as Kafka's ``CheckpointFile`` reads them: lines
end in ``\\n``, ``\\r\\n`` or ``\\r``; ``0`` then the entry count, then ``<topic> <partition>
<offset>`` split on runs of whitespace; an empty file, or one holding only the version line,
has no entries. Anything else is a ``CorruptLogError`` naming the file, the byte where the bad
line starts and its line number.
Writes are atomic (temp file, fsync, rename, fsync of the directory) like the broker's.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path

from tiering_core.errors import CorruptLogError, InvalidTopicError
from tiering_core.kafka.topic import TopicPartition

REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
PARTITION_METADATA = "partition.metadata"
CHECKPOINT_VERSION = 0
PARTITION_METADATA_VERSION = 0
_TOPIC_ID = re.compile(r"[A-Za-z0-9_-]{22}", re.ASCII)
_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]+")  # Java's \s
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")
_ZERO_UUID = uuid.UUID(int=0)
_METADATA_TOPIC_UUID = uuid.UUID(int=1)  # Kafka's reserved id of __cluster_metadata


def atomic_write(path: Path, data: bytes) -> None:
    """Temp file in the same directory, fsync, rename, fsync the directory: readers never see half a file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _lines(data: bytes) -> list[tuple[bytes, int]]:
    """Lines as ``BufferedReader.readLine`` splits them, each with the byte it starts at."""
    lines: list[tuple[bytes, int]] = []
    start = 0
    for brk in _LINE_BREAK.finditer(data):
        lines.append((data[start : brk.start()], start))
        start = brk.end()
    if start < len(data):
        lines.append((data[start:], start))
    return lines


def parse_offset_checkpoint(data: bytes | str, path: Path | str) -> dict[TopicPartition, int]:
    """Entries of an offset checkpoint's bytes; malformed input names file, byte and line."""
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    lines = _lines(raw)
    if not lines:
        return {}

    def fail(index: int, reason: str) -> CorruptLogError:
        position = lines[index][1] if index < len(lines) else len(raw)
        return CorruptLogError(path, position, f"line {index + 1}: {reason}")

    def text(index: int) -> str:
        try:
            return lines[index][0].decode("utf-8")
        except UnicodeDecodeError:
            raise fail(index, "is not UTF-8 text") from None

    version = text(0)
    if not _INT.fullmatch(version) or int(version) != CHECKPOINT_VERSION:
        raise fail(0, f"unsupported offset checkpoint version {version!r} (expected {CHECKPOINT_VERSION})")
    if len(lines) < 2:  # Kafka's CheckpointReadBuffer: no count line, no entries
        return {}
    count_text = text(1)
    if not _INT.fullmatch(count_text) or int(count_text) < 0:
        raise fail(1, f"entry count {count_text!r} is not a non-negative integer")
    count = int(count_text)
    result: dict[TopicPartition, int] = {}
    for index in range(2, len(lines)):
        line = text(index)
        parts = _WHITESPACE.split(line)
        while parts and not parts[-1]:  # Java's String.split drops trailing empty strings
            parts.pop()
        try:
            if len(parts) != 3 or not _INT.fullmatch(parts[1]) or not _INT.fullmatch(parts[2]):
                raise ValueError
            tp = TopicPartition(parts[0], int(parts[1]))
        except (ValueError, InvalidTopicError):
            raise fail(index, f"malformed entry {line!r} (expected '<topic> <partition> <offset>')") from None
        result[tp] = int(parts[2])
    if count != len(lines) - 2:
        raise fail(1, f"entry count {count} does not match the {len(lines) - 2} entry line(s) that follow")
    return result


def read_offset_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """Entries of a root checkpoint; a missing file has none (the broker has not written it yet)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return {}
    return parse_offset_checkpoint(data, Path(path))


def encode_offset_checkpoint(entries: Mapping[TopicPartition, int]) -> bytes:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{tp.topic} {tp.partition} {offset}" for tp, offset in sorted(entries.items())]
    return ("\n".join(lines) + "\n").encode("utf-8")


def write_offset_checkpoint(path: Path, entries: Mapping[TopicPartition, int]) -> None:
    atomic_write(Path(path), encode_offset_checkpoint(entries))


def update_offset_checkpoint(path: Path, tp: TopicPartition, offset: int | None) -> None:
    """Set (or with ``None`` remove) one partition's entry, keeping the other partitions' entries."""
    update_offset_checkpoints(path, {tp: offset})


def update_offset_checkpoints(path: Path, changes: Mapping[TopicPartition, int | None]) -> None:
    entries = read_offset_checkpoint(path)
    for tp, offset in changes.items():
        if offset is None:
            entries.pop(tp, None)
        else:
            entries[tp] = offset
    write_offset_checkpoint(path, entries)


# --- partition.metadata ------------------------------------------------------------------------


def topic_id_to_uuid(topic_id: str, path: Path | str | None = None) -> uuid.UUID:
    """Decode a topic id (Kafka's ``Uuid.toString``: URL-safe base64 of 16 bytes, no padding)."""
    where = Path(path) if path is not None else Path("<topic id>")
    if not _TOPIC_ID.fullmatch(topic_id):
        raise CorruptLogError(where, 0, f"topic id {topic_id!r} is not a 22-character URL-safe base64 UUID")
    try:
        raw = base64.urlsafe_b64decode(topic_id + "==")
    except binascii.Error:
        raise CorruptLogError(where, 0, f"topic id {topic_id!r} is not valid base64") from None
    value = uuid.UUID(bytes=raw)
    if value == _ZERO_UUID:
        raise CorruptLogError(where, 0, "topic id is the zero UUID (Kafka's 'no topic id')")
    return value


def uuid_to_topic_id(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def validate_topic_id(topic_id: str, path: Path | str | None = None) -> str:
    """``topic_id`` if it is a valid, canonically encoded Kafka topic id, else ``CorruptLogError``."""
    value = topic_id_to_uuid(topic_id, path)
    if uuid_to_topic_id(value) != topic_id:
        raise CorruptLogError(
            Path(path) if path is not None else Path("<topic id>"), 0, f"topic id {topic_id!r} is not canonical base64"
        )
    return topic_id


def new_topic_id() -> str:
    """A random topic id as Kafka's ``Uuid.randomUuid`` makes one (never reserved, never starting with '-')."""
    while True:
        value = uuid.uuid4()
        topic_id = uuid_to_topic_id(value)
        if value not in (_ZERO_UUID, _METADATA_TOPIC_UUID) and not topic_id.startswith("-"):
            return topic_id


def encode_partition_metadata(topic_id: str) -> bytes:
    """Exactly the broker's bytes: ``version: 0\\ntopic_id: <id>`` (no final newline)."""
    return f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {validate_topic_id(topic_id)}".encode("ascii")


def parse_partition_metadata(data: bytes, path: Path | str) -> str:
    """The topic id in a ``partition.metadata`` file's bytes."""
    path = Path(path)
    lines = _lines(data)
    fields: dict[str, tuple[str, int]] = {}
    for number, (raw, position) in enumerate(lines, start=1):
        try:
            line = raw.decode("ascii")
        except UnicodeDecodeError:
            raise CorruptLogError(path, position, f"line {number}: is not ASCII text") from None
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep or not value[:1].isspace() or not value.strip():
            raise CorruptLogError(path, position, f"line {number}: malformed line {line!r} (expected 'key: value')")
        fields[key.strip()] = (value.strip(), position)
    version = fields.get("version")
    if version is None:
        raise CorruptLogError(path, 0, "partition.metadata has no version line")
    if not _INT.fullmatch(version[0]) or int(version[0]) != PARTITION_METADATA_VERSION:
        raise CorruptLogError(path, version[1], f"unsupported partition.metadata version {version[0]!r} (expected 0)")
    topic_id = fields.get("topic_id")
    if topic_id is None:
        raise CorruptLogError(path, len(data), "partition.metadata has no topic_id line")
    try:
        return validate_topic_id(topic_id[0], path)
    except CorruptLogError as exc:
        raise CorruptLogError(path, topic_id[1], exc.reason) from None


def read_partition_metadata(path: Path) -> str:
    """The topic id in ``partition.metadata``; a missing file is a ``CorruptLogError`` saying so."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise CorruptLogError(path, 0, "partition.metadata is missing: the partition's topic id is unknown") from None
    return parse_partition_metadata(data, Path(path))


def write_partition_metadata(path: Path, topic_id: str) -> None:
    atomic_write(Path(path), encode_partition_metadata(topic_id))
