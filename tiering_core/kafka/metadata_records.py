"""KRaft's metadata records: the values of ``__cluster_metadata-0``'s record batches, decoded
and encoded as Kafka's ``MetadataRecordSerde`` does.

Each record's value is ``frameVersion`` (1), ``apiKey`` and ``version`` as unsigned varints,
then the record in Kafka's flexible-versions encoding (compact strings and arrays, tagged
fields). Only what removal and leadership need is decoded: TopicRecord, RemoveTopicRecord,
PartitionRecord, PartitionChangeRecord and the metadata transaction markers; every other record
type is kept as its api key alone. The encoder serves the demo's and the tests' metadata logs.
``tiering_core.kafka.cluster_metadata`` builds the image from these records.

Hostile files cost bounded memory and time: a batch above what KRaft writes is refused before
it is read, every length is checked against what is left before anything is allocated, and an
error names the file, the byte and the offset.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

from tiering_core.errors import CorruptLogError, InvalidTopicError, TieringError
from tiering_core.kafka.batch import (
    CODEC_NONE,
    HEADER_SIZE,
    LogFile,
    RecordBatchHeader,
    iter_batch_headers,
)
from tiering_core.kafka.checkpoints import uuid_to_topic_id
from tiering_core.kafka.records import (
    ControlRecordType,
    Record,
    RecordSpec,
    decode_batch,
)
from tiering_core.kafka.topic import validate_topic_name

#: ``MetadataRecordSerde``'s frame version.
FRAME_VERSION = 1
#: KRaft writes batches of at most 8 MiB (``KafkaRaftClient.MAX_BATCH_SIZE_BYTES``); twice that
#: is refused before it is read.
MAX_METADATA_BATCH_BYTES = 16 * 1024 * 1024
#: ``LeaderConstants``: no leader; in a PartitionChangeRecord, the leader did not change.
NO_LEADER = -1
NO_LEADER_CHANGE = -2
_INT8, _INT16, _INT32, _INT64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


class ClusterMetadataError(TieringError):
    """The KRaft metadata image cannot be read (no metadata log, a gap, a snapshot cut short):
    names the directory or file and what is missing."""


class MetadataRecordType(IntEnum):
    """The api keys of the metadata records this reader decodes or acts on (Kafka's
    ``MetadataRecordType``); every other key is skipped."""

    TOPIC_RECORD = 2
    PARTITION_RECORD = 3
    PARTITION_CHANGE_RECORD = 5
    REMOVE_TOPIC_RECORD = 9
    NO_OP_RECORD = 20
    BEGIN_TRANSACTION_RECORD = 23
    END_TRANSACTION_RECORD = 24
    ABORT_TRANSACTION_RECORD = 25


#: What the log below the snapshot is read for (deletions, the names they remove, the transactions
#: they may sit in): a record's value starts with its frame version and api key, so a batch whose
#: bytes hold none of these pairs holds none of these records.
_HISTORY_MARKS = tuple(
    bytes((FRAME_VERSION, key))
    for key in (
        MetadataRecordType.TOPIC_RECORD,
        MetadataRecordType.REMOVE_TOPIC_RECORD,
        MetadataRecordType.BEGIN_TRANSACTION_RECORD,
        MetadataRecordType.END_TRANSACTION_RECORD,
        MetadataRecordType.ABORT_TRANSACTION_RECORD,
    )
)

#: The versions each decoded record type has in Kafka 4.4 (``validVersions``); a later one is refused.
KNOWN_VERSIONS: Mapping[int, range] = {
    MetadataRecordType.TOPIC_RECORD: range(0, 1),
    MetadataRecordType.PARTITION_RECORD: range(0, 3),
    MetadataRecordType.PARTITION_CHANGE_RECORD: range(0, 3),
    MetadataRecordType.REMOVE_TOPIC_RECORD: range(0, 1),
}


# --- the records -------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicRecord:
    """A topic created: its name and topic id."""

    name: str
    topic_id: str


@dataclass(frozen=True)
class RemoveTopicRecord:
    """A topic deleted, with all its partitions."""

    topic_id: str


@dataclass(frozen=True)
class PartitionRecord:
    """A partition's whole state (at creation, and in every snapshot)."""

    topic_id: str
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int


@dataclass(frozen=True)
class PartitionChangeRecord:
    """A change of a partition: each None (``leader``: ``NO_LEADER_CHANGE``) is unchanged."""

    topic_id: str
    partition_id: int
    isr: tuple[int, ...] | None = None
    leader: int = NO_LEADER_CHANGE
    replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None


MetadataBody = TopicRecord | RemoveTopicRecord | PartitionRecord | PartitionChangeRecord


