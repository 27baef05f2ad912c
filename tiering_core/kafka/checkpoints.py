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
import functools
import os
import re
import stat
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from tiering_core.errors import CorruptLogError, InvalidTopicError
from tiering_core.kafka.epoch import EpochEntry
from tiering_core.kafka.files import CHECKPOINT_READ_LIMIT, PARTITION_METADATA_READ_LIMIT, read_regular
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
    try:
        mode: int | None = stat.S_IMODE(os.stat(path).st_mode)  # a rewritten file keeps its mode
    except FileNotFoundError:
        mode = None
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
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
    """Entries of a root checkpoint; a missing file has none (the broker has not written it yet).

    The file is read every time, but its bytes are parsed once: one log dir's checkpoint holds
    every partition of the broker, and a run reading each partition's entry would otherwise parse
    all of them once per partition (quadratic in the partitions)."""
    try:
        data = read_regular(Path(path), CHECKPOINT_READ_LIMIT, "offset checkpoint")
    except FileNotFoundError:
        return {}
    return dict(parsed_offset_checkpoint(data, str(path)))


@functools.lru_cache(maxsize=8)
def parsed_offset_checkpoint(data: bytes, path: str) -> Mapping[TopicPartition, int]:
    """``parse_offset_checkpoint`` of the same bytes once (keyed by the bytes themselves, so never
    stale; a few files' worth, each bounded by ``CHECKPOINT_READ_LIMIT``). Callers copy it."""
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
        data = read_regular(Path(path), PARTITION_METADATA_READ_LIMIT, "partition.metadata")
    except FileNotFoundError:
        raise CorruptLogError(path, 0, "partition.metadata is missing: the partition's topic id is unknown") from None
    return parse_partition_metadata(data, Path(path))


def write_partition_metadata(path: Path, topic_id: str) -> None:
    atomic_write(Path(path), encode_partition_metadata(topic_id))


# --- leader-epoch-checkpoint ---------------------------------------------------------------

_MAX_EPOCH = 2**31 - 1
_MAX_OFFSET = 2**63 - 1
# Kafka splits an entry line on runs of whitespace and wants two fields; Java's split drops
# trailing empty strings (so trailing whitespace is fine) but keeps a leading one (so leading
# whitespace is a third, empty field: malformed).
_ENTRY = re.compile(r"([+-]?[0-9]+)\s+([+-]?[0-9]+)\s*", re.ASCII)
_TEXT_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class LeaderEpochCheckpointMissingError(CorruptLogError):
    """A partition directory without ``leader-epoch-checkpoint`` (the broker always creates it)."""


# --- checkpoint codec ----------------------------------------------------------------------------


def _lines_with_positions(text: str) -> Iterator[tuple[str, int]]:
    """Lines as ``BufferedReader.readLine`` sees them, each with its starting byte position, one
    at a time (in ASCII text, as a broker writes it, a character index is the byte position)."""
    ascii_only = text.isascii()
    start = 0  # character index
    byte_pos = 0
    for brk in _TEXT_LINE_BREAK.finditer(text):
        line = text[start : brk.start()]
        yield line, start if ascii_only else byte_pos
        if not ascii_only:
            byte_pos += len(line.encode()) + len(brk.group())
        start = brk.end()
    if start < len(text):
        yield text[start:], start if ascii_only else byte_pos


def parse_leader_epoch_checkpoint(text: str, path: Path) -> list[EpochEntry]:
    """Parse ``0\\n<N>\\n<epoch> <startOffset>\\n...``; malformed input names the file, byte and line.

    As Kafka's ``CheckpointFile`` reader: an empty file (the broker creates it empty before the
    first epoch is assigned) and a file holding only the version line are an empty cache, and an
    entry is its line split on whitespace (trailing whitespace allowed, leading not).
    Beyond Kafka, entries must be in order (epochs strictly increasing, start offsets
    non-decreasing) and non-negative, because Kafka's ``assign`` would silently drop or reject
    such entries and this platform must not guess a lineage.
    """
    lines = _lines_with_positions(text)
    version_line, version_pos = next(lines, ("", -1))
    if version_pos == -1:
        return []
    if not _INT.fullmatch(version_line) or int(version_line) != CHECKPOINT_VERSION:
        raise CorruptLogError(
            path, 0, f"line 1: unsupported leader-epoch-checkpoint version {version_line!r} (expected 0)"
        )
    count_line, count_pos = next(lines, ("", -1))
    if count_pos == -1:
        return []
    if not _INT.fullmatch(count_line) or int(count_line) < 0:
        raise CorruptLogError(path, count_pos, f"line 2: entry count {count_line!r} is not a non-negative integer")
    count = int(count_line)
    entries: list[EpochEntry] = []
    for number, (line, position) in enumerate(lines, start=3):
        match = _ENTRY.fullmatch(line)
        if match is None:
            raise CorruptLogError(
                path, position, f"line {number}: malformed entry {line!r} (expected '<epoch> <startOffset>')"
            )
        epoch, start = int(match.group(1)), int(match.group(2))
        if not 0 <= epoch <= _MAX_EPOCH or not 0 <= start <= _MAX_OFFSET:
            raise CorruptLogError(path, position, f"line {number}: epoch or start offset out of range in {line!r}")
        if entries and (epoch <= entries[-1].epoch or start < entries[-1].start_offset):
            prev = entries[-1]
            raise CorruptLogError(
                path,
                position,
                f"line {number}: entry {line!r} does not follow '{prev.epoch} {prev.start_offset}' "
                "(epochs must increase and start offsets must not decrease)",
            )
        entries.append(EpochEntry(epoch, start))
    if len(entries) != count:
        raise CorruptLogError(
            path, count_pos, f"line 2: entry count {count} does not match {len(entries)} entry line(s)"
        )
    return entries


def read_leader_epoch_checkpoint(path: Path) -> list[EpochEntry]:
    """Read a partition's ``leader-epoch-checkpoint``.

    A missing file is an error, not an empty cache: the broker creates the file with the
    partition, so its absence means this is not a complete partition directory, and guessing an
    empty lineage would make every remote segment look like the remains of an unclean election.
    """
    path = Path(path)
    try:
        raw = read_regular(path, CHECKPOINT_READ_LIMIT, "leader-epoch-checkpoint")
    except FileNotFoundError:
        raise LeaderEpochCheckpointMissingError(
            path, 0, "leader-epoch-checkpoint is missing (the broker creates it with the partition)"
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptLogError(path, exc.start, "leader-epoch-checkpoint is not UTF-8 text") from None
    return parse_leader_epoch_checkpoint(text, path)


def encode_leader_epoch_checkpoint(entries: Sequence[EpochEntry]) -> bytes:
    """The checkpoint text exactly as the broker writes it (``\\n`` line ends, one space)."""
    lines = [str(CHECKPOINT_VERSION), str(len(entries))] + [f"{e.epoch} {e.start_offset}" for e in entries]
    return ("\n".join(lines) + "\n").encode("ascii")


def write_leader_epoch_checkpoint(path: Path, entries: Sequence[EpochEntry]) -> None:
    """Atomic write (temp file in the same directory, fsync, rename): readers never see half a file."""
    atomic_write(Path(path), encode_leader_epoch_checkpoint(entries))
