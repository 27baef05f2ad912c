"""Items are made on a thread of their own, ahead of their consumer (as an export decodes a segment
ahead of its writer): an error of the maker reaches the consumer after every item made before
it, and a consumer that stops leaves no thread behind."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tiering_core.engine.read_ahead import read_ahead
from tiering_core.errors import CorruptLogError


def _groups(made: list[int], fail_after: int | None = None) -> Iterator[int]:
    for i in range(10):
        if fail_after is not None and i == fail_after:
            raise CorruptLogError("00000000000000000000.log", 0, f"damaged after group {i}")
        made.append(i)
        yield i


def _decode_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "read-ahead"]


def test_a_decode_error_comes_after_the_groups_before_it() -> None:
    got: list[int] = []
    with pytest.raises(CorruptLogError, match="damaged after group 4"):
        for group in read_ahead(lambda: _groups([], fail_after=4), depth=2):
            got.append(group)
    assert got == [0, 1, 2, 3]
    assert not _decode_threads()


def test_the_decode_runs_at_most_depth_ahead_and_stops_with_the_writer() -> None:
    made: list[int] = []
    groups = read_ahead(lambda: _groups(made), depth=2)
    assert next(groups) == 0
    groups.close()  # the writer stops (an error of its own)
    assert not _decode_threads()
    assert len(made) <= 1 + 2 + 1  # the group taken, the queue, the one waiting to be queued
    assert list(read_ahead(lambda: _groups([]), depth=2)) == list(range(10))
