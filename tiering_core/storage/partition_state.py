"""``partition-state.json``: what the metadata store holds of a partition beyond its segments.

Manifests carry each segment's metadata (``segment_facts.SegmentFacts``); the partition's own state
cannot live in any one of them: its remote log start offset, the highest DeleteRecords offset
applied through the platform and its tiering gaps. One small JSON object per partition,
``<partition prefix>partition-state.json``, holds them, rewritten whole after every change the
store commits (``engine.partition_state``), so the bucket alone says what the store said last::

    {"format_version": 1, "topic": "orders", "topic_id": "...", "partition": 0,
     "remote_log_start_offset": 120, "delete_records_offset": null,
     "gaps": [[150, 179]], "updated_at_ms": 1700000000000}

Offsets are null where the store has none; ``gaps`` are ``[start, end]`` (inclusive) in ascending
order, as the store lists them. Its key follows no segment's layout (``layout.parse_segment_key``
names no segment for it): orphan sweeps leave it alone, and a partition's removal deletes it last.
The object is read strictly, with bounded reads: anything else is a ``PartitionStateError``
naming what is wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tiering_core.errors import InvalidTopicError
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.storage.errors import PartitionStateError, RemoteObjectNotFoundError
from tiering_core.storage.layout import partition_prefix
from tiering_core.storage.objects import ObjectStore
from tiering_core.storage.segment_facts import MAX_OFFSET

PARTITION_STATE_NAME = "partition-state.json"
PARTITION_STATE_VERSION = 1
#: At most this many gaps (each takes at most 66 bytes of the object: 6.6 MB, within the bound below).
MAX_GAPS = 100_000
#: An object larger than this is refused unread.
MAX_PARTITION_STATE_BYTES = 8 * 1024 * 1024

_FIELDS = frozenset(
    {
        "format_version",
        "topic",
        "topic_id",
        "partition",
        "remote_log_start_offset",
        "delete_records_offset",
        "gaps",
        "updated_at_ms",
    }
)


def partition_state_key(tip: TopicIdPartition, prefix: str = "") -> str:
    """``<prefix><topic>-<topicId>/<partition>/partition-state.json``."""
    return f"{partition_prefix(tip, prefix)}{PARTITION_STATE_NAME}"


@dataclass(frozen=True)
class PartitionState:
    """A partition's remote log start offset, highest applied DeleteRecords offset and tiering
    gaps (``(start, end)``, ascending) as the metadata store held them at ``updated_at_ms``.

    ``updated_at_ms`` is when it was written, no part of the value: two states that differ only
    in it are equal (the content is what a writer compares before writing again).
    """

    topic_id_partition: TopicIdPartition
    remote_log_start_offset: int | None
    delete_records_offset: int | None
    gaps: tuple[tuple[int, int], ...] = ()
    updated_at_ms: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        try:
            partition_prefix(self.topic_id_partition)  # the topic name and id, as in every key
        except InvalidTopicError as exc:
            raise PartitionStateError(f"partition state names no valid partition: {exc}") from None
        for name in ("remote_log_start_offset", "delete_records_offset"):
            value = getattr(self, name)
            if value is not None and not _is_int(value, 0, MAX_OFFSET):
                raise PartitionStateError(f"partition state {name} {value!r:.40} is not an offset or null")
        if not _is_int(self.updated_at_ms, 0, MAX_OFFSET):
            raise PartitionStateError(f"partition state updated_at_ms {self.updated_at_ms!r:.40} is not a time in ms")
        if len(self.gaps) > MAX_GAPS:
            raise PartitionStateError(f"partition state has {len(self.gaps)} gaps, more than the {MAX_GAPS} it holds")
        previous: tuple[int, int] | None = None
        for index, gap in enumerate(self.gaps):
            if (
                not isinstance(gap, tuple)
                or len(gap) != 2
                or not _is_int(gap[0], 0, MAX_OFFSET)
                or not _is_int(gap[1], gap[0], MAX_OFFSET)
            ):
                raise PartitionStateError(f"partition state gap {index} {gap!r:.80} is not a range [start, end]")
            if previous is not None and gap <= previous:
                raise PartitionStateError(
                    f"partition state gap {index} {list(gap)} does not follow {list(previous)} (gaps are in ascending "
                    "order, each once)"
                )
            previous = gap

    @property
    def tip(self) -> TopicIdPartition:
        return self.topic_id_partition

    def to_json(self) -> bytes:
        tip = self.topic_id_partition
        doc: dict[str, Any] = {
            "format_version": PARTITION_STATE_VERSION,
            "topic": tip.topic,
            "topic_id": tip.topic_id,
            "partition": tip.partition,
            "remote_log_start_offset": self.remote_log_start_offset,
            "delete_records_offset": self.delete_records_offset,
            "gaps": [list(gap) for gap in self.gaps],
            "updated_at_ms": self.updated_at_ms,
        }
        return json.dumps(doc, indent=2, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> PartitionState:
        """Parse and validate; anything else is a PartitionStateError naming the problem."""
        if len(data) > MAX_PARTITION_STATE_BYTES:
            raise PartitionStateError(f"partition state is larger than {MAX_PARTITION_STATE_BYTES} bytes")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PartitionStateError(f"partition state is not UTF-8: {exc.reason} at byte {exc.start}") from None
        try:
            doc = json.loads(text)
        except RecursionError:
            raise PartitionStateError("partition state is not valid JSON: nested too deep") from None
        except ValueError as exc:
            raise PartitionStateError(f"partition state is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise PartitionStateError("partition state is not a JSON object")
        version = doc.get("format_version")
        if version != PARTITION_STATE_VERSION or not _is_int(version, 0, MAX_OFFSET):
            raise PartitionStateError(f"unsupported partition state format_version {version!r:.40}")
        missing, unknown = sorted(_FIELDS - set(doc)), sorted(set(doc) - _FIELDS)
        if missing or unknown:
            which = [f"missing {', '.join(missing)}"] if missing else []
            which += [f"unknown {', '.join(map(repr, unknown))}"] if unknown else []
            raise PartitionStateError(f"partition state fields: {'; '.join(which):.200}")
        topic, topic_id, partition = doc["topic"], doc["topic_id"], doc["partition"]
        if not isinstance(topic, str) or not isinstance(topic_id, str) or not _is_int(partition, 0, 2**31 - 1):
            raise PartitionStateError(
                f"partition state topic {topic!r:.80}, topic_id {topic_id!r:.40}, partition {partition!r:.40}: "
                "not a topic name, topic id and partition number"
            )
        raw_gaps = doc["gaps"]
        if not isinstance(raw_gaps, list):
            raise PartitionStateError(f"partition state gaps must be a list, got {raw_gaps!r:.80}")
        if len(raw_gaps) > MAX_GAPS:
            raise PartitionStateError(f"partition state has {len(raw_gaps)} gaps, more than the {MAX_GAPS} it holds")
        gaps = []
        for index, gap in enumerate(raw_gaps):
            if not isinstance(gap, list) or len(gap) != 2:
                raise PartitionStateError(f"partition state gap {index} {gap!r:.80} is not a range [start, end]")
            gaps.append((gap[0], gap[1]))
        try:
            tip = TopicIdPartition(topic_id, TopicPartition(topic, partition))
        except InvalidTopicError as exc:
            raise PartitionStateError(f"partition state names no valid partition: {exc}") from None
        return cls(
            topic_id_partition=tip,
            remote_log_start_offset=doc["remote_log_start_offset"],
            delete_records_offset=doc["delete_records_offset"],
            gaps=tuple(gaps),
            updated_at_ms=doc["updated_at_ms"],
        )


def _is_int(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


class PartitionStates(ObjectStore):
    """A partition's ``partition-state.json`` over the object primitives (``RemoteStorage`` has these)."""

    def write_partition_state(self, state: PartitionState) -> None:
        """Write ``state`` as its partition's state object, whole (the previous one replaced)."""
        self.put_object(partition_state_key(state.topic_id_partition, self.prefix), state.to_json())

    def read_partition_state(self, tip: TopicIdPartition) -> PartitionState | None:
        """The partition's state object, None when it has none. One too large, malformed or of
        another partition is a PartitionStateError naming its key."""
        key = partition_state_key(tip, self.prefix)
        try:
            data = self.get_range(key, 0, MAX_PARTITION_STATE_BYTES)
        except RemoteObjectNotFoundError:
            return None
        try:
            state = PartitionState.from_json(data)
        except PartitionStateError as exc:
            raise PartitionStateError(f"{self.describe(key)}: {exc}") from None
        if state.topic_id_partition != tip:
            raise PartitionStateError(f"{self.describe(key)}: partition state of {state.topic_id_partition}, not {tip}")
        return state