@dataclass(frozen=True)
class MetadataRecord:
    """One metadata record of a batch; ``body`` is None for a type this reader does not decode."""

    offset: int
    api_key: int
    version: int
    body: MetadataBody | None
    leader_epoch: int  # the batch's: the epoch of the controller that wrote it


# --- the flexible-versions encoding -------------------------------------------------------------


class _Fields:
    """A cursor over one message in Kafka's flexible-versions encoding; every read is bounded by
    the message's end (``ValueError`` saying what ran past it)."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    def _take(self, n: int, what: str) -> int:
        if n < 0 or self.pos + n > self.end:
            raise ValueError(f"{what} runs past the end of the record ({self.end - self.pos} byte(s) left, {n} needed)")
        at = self.pos
        self.pos += n
        return at

    def uvarint(self, what: str) -> int:
        """Kafka's ``readUnsignedVarint``: at most 5 bytes, a 32-bit value."""
        value = shift = 0
        for _ in range(5):
            byte = self.data[self._take(1, what)]
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                if value > 0xFFFFFFFF:
                    raise ValueError(f"{what} is not an unsigned 32-bit varint")
                return value
            shift += 7
        raise ValueError(f"{what} is a varint longer than 5 bytes")

    def int8(self, what: str) -> int:
        return int(_INT8.unpack_from(self.data, self._take(1, what))[0])

    def int16(self, what: str) -> int:
        return int(_INT16.unpack_from(self.data, self._take(2, what))[0])

    def int32(self, what: str) -> int:
        return int(_INT32.unpack_from(self.data, self._take(4, what))[0])

    def int64(self, what: str) -> int:
        return int(_INT64.unpack_from(self.data, self._take(8, what))[0])

    def topic_id(self, what: str) -> str:
        at = self._take(16, what)
        return uuid_to_topic_id(uuid.UUID(bytes=bytes(self.data[at : at + 16])))

    def string(self, what: str) -> str:
        """A compact, non-nullable string."""
        length = self.uvarint(what) - 1
        if length < 0:
            raise ValueError(f"{what} is null")
        at = self._take(length, what)
        try:
            return bytes(self.data[at : at + length]).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{what} is not UTF-8") from None

    def _count(self, what: str, size: int, nullable: bool) -> int | None:
        count = self.uvarint(what) - 1
        if count < 0:
            if not nullable:
                raise ValueError(f"{what} is null")
            return None
        if count * size > self.end - self.pos:  # checked before anything is allocated
            raise ValueError(f"{what} claims {count} entries, more than the record holds")
        return count

    def int32s(self, what: str, *, nullable: bool = False) -> tuple[int, ...] | None:
        count = self._count(what, 4, nullable)
        if count is None:
            return None
        at = self._take(4 * count, what)
        return struct.unpack_from(f">{count}i", self.data, at)

    def broker_ids(self, what: str) -> tuple[int, ...]:
        """A compact, non-nullable array of broker ids."""
        ids = self.int32s(what)
        assert ids is not None  # not nullable: a null array raised
        _check_broker_ids(what, ids)
        return ids

    def skip_uuids(self, what: str, *, nullable: bool = False) -> None:
        count = self._count(what, 16, nullable)
        if count:
            self._take(16 * count, what)

    def tagged(self, what: str) -> dict[int, _Fields]:
        """The tagged fields: tag -> a cursor over that field's bytes."""
        fields: dict[int, _Fields] = {}
        for _ in range(self.uvarint(f"{what}'s tagged field count")):
            tag = self.uvarint(f"{what}'s tag")
            size = self.uvarint(f"{what}'s tagged field {tag} size")
            at = self._take(size, f"{what}'s tagged field {tag}")
            fields[tag] = _Fields(self.data, at, at + size)
        return fields

    def done(self, what: str) -> None:
        if self.pos != self.end:
            raise ValueError(f"{self.end - self.pos} byte(s) left after {what}")


def _tagged_int32s(tags: Mapping[int, _Fields], tag: int, what: str) -> tuple[int, ...] | None:
    field_ = tags.get(tag)
    if field_ is None:
        return None
    value = field_.int32s(what, nullable=True)
    field_.done(what)
    return value


def _check_broker_ids(what: str, ids: tuple[int, ...] | None) -> None:
    if ids is not None and any(b < 0 for b in ids):
        raise ValueError(f"{what} holds a negative broker id")


