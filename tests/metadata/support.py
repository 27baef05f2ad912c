"""Helpers shared by the metadata store tests."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.errors import SchemaBehindError
from tiering_core.metadata.migrations import current_revision, head_revision, upgrade
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.metadata.store import Lease, RemoteLogMetadataStore, RemoteLogSegmentMetadata

ROOT = Path(__file__).resolve().parents[2]
S = RemoteLogSegmentState


def tip(topic_id: str = "AAAAAAAAAAAAAAAAAAAAAA", topic: str = "orders", partition: int = 0) -> TopicIdPartition:
    return TopicIdPartition(topic_id, TopicPartition(topic, partition))


def segment(
    tp: TopicIdPartition,
    start: int,
    end: int,
    epochs: dict[int, int] | None = None,
    *,
    size: int = 100,
    event_time: int = 1,
    custom: dict[str, Any] | None = None,
) -> RemoteLogSegmentMetadata:
    """A fresh copy attempt (new UUID) of offsets start..end (inclusive)."""
    return RemoteLogSegmentMetadata(
        segment_id=uuid.uuid4(),
        topic_id_partition=tp,
        start_offset=start,
        end_offset=end,
        max_timestamp=1_000 + end,
        leader_epochs=epochs if epochs is not None else {0: start},
        size_bytes=size,
        state=S.COPY_SEGMENT_STARTED,
        writer_token=0,
        event_time=event_time,
        custom_metadata=custom or {},
    )


def finish(store: RemoteLogMetadataStore, lease: Lease, meta: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
    store.add_segment(meta, lease)
    return store.update_segment_state(meta.segment_id, S.COPY_SEGMENT_FINISHED, lease)


def delete(store: RemoteLogMetadataStore, lease: Lease, segment_id: uuid.UUID) -> None:
    store.update_segment_state(segment_id, S.DELETE_SEGMENT_STARTED, lease)
    store.update_segment_state(segment_id, S.DELETE_SEGMENT_FINISHED, lease)


def refused_then_upgraded(url: str, revision: str) -> None:
    """A store left at an older ``revision``: opening it is refused in one line naming that
    revision, the head and the command to run, and changes nothing; then that upgrade is run."""
    with pytest.raises(SchemaBehindError) as refused:
        RemoteLogMetadataStore(url)
    message = str(refused.value)
    assert "\n" not in message
    assert f"schema revision {revision}," in message, message
    assert f"(head {head_revision()})" in message and "run `tiering db upgrade`" in message, message
    assert current_revision(url) == revision
    upgrade(url)
    assert current_revision(url) == head_revision()


def worker(*args: str) -> subprocess.Popen[str]:
    """A real OS process running ``tests.metadata.workers`` (its stdin is the test's to write)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.metadata.workers", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def start_in(seconds: float) -> str:
    """A shared start instant for racing processes (they import and connect before it)."""
    return repr(time.time() + seconds)


def count_queries(store: RemoteLogMetadataStore) -> list[str]:
    """The SELECTs the store runs from now on."""
    statements: list[str] = []

    def seen(_conn: object, _cursor: object, sql: str, *_: object) -> None:
        if sql.lstrip().upper().startswith("SELECT"):
            statements.append(sql)

    event.listen(store.engine, "before_cursor_execute", seen)
    return statements
