"""Values the metadata store hands out: frozen dataclasses, never ORM objects (but for
``PartitionCounters``, the counts a run adds up in place before the store adds them to its rows).

Their dict fields are part of the value and must not be mutated by callers (the store may hand
the same decoded value to several callers). Slotted, so the store's memo of many decoded segments
holds fewer objects for the garbage collector to walk.

A segment's custom metadata (object keys, sizes, checksums) is ``None`` in values from listings
that leave it out (``list_segments(..., custom_metadata=False)``): most runs never look at it, and
not reading it is most of what keeps a listing of a long partition fast.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field, fields, replace
from typing import Any

from tiering_core.kafka.epoch import EpochEntry
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.states import RemoteLogSegmentState, RemotePartitionDeleteState


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """One copy attempt of one segment (docs/kafka-rules.md section 4; a fresh UUID per attempt).

    ``end_offset`` is inclusive; ``leader_epochs`` maps epoch -> first offset of that epoch in the
    segment, ascending; ``event_time`` is the time (ms) of the latest state change;
    ``custom_metadata`` is None where it was not read (see the module docstring).
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
    custom_metadata: dict[str, Any] | None = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.custom_metadata is not None and not isinstance(self.custom_metadata, dict):
            raise TypeError(f"custom_metadata of segment {self.segment_id} must be a dict")

    @property
    def first_epoch_offset(self) -> int:
        """The first offset its leader epochs cover: its start offset, or a later one when the broker's
        epoch cache had been truncated from the start inside the segment (its log start moved there),
        so that the records before it belong to no epoch and are never served."""
        return min(self.leader_epochs.values(), default=self.start_offset)

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


#: The store's ``lease_holder`` column holds at most this many characters; a try number takes at
#: most ``_TRY_CHARS`` of them (``#`` and 20 digits).
MAX_HOLDER_CHARS = 255
_TRY_CHARS = 21