def _decode_body(api_key: int, version: int, f: _Fields) -> MetadataBody | None:
    """The record of ``api_key`` at ``version`` from ``f`` (None: a type not decoded here)."""
    known = KNOWN_VERSIONS.get(api_key)
    if known is None:
        return None
    name = MetadataRecordType(api_key).name
    if version not in known:
        raise ValueError(f"{name} version {version} is not one this reader knows ({known.start}-{known.stop - 1})")
    body: MetadataBody
    if api_key == MetadataRecordType.TOPIC_RECORD:
        topic = f.string("the topic name")
        try:
            validate_topic_name(topic)
        except InvalidTopicError as exc:
            raise ValueError(str(exc)) from None
        body = TopicRecord(topic, f.topic_id("the topic id"))
        f.tagged(name)
    elif api_key == MetadataRecordType.REMOVE_TOPIC_RECORD:
        body = RemoveTopicRecord(f.topic_id("the topic id"))
        f.tagged(name)
    elif api_key == MetadataRecordType.PARTITION_RECORD:
        partition_id = f.int32("the partition id")
        topic_id = f.topic_id("the topic id")
        replicas, isr = f.broker_ids("replicas"), f.broker_ids("isr")
        removing, adding = f.broker_ids("removing replicas"), f.broker_ids("adding replicas")
        leader, leader_epoch, partition_epoch = f.int32("leader"), f.int32("leader epoch"), f.int32("partition epoch")
        if version >= 1:
            f.skip_uuids("directories")
        f.tagged(name)  # leader recovery state, ELR: not needed here
        if leader < NO_LEADER:
            raise ValueError(f"leader {leader} is not a broker id")
        body = PartitionRecord(
            topic_id, partition_id, replicas, isr, removing, adding, leader, leader_epoch, partition_epoch
        )
    else:
        partition_id = f.int32("the partition id")
        topic_id = f.topic_id("the topic id")
        tags = f.tagged(name)
        leader = NO_LEADER_CHANGE
        if 1 in tags:
            leader = tags[1].int32("leader")
            tags[1].done("leader")
        if leader < NO_LEADER_CHANGE:
            raise ValueError(f"leader {leader} is not a broker id")
        body = PartitionChangeRecord(
            topic_id,
            partition_id,
            isr=_tagged_int32s(tags, 0, "isr"),
            leader=leader,
            replicas=_tagged_int32s(tags, 2, "replicas"),
            removing_replicas=_tagged_int32s(tags, 3, "removing replicas"),
            adding_replicas=_tagged_int32s(tags, 4, "adding replicas"),
        )
        for what in ("isr", "replicas", "removing_replicas", "adding_replicas"):
            _check_broker_ids(what, getattr(body, what))
    if isinstance(body, PartitionRecord | PartitionChangeRecord) and body.partition_id < 0:
        raise ValueError(f"partition id {body.partition_id} is negative")
    f.done(name)
    return body


def decode_metadata_value(value: bytes) -> tuple[int, int, MetadataBody | None]:
    """``(api key, version, record)`` of one metadata record's value (``ValueError`` naming what is
    wrong); the record is None for a type this reader does not decode."""
    f = _Fields(value)
    frame = f.uvarint("the frame version")
    if frame != FRAME_VERSION:
        raise ValueError(f"frame version {frame} (only {FRAME_VERSION} exists)")
    api_key = f.uvarint("the api key")
    version = f.uvarint("the version")
    return api_key, version, _decode_body(api_key, version, f)


# --- encoding (the metadata log writer, kafka.metadata_log_writer, and the tests) ------------


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _int32s(values: Sequence[int] | None) -> bytes:
    if values is None:
        return _uvarint(0)
    return _uvarint(len(values) + 1) + struct.pack(f">{len(values)}i", *values)


def _topic_id_bytes(topic_id: str) -> bytes:
    from tiering_core.kafka.checkpoints import topic_id_to_uuid

    return topic_id_to_uuid(topic_id).bytes


def _tagged(fields: Sequence[tuple[int, bytes]]) -> bytes:
    return _uvarint(len(fields)) + b"".join(_uvarint(tag) + _uvarint(len(data)) + data for tag, data in fields)


def _frame(api_key: int, version: int, body: bytes) -> bytes:
    return _uvarint(FRAME_VERSION) + _uvarint(api_key) + _uvarint(version) + body


def encode_metadata_record(record: MetadataBody, version: int | None = None) -> bytes:
    """A metadata record's value as the controller writes it (PartitionRecord at version 2 unless
    ``version`` says otherwise, each replica's directory unassigned)."""
    if isinstance(record, TopicRecord):
        name = record.name.encode()
        body = _uvarint(len(name) + 1) + name + _topic_id_bytes(record.topic_id) + _tagged(())
        return _frame(MetadataRecordType.TOPIC_RECORD, 0, body)
    if isinstance(record, RemoveTopicRecord):
        return _frame(MetadataRecordType.REMOVE_TOPIC_RECORD, 0, _topic_id_bytes(record.topic_id) + _tagged(()))
    if isinstance(record, PartitionRecord):
        v = 2 if version is None else version
        body = (
            _INT32.pack(record.partition_id)
            + _topic_id_bytes(record.topic_id)
            + b"".join(
                _int32s(r) for r in (record.replicas, record.isr, record.removing_replicas, record.adding_replicas)
            )
            + struct.pack(">iii", record.leader, record.leader_epoch, record.partition_epoch)
        )
        if v >= 1:
            body += _uvarint(len(record.replicas) + 1) + bytes(16 * len(record.replicas))
        return _frame(MetadataRecordType.PARTITION_RECORD, v, body + _tagged(()))
    tags = [
        (tag, data)
        for tag, data in (
            (0, _int32s(record.isr) if record.isr is not None else None),
            (1, _INT32.pack(record.leader) if record.leader != NO_LEADER_CHANGE else None),
            (2, _int32s(record.replicas) if record.replicas is not None else None),
            (3, _int32s(record.removing_replicas) if record.removing_replicas is not None else None),
            (4, _int32s(record.adding_replicas) if record.adding_replicas is not None else None),
        )
        if data is not None
    ]
    body = _INT32.pack(record.partition_id) + _topic_id_bytes(record.topic_id) + _tagged(tags)
    return _frame(MetadataRecordType.PARTITION_CHANGE_RECORD, 2 if version is None else version, body)


