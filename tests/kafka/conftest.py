from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.topic import TopicPartition


@pytest.fixture()
def log_dir(tmp_path: Path) -> Path:
    path = tmp_path / "kafka-logs"
    path.mkdir()
    return path


@pytest.fixture()
def make_writer(log_dir: Path) -> Callable[..., PartitionWriter]:
    counter = {"t": 1_700_000_000_000}

    def clock() -> int:
        counter["t"] += 7
        return counter["t"]

    def make(topic: str = "orders", partition: int = 0, **kwargs: object) -> PartitionWriter:
        kwargs.setdefault("clock", clock)
        return PartitionWriter(log_dir, TopicPartition(topic, partition), **kwargs)  # type: ignore[arg-type]

    return make
