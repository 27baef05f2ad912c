"""KRaft's metadata image as a node keeps it on disk: the controller's word on which topics exist.

Every KRaft node, broker or controller, holds the cluster metadata log in
``<metadata.log.dir>/__cluster_metadata-0`` (``metadata.log.dir`` defaults to the first of
``log.dirs``): snapshots ``<endOffset:020d>-<epoch:010d>.checkpoint`` (the image of every record
below ``endOffset``, framed by a SnapshotHeader and a SnapshotFooter control record) and log
segments. Both hold ordinary v2 record batches; each record's value is one metadata record:
``frameVersion`` (1), ``apiKey`` and ``version`` as unsigned varints, then the record in Kafka's
flexible-versions encoding (compact strings and arrays, tagged fields).

The image is the latest snapshot plus the log after it. Only what removal and leadership need is
decoded: TopicRecord, RemoveTopicRecord, PartitionRecord, PartitionChangeRecord and the metadata
transaction markers (the records between BeginTransaction and EndTransaction apply at its end;
AbortTransaction drops them). Every other record type and every control batch is skipped. The log
before the snapshot, as long as Kafka keeps it, is read only for RemoveTopicRecords: each is the
controller's word that a topic id was deleted.

A node may hold records the quorum has not committed (a follower's tail, truncated when the next
leader disagrees), and the metadata log's high watermark lives in memory only. So the image says
how far it is proven committed (``committed_offset``): up to the latest snapshot (a node
snapshots only committed records), and up to the first offset of every leader epoch in which the
log holds a record of the controller's (the active controller writes its first record only after
everything up to its epoch's start is committed). The rules are in docs/kafka-rules.md section 7.

Hostile files cost bounded memory and time: regular files only, a batch above what KRaft writes
is refused before it is read, decompression is capped, every length is checked against what is
left before anything is allocated, and an error names the file, the byte and the offset.
"""

from __future__ import annotations

import re
import struct
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum
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
from tiering_core.kafka.partition_log import CLUSTER_METADATA_TOPIC, PartitionLog
from tiering_core.kafka.records import (
    ControlRecordType,
    Record,
    RecordSpec,
    decode_batch,
    decode_control_record,
    iter_batches,
)
from tiering_core.kafka.topic import TopicPartition, validate_topic_name

#: The metadata log's directory in ``metadata.log.dir``.
CLUSTER_METADATA_DIR = f"{CLUSTER_METADATA_TOPIC}-0"
SNAPSHOT_SUFFIX = ".checkpoint"
_SNAPSHOT_FILE = re.compile(r"(\d{20})-(\d{10})\.checkpoint")
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


# --- encoding (the writer of tiering_core.demo and the tests) --------------------------------


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


def _metadata_records(path: Path, header: RecordBatchHeader, records: Sequence[Record]) -> Iterator[MetadataRecord]:
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
            yield header, list(_metadata_records(path, header, records))


def iter_metadata_records(path: Path) -> Iterator[MetadataRecord]:
    """Every metadata record of one file (control batches skipped)."""
    for _header, records in iter_metadata_batches(path):
        yield from records


# --- the image -----------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class SnapshotId:
    """A snapshot of the metadata log: the image of every record below ``end_offset``."""

    end_offset: int
    epoch: int

    @property
    def file_name(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}{SNAPSHOT_SUFFIX}"


@dataclass(frozen=True)
class MetadataPartition:
    """A partition as the controller last recorded it."""

    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int  # NO_LEADER: none
    leader_epoch: int
    partition_epoch: int
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()

    def changed(self, change: PartitionChangeRecord) -> MetadataPartition:
        """After ``change``, as Kafka's ``PartitionRegistration.merge``: a new leader (even the same
        broker) bumps the leader epoch, every change bumps the partition epoch."""
        leader, leader_epoch = self.leader, self.leader_epoch
        if change.leader != NO_LEADER_CHANGE:
            leader, leader_epoch = change.leader, self.leader_epoch + 1
        return replace(
            self,
            replicas=self.replicas if change.replicas is None else change.replicas,
            isr=self.isr if change.isr is None else change.isr,
            removing_replicas=self.removing_replicas if change.removing_replicas is None else change.removing_replicas,
            adding_replicas=self.adding_replicas if change.adding_replicas is None else change.adding_replicas,
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
        )


