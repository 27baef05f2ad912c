"""Values the metadata store hands out: frozen dataclasses, never ORM objects.

Their dict fields are part of the value and must not be mutated by callers (the store may hand
the same decoded value to several callers). Slotted, so the store's memo of many decoded segments
holds fewer objects for the garbage collector to walk.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import msgspec

from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.errors import SegmentNotFoundError
from tiering_core.metadata.states import RemoteLogSegmentState, RemotePartitionDeleteState


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """One copy attempt of one segment (KAFKA_SEMANTICS 4; a fresh UUID per attempt).

    ``end_offset`` is inclusive; ``leader_epochs`` maps epoch -> first offset of that epoch in the
    segment, ascending; ``event_time`` is the time (ms) of the latest state change.
    """

    segment_id: uuid.UUID
    topic_id_partition: TopicIdPartition
    start_offset: int
    end_offset: int
    max_timestamp: int
    leader_epochs: dict[int, int]
    size_bytes: int
    state: RemoteLogSegmentState
    writer_token: int
    event_time: int
    custom_metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(_custom_slot.__get__(self), dict):
            raise TypeError(f"custom_metadata of segment {self.segment_id} must be a dict")

    def epoch_ranges(self) -> dict[int, tuple[int, int]]:
        """Per epoch: (its start in the segment, next epoch's start - 1 or the end offset)."""
        items = sorted(self.leader_epochs.items())
        ranges = {}
        for i, (epoch, start) in enumerate(items):
            end = items[i + 1][1] - 1 if i + 1 < len(items) else self.end_offset
            ranges[epoch] = (start, end)
        return ranges

    def with_state(
        self, state: RemoteLogSegmentState, *, event_time: int | None = None, writer_token: int | None = None
    ) -> RemoteLogSegmentMetadata:
        return replace(
            self,
            state=state,
            event_time=self.event_time if event_time is None else event_time,
            writer_token=self.writer_token if writer_token is None else writer_token,
        )


_decode_custom = msgspec.json.Decoder(dict[str, Any]).decode
_custom_slot: Any = RemoteLogSegmentMetadata.__dict__["custom_metadata"]  # the slot's member descriptor


class CustomMetadataLoader:
    """Reads the custom metadata of a listing's segments, all in one go, when the first is asked for.

    ``read`` maps segment ids (text) to their stored JSON; ``segment_ids`` may still grow until the
    first read. Shared by the listing's values, so reading every segment's custom metadata costs
    one query, and reading none costs nothing.
    """

    __slots__ = ("_lock", "_read", "_segment_ids", "_texts")

    def __init__(self, read: Callable[[Sequence[str]], dict[str, str]], segment_ids: list[str]) -> None:
        self._read = read
        self._segment_ids = segment_ids
        self._texts: dict[str, str] | None = None
        self._lock = threading.Lock()

    def text_of(self, segment_id: uuid.UUID) -> str:
        with self._lock:
            if self._texts is None:
                self._texts = self._read(self._segment_ids)
                self._segment_ids = []
            texts = self._texts
        text = texts.get(str(segment_id))
        if text is None:
            raise SegmentNotFoundError(
                f"segment {segment_id}: its custom metadata is no longer stored (its partition's metadata was dropped)"
            )
        return text


class _CustomMetadata:
    """``RemoteLogSegmentMetadata.custom_metadata``, decoded from its stored JSON on first read.

    Reading and decoding every segment's object keys, sizes and checksums made up most of a
    listing's cost, and most listings never look at them. A value the store builds holds the
    JSON text (a ``str``) or its listing's ``CustomMetadataLoader`` in the slot; the first read
    decodes it and keeps the dict. Equality, ``repr``, pickling and
    ``dataclasses.replace`` read the attribute, so they see the dict like any other caller.
    """

    def __get__(self, obj: RemoteLogSegmentMetadata | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = _custom_slot.__get__(obj, owner)
        if type(value) is CustomMetadataLoader:
            value = value.text_of(obj.segment_id)
        if type(value) is str:
            value = _decode_custom(value) if value else {}
            _custom_slot.__set__(obj, value)  # concurrent readers decode equal dicts; either is kept
        return value

    def __set__(self, obj: RemoteLogSegmentMetadata, value: Any) -> None:
        _custom_slot.__set__(obj, value)

    def __delete__(self, obj: RemoteLogSegmentMetadata) -> None:
        _custom_slot.__delete__(obj)


setattr(RemoteLogSegmentMetadata, "custom_metadata", _CustomMetadata())  # noqa: B010 (replaces the slot descriptor)


def _slot_setters() -> tuple[Any, ...]:
    """The slots' own setters (for custom metadata the slot's, under the decoding descriptor)."""
    return tuple(
        _custom_slot.__set__ if f.name == "custom_metadata" else RemoteLogSegmentMetadata.__dict__[f.name].__set__
        for f in fields(RemoteLogSegmentMetadata)
    )


def _stored_segment_factory() -> Any:
    """A constructor of values from trusted stored columns that skips the frozen dataclass
    ``__init__`` (its eleven ``object.__setattr__`` calls cost several times the rest of decoding
    a listed row). Only the store calls it, with columns it validated when they were written."""
    (s_id, s_tip, s_start, s_end, s_max_ts, s_epochs, s_size, s_state, s_token, s_time, s_custom) = _slot_setters()
    new = object.__new__
    cls = RemoteLogSegmentMetadata

    def stored_segment(
        segment_id: uuid.UUID,
        tip: TopicIdPartition,
        start_offset: int,
        end_offset: int,
        max_timestamp: int,
        leader_epochs: dict[int, int],
        size_bytes: int,
        state: RemoteLogSegmentState,
        writer_token: int,
        event_time: int,
        custom_metadata: str | CustomMetadataLoader,
    ) -> RemoteLogSegmentMetadata:
        meta = new(cls)
        s_id(meta, segment_id)
        s_tip(meta, tip)
        s_start(meta, start_offset)
        s_end(meta, end_offset)
        s_max_ts(meta, max_timestamp)
        s_epochs(meta, leader_epochs)
        s_size(meta, size_bytes)
        s_state(meta, state)
        s_token(meta, writer_token)
        s_time(meta, event_time)
        s_custom(meta, custom_metadata)
        return meta

    return stored_segment


stored_segment = _stored_segment_factory()


@dataclass(frozen=True, slots=True)
class Lease:
    """The right to write one partition's metadata until ``expires_at_ms`` (database clock).

    ``token`` is the partition's fencing token: it only ever grows, and a write carrying any
    token but the current one is rejected.
    """

    topic_id_partition: TopicIdPartition
    holder: str
    token: int
    expires_at_ms: int
    run_id: str | None = None

    @property
    def tip(self) -> TopicIdPartition:
        return self.topic_id_partition


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    """A partition as the metadata store knows it (a dropped one is a tombstone)."""

    topic_id: str
    topic_partition: TopicPartition
    delete_state: RemotePartitionDeleteState | None
    remote_log_start_offset: int | None
    dropped: bool
    lease_holder: str | None
    lease_token: int
    lease_expires_ms: int
    fencing_token: int
    created_ms: int
    updated_ms: int

    @property
    def topic(self) -> str:
        return self.topic_partition.topic

    @property
    def partition(self) -> int:
        return self.topic_partition.partition

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return TopicIdPartition(self.topic_id, self.topic_partition)


@dataclass(frozen=True, slots=True)
class TieringGap:
    """Offsets [start, end] the broker deleted before they were tiered (KAFKA_SEMANTICS 10.3)."""

    start: int
    end: int
    detected_ms: int


@dataclass(frozen=True, slots=True)
class DeleteRecordsObservation:
    """A DeleteRecords offset seen for the partition, where it was seen and when."""

    offset: int
    source: str
    observed_ms: int
    token: int
    run_id: str | None


@dataclass(frozen=True, slots=True)
class StateChange:
    """One row of the append-only history: a segment's or the partition's state change."""

    topic_id_partition: TopicIdPartition
    segment_id: uuid.UUID | None
    from_state: str | None
    to_state: str
    at_ms: int
    token: int
    run_id: str | None
