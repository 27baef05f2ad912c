"""KRaft's metadata image read from a node's ``__cluster_metadata-0`` (docs/kafka-rules.md section 7):
the latest snapshot plus the log after it, metadata transactions, what is proven committed, the
deletions the log before the snapshot still holds, and hostile files refused with file and offset
(the records themselves: test_metadata_records.py).
The same reader is checked against Kafka's own decoder on a real cluster in
tests/real_kafka/test_cluster_metadata.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.kafka.test_metadata_records import uvarint
from tiering_core.errors import CorruptLogError
from tiering_core.kafka.batch import CODEC_GZIP, iter_batch_headers
from tiering_core.kafka.checkpoints import new_topic_id
from tiering_core.kafka.cluster_metadata import (
    CLUSTER_METADATA_DIR,
    MetadataPartition,
    TopicIdState,
    find_metadata_log_dir,
    read_cluster_metadata,
)
from tiering_core.kafka.files import NotARegularFileError
from tiering_core.kafka.metadata_log_writer import ClusterMetadataWriter
from tiering_core.kafka.metadata_records import (
    MAX_METADATA_BATCH_BYTES,
    NO_LEADER,
    ClusterMetadataError,
    MetadataRecordType,
    PartitionChangeRecord,
    RemoveTopicRecord,
    TopicRecord,
    encode_metadata_marker,
    encode_metadata_record,
    iter_metadata_records,
)
from tiering_core.kafka.records import RecordSpec, encode_batch
from tiering_core.kafka.topic import TopicPartition


@pytest.fixture()
def controller(tmp_path: Path) -> ClusterMetadataWriter:
    clock = iter(range(1_700_000_000_000, 1_800_000_000_000, 10))
    return ClusterMetadataWriter(tmp_path / "logs", voters=(1, 2, 3), clock=lambda: next(clock))


def image(w: ClusterMetadataWriter):
    return read_cluster_metadata(w.log_dir)


# --- the image ------------------------------------------------------------------------------------


def test_the_image_follows_creations_leader_changes_and_deletions(controller: ClusterMetadataWriter) -> None:
    orders = controller.create_topic("orders", 2, replicas=(1, 2))
    doomed = controller.create_topic("doomed")
    controller.change_leader(TopicPartition("orders", 1), 2, isr=(2,))
    controller.change_leader(TopicPartition("orders", 1), 2)  # the same leader again: a new epoch all the same
    controller.append([PartitionChangeRecord(orders, 0, isr=(1,))])  # no leader change: same epoch
    controller.append([PartitionChangeRecord(orders, 0, leader=NO_LEADER)])  # no leader left
    removed_at = controller.remove_topic(doomed)
    controller.no_op()
    img = image(controller)
    assert set(img.topics) == {orders}
    assert img.topic_named("orders") is img.topics[orders]
    assert img.partition(TopicPartition("orders", 1)) == MetadataPartition(1, (1, 2), (2,), 2, 2, 2)
    assert img.partition(TopicPartition("orders", 0)) == MetadataPartition(0, (1, 2), (1,), NO_LEADER, 1, 2)
    assert img.partition(TopicPartition("orders", 5)) is None and img.partition(TopicPartition("gone", 0)) is None
    assert img.removed[doomed].name == "doomed" and img.removed[doomed].offset == removed_at
    assert (img.snapshot, img.log_start_offset, img.end_offset) == (None, 0, controller.next_offset)
    # Kafka's own image agrees with this one: records read back one by one, as written.
    records = list(iter_metadata_records(controller.segment))
    assert [r.offset for r in records] == list(range(1, controller.next_offset))
    assert records[0].body == TopicRecord("orders", orders) and records[0].leader_epoch == 1


def test_metadata_transactions_apply_at_their_end_and_never_when_aborted(controller: ClusterMetadataWriter) -> None:
    with controller.transaction():
        kept = controller.create_topic("kept")
        assert kept not in image(controller).topics  # not yet ended
        assert image(controller).open_transaction is not None
    with controller.transaction(abort=True):
        dropped = controller.create_topic("dropped")
    with controller.transaction(abort=True):
        controller.remove_topic(kept)
    img = image(controller)
    assert set(img.topics) == {kept} and dropped not in img.removed and kept not in img.removed
    assert img.open_transaction is None
    controller.append([MetadataRecordType.BEGIN_TRANSACTION_RECORD])
    controller.append([MetadataRecordType.BEGIN_TRANSACTION_RECORD])
    with pytest.raises(CorruptLogError, match="a second BeginTransactionRecord"):
        image(controller)


def test_a_snapshot_and_the_log_after_it_make_the_image(controller: ClusterMetadataWriter) -> None:
    old = controller.create_topic("old")
    moved = controller.create_topic("moved", replicas=(1, 2))
    controller.snapshot()
    controller.roll()
    controller.change_leader(TopicPartition("moved", 0), 2)
    new = controller.create_topic("new")
    controller.remove_topic(old)
    img = image(controller)
    assert img.snapshot is not None and img.snapshot.end_offset == 5
    assert set(img.topics) == {moved, new}
    assert img.partition(TopicPartition("moved", 0)) == MetadataPartition(0, (1, 2), (1, 2), 2, 1, 1)
    assert img.removed[old].offset == 8
    # The log before the snapshot is read for its deletions only: the snapshot is the image there.
    controller.delete_segments_before_snapshot()
    assert image(controller).topics == img.topics


def test_deletions_before_the_snapshot_are_kept_while_the_log_keeps_them(controller: ClusterMetadataWriter) -> None:
    gone = controller.create_topic("gone")
    controller.remove_topic(gone)
    with controller.transaction(abort=True):  # an aborted deletion is none
        live = controller.create_topic("live")
    live = controller.create_topic("live")
    with controller.transaction(abort=True):
        controller.remove_topic(live)
    controller.no_op()
    controller.snapshot()
    controller.roll()
    controller.no_op()
    img = image(controller)
    assert img.state_of(gone) is TopicIdState.DELETED and img.removed[gone].name == "gone"
    assert img.state_of(live) is TopicIdState.LIVE
    controller.delete_segments_before_snapshot()  # Kafka's metadata log retention
    img = image(controller)
    assert img.state_of(gone) is TopicIdState.UNKNOWN and img.log_start_offset == img.snapshot.end_offset


def test_what_is_proven_committed(controller: ClusterMetadataWriter) -> None:
    """The latest snapshot, or a leader epoch in which the controller wrote: a record above both
    may be an uncommitted tail a follower holds."""
    doomed = controller.create_topic("doomed")
    at = controller.remove_topic(doomed)
    img = image(controller)
    assert img.committed_offset == 1  # the first epoch's start: the controller wrote in it
    assert img.state_of(doomed) is TopicIdState.DELETION_UNCOMMITTED
    controller.elect(2)  # a new leader's LeaderChange alone proves nothing yet
    assert image(controller).state_of(doomed) is TopicIdState.DELETION_UNCOMMITTED
    start = controller.next_offset - 1
    controller.no_op()  # the new controller writes only once its epoch's start is committed
    img = image(controller)
    assert img.committed_offset == start + 1 > at and img.state_of(doomed) is TopicIdState.DELETED
    other = controller.create_topic("other")
    controller.remove_topic(other)
    assert image(controller).state_of(other) is TopicIdState.DELETION_UNCOMMITTED
    controller.snapshot()
    img = image(controller)
    assert img.committed_offset == controller.next_offset and img.state_of(other) is TopicIdState.DELETED
    assert img.state_of(new_topic_id()) is TopicIdState.UNKNOWN


def test_a_reopened_writer_goes_on_where_the_log_ends(controller: ClusterMetadataWriter) -> None:
    orders = controller.create_topic("orders")
    again = ClusterMetadataWriter(controller.log_dir)
    assert (again.next_offset, again.epoch) == (controller.next_offset, controller.epoch)
    again.change_leader(TopicPartition("orders", 0), 1)
    assert image(again).topics[orders].partitions[0].leader_epoch == 1


# --- where the metadata log is ------------------------------------------------------------------


def test_the_metadata_log_dir_is_found_or_named(tmp_path: Path, controller: ClusterMetadataWriter) -> None:
    other = tmp_path / "other"
    other.mkdir()
    assert find_metadata_log_dir([other, controller.log_dir]) == controller.log_dir
    assert find_metadata_log_dir([other], controller.log_dir, "brokers.1.metadata_log_dir") == controller.log_dir
    with pytest.raises(ClusterMetadataError, match=f"brokers.1.metadata_log_dir: {other} holds no"):
        find_metadata_log_dir([controller.log_dir], other, "brokers.1.metadata_log_dir")
    with pytest.raises(ClusterMetadataError, match="if it is elsewhere, name it as metadata_log_dir"):
        find_metadata_log_dir([other])
    ClusterMetadataWriter(other)
    with pytest.raises(ClusterMetadataError, match="each hold a __cluster_metadata-0"):
        find_metadata_log_dir([other, controller.log_dir])
    link = tmp_path / "linked"
    link.mkdir()
    (link / CLUSTER_METADATA_DIR).symlink_to(controller.path)  # never followed
    with pytest.raises(ClusterMetadataError, match="is not a directory"):
        read_cluster_metadata(link)


# --- hostile and damaged files ----------------------------------------------------------------


def test_a_gap_after_the_snapshot_is_refused(controller: ClusterMetadataWriter) -> None:
    controller.create_topic("orders")
    controller.snapshot()
    controller.roll()
    controller.no_op()
    controller.next_offset += 5  # five offsets lost
    controller.no_op()
    with pytest.raises(ClusterMetadataError, match=r"does not go on at offset 4 \(the next batch starts at 9\)"):
        image(controller)


def test_a_log_without_its_start_and_without_a_snapshot_is_refused(tmp_path: Path) -> None:
    w = ClusterMetadataWriter(tmp_path / "logs")
    w.create_topic("orders")
    w.roll()
    w.no_op()
    (w.path / "00000000000000000000.log").unlink()
    with pytest.raises(ClusterMetadataError, match="offsets since the log's start are missing"):
        read_cluster_metadata(w.log_dir)


def test_a_snapshot_cut_short_is_refused(controller: ClusterMetadataWriter) -> None:
    controller.create_topic("orders")
    path = controller.snapshot()
    data = path.read_bytes()
    footer = list(iter_batch_headers(path))[-1]
    path.write_bytes(data[: footer.position])
    with pytest.raises(ClusterMetadataError, match="the snapshot has no footer"):
        image(controller)
    path.write_bytes(data[:-10])
    with pytest.raises(CorruptLogError, match="truncated"):
        image(controller)


def test_records_that_do_not_fit_the_image_name_file_and_offset(controller: ClusterMetadataWriter) -> None:
    at = controller.append([RemoveTopicRecord(new_topic_id())])
    with pytest.raises(CorruptLogError, match=f"at offset {at}: REMOVE_TOPIC_RECORD of topic id .* unknown to the log"):
        image(controller)


def test_a_damaged_record_names_file_byte_and_offset(controller: ClusterMetadataWriter) -> None:
    controller.create_topic("orders")
    at = controller.append_values([uvarint(1) + uvarint(3) + uvarint(0) + b"\x00"])
    with pytest.raises(
        CorruptLogError, match=f"{controller.segment}: at byte .*: malformed metadata record at offset {at}"
    ):
        image(controller)


def test_a_crc_mismatch_is_refused(controller: ClusterMetadataWriter) -> None:
    controller.create_topic("orders")
    data = bytearray(controller.segment.read_bytes())
    data[-3] ^= 0xFF
    controller.segment.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError, match="CRC mismatch"):
        image(controller)


def test_a_batch_larger_than_kraft_writes_is_refused_before_it_is_read(controller: ClusterMetadataWriter) -> None:
    big = encode_batch(
        [RecordSpec(None, b"\x01" * (MAX_METADATA_BATCH_BYTES + 1), 0)],
        base_offset=controller.next_offset,
        partition_leader_epoch=1,
    )
    with open(controller.segment, "ab") as out:
        out.write(big)
    with pytest.raises(CorruptLogError, match=f"more than the {MAX_METADATA_BATCH_BYTES}"):
        image(controller)


def test_a_fifo_in_place_of_a_snapshot_is_refused(controller: ClusterMetadataWriter) -> None:
    controller.create_topic("orders")
    controller.snapshot().unlink()
    os.mkfifo(controller.path / "00000000000000000003-0000000001.checkpoint")  # would block a reader for ever
    with pytest.raises(NotARegularFileError, match="is a FIFO, not a regular file"):
        image(controller)


def test_deletions_in_compressed_batches_before_the_snapshot_are_found(controller: ClusterMetadataWriter) -> None:
    """The log before the snapshot is scanned for its deletions without decoding batches that hold
    none; a compressed batch cannot be told so by its bytes, and is decoded."""
    gone = controller.create_topic("gone")
    values = [encode_metadata_record(RemoveTopicRecord(gone)), encode_metadata_marker(MetadataRecordType.NO_OP_RECORD)]
    batch = encode_batch(
        [RecordSpec(None, v, 0) for v in values],
        base_offset=controller.next_offset,
        partition_leader_epoch=controller.epoch,
        codec=CODEC_GZIP,
    )
    with open(controller.segment, "ab") as out:
        out.write(batch)
    controller.next_offset += len(values)
    controller.topics.clear()
    controller.partitions.clear()
    for _ in range(50):
        controller.no_op()
    controller.snapshot()
    img = image(controller)
    assert img.state_of(gone) is TopicIdState.DELETED and img.removed[gone].name == "gone"