@dataclass(frozen=True)
class MetadataTopic:
    topic_id: str
    name: str
    partitions: Mapping[int, MetadataPartition]


@dataclass(frozen=True)
class TopicRemoval:
    """A RemoveTopicRecord in the log: the topic id deleted at ``offset`` (of the record, or of
    the EndTransactionRecord that applied it); ``name`` when the log still says it."""

    topic_id: str
    name: str | None
    offset: int


class TopicIdState(Enum):
    """What the image says of a topic id."""

    LIVE = "live"  # in the image (at the log's end, committed or not)
    DELETED = "deleted"  # a RemoveTopicRecord below the committed offset
    DELETION_UNCOMMITTED = "deletion uncommitted"  # a RemoveTopicRecord not proven committed yet
    UNKNOWN = "unknown"  # neither: never here, or removed before the log kept


@dataclass(frozen=True)
class ClusterMetadataImage:
    """The metadata image of one node's ``__cluster_metadata-0``.

    ``topics`` are at the end of the log read, committed or not (by topic id); ``removed`` holds
    every RemoveTopicRecord the log still has; ``committed_offset``: every record below it is
    proven committed (module docstring); ``open_transaction``: the offset of a metadata
    transaction not yet ended at the log's end (its records are not in ``topics``)."""

    path: Path
    snapshot: SnapshotId | None
    log_start_offset: int
    end_offset: int
    committed_offset: int
    topics: Mapping[str, MetadataTopic]
    removed: Mapping[str, TopicRemoval]
    open_transaction: int | None = None

    def topic_named(self, name: str) -> MetadataTopic | None:
        return next((t for t in self.topics.values() if t.name == name), None)

    def partition(self, tp: TopicPartition) -> MetadataPartition | None:
        """The partition of the topic now named ``tp.topic`` (its leader, leader epoch, replicas)."""
        topic = self.topic_named(tp.topic)
        return topic.partitions.get(tp.partition) if topic is not None else None

    def state_of(self, topic_id: str) -> TopicIdState:
        if topic_id in self.topics:
            return TopicIdState.LIVE
        removal = self.removed.get(topic_id)
        if removal is None:
            return TopicIdState.UNKNOWN
        return TopicIdState.DELETED if removal.offset < self.committed_offset else TopicIdState.DELETION_UNCOMMITTED


