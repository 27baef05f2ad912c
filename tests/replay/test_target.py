"""The ``tiering.source`` mark: what a replayed record says of its source, and what is not one."""

from __future__ import annotations

import pytest

from tiering_core.errors import TieringError
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.replay import SOURCE_HEADER, RangeRequest, SourceMark
from tiering_core.replay.target import transactional_id


def test_a_mark_reads_back_as_written_and_the_last_one_counts() -> None:
    mark = SourceMark("2zfzmLCpRaOSKOe6dXGZPw", 3, 12345)
    assert SourceMark.decode(mark.encode()) == mark
    earlier = SourceMark("AAAAAAAAAAAAAAAAAAAAAA", 0, 7).encode()
    headers = [(SOURCE_HEADER, earlier), ("other", b"x"), (SOURCE_HEADER, mark.encode())]
    assert SourceMark.of(headers) == mark
    assert SourceMark.of([("other", b"x")]) is None


@pytest.mark.parametrize(
    "value", [None, b"", b"a:b:c", b"id:1", b"id:-1:2", b"id:1:2:3", b"\xff\xfe:1:2", b"id:1:" + b"9" * 200]
)
def test_another_writers_header_is_no_mark(value: bytes | None) -> None:
    assert SourceMark.decode(value) is None


def test_a_transactional_id_per_source_partition_and_target() -> None:
    a = TopicIdPartition("id-a", TopicPartition("orders", 0))
    b = TopicIdPartition("id-a", TopicPartition("orders", 1))
    assert len({transactional_id("t1", a), transactional_id("t1", b), transactional_id("t2", a)}) == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of a first offset and a first timestamp"),
        ({"from_offset": 1, "from_timestamp": 2}, "exactly one of a first offset and a first timestamp"),
        ({"from_offset": 1, "to_offset": 2, "to_timestamp": 3}, "not both"),
        ({"from_offset": -1}, "from offset must not be negative"),
        ({"from_offset": 5, "to_offset": 4}, "the last offset 4 is below the first offset 5"),
        ({"from_timestamp": 5, "to_timestamp": 4}, "the last timestamp 4 is before the first one 5"),
    ],
)
def test_a_bad_range_is_refused_by_name(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(TieringError, match=message):
        RangeRequest(**kwargs)
