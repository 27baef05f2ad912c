"""KRaft's metadata image as a node keeps it on disk: the controller's word on which topics exist.

Every KRaft node, broker or controller, holds the cluster metadata log in
``<metadata.log.dir>/__cluster_metadata-0`` (``metadata.log.dir`` defaults to the first of
``log.dirs``): snapshots ``<endOffset:020d>-<epoch:010d>.checkpoint`` (the image of every record
below ``endOffset``, framed by a SnapshotHeader and a SnapshotFooter control record) and log
segments. Both hold ordinary v2 record batches; each record's value is one metadata record
(``tiering_core.kafka.metadata_records`` decodes them).

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.batch import (
    RecordBatchHeader,
)
from tiering_core.kafka.metadata_records import (
    MAX_METADATA_BATCH_BYTES,
    NO_LEADER_CHANGE,
    ClusterMetadataError,
    MetadataRecord,
    MetadataRecordType,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
    decode_metadata_records,
    iter_metadata_batches,
)
from tiering_core.kafka.partition_log import CLUSTER_METADATA_TOPIC, PartitionLog
from tiering_core.kafka.records import (
    ControlRecordType,
    decode_control_record,
    iter_batches,
)
from tiering_core.kafka.topic import TopicPartition

#: The metadata log's directory in ``metadata.log.dir``.
CLUSTER_METADATA_DIR = f"{CLUSTER_METADATA_TOPIC}-0"
SNAPSHOT_SUFFIX = ".checkpoint"
_SNAPSHOT_FILE = re.compile(r"(\d{20})-(\d{10})\.checkpoint")


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
        for entry in decode_metadata_records(path, header, records):
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