@dataclass
class _Builder:
    """Replays records in log order: in full from the snapshot on, before it only the deletions."""

    path: Path
    snapshot_end: int
    topics: dict[str, tuple[str, dict[int, MetadataPartition]]] = field(default_factory=dict)
    removed: dict[str, TopicRemoval] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # topic id -> name, of the log before the snapshot
    pending: list[MetadataRecord] | None = None  # an open metadata transaction's records
    pending_from: int | None = None

    def take(self, record: MetadataRecord, where: str) -> None:
        kind = record.api_key
        if self.pending_from is not None and self.pending_from < self.snapshot_end <= record.offset:
            raise ValueError(
                f"a metadata transaction begun at offset {self.pending_from} is open across the snapshot "
                f"at offset {self.snapshot_end}"
            )
        if kind == MetadataRecordType.BEGIN_TRANSACTION_RECORD:
            if self.pending is not None:
                raise ValueError(f"a second BeginTransactionRecord (the first at offset {self.pending_from})")
            self.pending, self.pending_from = [], record.offset
        elif kind in (MetadataRecordType.END_TRANSACTION_RECORD, MetadataRecordType.ABORT_TRANSACTION_RECORD):
            if self.pending is None:
                raise ValueError(f"{MetadataRecordType(kind).name} without a BeginTransactionRecord")
            pending, self.pending, self.pending_from = self.pending, None, None
            if kind == MetadataRecordType.END_TRANSACTION_RECORD:
                for held in pending:
                    self.apply(held, record.offset, where)
        elif record.body is not None:
            if self.pending is not None:
                self.pending.append(record)
            else:
                self.apply(record, record.offset, where)

    def apply(self, record: MetadataRecord, offset: int, where: str) -> None:
        body = record.body
        if record.offset < self.snapshot_end:  # already in the snapshot: only a deletion is news
            if isinstance(body, TopicRecord):
                self.names[body.topic_id] = body.name
            elif isinstance(body, RemoveTopicRecord):
                self.removed[body.topic_id] = TopicRemoval(body.topic_id, self.names.get(body.topic_id), offset)
            return
        if isinstance(body, TopicRecord):
            self.topics[body.topic_id] = (body.name, {})
            return
        assert body is not None
        topic = self.topics.get(body.topic_id)
        if topic is None:
            raise ValueError(f"{MetadataRecordType(record.api_key).name} of topic id {body.topic_id}, unknown {where}")
        if isinstance(body, RemoveTopicRecord):
            del self.topics[body.topic_id]
            self.removed[body.topic_id] = TopicRemoval(body.topic_id, topic[0], offset)
        elif isinstance(body, PartitionRecord):
            topic[1][body.partition_id] = MetadataPartition(
                body.partition_id,
                body.replicas,
                body.isr,
                body.leader,
                body.leader_epoch,
                body.partition_epoch,
                body.removing_replicas,
                body.adding_replicas,
            )
        elif isinstance(body, PartitionChangeRecord):
            partition = topic[1].get(body.partition_id)
            if partition is None:
                raise ValueError(
                    f"PartitionChangeRecord of partition {body.partition_id} of {topic[0]!r}, unknown {where}"
                )
            topic[1][body.partition_id] = partition.changed(body)


