"""Root offset checkpoints and partition.metadata: Kafka's text formats, atomic writes, clear errors."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from tiering_core.errors import CorruptLogError
from tiering_core.kafka.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    encode_offset_checkpoint,
    encode_partition_metadata,
    new_topic_id,
    parse_offset_checkpoint,
    parsed_offset_checkpoint,
    read_offset_checkpoint,
    read_partition_metadata,
    update_offset_checkpoint,
    validate_topic_id,
    write_offset_checkpoint,
    write_partition_metadata,
)
from tiering_core.kafka.topic import TopicPartition

TOPIC_ID = "f6ZcYhZ1SqWAcPsVD_lc0g"


def test_round_trip_and_kafkas_layout(tmp_path: Path) -> None:
    entries = {TopicPartition("pay.ments-x", 3): 17, TopicPartition("orders", 0): 5}
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT
    write_offset_checkpoint(path, entries)
    assert path.read_bytes() == b"0\n2\norders 0 5\npay.ments-x 3 17\n"
    assert read_offset_checkpoint(path) == entries
    assert [p.name for p in tmp_path.iterdir()] == [REPLICATION_OFFSET_CHECKPOINT]  # no temp file left behind


def test_tolerates_what_kafkas_reader_tolerates(tmp_path: Path) -> None:
    path = tmp_path / "c"
    assert parse_offset_checkpoint(b"0\r\n2\r\norders\t0   5\r\nclicks 1 9  \n", path) == {
        TopicPartition("orders", 0): 5,
        TopicPartition("clicks", 1): 9,
    }
    assert parse_offset_checkpoint(b"", path) == {}  # the broker creates the file empty
    assert parse_offset_checkpoint(b"0\n0\n", path) == {}
    assert read_offset_checkpoint(tmp_path / "missing") == {}


def test_a_version_line_alone_has_no_entries_as_in_kafka(tmp_path: Path) -> None:
    """``CheckpointReadBuffer.read`` returns an empty list when the count line is missing."""
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT
    for text in (b"0\n", b"0", b"0\r\n"):
        path.write_bytes(text)
        assert read_offset_checkpoint(path) == {}
    path.write_bytes(b"1\n")  # the version is still checked
    with pytest.raises(CorruptLogError, match="unsupported offset checkpoint version '1'"):
        read_offset_checkpoint(path)


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        (b"1\n0\n", 1, "unsupported offset checkpoint version '1'"),
        (b"0\nx\n", 2, "entry count 'x' is not"),
        (b"0\n2\norders 0 5\n", 2, "entry count 2 does not match the 1 entry line"),
        (b"0\n1\norders zero 5\n", 3, "malformed entry 'orders zero 5'"),
        (b"0\n1\norders 0\n", 3, "malformed entry 'orders 0'"),
        (b"0\n2\norders 0 5\n\n", 4, "malformed entry ''"),
        (b"0\n1\n orders 0 5\n", 3, "malformed entry"),
        (b"0\n1\nbad/topic 0 5\n", 3, "malformed entry 'bad/topic 0 5'"),
        (b"0\n1\norders 0 5\xff\n", 3, "is not UTF-8 text"),
    ],
)
def test_garbage_names_file_byte_and_line(tmp_path: Path, text: bytes, line: int, reason: str) -> None:
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT
    path.write_bytes(text)
    with pytest.raises(CorruptLogError, match=reason) as err:
        read_offset_checkpoint(path)
    starts = [0] + [i + 1 for i, b in enumerate(text) if b == ord("\n")]
    assert err.value.path == path and err.value.position == starts[line - 1]
    assert f"{path}: at byte {starts[line - 1]}: line {line}:" in str(err.value)


def test_update_keeps_other_partitions(tmp_path: Path) -> None:
    path = tmp_path / LOG_START_OFFSET_CHECKPOINT
    update_offset_checkpoint(path, TopicPartition("a", 0), 10)
    update_offset_checkpoint(path, TopicPartition("b", 1), 20)
    update_offset_checkpoint(path, TopicPartition("a", 0), 11)
    assert read_offset_checkpoint(path) == {TopicPartition("a", 0): 11, TopicPartition("b", 1): 20}
    update_offset_checkpoint(path, TopicPartition("a", 0), None)
    assert path.read_bytes() == encode_offset_checkpoint({TopicPartition("b", 1): 20}) == b"0\n1\nb 1 20\n"


def test_a_checkpoint_is_parsed_once_per_content_and_never_read_stale(tmp_path: Path) -> None:
    """A broker's checkpoint holds all its partitions: a run reading each partition's entry parses
    the file's bytes once, yet sees a rewrite at once, even one in place of the same size (the
    parse is keyed by the bytes, not by the file's times), and a caller's change stays its own."""
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT
    entries = {TopicPartition("t", p): 100 + p for p in range(500)}
    write_offset_checkpoint(path, entries)
    parsed_offset_checkpoint.cache_clear()
    for p in range(500):
        assert read_offset_checkpoint(path)[TopicPartition("t", p)] == 100 + p
    info = parsed_offset_checkpoint.cache_info()
    assert (info.misses, info.hits) == (1, 499)

    path.write_bytes(path.read_bytes().replace(b"t 7 107\n", b"t 7 207\n"))  # in place, same size
    assert read_offset_checkpoint(path)[TopicPartition("t", 7)] == 207

    mine = read_offset_checkpoint(path)
    mine[TopicPartition("t", 7)] = -1
    assert read_offset_checkpoint(path)[TopicPartition("t", 7)] == 207
    path.write_bytes(b"0\n1\nnot an entry\n")
    with pytest.raises(CorruptLogError, match="line 3"):  # a bad file is still named, never cached
        read_offset_checkpoint(path)


def test_partition_metadata_is_the_brokers_bytes(tmp_path: Path) -> None:
    path = tmp_path / "partition.metadata"
    write_partition_metadata(path, TOPIC_ID)
    assert path.read_bytes() == f"version: 0\ntopic_id: {TOPIC_ID}".encode()
    assert read_partition_metadata(path) == TOPIC_ID
    path.write_bytes(f"version: 0\r\ntopic_id:   {TOPIC_ID}\n".encode())
    assert read_partition_metadata(path) == TOPIC_ID
    assert encode_partition_metadata(TOPIC_ID).endswith(TOPIC_ID.encode())


@pytest.mark.parametrize(
    ("text", "reason", "position"),
    [
        (b"version: 1\ntopic_id: f6ZcYhZ1SqWAcPsVD_lc0g", "unsupported partition.metadata version '1'", 0),
        (b"version: 0\n", "has no topic_id line", 11),
        (b"topic_id: f6ZcYhZ1SqWAcPsVD_lc0g", "has no version line", 0),
        (b"version: 0\ntopic_id: short", "is not a 22-character", 11),
        (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", "zero UUID", 11),
        (b"version: 0\ntopic_id: f6ZcYhZ1SqWAcPsVD_lc0h", "not canonical", 11),
        (b"version: 0\ngarbage\n", "line 2: malformed line 'garbage'", 11),
    ],
)
def test_bad_partition_metadata(tmp_path: Path, text: bytes, reason: str, position: int) -> None:
    path = tmp_path / "partition.metadata"
    path.write_bytes(text)
    with pytest.raises(CorruptLogError, match=reason) as err:
        read_partition_metadata(path)
    assert err.value.path == path and err.value.position == position


def test_missing_partition_metadata(tmp_path: Path) -> None:
    with pytest.raises(CorruptLogError, match=r"partition\.metadata is missing"):
        read_partition_metadata(tmp_path / "partition.metadata")


def test_new_topic_ids_are_valid_kafka_uuids() -> None:
    ids = {new_topic_id() for _ in range(200)}
    assert len(ids) == 200
    for topic_id in ids:
        assert validate_topic_id(topic_id) == topic_id and not topic_id.startswith("-")
        assert len(base64.urlsafe_b64decode(topic_id + "==")) == 16
    with pytest.raises(CorruptLogError):
        validate_topic_id("x" * 22 + "=")


def test_atomic_write_leaves_the_old_file_when_it_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT
    write_offset_checkpoint(path, {TopicPartition("a", 0): 1})

    def failing_replace(src: str, dst: str) -> None:  # an injected fault: the rename never happens
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        write_offset_checkpoint(path, {TopicPartition("a", 0): 2})
    assert read_offset_checkpoint(path) == {TopicPartition("a", 0): 1}
    assert [p.name for p in tmp_path.iterdir()] == [REPLICATION_OFFSET_CHECKPOINT]
