"""SQLAlchemy 2 models of the metadata store: the schema Alembic's migrations create.

The migrations in ``migrations/versions`` are written by hand; a test checks that upgrading
an empty database yields exactly these tables, columns and indexes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

if TYPE_CHECKING:
    from tiering_core.kafka.topic import TopicIdPartition

# The partial index of segments still listed (any state but DELETE_SEGMENT_FINISHED). Queries
# must repeat this exact condition for SQLite to use the index.
LIVE_SEGMENT_CONDITION = "state <> 'DELETE_SEGMENT_FINISHED'"


class Base(DeclarativeBase):
    pass


class PartitionRow(Base):
    """A topic-id partition: delete state, lease and fencing token, remote log start offset.

    A removed partition stays as a tombstone (``dropped``) so its topic id is never copied to again.
    """

    __tablename__ = "tiering_partitions"
    __table_args__ = (
        UniqueConstraint("topic_id", "partition", name="uq_partition_topic_id"),
        Index("ix_partitions_topic_partition", "topic", "partition"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    topic_id: Mapped[str] = mapped_column(String(22))
    topic: Mapped[str] = mapped_column(String(249))
    partition: Mapped[int] = mapped_column(Integer)
    delete_state: Mapped[str | None] = mapped_column(String(32), nullable=True)
    dropped: Mapped[bool] = mapped_column(Boolean)
    lease_holder: Mapped[str | None] = mapped_column(String(255), nullable=True)
    lease_token: Mapped[int] = mapped_column(BigInteger)
    lease_expires_ms: Mapped[int] = mapped_column(BigInteger)
    # The fencing token counter: every acquired lease takes the next value; it never decreases.
    fencing_counter: Mapped[int] = mapped_column(BigInteger)
    remote_log_start_offset: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # Orders COPY_SEGMENT_FINISHED events: the later finished segment supersedes the earlier.
    finish_counter: Mapped[int] = mapped_column(BigInteger)
    created_ms: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    updated_ms: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))


class ExportTableRow(Base):
    """An Iceberg table the export writes (its catalog's name and ``namespace.name``): the export
    lease and its fencing token, as a partition row holds a partition's (one export of a table at
    a time; ``metadata.leases``)."""

    __tablename__ = "tiering_export_tables"

    catalog: Mapped[str] = mapped_column(String(255), primary_key=True)
    table_name: Mapped[str] = mapped_column(String(1024), primary_key=True)
    lease_holder: Mapped[str | None] = mapped_column(String(255), nullable=True)
    lease_token: Mapped[int] = mapped_column(BigInteger)
    lease_expires_ms: Mapped[int] = mapped_column(BigInteger)
    fencing_counter: Mapped[int] = mapped_column(BigInteger)
    created_ms: Mapped[int] = mapped_column(BigInteger)
    updated_ms: Mapped[int] = mapped_column(BigInteger)


class ExportCommitRow(Base):
    """An export commit the metadata store recorded once the catalog confirmed it, under the
    table's export lease (``lease_token``): the table's Iceberg UUID, the snapshot, its place in the
    table's history and the exported ranges its summary carries (``values.ExportCommit``). The
    table's catalog name and ``namespace.name`` are kept for people reading the store."""

    __tablename__ = "tiering_export_commits"
    __table_args__ = (Index("ix_export_commits_position", "table_uuid", "sequence_number", "timestamp_ms"),)

    table_uuid: Mapped[str] = mapped_column(String(36), primary_key=True)
    snapshot_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    catalog: Mapped[str] = mapped_column(String(255))
    table_name: Mapped[str] = mapped_column(String(1024))
    sequence_number: Mapped[int] = mapped_column(BigInteger)
    timestamp_ms: Mapped[int] = mapped_column(BigInteger)
    exported: Mapped[str] = mapped_column(Text)
    lease_token: Mapped[int] = mapped_column(BigInteger)
    recorded_ms: Mapped[int] = mapped_column(BigInteger)