def find_metadata_log_dir(
    log_dirs: Sequence[Path], configured: Path | None = None, key: str = "metadata_log_dir"
) -> Path:
    """The log dir holding ``__cluster_metadata-0`` (the broker's ``metadata.log.dir``): ``configured``
    (the config's ``key``), else the one of ``log_dirs`` that holds it; ``ClusterMetadataError``
    naming ``key`` when there is none, or more than one."""
    if configured is not None:
        if not _is_metadata_dir(Path(configured) / CLUSTER_METADATA_DIR):
            raise ClusterMetadataError(
                f"{key}: {configured} holds no {CLUSTER_METADATA_DIR} directory (name the broker's metadata.log.dir)"
            )
        return Path(configured)
    found = [Path(d) for d in log_dirs if _is_metadata_dir(Path(d) / CLUSTER_METADATA_DIR)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise ClusterMetadataError(
            f"no log dir of {', '.join(map(str, log_dirs)) or 'the config'} holds KRaft's {CLUSTER_METADATA_DIR} "
            f"(the broker's metadata.log.dir, by default its first log dir): if it is elsewhere, name it as {key}"
        )
    raise ClusterMetadataError(
        f"{', '.join(map(str, found))} each hold a {CLUSTER_METADATA_DIR}: name the one the broker uses "
        f"(its metadata.log.dir) as {key}"
    )


def _is_metadata_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def latest_snapshot(directory: Path) -> SnapshotId | None:
    """The newest ``<offset>-<epoch>.checkpoint`` of a metadata log directory (a ``.part`` being
    written or a ``.deleted`` one is not a snapshot)."""
    found = [
        SnapshotId(int(m.group(1)), int(m.group(2)))
        for entry in directory.iterdir()
        if (m := _SNAPSHOT_FILE.fullmatch(entry.name)) is not None
    ]
    return max(found, default=None)


def _read_snapshot(path: Path, builder: _Builder) -> None:
    """Replay one snapshot into ``builder``: SnapshotHeader first, SnapshotFooter last, else it is
    not a whole snapshot."""
    first: ControlRecordType | None = None
    last: ControlRecordType | None = None
    position = 0
    for header, records in iter_batches(path, max_batch_bytes=MAX_METADATA_BATCH_BYTES):
        position = header.position
        if header.is_control:
            for record in records:
                try:
                    kind = decode_control_record(record).type
                except ValueError as exc:
                    raise CorruptLogError(path, header.position, str(exc)) from None
                first = kind if first is None else first
                last = kind
            continue
        if first is None:
            raise ClusterMetadataError(
                f"{path}: at byte {header.position}: the snapshot does not start with its header"
            )
        last = None
        for entry in _metadata_records(path, header, records):
            try:  # the snapshot's records stand at its end offset: all of them are the image
                builder.take(replace(entry, offset=builder.snapshot_end), "in the snapshot")
            except ValueError as exc:
                raise CorruptLogError(
                    path, header.position, f"metadata record at offset {entry.offset}: {exc}"
                ) from None
    if first != ControlRecordType.SNAPSHOT_HEADER or last != ControlRecordType.SNAPSHOT_FOOTER:
        what = "header" if first != ControlRecordType.SNAPSHOT_HEADER else "footer"
        raise ClusterMetadataError(f"{path}: at byte {position}: the snapshot has no {what} (cut short or damaged)")
    if builder.pending is not None:
        raise ClusterMetadataError(f"{path}: a metadata transaction is open at the snapshot's end")


def read_cluster_metadata(metadata_log_dir: Path) -> ClusterMetadataImage:
    """The image of ``<metadata_log_dir>/__cluster_metadata-0``: the latest snapshot, then the
    log segments (offsets below the snapshot only for their deletions). A gap in the log from the
    snapshot on, a snapshot cut short or a malformed record is an error naming file and offset."""
    directory = Path(metadata_log_dir) / CLUSTER_METADATA_DIR
    if not _is_metadata_dir(directory):
        raise ClusterMetadataError(f"{directory} is not a directory: no KRaft metadata log there")
    snapshot = latest_snapshot(directory)
    builder = _Builder(directory, snapshot.end_offset if snapshot is not None else 0)
    if snapshot is not None:
        _read_snapshot(directory / snapshot.file_name, builder)
    covered = builder.snapshot_end  # every offset below is in the snapshot or was replayed
    committed = builder.snapshot_end
    log_start: int | None = None
    epoch_starts: dict[int, int] = {}
    previous: RecordBatchHeader | None = None
    for segment in PartitionLog(directory).segments:
        path = segment.log_path
        for header, records in iter_metadata_batches(path, history_below=builder.snapshot_end):
            log_start = header.base_offset if log_start is None else log_start
            epoch = header.partition_leader_epoch
            contiguous = previous is not None and header.base_offset == previous.next_offset
            if (previous is None and header.base_offset == 0) or (
                contiguous and previous is not None and epoch > previous.partition_leader_epoch
            ):
                epoch_starts[epoch] = header.base_offset  # the leader's first offset of its epoch
            if not header.is_control and epoch in epoch_starts:
                committed = max(committed, epoch_starts[epoch] + 1)
            if header.next_offset > builder.snapshot_end:  # offsets the snapshot does not cover
                if header.base_offset > covered or (covered > builder.snapshot_end and header.base_offset != covered):
                    since = f"the snapshot {snapshot.file_name}" if snapshot is not None else "the log's start"
                    raise ClusterMetadataError(
                        f"{path}: at byte {header.position}: the metadata log does not go on at offset {covered} "
                        f"(the next batch starts at {header.base_offset}): offsets since {since} are missing"
                    )
                covered = header.next_offset
            for record in records:
                try:
                    builder.take(record, "to the log")
                except ValueError as exc:
                    raise CorruptLogError(
                        path, header.position, f"metadata record at offset {record.offset}: {exc}"
                    ) from None
            previous = header
    topics = {
        topic_id: MetadataTopic(topic_id, name, dict(sorted(partitions.items())))
        for topic_id, (name, partitions) in builder.topics.items()
    }
    return ClusterMetadataImage(
        path=directory,
        snapshot=snapshot,
        log_start_offset=builder.snapshot_end if log_start is None else min(log_start, builder.snapshot_end),
        end_offset=covered,
        committed_offset=min(committed, covered),
        topics=topics,
        removed=dict(builder.removed),
        open_transaction=builder.pending_from,
    )