@dataclass(frozen=True, slots=True)
class TaskAttempt:
    """One try of one scheduled task instance (Airflow's DAG id, run id, task id, map index and
    try number), as a run names itself when it holds a partition.

    A later try of the same task instance takes over the lease its previous try left (that try
    ended, or was judged gone, before Airflow started the retry), so a retry need not wait until
    the lease expires; every other holder still waits. The takeover takes the next fencing
    token, so should the previous try still run somewhere, its late writes are refused. The
    try number is the last part of the holder name, after ``#``.
    """

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1
    try_number: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.try_number, bool) or not isinstance(self.try_number, int) or self.try_number < 0:
            raise ValueError(f"try number must be a non-negative integer, not {self.try_number!r}")
        if isinstance(self.map_index, bool) or not isinstance(self.map_index, int):
            raise ValueError(f"map index must be an integer, not {self.map_index!r}")
        for name in ("dag_id", "run_id", "task_id"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name} must be a non-empty string")

    def to_json(self) -> str:
        """This try as one JSON object (how a task hands it to a process it starts)."""
        return json.dumps(
            {
                "dag_id": self.dag_id,
                "run_id": self.run_id,
                "task_id": self.task_id,
                "map_index": self.map_index,
                "try_number": self.try_number,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> TaskAttempt:
        """``to_json``'s object back; ``ValueError`` naming what is wrong with another text."""
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"a task attempt must be a JSON object: {exc}") from exc
        fields = ("dag_id", "run_id", "task_id", "map_index", "try_number")
        if not isinstance(doc, dict) or set(doc) != set(fields):
            raise ValueError(f"a task attempt must be a JSON object of exactly {', '.join(fields)}")
        return cls(**{name: doc[name] for name in fields})

    def instance_name(self, kind: str) -> str:
        """``<kind>:<dag>/<run>/<task>[<map index>]``, the same for every try; a long name keeps
        its head and a digest of the whole, so the holder fits the store's column."""
        name = f"{kind}:{self.dag_id}/{self.run_id}/{self.task_id}"
        if self.map_index >= 0:
            name += f"[{self.map_index}]"
        room = MAX_HOLDER_CHARS - _TRY_CHARS
        if len(name) > room:
            digest = hashlib.sha256(name.encode()).hexdigest()[:32]
            name = f"{name[: room - len(digest) - 1]}~{digest}"
        return name

    def holder(self, kind: str) -> str:
        """The lease holder name of this try: ``<instance name>#<try number>``."""
        return f"{self.instance_name(kind)}#{self.try_number}"

    def takes_over(self, current_holder: str, kind: str) -> bool:
        """``current_holder`` is an earlier try of this task instance running the same ``kind``
        of run: its lease passes to this try at once."""
        name, sep, tried = current_holder.rpartition("#")
        return (
            bool(sep)
            and name == self.instance_name(kind)
            and tried.isascii()
            and tried.isdigit()
            and int(tried) < self.try_number
        )


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
class TableLease:
    """The right to export into one Iceberg table (``catalog``'s ``table``, ``namespace.name``)
    until ``expires_at_ms`` (database clock); ``token`` is the table's fencing token, as a
    partition's ``Lease`` carries its own."""

    catalog: str
    table: str
    holder: str
    token: int
    expires_at_ms: int
    run_id: str | None = None

    @property
    def subject(self) -> str:
        """How errors and logs name the table: ``<catalog>.<namespace>.<name>``."""
        return f"{self.catalog}.{self.table}"


@dataclass(frozen=True, slots=True)
class ExportCommit:
    """An export commit as the metadata store records it once the catalog confirmed it: the
    table (by its Iceberg UUID: a table dropped and made again under its name is another table),
    the snapshot, its place in the table's history (``sequence_number``, then ``timestamp_ms``:
    the order of its commits) and the exported ranges its summary carries, as that JSON text.
    docs/export.md, "Exactly once", says when it is read."""

    table_uuid: str
    snapshot_id: int
    sequence_number: int
    timestamp_ms: int
    exported: str

    def __post_init__(self) -> None:
        try:
            canonical = str(uuid.UUID(self.table_uuid))
        except (TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"an export commit's table UUID must be a UUID, not {self.table_uuid!r}") from exc
        if canonical != self.table_uuid:
            raise ValueError(f"an export commit's table UUID must be in canonical form, not {self.table_uuid!r}")
        for name in ("snapshot_id", "sequence_number", "timestamp_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
                raise ValueError(f"an export commit's {name} must be a 64-bit integer, not {value!r}")
        if not isinstance(self.exported, str):
            raise ValueError("an export commit's exported ranges must be JSON text")

    @property
    def position(self) -> tuple[int, int]:
        """Its place in the table's history: later commits sort after it."""
        return (self.sequence_number, self.timestamp_ms)


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

    @property
    def live(self) -> bool:
        """Tiered and served: neither removed (a tombstone) nor being removed."""
        return not self.dropped and self.delete_state is None


@dataclass(frozen=True, slots=True)
class TieringGap:
    """Offsets [start, end] the broker deleted before they were tiered (docs/kafka-rules.md section 10 item 3)."""

    start: int
    end: int
    detected_ms: int


#: The ``source`` of a DeleteRecords applied through the platform (``tiering delete-records`` and
#: the ``tiering_delete_records`` DAG write exactly this). Only such rows move the global log start
#: (docs/kafka-rules.md section 10 item 1); rows of any other source are what older versions took
#: for a DeleteRecords in the broker's files or the cluster's log start, kept as history only.
DELETE_RECORDS_APPLIED = "tiering delete-records"


@dataclass(frozen=True, slots=True)
class StoredTier:
    """What the store holds of one partition that its tier view joins with the broker's log,
    read for many partitions at once (``LineageStore.stored_tiers``): the recorded lineage, the
    remote log start, the highest DeleteRecords applied through the platform, and per leader
    epoch the highest offset ever finished in it."""

    recorded_lineage: tuple[EpochEntry, ...] = ()
    remote_log_start_offset: int | None = None
    delete_records_offset: int | None = None
    highest_by_epoch: dict[int, int] = field(default_factory=dict)

    def latest_copied_epoch(self, epochs: list[int]) -> tuple[int, int] | None:
        """As ``SegmentStore.latest_copied_epoch``: of ``epochs``, the latest with finished data
        and the highest offset finished in it; None if none has any."""
        for epoch in sorted(epochs, reverse=True):
            if epoch in self.highest_by_epoch:
                return epoch, self.highest_by_epoch[epoch]
        return None


@dataclass(frozen=True, slots=True)
class DeleteRecordsObservation:
    """A DeleteRecords row of the partition: its offset, where it came from and when."""

    offset: int
    source: str
    observed_ms: int
    token: int
    run_id: str | None

    @property
    def applied(self) -> bool:
        """Applied through the platform: the only kind that moves the global log start."""
        return self.source == DELETE_RECORDS_APPLIED


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


@dataclass(frozen=True, slots=True)
class ReplicaObservation:
    """What one broker's run saw of its replica of a partition (docs/kafka-rules.md sections 2 and 3).

    ``leader_epoch`` and ``leader_epoch_start_offset`` are the tip of the replica's leader-epoch
    cache (None for an empty cache); HW and LSO are None when the broker's checkpoints could not
    give them. ``at_risk`` and ``headroom_seconds`` are the local-retention-risk verdict: the
    time left (negative once past due) before the broker's own retention may delete the oldest
    segment not yet tiered, None when nothing waits or no time limit applies. ``observed_ms`` is
    the database clock when the store recorded it (ignored when recording). The lags (Kafka's
    RemoteCopyLag and RemoteDeleteLag, bytes and segments) and the remote size are what the run
    computed of the partition, None where it computed none; so are KIP-1257's RetentionSizeInPercent
    and LocalRetentionSizeInPercent (None: no limit known, or not computed).
    """

    broker_id: int
    topic_id_partition: TopicIdPartition
    high_watermark: int | None
    last_stable_offset: int | None
    log_end_offset: int
    local_log_start_offset: int
    local_bytes: int
    leader_epoch: int | None
    leader_epoch_start_offset: int | None
    at_risk: bool
    headroom_seconds: float | None
    observed_ms: int = 0
    copy_lag_bytes: int | None = None
    copy_lag_segments: int | None = None
    delete_lag_bytes: int | None = None
    delete_lag_segments: int | None = None
    remote_bytes: int | None = None
    remote_segments: int | None = None
    retention_size_percent: int | None = None
    local_retention_size_percent: int | None = None

    @property
    def tip(self) -> TopicIdPartition:
        return self.topic_id_partition

    def age_ms(self, now_ms: int) -> int:
        return now_ms - self.observed_ms


@dataclass(frozen=True, slots=True)
class ClusterObservations:
    """The latest observation of every replica the store holds (or of a selection), per
    partition and broker, with the database clock when they were read (to judge their age)."""

    db_now_ms: int
    replicas: dict[TopicIdPartition, dict[int, ReplicaObservation]]


#: The broker id under which acts that run on no broker (reads, verify) are counted.
NO_BROKER = -1


@dataclass(slots=True)
class PartitionCounters:
    """Counts recorded in the store for one partition (on one broker, or summed over brokers)."""

    copy_bytes: int = 0
    copy_requests: int = 0
    copy_errors: int = 0
    delete_requests: int = 0
    delete_errors: int = 0
    fetch_bytes: int = 0
    fetch_requests: int = 0
    fetch_errors: int = 0
    index_repairs: int = 0
    scrub_failures: int = 0

    def add(self, other: PartitionCounters) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass(frozen=True, slots=True)
class ReplayRecord:
    """One source partition's replay as the store keeps it (``tiering_replays``); ``gaps``:
    ``(start, end, reason)`` of the offsets it could not replay."""

    topic: str
    topic_id: str
    partition: int
    target_topic: str
    first_offset: int | None
    last_offset: int | None
    resumed_after: int | None
    records: int
    bytes: int
    outcome: str
    detail: str | None
    gaps: tuple[tuple[int, int, str], ...]
    started_ms: int
    finished_ms: int
    run: str | None = None


@dataclass(frozen=True, slots=True)
class StoreIdentity:
    """Who a metadata store is (``tiering_store``): the id it got when it was created, which the
    prefix it writes under names in its identity object, and the start of a ``tiering recover``
    into it that has not finished (None: none; until it has, the store writes nothing remote)."""

    store_id: str
    created_ms: int
    recovery_started_ms: int | None = None

    @property
    def recovering(self) -> bool:
        return self.recovery_started_ms is not None


@dataclass(frozen=True, slots=True)
class RecoveredSegment:
    """A finished segment as ``tiering recover`` read it from the bucket: its metadata (as copy
    recorded it, with the record of its manifest), the leader-epoch index its copy uploaded, and
    whether a later copy of the same offsets supersedes it (then it is recorded as being deleted,
    and the next run that holds the partition deletes it)."""

    metadata: RemoteLogSegmentMetadata
    lineage: tuple[EpochEntry, ...]
    superseded: bool = False