def encode_metadata_marker(kind: MetadataRecordType) -> bytes:
    """A record without fields of its own (NoOpRecord, the transaction markers), version 0."""
    return _frame(kind, 0, _tagged(()))


def kraft_control_record(kind: ControlRecordType, value: bytes, timestamp: int) -> RecordSpec:
    """A KRaft control record (LeaderChange, SnapshotHeader, SnapshotFooter): key
    ``version:i16=0, type:i16``, ``value`` the message in the flexible encoding."""
    return RecordSpec(key=struct.pack(">hh", 0, int(kind)), value=value, timestamp=timestamp)


def encode_leader_change(leader_id: int, voters: Sequence[int]) -> bytes:
    """LeaderChangeMessage version 0: the new leader and the voters (all granting, here)."""
    voter_array = _uvarint(len(voters) + 1) + b"".join(_INT32.pack(v) + _tagged(()) for v in voters)
    return _INT16.pack(0) + _INT32.pack(leader_id) + voter_array + voter_array + _tagged(())


def encode_snapshot_header(last_contained_log_timestamp: int) -> bytes:
    return _INT16.pack(0) + _INT64.pack(last_contained_log_timestamp) + _tagged(())


def encode_snapshot_footer() -> bytes:
    return _INT16.pack(0) + _tagged(())


# --- reading files -------------------------------------------------------------------------------


def decode_metadata_records(
    path: Path, header: RecordBatchHeader, records: Sequence[Record]
) -> Iterator[MetadataRecord]:
    """The metadata records of one decoded batch; a value that is not one is a ``CorruptLogError``."""
    for record in records:
        if record.value is None:
            raise CorruptLogError(path, header.position, f"metadata record at offset {record.offset} has no value")
        try:
            api_key, version, body = decode_metadata_value(record.value)
        except ValueError as exc:
            raise CorruptLogError(
                path, header.position, f"malformed metadata record at offset {record.offset}: {exc}"
            ) from None
        yield MetadataRecord(record.offset, api_key, version, body, header.partition_leader_epoch)


def iter_metadata_batches(
    path: Path, *, history_below: int = 0
) -> Iterator[tuple[RecordBatchHeader, list[MetadataRecord]]]:
    """Each batch of a metadata log segment or snapshot with its metadata records (a control
    batch: none), CRC checked; malformed input is a ``CorruptLogError`` naming file and byte.

    A batch wholly below ``history_below`` (the log a snapshot covers, read for its deletions
    only) is decoded only if its records' bytes may hold a record that matters there
    (``_HISTORY_MARKS``): most of that log is the controller's NoOpRecords, and its scan stays
    near the CRC's speed."""
    path = Path(path)
    with LogFile(path) as log:
        for header in iter_batch_headers(path, verify_crc=True):
            if header.is_control:
                yield header, []
                continue
            if header.size_in_bytes > MAX_METADATA_BATCH_BYTES:  # checked before the bytes are held
                raise CorruptLogError(
                    path,
                    header.position,
                    f"batch at offset {header.base_offset} is {header.size_in_bytes} bytes, more than the "
                    f"{MAX_METADATA_BATCH_BYTES} KRaft writes",
                )
            if header.next_offset <= history_below and header.codec == CODEC_NONE:
                body = log.read_at(header.position + HEADER_SIZE, header.size_in_bytes - HEADER_SIZE)
                if not any(mark in body for mark in _HISTORY_MARKS):
                    yield header, []
                    continue
            header, records = decode_batch(log.batch_bytes(header), path, header.position)
            yield header, list(decode_metadata_records(path, header, records))


def iter_metadata_records(path: Path) -> Iterator[MetadataRecord]:
    """Every metadata record of one file (control batches skipped)."""
    for _header, records in iter_metadata_batches(path):
        yield from records
