"""partition-state.json: round trip, strict and bounded reads naming the problem, its key outside
every segment's layout, and read and written whole on both backends."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.storage.errors import PartitionStateError, RemoteStorageError
from tiering_core.storage.filesystem import FilesystemRemoteStorage
from tiering_core.storage.layout import parse_segment_key, partition_prefix
from tiering_core.storage.partition_state import (
    MAX_GAPS,
    MAX_PARTITION_STATE_BYTES,
    PartitionState,
    partition_state_key,
)
from tiering_core.storage.remote import RemoteStorage
from tiering_core.storage.s3 import S3RemoteStorage

TIP = TopicIdPartition("DDDDDDDDDDDDDDDDDDDDDD", TopicPartition("orders", 2))
STATE = PartitionState(TIP, 120, 130, ((140, 149), (140, 155), (200, 209)), updated_at_ms=1_700_000_000_000)


def test_round_trip_and_the_document() -> None:
    parsed = PartitionState.from_json(STATE.to_json())
    assert parsed == STATE and parsed.updated_at_ms == STATE.updated_at_ms
    assert json.loads(STATE.to_json()) == {
        "format_version": 1,
        "topic": "orders",
        "topic_id": "DDDDDDDDDDDDDDDDDDDDDD",
        "partition": 2,
        "remote_log_start_offset": 120,
        "delete_records_offset": 130,
        "gaps": [[140, 149], [140, 155], [200, 209]],
        "updated_at_ms": 1_700_000_000_000,
    }
    empty = PartitionState(TIP, None, None)
    assert PartitionState.from_json(empty.to_json()) == empty
    assert json.loads(empty.to_json())["remote_log_start_offset"] is None


def test_when_it_was_written_is_no_part_of_the_value() -> None:
    assert replace(STATE, updated_at_ms=1) == STATE
    assert replace(STATE, gaps=()) != STATE
    assert replace(STATE, delete_records_offset=None) != STATE


def test_its_key_names_no_segment() -> None:
    key = partition_state_key(TIP, "t/")
    assert key == f"{partition_prefix(TIP, 't/')}partition-state.json"
    assert key == "t/orders-DDDDDDDDDDDDDDDDDDDDDD/2/partition-state.json"
    assert parse_segment_key(key, "t/") is None


def mutate(name: str, value: Any) -> bytes:
    doc = json.loads(STATE.to_json())
    if value is KeyError:
        del doc[name]
    else:
        doc[name] = value
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "partition state is not valid JSON"),
        (b"\xff", "partition state is not UTF-8"),
        (b"[" * 400_000, "partition state is not valid JSON"),
        (b"[]", "partition state is not a JSON object"),
        (mutate("format_version", 2), "unsupported partition state format_version 2"),
        (mutate("format_version", True), "unsupported partition state format_version True"),
        (mutate("format_version", 1.0), "unsupported partition state format_version 1.0"),
        (mutate("gaps", KeyError), "partition state fields: missing gaps"),
        (mutate("segments", []), "partition state fields: unknown 'segments'"),
        (mutate("topic", "../etc"), "partition state names no valid partition: topic name '../etc'"),
        (mutate("topic", 7), "partition state topic 7, .*: not a topic name"),
        (mutate("topic_id", "short"), "partition state names no valid partition: topic id 'short'"),
        (mutate("partition", -1), "partition -1: not a topic name, topic id and partition number"),
        (mutate("partition", "2"), "partition '2': not a topic name"),
        (mutate("remote_log_start_offset", -1), "remote_log_start_offset -1 is not an offset or null"),
        (mutate("remote_log_start_offset", 2**63), "remote_log_start_offset 9223372036854775808 is not an offset"),
        (mutate("delete_records_offset", "130"), "delete_records_offset '130' is not an offset or null"),
        (mutate("delete_records_offset", False), "delete_records_offset False is not an offset or null"),
        (mutate("updated_at_ms", None), "updated_at_ms None is not a time in ms"),
        (mutate("gaps", {"140": 149}), "partition state gaps must be a list"),
        (mutate("gaps", [[140]]), r"gap 0 \[140\] is not a range \[start, end\]"),
        (mutate("gaps", [[150, 140]]), r"gap 0 \(150, 140\) is not a range \[start, end\]"),
        (mutate("gaps", [[-1, 140]]), r"gap 0 \(-1, 140\) is not a range"),
        (mutate("gaps", [[1, 2.5]]), r"gap 0 \(1, 2.5\) is not a range"),
        (mutate("gaps", [[200, 209], [140, 149]]), r"gap 1 \[140, 149\] does not follow \[200, 209\]"),
        (mutate("gaps", [[140, 149], [140, 149]]), r"gap 1 \[140, 149\] does not follow \[140, 149\]"),
        (mutate("gaps", [[g, g] for g in range(MAX_GAPS + 1)]), f"has {MAX_GAPS + 1} gaps, more than the {MAX_GAPS}"),
        (b" " * (MAX_PARTITION_STATE_BYTES + 1), f"larger than {MAX_PARTITION_STATE_BYTES} bytes"),
    ],
)
def test_hostile_states_are_refused_naming_the_problem(data: bytes, message: str) -> None:
    with pytest.raises(PartitionStateError, match=message):
        PartitionState.from_json(data)
    assert issubclass(PartitionStateError, RemoteStorageError)


def test_the_most_gaps_it_holds_fit_the_bound() -> None:
    widest = 2**63 - 1
    most = PartitionState(TIP, widest, widest, tuple((widest - i, widest) for i in reversed(range(MAX_GAPS))), widest)
    data = most.to_json()
    assert len(data) <= MAX_PARTITION_STATE_BYTES
    assert PartitionState.from_json(data) == most


def test_no_writer_makes_what_a_reader_refuses() -> None:
    with pytest.raises(PartitionStateError, match=r"gap 1 \[140, 149\] does not follow \[200, 209\]"):
        PartitionState(TIP, 120, None, ((200, 209), (140, 149)))
    with pytest.raises(PartitionStateError, match="remote_log_start_offset -5 is not an offset"):
        PartitionState(TIP, -5, None)


@pytest.fixture(params=["s3", "filesystem"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RemoteStorage]:
    if request.param == "s3":
        endpoint = request.getfixturevalue("s3_endpoint")
        backend: RemoteStorage = S3RemoteStorage(
            endpoint.new_bucket(), prefix="p/", endpoint_url=endpoint.url, region="us-east-1"
        )
    else:
        backend = FilesystemRemoteStorage(tmp_path / "tier", prefix="p/")
    with backend:
        yield backend


def test_written_whole_and_read_back(storage: RemoteStorage) -> None:
    assert storage.read_partition_state(TIP) is None
    storage.write_partition_state(STATE)
    assert [o.key for o in storage.list_objects(TIP)] == [partition_state_key(TIP, "p/")]
    read = storage.read_partition_state(TIP)
    assert read == STATE and read is not None and read.updated_at_ms == STATE.updated_at_ms
    later = PartitionState(TIP, 150, 130, ((200, 209),), updated_at_ms=STATE.updated_at_ms + 1)
    storage.write_partition_state(later)
    assert storage.read_partition_state(TIP) == later


def test_a_malformed_or_misplaced_object_is_an_error_naming_its_key(storage: RemoteStorage) -> None:
    key = partition_state_key(TIP, "p/")
    storage.put_object(key, b"{}")
    with pytest.raises(PartitionStateError, match=f"{key}: unsupported partition state format_version None"):
        storage.read_partition_state(TIP)
    other = TopicIdPartition("EEEEEEEEEEEEEEEEEEEEEE", TopicPartition("orders", 2))
    storage.put_object(key, replace(STATE, topic_id_partition=other).to_json())
    with pytest.raises(PartitionStateError, match=f"{key}: partition state of orders-2\\(EEEE"):
        storage.read_partition_state(TIP)
    storage.put_object(key, b" " * (MAX_PARTITION_STATE_BYTES + 10))
    with pytest.raises(PartitionStateError, match="larger than"):
        storage.read_partition_state(TIP)