class ReplayRow(Base):
    """One source partition's replay into a Kafka topic, as it ended (``replay.run``): its range,
    where it resumed, what it committed, its outcome and the offsets it could not replay
    (``gaps``: JSON ``[[start, end, reason], ...]``). Only the newest rows are kept
    (``replays.KEPT_REPLAYS``): the Tiering page shows the last replays."""

    __tablename__ = "tiering_replays"
    __table_args__ = (Index("ix_replays_finished", "finished_ms"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    topic: Mapped[str] = mapped_column(String(249))
    topic_id: Mapped[str] = mapped_column(String(22))
    partition: Mapped[int] = mapped_column(Integer)
    target_topic: Mapped[str] = mapped_column(String(249))
    first_offset: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    last_offset: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    resumed_after: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    records: Mapped[int] = mapped_column(BigInteger)
    bytes: Mapped[int] = mapped_column(BigInteger)
    outcome: Mapped[str] = mapped_column(String(16))
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)
    gaps: Mapped[str] = mapped_column(Text)
    run: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    started_ms: Mapped[int] = mapped_column(BigInteger)
    finished_ms: Mapped[int] = mapped_column(BigInteger)


class ErasureRow(Base):
    """One partition's part of an erasure by record key (``tiering erase``): the SHA-256 of each
    erased key (JSON list of hex; never a key), who asked, when, the segments copied again
    without the keys (JSON ``[[old id, new id, records removed], ...]``) and the records removed.
    Updated as each segment is switched, so a run killed part-way leaves what it did.
    ``local_segments`` (JSON, revision 0015) names the broker's local segments still holding the
    keys on the erasing host (NULL: not looked at)."""

    __tablename__ = "tiering_erasures"
    __table_args__ = (
        UniqueConstraint("erasure_id", "topic_id", "partition", name="uq_erasures_partition"),
        Index("ix_erasures_finished", "finished_ms"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    erasure_id: Mapped[str] = mapped_column(String(36))
    topic: Mapped[str] = mapped_column(String(249))
    topic_id: Mapped[str] = mapped_column(String(22))
    partition: Mapped[int] = mapped_column(Integer)
    key_sha256: Mapped[str] = mapped_column(Text)
    requested_by: Mapped[str] = mapped_column(String(1024))
    segments: Mapped[str] = mapped_column(Text)
    records_removed: Mapped[int] = mapped_column(BigInteger)
    segments_read: Mapped[int] = mapped_column(Integer)
    outcome: Mapped[str] = mapped_column(String(16))
    started_ms: Mapped[int] = mapped_column(BigInteger)
    finished_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    local_segments: Mapped[str | None] = mapped_column(Text, nullable=True)


class TableErasureRow(Base):
    """One export table's part of an erasure by record key (``export/erase.py``): the table (name
    and Iceberg UUID), the rows deleted, the data files holding the keys deleted, the snapshots
    expired and the outcome; ``pending`` (JSON list of URLs) names the files the erasure is about
    to delete once its expiry landed, so that a run killed then leaves them named for the next.
    Never a key: the erasure's partitions' rows hold the keys' SHA-256."""

    __tablename__ = "tiering_table_erasures"
    __table_args__ = (
        UniqueConstraint("erasure_id", "table_uuid", name="uq_table_erasures_table"),
        Index("ix_table_erasures_finished", "finished_ms"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    erasure_id: Mapped[str] = mapped_column(String(36))
    topic: Mapped[str] = mapped_column(String(249))
    table_name: Mapped[str] = mapped_column(String(1024))
    table_uuid: Mapped[str] = mapped_column(String(36))
    rows_deleted: Mapped[int] = mapped_column(BigInteger)
    data_files_deleted: Mapped[int] = mapped_column(Integer)
    snapshots_expired: Mapped[int] = mapped_column(Integer)
    pending: Mapped[str] = mapped_column(Text)
    outcome: Mapped[str] = mapped_column(String(16))
    started_ms: Mapped[int] = mapped_column(BigInteger)
    finished_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class StoreIdentityRow(Base):
    """The store's one identity row (``id`` is always 1): the id it was given when it was created,
    which the prefix it writes under records in its identity object (``engine.binding``), and the
    start of a ``tiering recover`` into it that has not finished (None: none)."""

    __tablename__ = "tiering_store"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    store_id: Mapped[str] = mapped_column(String(36))
    created_ms: Mapped[int] = mapped_column(BigInteger)
    recovery_started_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


def registered_partition(tip: TopicIdPartition, now_ms: int) -> dict[str, Any]:
    """A ``PartitionRow``'s values as the store first registers the partition: no lease taken, no
    deletion, nothing copied (loaders of prepared stores override what they need)."""
    return {
        "topic_id": tip.topic_id,
        "topic": tip.topic,
        "partition": tip.partition,
        "delete_state": None,
        "dropped": False,
        "lease_holder": None,
        "lease_token": 0,
        "lease_expires_ms": 0,
        "fencing_counter": 0,
        "remote_log_start_offset": None,
        "finish_counter": 0,
        "created_ms": now_ms,
        "updated_ms": now_ms,
    }


# The listing order's index columns, then what else a listing reads. On SQLite the partial index of
# live segments holds every column a listing returns but custom metadata, so a listing reads the
# index alone (a few contiguous pages) instead of a table page per segment. PostgreSQL's btree
# entries are limited to about 2.7 kB, too little for the leader epochs of a segment that saw
# hundreds of elections, so there the index stops at the writer token.
LISTING_ORDER_COLUMNS = ("partition_id", "start_offset", "event_time", "segment_id")
LISTING_EXTRA_COLUMNS = ("state", "writer_token", "end_offset", "max_timestamp", "size_bytes", "leader_epochs")
# Indexes that exist on one backend only (index name -> dialect).
DIALECT_INDEXES = {"ix_segments_live": "postgresql", "ix_segments_listing": "sqlite"}


class SegmentRow(Base):
    """One copy attempt of a segment (RemoteLogSegmentMetadata)."""

    __tablename__ = "tiering_segments"
    __table_args__ = (
        Index("ix_segments_partition_start", "partition_id", "start_offset"),
        Index(
            "ix_segments_live",
            *LISTING_ORDER_COLUMNS,
            "state",
            "writer_token",
            postgresql_where=text(LIVE_SEGMENT_CONDITION),
        ).ddl_if(dialect=DIALECT_INDEXES["ix_segments_live"]),
        Index(
            "ix_segments_listing",
            *LISTING_ORDER_COLUMNS,
            *LISTING_EXTRA_COLUMNS,
            sqlite_where=text(LIVE_SEGMENT_CONDITION),
        ).ddl_if(dialect=DIALECT_INDEXES["ix_segments_listing"]),
    )

    segment_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    partition_id: Mapped[int] = mapped_column(ForeignKey("tiering_partitions.id"))
    start_offset: Mapped[int] = mapped_column(BigInteger)
    end_offset: Mapped[int] = mapped_column(BigInteger)
    max_timestamp: Mapped[int] = mapped_column(BigInteger)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(String(32))
    leader_epochs: Mapped[dict[str, Any]] = mapped_column(JSON)
    writer_token: Mapped[int] = mapped_column(BigInteger)
    event_time: Mapped[int] = mapped_column(BigInteger)
    finish_seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    custom_metadata: Mapped[dict[str, Any]] = mapped_column(JSON)


class SegmentEpochRow(Base):
    """Per (finished segment, epoch): the offsets that epoch covers in it, for segment_for.

    Written at COPY_SEGMENT_FINISHED, removed at DELETE_SEGMENT_STARTED, so only finished
    segments serve reads. The lookup index covers the query (no table access).
    """

    __tablename__ = "tiering_segment_epochs"
    __table_args__ = (
        Index("ix_segment_epochs_cover", "partition_id", "epoch", "start_offset", "end_offset", "finish_seq"),
    )

    segment_id: Mapped[str] = mapped_column(ForeignKey("tiering_segments.segment_id"), primary_key=True)
    epoch: Mapped[int] = mapped_column(Integer, primary_key=True)
    partition_id: Mapped[int] = mapped_column(Integer)
    start_offset: Mapped[int] = mapped_column(BigInteger)
    end_offset: Mapped[int] = mapped_column(BigInteger)
    finish_seq: Mapped[int] = mapped_column(BigInteger)


class EpochHighestRow(Base):
    """Per (partition, epoch): highest offset ever finished (never decreases on deletion).

    ``max_span`` is the widest (end - start) of any finished segment's range for the epoch, so
    segment_for only looks at ranges starting within ``max_span`` below the offset.
    """

    __tablename__ = "tiering_epoch_highest"

    partition_id: Mapped[int] = mapped_column(ForeignKey("tiering_partitions.id"), primary_key=True)
    epoch: Mapped[int] = mapped_column(Integer, primary_key=True)
    highest_offset: Mapped[int] = mapped_column(BigInteger)
    max_span: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))


class LineageRow(Base):
    """The partition's epoch history as recorded from copied segments (docs/kafka-rules.md section 10 item 2)."""

    __tablename__ = "tiering_lineage"

    partition_id: Mapped[int] = mapped_column(ForeignKey("tiering_partitions.id"), primary_key=True)
    epoch: Mapped[int] = mapped_column(Integer, primary_key=True)
    start_offset: Mapped[int] = mapped_column(BigInteger)


class DeleteRecordsRow(Base):
    """A DeleteRecords of the partition (only rising ones are kept). ``source`` tells the kinds
    apart: ``values.DELETE_RECORDS_APPLIED`` for one applied through the platform, the only kind
    that counts; other values are rows older versions recorded from the broker's files or the
    cluster's log start, kept as history."""

    __tablename__ = "tiering_delete_records"
    __table_args__ = (Index("ix_delete_records_partition_offset", "partition_id", "before_offset"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    partition_id: Mapped[int] = mapped_column(ForeignKey("tiering_partitions.id"))
    # DeleteRecords deletes everything before this offset: the log start offset moves to it.
    before_offset: Mapped[int] = mapped_column(BigInteger)
    source: Mapped[str] = mapped_column(String(255))
    observed_ms: Mapped[int] = mapped_column(BigInteger)
    token: Mapped[int] = mapped_column(BigInteger)
    run_id: Mapped[str | None] = mapped_column(String(255), nullable=True)


class GapRow(Base):
    """A tiering gap: offsets the broker deleted before they were tiered."""

    __tablename__ = "tiering_gaps"
    __table_args__ = (UniqueConstraint("partition_id", "start_offset", "end_offset", name="uq_gap_range"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    partition_id: Mapped[int] = mapped_column(ForeignKey("tiering_partitions.id"), index=True)
    start_offset: Mapped[int] = mapped_column(BigInteger)
    end_offset: Mapped[int] = mapped_column(BigInteger)
    detected_ms: Mapped[int] = mapped_column(BigInteger)


class HistoryRow(Base):
    """Append-only log of every state change: what, when, which lease token, which run.

    No foreign keys: the history outlives a dropped partition's metadata.
    """

    __tablename__ = "tiering_state_history"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    partition_id: Mapped[int] = mapped_column(Integer, index=True)
    segment_id: Mapped[str | None] = mapped_column(String(36), nullable=True, index=True)
    from_state: Mapped[str | None] = mapped_column(String(32), nullable=True)
    to_state: Mapped[str] = mapped_column(String(32))
    at_ms: Mapped[int] = mapped_column(BigInteger)
    token: Mapped[int] = mapped_column(BigInteger)
    run_id: Mapped[str | None] = mapped_column(String(255), nullable=True)


class _ObservedReplica:
    """What a broker saw of its replica: the columns an observation and a chart point share."""

    high_watermark: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    last_stable_offset: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    log_end_offset: Mapped[int] = mapped_column(BigInteger)
    local_log_start_offset: Mapped[int] = mapped_column(BigInteger)
    local_bytes: Mapped[int] = mapped_column(BigInteger)
    leader_epoch: Mapped[int | None] = mapped_column(Integer, nullable=True)
    leader_epoch_start_offset: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    at_risk: Mapped[bool] = mapped_column(Boolean)
    headroom_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    observed_ms: Mapped[int] = mapped_column(BigInteger)
    # What the run computed of the partition's lags and remote size (None: it did not).
    copy_lag_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    copy_lag_segments: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    delete_lag_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    delete_lag_segments: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    remote_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    remote_segments: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # KIP-1257's percents of the retention limits (None: not computed, or no limit known).
    retention_size_percent: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    local_retention_size_percent: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class ReplicaObservationRow(_ObservedReplica, Base):
    """The latest a broker saw of its replica of a partition (one row per broker and partition,
    overwritten by each run). No foreign key: a replica is observed before anything is tiered."""

    __tablename__ = "tiering_replica_observations"
    __table_args__ = (Index("ix_replica_observations_topic", "topic"),)

    topic_id: Mapped[str] = mapped_column(String(22), primary_key=True)
    partition: Mapped[int] = mapped_column(Integer, primary_key=True)
    broker_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    topic: Mapped[str] = mapped_column(String(249))


class ReplicaObservationPointRow(_ObservedReplica, Base):
    """A downsampled series of observations for charts: per broker and partition, one point per
    ``resolution_ms`` bucket (the bucket's latest observation), pruned past its resolution's horizon."""

    __tablename__ = "tiering_replica_observation_points"
    __table_args__ = (Index("ix_replica_observation_points_expiry", "resolution_ms", "bucket_ms"),)

    topic_id: Mapped[str] = mapped_column(String(22), primary_key=True)
    partition: Mapped[int] = mapped_column(Integer, primary_key=True)
    broker_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    resolution_ms: Mapped[int] = mapped_column(Integer, primary_key=True)
    bucket_ms: Mapped[int] = mapped_column(BigInteger, primary_key=True)


class PartitionCountersRow(Base):
    """What runs did to a partition on one broker (``NO_BROKER``, -1: on no broker), each count
    raised by the run that acted; ``last_copy_ms`` is the database clock of the last finished
    copy, ``last_*`` the task instance of the last run that acted (at ``last_task_ms``). No foreign key: reads count
    for partitions the store may have dropped since."""

    __tablename__ = "tiering_partition_counters"
    __table_args__ = (Index("ix_partition_counters_topic", "topic"),)

    topic_id: Mapped[str] = mapped_column(String(22), primary_key=True)
    partition: Mapped[int] = mapped_column(Integer, primary_key=True)
    broker_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    topic: Mapped[str] = mapped_column(String(249))
    copy_bytes: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    copy_requests: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    copy_errors: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    delete_requests: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    delete_errors: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    fetch_bytes: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    fetch_requests: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    fetch_errors: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    index_repairs: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    scrub_failures: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    last_copy_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    last_dag_id: Mapped[str | None] = mapped_column(String(250), nullable=True)
    last_run_id: Mapped[str | None] = mapped_column(String(250), nullable=True)
    last_task_id: Mapped[str | None] = mapped_column(String(250), nullable=True)
    last_map_index: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_try_number: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_task_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    updated_ms: Mapped[int] = mapped_column(BigInteger)


class QuotaHolderRow(Base):
    """A process drawing on a broker's upload (``copy``) or fetch quota: each holder's rate is the
    cap divided by the holders whose entry has not expired (``expires_ms``, pushed on by each
    heartbeat). The throttle figures the holder last reported stay for the metrics after it left."""

    __tablename__ = "tiering_quota_holders"

    broker_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(8), primary_key=True)
    holder: Mapped[str] = mapped_column(String(255), primary_key=True)
    expires_ms: Mapped[int] = mapped_column(BigInteger)
    heartbeat_ms: Mapped[int] = mapped_column(BigInteger)
    throttle_ms: Mapped[float] = mapped_column(Float)
    throttles: Mapped[int] = mapped_column(BigInteger)
    throttle_ms_max: Mapped[float] = mapped_column(Float)
