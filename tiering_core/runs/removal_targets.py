"""Which topic ids of a topic-partition a removal deletes, finds removed and leaves alone: the
value a removal acts on and a refusal carries back (``runs.errors.RemovalRefusedError``), so a
caller deciding whether to force it needs no second look at the store (docs/kafka-rules.md
section 7)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tiering_core.kafka.topic import TopicIdPartition, TopicPartition


@dataclass(frozen=True)
class RemovalTargets:
    """Which topic ids of a topic-partition a removal deletes, which it finds already removed
    (tombstones) and which it leaves alone (still in the broker's log dirs, or reported by
    another broker of the cluster: ``reported``, topic id -> which broker and when)."""

    topic_partition: TopicPartition
    remove: tuple[TopicIdPartition, ...]
    removed: tuple[TopicIdPartition, ...]
    kept: tuple[TopicIdPartition, ...]
    reported: Mapping[str, str] = field(default_factory=dict)

    def forced(self) -> RemovalTargets:
        """The targets of a forced removal: the topic ids other brokers report are removed too."""
        if not self.reported:
            return self
        moved = tuple(t for t in self.kept if t.topic_id in self.reported)
        kept = tuple(t for t in self.kept if t.topic_id not in self.reported)
        return RemovalTargets(self.topic_partition, self.remove + moved, self.removed, kept)
