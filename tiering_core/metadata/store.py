"""The remote log metadata store (docs/kafka-rules.md sections 4, 5, 6, 7 and 10) over SQLAlchemy 2 Core.

``RemoteLogMetadataStore`` is the one entry point; each concept lives in its own module:

- ``transactions``: the one transaction helper (fenced writes lock the partition row first);
- ``segments``: segment metadata and its state machine, point reads and figures;
- ``listing``: listing a partition's segments, and the memo of listed segments;
- ``partitions``: partitions, their deletion states and removal, the remote log start offset,
  the state history;
- ``leases``: leases and fencing tokens, of partitions and of the tables the export writes;
- ``export_commits``: the export commits each table's export landed, kept past snapshot expiry;
- ``lineage``: the recorded lineage, applied DeleteRecords and tiering gaps;
- ``observations``: what each broker saw of its replicas, and the best replica;
- ``counters``: what runs did to each partition (copies, deletions, reads), for metrics;
- ``quota_holders``: the processes sharing each broker's upload and fetch quotas;
- ``totals``: set-wise figures over every partition at once (sizes, gaps, chart series);
- ``identity``: the store's id (which its prefix's identity object names) and an unfinished recovery.

The state transition tables are ``states``. A SQLite store checkpoints its WAL from a background
thread, so no commit waits for a checkpoint's fsync.
"""

from __future__ import annotations

from types import TracebackType

from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from tiering_core.config.metadata import DatabaseTimeouts, safe_url
from tiering_core.metadata.copy_history import CopyHistoryStore
from tiering_core.metadata.counters import CounterStore
from tiering_core.metadata.engine import (
    WalCheckpointer,
    describe_driver_error,
    is_sqlite_in_memory,
    make_engine,
    sqlite_file,
    writer,
)
from tiering_core.metadata.erasures import ErasureStore
from tiering_core.metadata.errors import MetadataStoreError
from tiering_core.metadata.export_commits import ExportCommitStore
from tiering_core.metadata.identity import IdentityStore
from tiering_core.metadata.leases import LeaseStore
from tiering_core.metadata.listing import DEFAULT_SEGMENT_MEMO, LISTED_PARTITIONS
from tiering_core.metadata.observations import ObservationStore
from tiering_core.metadata.partitions import METADATA_DROPPED, TOMBSTONE_LIFTED
from tiering_core.metadata.queries import Statements
from tiering_core.metadata.quota_holders import QuotaHolderStore
from tiering_core.metadata.replays import ReplayStore
from tiering_core.metadata.segments import SegmentStore, validate_segment_metadata
from tiering_core.metadata.totals import TotalsStore
from tiering_core.metadata.transactions import now_ms
from tiering_core.metadata.values import (
    ClusterObservations,
    DeleteRecordsObservation,
    ExportCommit,
    Lease,
    PartitionRecord,
    RemoteLogSegmentMetadata,
    ReplicaObservation,
    StateChange,
    StoreIdentity,
    TableLease,
    TaskAttempt,
    TieringGap,
)

__all__ = [
    "METADATA_DROPPED",
    "TOMBSTONE_LIFTED",
    "ClusterObservations",
    "DeleteRecordsObservation",
    "ExportCommit",
    "Lease",
    "PartitionRecord",
    "RemoteLogMetadataStore",
    "RemoteLogSegmentMetadata",
    "ReplicaObservation",
    "StateChange",
    "StoreIdentity",
    "TableLease",
    "TaskAttempt",
    "TieringGap",
    "now_ms",
    "validate_segment_metadata",
]


class RemoteLogMetadataStore(
    SegmentStore,
    LeaseStore,
    ExportCommitStore,
    ObservationStore,
    CounterStore,
    TotalsStore,
    QuotaHolderStore,
    ReplayStore,
    IdentityStore,
    CopyHistoryStore,
    ErasureStore,
):
    """Segment metadata, partition delete states, fenced leases (of partitions and export tables),
    the export commits each table's export landed, the section-10 state, replica observations and
    the counters of what runs did, the processes sharing each broker's quotas, the last replays and
    the audit trail of erasures.

    ``url`` is any SQLAlchemy URL (``sqlite:///path`` embedded, ``postgresql+psycopg://`` in
    production); a new, empty database gets the schema at head on open, and a store at any other
    revision is refused: only ``tiering db upgrade`` migrates one. ``lease_ms`` is the default
    lease time to live. ``timeouts`` bound how long a PostgreSQL server may leave a request
    unanswered. ``segment_memo`` bounds the decoded segments kept between calls.
    Safe to share between threads.
    """

    def __init__(
        self,
        url: str,
        *,
        lease_ms: int = 600_000,
        timeouts: DatabaseTimeouts | None = None,
        echo: bool = False,
        segment_memo: int = DEFAULT_SEGMENT_MEMO,
        listed_partitions: int = LISTED_PARTITIONS,
    ) -> None:
        self.url = url
        self.lease_ms = lease_ms
        self.timeouts = timeouts or DatabaseTimeouts()
        self._init_listing(segment_memo, listed_partitions)
        self._checkpointer: WalCheckpointer | None = None
        try:
            in_memory = is_sqlite_in_memory(url)
            if not in_memory:
                self.engine = make_engine(url, echo=echo, timeouts=self.timeouts)
        except (ArgumentError, NoSuchModuleError, ValueError) as exc:
            raise MetadataStoreError(f"bad metadata store url {safe_url(url)}: {exc}") from exc
        if in_memory:
            raise MetadataStoreError(
                f"metadata.url {url} is an in-memory SQLite database: each connection would see "
                "its own empty database and everything would be lost when the process ends; use a file "
                "(sqlite:///path/to/metadata.db) or PostgreSQL"
            )
        self._writer = writer(self.engine)
        self.dialect = self.engine.dialect.name
        self._pg = self.dialect == "postgresql"
        self._q = Statements(self.engine.dialect)
        self._driver_error = self.engine.dialect.loaded_dbapi.Error
        try:
            from tiering_core.metadata.migrations import create_or_check_schema

            create_or_check_schema(self.engine, url, self.timeouts)
        except DBAPIError as exc:
            self.engine.dispose()
            reason = describe_driver_error(exc.orig, self.timeouts)
            raise MetadataStoreError(f"cannot open metadata store {safe_url(url)}: {reason}") from exc
        except BaseException:
            self.engine.dispose()
            raise
        path = sqlite_file(url)
        if path is not None:
            self._checkpointer = WalCheckpointer(path)

    def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.stop()
            self._checkpointer = None
        self.engine.dispose()

    def __enter__(self) -> RemoteLogMetadataStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RemoteLogMetadataStore({safe_url(self.url)!r})"
