"""What the cluster says of one partition, and which wins when the broker's files lag it.

The rules (docs/kafka-rules.md, "The live cluster as a source"):

- **High watermark and LSO**: the live values (``replication-offset-checkpoint`` is written every
  few seconds; the live LSO, ListOffsets under read_committed, is exact), but never above the log
  end offset of the replica whose files are read: a copy can only tier what is in its files.
- **Log start offset**: the cluster's log start is the broker's *local* log start (docs/kafka-rules.md
  section 10 item 1), at once: the segments wholly below it, which the broker deletes only at its
  next retention check (their epochs already cut from its epoch cache), are not copied, and data
  below it not yet tiered is a tiering gap. It is never a DeleteRecords and never moves the global
  log start: a follower copies its leader's log start whatever moved it (the leader's retention, a
  DeleteRecords sent to the cluster), and the log start alone cannot tell which.
- **Topic id**: the cluster's topic id must equal the one in ``partition.metadata``; otherwise the
  directory is a stale incarnation of a recreated topic, and nothing live applies to it (copy and
  retention refuse it, status says why). A partition the cluster does not know: the same.

Nothing here imports kafka-python: these are values and rules only.
"""

from __future__ import annotations

from dataclasses import dataclass

from tiering_core.kafka.topic import TopicPartition

#: ``offsets_source`` of a tier view: offsets from the cluster's admin API, or from the files.
SOURCE_BROKER = "broker"
SOURCE_FILES = "files"


@dataclass(frozen=True)
class LiveOffsets:
    """ListOffsets answers for one partition (from its leader)."""

    log_start_offset: int  # EARLIEST
    high_watermark: int  # LATEST, read_uncommitted
    last_stable_offset: int  # LATEST, read_committed


@dataclass(frozen=True)
class LivePartition:
    """The cluster's view of one partition; ``problem`` says why it does not apply to the files read."""

    topic_partition: TopicPartition
    topic_id: str | None  # None: the cluster does not know the topic
    offsets: LiveOffsets | None
    problem: str | None = None
    leader_id: int | None = None  # the broker that answered ListOffsets for it
    #: The cluster's Metadata answered the topic with an error other than "unknown topic" (not
    #: authorized, a leader election, ...): that answer says nothing of whether the topic exists.
    metadata_error: str | None = None

    def for_directory(self, directory_topic_id: str) -> LivePartition:
        """This view checked against a partition directory's own topic id (``partition.metadata``)."""
        if self.problem is not None or self.topic_id is None or self.topic_id == directory_topic_id:
            return self
        return LivePartition(
            self.topic_partition,
            self.topic_id,
            None,
            f"{self.topic_partition}: the cluster's topic id is {self.topic_id} but the directory's "
            f"partition.metadata has {directory_topic_id}: a stale directory of a deleted or recreated "
            "topic; nothing is copied from it",
            leader_id=self.leader_id,
        )


def unknown_partition(tp: TopicPartition, topic_id: str | None) -> LivePartition:
    if topic_id is None:
        why = f"{tp}: the cluster does not know topic {tp.topic!r} (deleted?); nothing is copied from its directory"
    else:
        why = f"{tp}: the cluster does not know partition {tp.partition} of topic {tp.topic!r}; nothing is copied"
    return LivePartition(tp, topic_id, None, why)


def bounded_offsets(live: LiveOffsets, log_end_offset: int) -> tuple[int, int]:
    """(high watermark, LSO): the live values, never above the local log end offset."""
    high_watermark = min(live.high_watermark, log_end_offset)
    return high_watermark, min(live.last_stable_offset, high_watermark)
