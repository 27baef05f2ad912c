"""The young generation's threshold is raised inside the block only, and never lowered."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from tiering_core.engine.allocation import BULK_THRESHOLD, fewer_collections


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    yield before
    gc.set_threshold(*before)


def test_raised_inside_and_put_back_after(thresholds: tuple[int, int, int]) -> None:
    gc.set_threshold(700, 10, 10)
    with fewer_collections():
        assert gc.get_threshold() == (BULK_THRESHOLD, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_put_back_when_the_block_fails(thresholds: tuple[int, int, int]) -> None:
    gc.set_threshold(700, 10, 10)
    with pytest.raises(RuntimeError), fewer_collections():
        raise RuntimeError("planning failed")
    assert gc.get_threshold() == (700, 10, 10)


def test_a_process_that_collects_less_often_already_keeps_its_threshold(thresholds: tuple[int, int, int]) -> None:
    gc.set_threshold(200_000, 5, 5)
    with fewer_collections(), fewer_collections(1000):
        assert gc.get_threshold() == (200_000, 5, 5)
    assert gc.get_threshold() == (200_000, 5, 5)
