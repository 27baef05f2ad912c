"""What the cluster says of one partition, and which wins when the broker's files lag it.

The rules (docs/kafka-rules.md, "The live cluster as a source"):

- **High watermark and LSO**: the live values (``replication-offset-checkpoint`` is written every
  few seconds; the live LSO, ListOffsets under read_committed, is exact), but never above the log
  end offset of the replica whose files are read: a copy can only tier what is in its files.
- **Log start offset**: a live log start strictly inside a listed local segment (above its base,
  below the next segment's base or the listed log end offset) is a DeleteRecords, exactly like a
  ``log-start-offset-checkpoint`` entry. A live log start equal to a listed segment base is the
  broker's own retention; one at or above the listed log end offset cannot be told apart from a
  roll and delete of segments newer than the listing (the broker's retention, racing the listing):
  neither is ever taken for a DeleteRecords. A DeleteRecords missed so is seen by the next run or
  by the checkpoint file; taking retention for one would delete remote data. The rule needs the
  files of the partition's leader (by ``meta.properties``' node id): the live log start is the
  leader's, and a follower rolls its segments at offsets of its own, so the leader's retention can
  land strictly inside a follower's segment. Read from a follower, the live log start is not used.
- **Topic id**: the cluster's topic id must equal the one in ``partition.metadata``; otherwise the
  directory is a stale incarnation of a recreated topic, and nothing live applies to it (copy and
  retention refuse it, status says why). A partition the cluster does not know: the same.

Nothing here imports kafka-python: these are values and rules only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tiering_core.kafka.log_dirs import LogDirError, read_log_dir_identity
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


def reads_leader(live: LivePartition, log_dir: Path) -> bool:
    """Whether ``log_dir`` belongs to the broker that leads the partition (positive evidence only)."""
    if live.leader_id is None:
        return False
    try:
        return read_log_dir_identity(log_dir).node_id == live.leader_id
    except LogDirError:
        return False


def bounded_offsets(live: LiveOffsets, log_end_offset: int) -> tuple[int, int]:
    """(high watermark, LSO): the live values, never above the local log end offset."""
    high_watermark = min(live.high_watermark, log_end_offset)
    return high_watermark, min(live.last_stable_offset, high_watermark)


def live_delete_records(log_start_offset: int, segment_bases: Sequence[int], log_end_offset: int) -> int | None:
    """The DeleteRecords a live log start shows against a listing of local segments, if any.

    ``segment_bases`` are the listed segments' base offsets in order and ``log_end_offset`` the
    listed end: only an offset strictly inside one of them counts (see the module docstring).
    """
    if not segment_bases or log_start_offset <= segment_bases[0] or log_start_offset >= log_end_offset:
        return None
    if log_start_offset in set(segment_bases):
        return None
    return log_start_offset
