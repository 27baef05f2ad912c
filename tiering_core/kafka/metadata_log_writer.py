"""Writes a KRaft node's ``__cluster_metadata-0`` the way the node holds it: for tests and the demo.

What follows Kafka (``KafkaRaftClient``, ``QuorumController``, ``RecordsSnapshotWriter``):
- each leader epoch starts with a LeaderChange control batch at the epoch's first offset; the
  controller's records follow in batches whose partition leader epoch is that epoch;
- creating a topic is a TopicRecord and a PartitionRecord per partition in one batch; a leader
  change is a PartitionChangeRecord with the new leader; a deletion is a RemoveTopicRecord;
  ``transaction()`` wraps records in BeginTransaction/EndTransaction (or AbortTransaction);
- ``snapshot()`` writes ``<endOffset:020d>-<epoch:010d>.checkpoint``: a SnapshotHeader control
  batch, the image (TopicRecord and PartitionRecord of every live topic), a SnapshotFooter;
- ``roll()`` starts a new segment; ``delete_segments_before_snapshot()`` removes the segments
  wholly below the latest snapshot, as Kafka's metadata log retention does.
Only the ``.log`` files are written: nothing here or in the reader needs the segment indexes.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tiering_core.kafka.checkpoints import atomic_write, new_topic_id
from tiering_core.kafka.cluster_metadata import (
    CLUSTER_METADATA_DIR,
    ClusterMetadataImage,
    SnapshotId,
    latest_snapshot,
    read_cluster_metadata,
)
from tiering_core.kafka.log_writer import DEMO_NODE_ID, write_meta_properties
from tiering_core.kafka.metadata_records import (
    NO_LEADER_CHANGE,
    MetadataBody,
    MetadataRecordType,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
    encode_leader_change,
    encode_metadata_marker,
    encode_metadata_record,
    encode_snapshot_footer,
    encode_snapshot_header,
    iter_metadata_batches,
    kraft_control_record,
)
from tiering_core.kafka.partition_log import PartitionLog
from tiering_core.kafka.records import ControlRecordType, RecordSpec, encode_batch
from tiering_core.kafka.topic import TopicPartition

MetadataEntry = MetadataBody | MetadataRecordType  # a record, or a marker without fields (NoOp, transactions)


class ClusterMetadataWriter:
    """Appends to the metadata log of the node owning ``log_dir`` (its ``metadata.log.dir``).

    A new log starts at offset 0 with epoch ``epoch``'s LeaderChange; an existing one is opened
    where it ends (its image read back), so a test may write it in several steps.
    """

    def __init__(
        self,
        log_dir: Path,
        *,
        node_id: int = DEMO_NODE_ID,
        voters: Sequence[int] | None = None,
        epoch: int = 1,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.path = self.log_dir / CLUSTER_METADATA_DIR
        self.node_id = node_id
        self.voters = tuple(voters) if voters is not None else (node_id,)
        self.clock: Callable[[], int] = clock or (lambda: int(time.time() * 1000))
        self.topics: dict[str, TopicRecord] = {}
        self.partitions: dict[tuple[str, int], PartitionRecord] = {}
        self.log_dir.mkdir(parents=True, exist_ok=True)
        write_meta_properties(self.log_dir, node_id)
        if self.path.is_dir():
            self._reopen()
        else:
            self.path.mkdir(parents=True)
            self.next_offset = 0
            self.epoch = epoch - 1
            self.segment = self._segment_path(0)
            self.segment.touch()
            self.elect(node_id)

    def _segment_path(self, base: int) -> Path:
        return self.path / f"{base:020d}.log"

    def _reopen(self) -> None:
        image = read_cluster_metadata(self.log_dir)
        self.next_offset = image.end_offset
        segments = PartitionLog(self.path).segments
        self.segment = segments[-1].log_path
        epochs = [h.partition_leader_epoch for s in segments for h, _ in iter_metadata_batches(s.log_path)]
        self.epoch = max([*epochs, image.snapshot.epoch if image.snapshot is not None else 0])
        self._load(image)

    def _load(self, image: ClusterMetadataImage) -> None:
        for topic in image.topics.values():
            self.topics[topic.topic_id] = TopicRecord(topic.name, topic.topic_id)
            for p in topic.partitions.values():
                self.partitions[(topic.topic_id, p.partition)] = PartitionRecord(
                    topic.topic_id,
                    p.partition,
                    p.replicas,
                    p.isr,
                    p.removing_replicas,
                    p.adding_replicas,
                    p.leader,
                    p.leader_epoch,
                    p.partition_epoch,
                )

    # --- the log -------------------------------------------------------------------------------

    def _append_batch(self, batch: bytes, count: int) -> int:
        base = self.next_offset
        with open(self.segment, "ab") as out:
            out.write(batch)
            out.flush()
            os.fsync(out.fileno())
        self.next_offset += count
        return base

    def elect(self, leader_id: int | None = None) -> int:
        """A new leader epoch: its LeaderChange control batch; returns the epoch. Nothing before it
        is proven committed until the new controller writes a record of its own (``no_op``)."""
        self.epoch += 1
        record = kraft_control_record(
            ControlRecordType.LEADER_CHANGE,
            encode_leader_change(self.node_id if leader_id is None else leader_id, self.voters),
            self.clock(),
        )
        batch = encode_batch([record], base_offset=self.next_offset, partition_leader_epoch=self.epoch, control=True)
        self._append_batch(batch, 1)
        return self.epoch

    def append(self, entries: Sequence[MetadataEntry], *, epoch: int | None = None) -> int:
        """One batch of the controller's records (at ``epoch``, default the current one); returns
        its base offset."""
        values = [
            encode_metadata_marker(e) if isinstance(e, MetadataRecordType) else encode_metadata_record(e)
            for e in entries
        ]
        base = self.append_values(values, epoch=epoch)
        for entry in entries:
            self._track(entry)
        return base

    def append_values(self, values: Sequence[bytes], *, epoch: int | None = None) -> int:
        """One batch of records given as their encoded values (any record type, or a damaged one)."""
        now = self.clock()
        specs = [RecordSpec(None, value, now) for value in values]
        batch = encode_batch(
            specs, base_offset=self.next_offset, partition_leader_epoch=self.epoch if epoch is None else epoch
        )
        return self._append_batch(batch, len(specs))

    def _track(self, entry: MetadataEntry) -> None:
        if isinstance(entry, TopicRecord):
            self.topics[entry.topic_id] = entry
        elif isinstance(entry, PartitionRecord):
            self.partitions[(entry.topic_id, entry.partition_id)] = entry
        elif isinstance(entry, RemoveTopicRecord):
            self.topics.pop(entry.topic_id, None)
            for key in [k for k in self.partitions if k[0] == entry.topic_id]:
                del self.partitions[key]
        elif isinstance(entry, PartitionChangeRecord):
            old = self.partitions[(entry.topic_id, entry.partition_id)]
            leader, leader_epoch = old.leader, old.leader_epoch
            if entry.leader != NO_LEADER_CHANGE:
                leader, leader_epoch = entry.leader, old.leader_epoch + 1
            self.partitions[(entry.topic_id, entry.partition_id)] = PartitionRecord(
                old.topic_id,
                old.partition_id,
                old.replicas if entry.replicas is None else entry.replicas,
                old.isr if entry.isr is None else entry.isr,
                old.removing_replicas if entry.removing_replicas is None else entry.removing_replicas,
                old.adding_replicas if entry.adding_replicas is None else entry.adding_replicas,
                leader,
                leader_epoch,
                old.partition_epoch + 1,
            )

    def no_op(self) -> int:
        """The controller's NoOpRecord (it writes one every ``metadata.max.idle.interval.ms``)."""
        return self.append([MetadataRecordType.NO_OP_RECORD])

    @contextmanager
    def transaction(self, *, abort: bool = False) -> Iterator[None]:
        """Records appended inside make one metadata transaction (ended, or aborted with ``abort``)."""
        self.append([MetadataRecordType.BEGIN_TRANSACTION_RECORD])
        yield
        end = MetadataRecordType.ABORT_TRANSACTION_RECORD if abort else MetadataRecordType.END_TRANSACTION_RECORD
        if abort:  # the aborted records never entered the image: forget them again
            image = read_cluster_metadata(self.log_dir)
            self.topics.clear()
            self.partitions.clear()
            self._load(image)
        self.append([end])

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        topic_id: str | None = None,
        replicas: Sequence[int] | None = None,
    ) -> str:
        """A TopicRecord and its PartitionRecords (leader the first replica, epoch 0); the topic id."""
        topic_id = topic_id or new_topic_id()
        owners = tuple(replicas) if replicas is not None else (self.node_id,)
        records: list[MetadataEntry] = [TopicRecord(name, topic_id)]
        records += [PartitionRecord(topic_id, p, owners, owners, (), (), owners[0], 0, 0) for p in range(partitions)]
        self.append(records)
        return topic_id

    def remove_topic(self, topic_id: str) -> int:
        """The topic's RemoveTopicRecord; its offset."""
        return self.append([RemoveTopicRecord(topic_id)])

    def change_leader(self, tp: TopicPartition, leader: int, *, isr: Sequence[int] | None = None) -> int:
        """A PartitionChangeRecord electing ``leader`` for the topic now named ``tp.topic``."""
        topic_id = next(t.topic_id for t in self.topics.values() if t.name == tp.topic)
        change = PartitionChangeRecord(topic_id, tp.partition, tuple(isr) if isr is not None else None, leader)
        return self.append([change])

    def roll(self) -> Path:
        """Start a new segment at the log's end."""
        self.segment = self._segment_path(self.next_offset)
        self.segment.touch()
        return self.segment

    # --- snapshots -----------------------------------------------------------------------------

    def snapshot(self) -> Path:
        """The image of every record so far as ``<end>-<epoch>.checkpoint`` (the node snapshots
        only what is committed: a snapshot is the proof that everything below it is)."""
        snapshot = SnapshotId(self.next_offset, self.epoch)
        now = self.clock()
        header = kraft_control_record(ControlRecordType.SNAPSHOT_HEADER, encode_snapshot_header(now), now)
        footer = kraft_control_record(ControlRecordType.SNAPSHOT_FOOTER, encode_snapshot_footer(), now)
        image: list[MetadataBody] = []
        for topic in self.topics.values():
            image.append(topic)
            image.extend(p for (t, _), p in sorted(self.partitions.items()) if t == topic.topic_id)
        data = encode_batch([header], base_offset=0, partition_leader_epoch=self.epoch, control=True)
        if image:
            specs = [RecordSpec(None, encode_metadata_record(r), now) for r in image]
            data += encode_batch(specs, base_offset=1, partition_leader_epoch=self.epoch)
        data += encode_batch([footer], base_offset=1 + len(image), partition_leader_epoch=self.epoch, control=True)
        path = self.path / snapshot.file_name
        atomic_write(path, data)
        return path

    def delete_segments_before_snapshot(self) -> list[Path]:
        """Remove the segments wholly below the latest snapshot (never the active one)."""
        snapshot = latest_snapshot(self.path)
        if snapshot is None:
            return []
        bases = sorted(int(p.name[:20]) for p in self.path.glob("*.log"))
        gone = []
        for base, next_base in itertools.pairwise(bases):
            if next_base <= snapshot.end_offset:
                path = self._segment_path(base)
                path.unlink()
                gone.append(path)
        return gone
