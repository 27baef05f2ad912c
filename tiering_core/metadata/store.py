"""The remote log metadata store (KAFKA_SEMANTICS sections 4, 5, 6, 7 and 10) over SQLAlchemy 2 Core.

Every write is one transaction that first locks the partition row (PostgreSQL
``SELECT ... FOR UPDATE``; SQLite ``BEGIN IMMEDIATE``), then reads the database clock and checks
the writer's lease token and expiry against it, so a fenced writer lands nothing (and a lease
that ran out while waiting for the lock is expired). Every read queries the database, so a write
is visible to the next query (read-your-writes, across processes too). The only thing kept
between calls is a bounded memo of decoded segments keyed by (segment id, state, event time,
writer token): a segment's row is only ever written when it enters a state, so a changed segment
is a different key and the memo cannot serve stale data. Listed segments read their custom
metadata when it is first asked for. A SQLite store checkpoints its WAL from a background
thread, so no commit waits for a checkpoint's fsync.
"""

from __future__ import annotations

import gc
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import msgspec
from sqlalchemy import Connection, func, select
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, NoSuchModuleError

from tiering_core.kafka.epoch import EpochEntry, merge_lineage
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.engine import (
    WalCheckpointer,
    is_sqlite_in_memory,
    make_engine,
    safe_url,
    sqlite_file,
    writer,
)
from tiering_core.metadata.errors import (
    DuplicateSegmentError,
    FencedError,
    InvalidSegmentMetadataError,
    InvalidStateTransitionError,
    LeaseHeldError,
    MetadataStoreError,
    PartitionDeletedError,
    PartitionNotEmptyError,
    SegmentNotFoundError,
)
from tiering_core.metadata.queries import (
    HI,
    D,
    E,
    G,
    H,
    L,
    P,
    S,
    Statements,
)
from tiering_core.metadata.states import (
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
    check_partition_transition,
    check_segment_transition,
)
from tiering_core.metadata.values import (
    CustomMetadataLoader,
    DeleteRecordsObservation,
    Lease,
    PartitionRecord,
    RemoteLogSegmentMetadata,
    StateChange,
    TieringGap,
    stored_segment,
)

__all__ = [
    "METADATA_DROPPED",
    "DeleteRecordsObservation",
    "Lease",
    "PartitionRecord",
    "RemoteLogMetadataStore",
    "RemoteLogSegmentMetadata",
    "StateChange",
    "TieringGap",
    "now_ms",
]

# Decoding a listing is mostly JSON parsing; msgspec's typed decoders do it several times faster
# than the json module (and turn the epoch keys back into ints on the way).
_decode_epochs = msgspec.json.Decoder(dict[int, int]).decode
_decode_epoch_lists = msgspec.json.Decoder(list[dict[int, int]]).decode
_decode_uuids = msgspec.json.Decoder(list[uuid.UUID]).decode


METADATA_DROPPED = "METADATA_DROPPED"  # history marker of drop_partition_metadata
DEFAULT_SEGMENT_MEMO = 50_000
LISTED_PARTITIONS = 4096
IDS_PER_QUERY = 500
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
_STATES = {s.value: s for s in RemoteLogSegmentState}


class _CollectorPause:
    """Pauses Python's cyclic garbage collector while listings are read and decoded; counted and
    thread safe (the collector is process-wide: the first listing to start pauses it, the last
    to end resumes it).

    A listing builds thousands of objects that form no cycles (reference counting frees them).
    Collections during it only walk them and promote them to the oldest generation, whose growth
    then triggers full collections of tens of milliseconds: most of a listing's p99. Nothing is
    paused or resumed when the collector was already disabled when the first listing started,
    and the pause is short: the collector runs as usual once no listing is in progress.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._resume = False

    def __enter__(self) -> None:
        with self._lock:
            if self._depth == 0:
                self._resume = gc.isenabled()
                if self._resume:
                    gc.disable()
            self._depth += 1

    def __exit__(self, *_exc: object) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0 and self._resume:
                self._resume = False
                gc.enable()


_collector_paused = _CollectorPause()


def now_ms() -> int:
    return int(time.time() * 1000)


def _ascending(epochs: dict[int, int]) -> dict[int, int]:
    """Leader epochs in ascending epoch order (as written; PostgreSQL's JSON keeps the text)."""
    return epochs if list(epochs) == sorted(epochs) else dict(sorted(epochs.items()))


def _epochs(text: str) -> dict[int, int]:
    """Stored leader epochs (JSON) -> {epoch: start offset}, ascending."""
    epochs = _decode_epochs(text)
    return _ascending(epochs) if len(epochs) > 1 else epochs


def _tip_params(tip: TopicIdPartition) -> dict[str, Any]:
    return {"tid": tip.topic_id, "part": tip.partition}


def _tip_of(row: Any) -> TopicIdPartition:
    return TopicIdPartition(row.topic_id, TopicPartition(row.topic, row.partition))


def _epochs_json(leader_epochs: dict[int, int]) -> dict[str, int]:
    return {str(e): int(o) for e, o in sorted(leader_epochs.items())}


def validate_segment_metadata(meta: RemoteLogSegmentMetadata) -> None:
    """Offsets and leader epochs that can describe a Kafka segment, else InvalidSegmentMetadataError."""
    what = f"segment {meta.segment_id} of {meta.topic_id_partition}"
    if not isinstance(meta.segment_id, uuid.UUID):
        raise InvalidSegmentMetadataError(f"{what}: segment id must be a UUID")
    if meta.start_offset < 0 or meta.end_offset < meta.start_offset:
        raise InvalidSegmentMetadataError(
            f"{what}: offsets {meta.start_offset}..{meta.end_offset} are not a range (end offset is inclusive)"
        )
    if meta.size_bytes < 0:
        raise InvalidSegmentMetadataError(f"{what}: negative size {meta.size_bytes}")
    if not meta.leader_epochs:
        raise InvalidSegmentMetadataError(f"{what}: no leader epochs (every segment has at least one)")
    previous = None
    for epoch, start in sorted(meta.leader_epochs.items()):
        if epoch < 0 or not meta.start_offset <= start <= meta.end_offset:
            raise InvalidSegmentMetadataError(
                f"{what}: leader epoch {epoch} at {start} is outside the segment {meta.start_offset}..{meta.end_offset}"
            )
        if previous is not None and start < previous:
            raise InvalidSegmentMetadataError(f"{what}: leader epoch {epoch} starts at {start}, before {previous}")
        previous = start


@dataclass(slots=True)
class _LockedPartition:
    """The columns of a locked partition row that writes need, and the database clock (ms) read
    after the lock was taken."""

    id: int
    delete_state: str | None
    dropped: bool
    lease_holder: str | None
    lease_token: int
    lease_expires_ms: int
    fencing_counter: int
    remote_log_start_offset: int | None
    finish_counter: int
    db_now: int

    @property
    def removal(self) -> str | None:
        """How far the partition's removal went ("removed" once dropped), None while it is live:
        a removed or being-removed partition is never copied to again."""
        return "removed" if self.dropped else self.delete_state


class RemoteLogMetadataStore:
    """Segment metadata, partition delete states, fenced leases and the section-10 state.

    ``url`` is any SQLAlchemy URL (``sqlite:///path`` embedded, ``postgresql+psycopg://`` in
    production); a missing or older schema is migrated on open. ``lease_ms`` is the default
    lease time to live. ``segment_memo`` bounds the decoded segments kept between calls.
    Safe to share between threads.
    """

    def __init__(
        self,
        url: str,
        *,
        lease_ms: int = 600_000,
        echo: bool = False,
        segment_memo: int = DEFAULT_SEGMENT_MEMO,
        listed_partitions: int = LISTED_PARTITIONS,
    ) -> None:
        self.url = url
        self.lease_ms = lease_ms
        self._memo_limit = max(0, segment_memo)
        self._memo_young: dict[tuple[Any, ...], RemoteLogSegmentMetadata] = {}
        self._memo_old: dict[tuple[Any, ...], RemoteLogSegmentMetadata] = {}
        self._listed: dict[tuple[str, int], None] = {}  # partitions listed lately, oldest first
        self._listed_limit = max(1, listed_partitions)
        self._memo_lock = threading.Lock()  # the memo's generations and the listed partitions
        self._checkpointer: WalCheckpointer | None = None
        try:
            in_memory = is_sqlite_in_memory(url)
            if not in_memory:
                self.engine = make_engine(url, echo=echo)
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
        self._driver_error: type[Exception] = self.engine.dialect.loaded_dbapi.Error
        try:
            from tiering_core.metadata.migrations import ensure_schema

            ensure_schema(self.engine, url)
        except DBAPIError as exc:
            self.engine.dispose()
            raise MetadataStoreError(f"cannot open metadata store {safe_url(url)}: {exc.orig}") from exc
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

    # --- transactions and clock ----------------------------------------------------------

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except DBAPIError as exc:
            raise MetadataStoreError(f"metadata store {safe_url(self.url)}: {exc.orig}") from exc
        except self._driver_error as exc:  # from a DriverQuery, which bypasses SQLAlchemy
            raise MetadataStoreError(f"metadata store {safe_url(self.url)}: {exc}") from exc

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """One write transaction (SQLite: holds the write lock from BEGIN)."""
        with self._guard(), self._writer.begin() as conn:
            yield conn

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        """A read transaction."""
        with self._guard(), self.engine.connect() as conn:
            yield conn

    def _clock(self, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` plus this host's clock for SQLite (PostgreSQL reads its own clock)."""
        if not self._pg:
            params["now"] = now_ms()
        return params

    # --- the partition row: lookup, lock, fencing ----------------------------------------

    def _lock(self, conn: Connection, tip: TopicIdPartition) -> _LockedPartition | None:
        """The partition row, locked until the transaction ends, with the clock read after the lock.

        On PostgreSQL the clock is a second statement: one inside the locking SELECT is read
        before the lock wait, so a lease that expired while waiting would pass and a new expiry
        would come out short by the wait. SQLite's write lock is taken at BEGIN, before this.
        """
        row = conn.execute(self._q.lock, _tip_params(tip)).first()
        if row is None:
            return None
        db_now = int(conn.execute(self._q.clock).scalar_one()) if self._pg else now_ms()
        return _LockedPartition(
            id=row.id,
            delete_state=row.delete_state,
            dropped=bool(row.dropped),
            lease_holder=row.lease_holder,
            lease_token=row.lease_token,
            lease_expires_ms=row.lease_expires_ms,
            fencing_counter=row.fencing_counter,
            remote_log_start_offset=row.remote_log_start_offset,
            finish_counter=row.finish_counter,
            db_now=db_now,
        )

    def _ensure(self, conn: Connection, tip: TopicIdPartition) -> _LockedPartition:
        row = self._lock(conn, tip)
        if row is not None:
            return row
        now = now_ms()
        conn.execute(
            self._q.insert_partition,
            {
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
                "created_ms": now,
                "updated_ms": now,
            },
        )
        row = self._lock(conn, tip)
        if row is None:
            raise MetadataStoreError(f"{tip}: could not register the partition")
        return row

    def _fenced(self, conn: Connection, lease: Lease) -> _LockedPartition:
        """The locked partition row if ``lease`` is its current, unexpired lease; else FencedError."""
        tip = lease.topic_id_partition
        row = self._lock(conn, tip)
        if row is None:
            raise FencedError(f"{tip}: partition unknown to the metadata store; acquire a lease first")
        if row.lease_token != lease.token:
            raise FencedError(
                f"{tip}: lease token {lease.token} of {lease.holder} is fenced "
                f"(current token {row.lease_token} held by {row.lease_holder})"
            )
        if row.lease_holder is None:
            raise FencedError(f"{tip}: lease token {lease.token} of {lease.holder} was released")
        if row.lease_holder != lease.holder:
            raise FencedError(f"{tip}: lease token {lease.token} is held by {row.lease_holder}, not {lease.holder}")
        if row.lease_expires_ms <= row.db_now:
            raise FencedError(
                f"{tip}: lease token {lease.token} of {lease.holder} expired {row.db_now - row.lease_expires_ms} ms ago"
            )
        return row

    def _update_partition(self, conn: Connection, row: _LockedPartition, **values: Any) -> None:
        """Update the locked row, and ``row`` with it (later steps of the transaction see the change)."""
        conn.execute(self._q.update_partition, {"pid": row.id, "updated_ms": row.db_now, **values})
        for name, value in values.items():
            if name in _LockedPartition.__dataclass_fields__:
                setattr(row, name, value)

    def _history(
        self,
        conn: Connection,
        partition: _LockedPartition,
        lease: Lease,
        to_state: str,
        *,
        segment_id: str | None = None,
        from_state: str | None = None,
    ) -> None:
        conn.execute(
            self._q.history,
            {
                "partition_id": partition.id,
                "segment_id": segment_id,
                "from_state": from_state,
                "to_state": to_state,
                "at_ms": partition.db_now,
                "token": lease.token,
                "run_id": lease.run_id,
            },
        )

    @staticmethod
    def _check_lease_tip(tip: TopicIdPartition, lease: Lease) -> None:
        if tip != lease.topic_id_partition:
            raise FencedError(f"the lease of {lease.topic_id_partition} cannot write {tip}")

    # --- partitions ----------------------------------------------------------------------

    @staticmethod
    def _record(row: Any) -> PartitionRecord:
        return PartitionRecord(
            topic_id=row.topic_id,
            topic_partition=TopicPartition(row.topic, row.partition),
            delete_state=RemotePartitionDeleteState(row.delete_state) if row.delete_state else None,
            remote_log_start_offset=row.remote_log_start_offset,
            dropped=bool(row.dropped),
            lease_holder=row.lease_holder,
            lease_token=row.lease_token,
            lease_expires_ms=row.lease_expires_ms,
            fencing_token=row.fencing_counter,
            created_ms=row.created_ms,
            updated_ms=row.updated_ms,
        )

    def register_partition(self, tip: TopicIdPartition) -> None:
        """Idempotent. A partition being removed, or removed (a tombstone), raises PartitionDeletedError:
        a recreated topic has a new topic id and is a new partition."""
        with self._write() as conn:
            row = self._ensure(conn, tip)
        if row.removal is not None:
            raise PartitionDeletedError(
                f"{tip}: partition is {row.removal} in the remote tier; a recreated topic gets a new topic id"
            )

    def get_partition(self, tp: TopicIdPartition | TopicPartition) -> PartitionRecord | None:
        """By topic id + partition; by name alone, the live partition (else the latest tombstone)."""
        if isinstance(tp, TopicIdPartition):
            query = select(P).where(P.c.topic_id == tp.topic_id, P.c.partition == tp.partition)
        else:
            query = (
                select(P)
                .where(P.c.topic == tp.topic, P.c.partition == tp.partition)
                .order_by(P.c.dropped, P.c.id.desc())
                .limit(1)
            )
        with self._read() as conn:
            row = conn.execute(query).first()
        return self._record(row) if row is not None else None

    def list_partitions(self) -> list[PartitionRecord]:
        """Every partition the store knows, tombstones included, by topic, partition, age."""
        with self._read() as conn:
            rows = conn.execute(select(P).order_by(P.c.topic, P.c.partition, P.c.id)).all()
        return [self._record(r) for r in rows]

    # --- leases (fencing) ----------------------------------------------------------------

    def _ttl(self, ttl_ms: int | None) -> int:
        ttl = self.lease_ms if ttl_ms is None else ttl_ms
        if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0:
            raise ValueError(f"lease time to live must be a positive number of milliseconds, not {ttl!r}")
        return ttl

    def acquire_lease(
        self, tip: TopicIdPartition, holder: str, *, ttl_ms: int | None = None, run_id: str | None = None
    ) -> Lease:
        """Take the partition's lease with the next fencing token (tokens only ever grow).

        Raises LeaseHeldError while another lease (even one of the same holder name) is unexpired.
        """
        ttl = self._ttl(ttl_ms)
        with self._write() as conn:
            row = self._ensure(conn, tip)
            if row.lease_holder is not None and row.lease_expires_ms > row.db_now:
                raise LeaseHeldError(
                    f"{tip}: lease held by {row.lease_holder} (token {row.lease_token}) until "
                    f"{row.lease_expires_ms} ms since the epoch, {row.lease_expires_ms - row.db_now} ms from now"
                )
            token = row.fencing_counter + 1
            expires = row.db_now + ttl
            self._update_partition(
                conn, row, fencing_counter=token, lease_token=token, lease_holder=holder, lease_expires_ms=expires
            )
        return Lease(tip, holder, token, expires, run_id)

    def renew_lease(self, lease: Lease, *, ttl_ms: int | None = None) -> Lease:
        """Extend a current, unexpired lease (FencedError otherwise); same token."""
        ttl = self._ttl(ttl_ms)
        with self._write() as conn:
            row = self._fenced(conn, lease)
            expires = row.db_now + ttl
            self._update_partition(conn, row, lease_expires_ms=expires)
        return Lease(lease.topic_id_partition, lease.holder, lease.token, expires, lease.run_id)

    def release_lease(self, lease: Lease) -> None:
        """Give the lease up now (also after it expired, if nobody took it); FencedError if superseded."""
        with self._write() as conn:
            row = self._lock(conn, lease.topic_id_partition)
            if row is None or row.lease_token != lease.token or row.lease_holder not in (None, lease.holder):
                raise FencedError(f"{lease.topic_id_partition}: lease token {lease.token} is no longer current")
            self._update_partition(conn, row, lease_holder=None, lease_expires_ms=0)

    def release_lease_if_current(self, lease: Lease) -> bool:
        """``release_lease`` at the end of a run: False, and nothing to give up, when a newer run
        has taken the partition meanwhile (the run's own writes were fenced already)."""
        try:
            self.release_lease(lease)
        except FencedError:
            return False
        return True

    def current_lease(self, tip: TopicIdPartition) -> Lease | None:
        """The partition's unexpired lease (its run may still be writing), or None."""
        with self._read() as conn:
            row = conn.execute(self._q.lease, self._clock(_tip_params(tip))).first()
        if row is None or row.lease_holder is None or row.lease_expires_ms <= row.db_now:
            return None
        return Lease(tip, row.lease_holder, row.lease_token, row.lease_expires_ms)

    def is_lease_active(self, tip: TopicIdPartition) -> bool:
        """True while some run holds an unexpired lease (a COPY_SEGMENT_STARTED may be in flight)."""
        return self.current_lease(tip) is not None

    # --- decoding segment rows -----------------------------------------------------------

    def _memo_get(self, key: tuple[Any, ...]) -> RemoteLogSegmentMetadata | None:
        meta = self._memo_young.get(key)
        if meta is None:
            meta = self._memo_old.get(key)
            if meta is not None:
                self._memo_put(key, meta)
        return meta

    def _memo_put(self, key: tuple[Any, ...], meta: RemoteLogSegmentMetadata) -> None:
        """Two generations: when the young one is full it becomes the old one (dropping the old)."""
        if not self._memo_limit:
            return
        with self._memo_lock:
            if len(self._memo_young) >= self._memo_limit // 2:
                self._memo_old = self._memo_young
                self._memo_young = {}
            self._memo_young[key] = meta

    def _admit(self, tip: TopicIdPartition) -> bool:
        """Memoize a partition's segments from its second listing on: a pass over many partitions
        (status) then leaves the memo alone instead of churning it (and the garbage collector)."""
        key = (tip.topic_id, tip.partition)
        with self._memo_lock:
            if key in self._listed:
                return True
            while len(self._listed) >= self._listed_limit:
                del self._listed[next(iter(self._listed))]
            self._listed[key] = None
            return False

    def _decode(self, row: Sequence[Any], tip: TopicIdPartition, *, memo: bool = True) -> RemoteLogSegmentMetadata:
        """A row starting with SEGMENT_COLUMNS -> value (with ``memo``, a memoized one is reused).
        Its custom metadata, read with the row, is decoded when first read."""
        sid, _pid, start, end, max_ts, size, state, epochs_json, token, event_time, custom_json = row[:11]
        meta = self._memo_get((sid, state, event_time, token)) if memo else None
        if meta is not None:
            return meta
        return stored_segment(
            msgspec.convert(sid, uuid.UUID),
            tip,
            start,
            end,
            max_ts,
            _epochs(epochs_json),
            size,
            _STATES[state],
            token,
            event_time,
            custom_json or "",
        )

    def _decode_listing(self, rows: Sequence[Sequence[Any]], tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """Rows of LISTING_COLUMNS -> values, in order.

        A listing's hot path: a segment seen before in the same state is its memoized value (from
        a partition's second listing on). The others' UUIDs and leader epochs are decoded by
        msgspec in one call each, the values are built without the dataclass ``__init__``, and
        their custom metadata is read (for all of them in one query) and decoded when first
        asked for.
        """
        memoize = self._admit(tip)
        found: list[RemoteLogSegmentMetadata | None] | None = None
        new_rows = rows
        if memoize:
            memo_get = self._memo_get
            found = [memo_get((r[0], r[5], r[8], r[7])) for r in rows]
            new_rows = [r for r, meta in zip(rows, found, strict=True) if meta is None]
        built: list[RemoteLogSegmentMetadata] = []
        if new_rows:
            sids = [r[0] for r in new_rows]
            # Both columns are JSON the store wrote (UUID text, epoch objects): joined, they decode at once.
            uuids = _decode_uuids('["' + '","'.join(sids) + '"]')
            all_epochs = _decode_epoch_lists("[" + ",".join([r[6] for r in new_rows]) + "]")
            loader = CustomMetadataLoader(self._custom_metadata_texts, sids)
            states, build, append = _STATES, stored_segment, built.append
            for segment_id, epochs, (_sid, start, end, max_ts, size, state, _e, token, event_time) in zip(
                uuids, all_epochs, new_rows, strict=True
            ):
                if len(epochs) > 1:
                    epochs = _ascending(epochs)
                append(
                    build(segment_id, tip, start, end, max_ts, epochs, size, states[state], token, event_time, loader)
                )
            if memoize and self._memo_limit:
                for r, meta in zip(new_rows, built, strict=True):
                    self._memo_put((r[0], r[5], r[8], r[7]), meta)
        if found is None:
            return built
        fresh = iter(built)
        return [meta if meta is not None else next(fresh) for meta in found]

    def _custom_metadata_texts(self, segment_ids: Sequence[str]) -> dict[str, str]:
        """The stored custom metadata JSON of these segments (those still stored)."""
        texts: dict[str, str] = {}
        with self._read() as conn:
            for i in range(0, len(segment_ids), IDS_PER_QUERY):
                chunk = list(segment_ids[i : i + IDS_PER_QUERY])
                texts.update((sid, text or "") for sid, text in conn.execute(self._q.custom_by_ids, {"ids": chunk}))
        return texts

    # --- segments ------------------------------------------------------------------------

    def add_segment(self, meta: RemoteLogSegmentMetadata, lease: Lease) -> None:
        """Record a copy attempt before anything is uploaded; only COPY_SEGMENT_STARTED may be added.

        The stored writer token is the lease's. A duplicate id raises DuplicateSegmentError.
        """
        if meta.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise InvalidStateTransitionError(
                f"new segment {meta.segment_id} of {meta.topic_id_partition}", "NONE", meta.state.value
            )
        validate_segment_metadata(meta)
        if meta.topic_id_partition != lease.topic_id_partition:
            raise FencedError(
                f"the lease of {lease.topic_id_partition} cannot add a segment of {meta.topic_id_partition}"
            )
        sid = str(meta.segment_id)
        with self._write() as conn:
            row = self._fenced(conn, lease)
            if row.removal is not None:
                raise PartitionDeletedError(
                    f"{meta.topic_id_partition}: partition is {row.removal}; nothing more is copied to it"
                )
            try:
                conn.execute(
                    self._q.insert_segment,
                    {
                        "segment_id": sid,
                        "partition_id": row.id,
                        "start_offset": meta.start_offset,
                        "end_offset": meta.end_offset,
                        "max_timestamp": meta.max_timestamp,
                        "size_bytes": meta.size_bytes,
                        "state": meta.state.value,
                        "leader_epochs": _epochs_json(meta.leader_epochs),
                        "writer_token": lease.token,
                        "event_time": meta.event_time,
                        "finish_seq": None,
                        "custom_metadata": dict(meta.custom_metadata),
                    },
                )
            except IntegrityError as exc:  # the transaction is rolled back: nothing lands
                raise DuplicateSegmentError(
                    f"segment {sid} already exists (every copy attempt needs a fresh UUID)"
                ) from exc
            self._history(conn, row, lease, meta.state.value, segment_id=sid)

    def update_segment_state(
        self,
        segment_id: uuid.UUID,
        new_state: RemoteLogSegmentState,
        lease: Lease,
        *,
        event_time_ms: int | None = None,
        custom_metadata: dict[str, Any] | None = None,
    ) -> RemoteLogSegmentMetadata:
        """Validated transition of a segment of the lease's partition.

        A same-state update is a no-op (returns the stored value unchanged); a forbidden one raises
        InvalidStateTransitionError and writes nothing. ``custom_metadata`` is merged into the
        stored one. COPY_SEGMENT_FINISHED takes the partition's next finish sequence number and
        raises the per-epoch highest offsets (refused with PartitionDeletedError once the partition
        is marked for deletion); DELETE_SEGMENT_STARTED stops the segment serving reads.
        A copy finishes with ``finish_copied_segment`` instead, which also records what it teaches.
        """
        with self._write() as conn:
            prow = self._fenced(conn, lease)
            meta = self._transition(conn, prow, lease, segment_id, new_state, event_time_ms, custom_metadata)
        return meta

    def finish_copied_segment(
        self,
        segment_id: uuid.UUID,
        lease: Lease,
        *,
        custom_metadata: dict[str, Any],
        lineage: Sequence[EpochEntry],
    ) -> RemoteLogSegmentMetadata:
        """COPY_SEGMENT_FINISHED with everything the copy teaches, in one fenced transaction.

        The segment moves to COPY_SEGMENT_FINISHED with ``custom_metadata`` merged in (as
        ``update_segment_state``; an already finished segment is not finished twice),
        ``lineage`` (the leader-epoch cache seen at copy time) is merged into the recorded lineage
        (as ``record_lineage``), and an unset remote log start offset becomes the segment's start
        offset. Either all of it lands or none: done as separate steps, a crash in between left a
        finished segment outside the recorded lineage and the remote log start, which a later run
        then moved past it, so retention deleted it.
        """
        with self._write() as conn:
            prow = self._fenced(conn, lease)
            meta = self._transition(conn, prow, lease, segment_id, _FINISHED, None, custom_metadata)
            self._merge_lineage(conn, prow, lineage)
            if prow.remote_log_start_offset is None:
                self._advance_remote_log_start(conn, prow, meta.start_offset)
        return meta

    def _transition(
        self,
        conn: Connection,
        prow: _LockedPartition,
        lease: Lease,
        segment_id: uuid.UUID,
        new_state: RemoteLogSegmentState,
        event_time_ms: int | None,
        custom_metadata: dict[str, Any] | None,
    ) -> RemoteLogSegmentMetadata:
        """A segment's state change inside a fenced write; the resulting value."""
        tip = lease.topic_id_partition
        sid = str(segment_id)
        if new_state == _FINISHED and prow.removal is not None:
            raise PartitionDeletedError(
                f"segment {segment_id} of {tip}: cannot become {_FINISHED.value}, the partition is "
                f"{prow.removal}; nothing more is copied to it"
            )
        seg = conn.execute(self._q.segment_by_id, {"sid": sid}).first()
        if seg is None or seg.partition_id != prow.id:
            raise SegmentNotFoundError(f"segment {segment_id} not found in {tip}")
        current = self._decode(seg, tip, memo=False)  # its custom metadata as this transaction sees it
        if not check_segment_transition(current.state, new_state, f"segment {segment_id} of {tip}"):
            return current
        event_time = prow.db_now if event_time_ms is None else event_time_ms
        merged = current.custom_metadata
        values: dict[str, Any] = {"sid": sid, "state": new_state.value, "event_time": event_time}
        values["writer_token"] = lease.token
        if custom_metadata is not None:
            merged = {**current.custom_metadata, **custom_metadata}
            values["custom_metadata"] = merged
        if new_state == _FINISHED:
            finish_seq = prow.finish_counter + 1
            values["finish_seq"] = finish_seq
            self._update_partition(conn, prow, finish_counter=finish_seq)
            self._index_finished(conn, prow.id, sid, current, finish_seq)
        elif new_state == RemoteLogSegmentState.DELETE_SEGMENT_STARTED:
            conn.execute(self._q.delete_epoch_ranges, {"sid": sid})
        conn.execute(self._q.update_segment, values)
        self._history(conn, prow, lease, new_state.value, segment_id=sid, from_state=current.state.value)
        changed = RemoteLogSegmentMetadata(
            segment_id=current.segment_id,
            topic_id_partition=tip,
            start_offset=current.start_offset,
            end_offset=current.end_offset,
            max_timestamp=current.max_timestamp,
            leader_epochs=current.leader_epochs,
            size_bytes=current.size_bytes,
            state=new_state,
            writer_token=lease.token,
            event_time=event_time,
            custom_metadata=merged,
        )
        return changed

    def _index_finished(
        self, conn: Connection, partition_id: int, sid: str, meta: RemoteLogSegmentMetadata, finish_seq: int
    ) -> None:
        """A finished segment's per-epoch ranges (segment_for) and the epochs' highest offsets."""
        ranges = meta.epoch_ranges()
        conn.execute(
            self._q.insert_epoch_ranges,
            [
                {
                    "segment_id": sid,
                    "epoch": epoch,
                    "partition_id": partition_id,
                    "start_offset": start,
                    "end_offset": end,
                    "finish_seq": finish_seq,
                }
                for epoch, (start, end) in ranges.items()
            ],
        )
        conn.execute(
            self._q.raise_epoch_highest,
            [
                {"partition_id": partition_id, "epoch": epoch, "highest_offset": end, "max_span": max(0, end - start)}
                for epoch, (start, end) in ranges.items()
            ],
        )

    def get_segment(self, segment_id: uuid.UUID) -> RemoteLogSegmentMetadata | None:
        with self._read() as conn:
            row = conn.execute(self._q.segment_with_partition, {"sid": str(segment_id)}).first()
        if row is None:
            return None
        return self._decode(row, _tip_of(row))

    def list_segments(
        self, tip: TopicIdPartition, epoch: int | None = None, *, include_deleted: bool = False
    ) -> list[RemoteLogSegmentMetadata]:
        """Segments in any state but DELETE_SEGMENT_FINISHED (all with ``include_deleted``), sorted by
        start offset, then event time, then segment id. With ``epoch``: those whose leader epochs
        include it.

        One query, answered on SQLite from the listing index alone. Custom metadata (object keys,
        sizes, checksums) is not part of it: the first read of any listed segment's
        ``custom_metadata`` reads it for all of them, as stored then (a later state change may
        have merged more into it).
        """
        query = self._q.all_listing if include_deleted else self._q.live_listing
        with _collector_paused:
            with self._read() as conn:
                rows = query.rows(conn, _tip_params(tip))
            metas = self._decode_listing(rows, tip)
        return metas if epoch is None else [m for m in metas if epoch in m.leader_epochs]

    def finished_segments(self, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """COPY_SEGMENT_FINISHED segments by start offset (for size/count over a lineage subset)."""
        return [s for s in self.list_segments(tip) if s.state == _FINISHED]

    def highest_offset_for_epoch(self, tip: TopicIdPartition, epoch: int) -> int | None:
        """Highest offset ever finished in ``epoch`` (KAFKA_SEMANTICS 4); never decreases on deletion."""
        with self._read() as conn:
            return conn.execute(self._q.highest_offset, {**_tip_params(tip), "epoch": epoch}).scalar()

    def segment_for(self, tip: TopicIdPartition, epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment whose range for ``epoch`` contains ``offset``.

        Where finished ranges overlap, the later finished one (higher finish sequence) wins;
        offsets only an earlier segment covers (a shorter re-upload over a longer one) still
        resolve to it.
        """
        with self._read() as conn:
            row = conn.execute(self._q.segment_for, {**_tip_params(tip), "epoch": epoch, "offset": offset}).first()
        return self._decode(row, tip) if row is not None else None

    def remote_log_size(self, tip: TopicIdPartition) -> int:
        """Bytes of COPY_SEGMENT_FINISHED segments."""
        return self._finished_totals(tip)[0]

    def remote_segment_count(self, tip: TopicIdPartition) -> int:
        """Number of COPY_SEGMENT_FINISHED segments."""
        return self._finished_totals(tip)[1]

    def _finished_totals(self, tip: TopicIdPartition) -> tuple[int, int]:
        with self._read() as conn:
            size, count = conn.execute(self._q.finished_totals, _tip_params(tip)).one()
        return int(size), int(count)

    # --- partition deletion (KAFKA_SEMANTICS 7) ------------------------------------------

    def mark_partition_for_deletion(self, tip: TopicIdPartition, lease: Lease) -> None:
        self.update_partition_delete_state(tip, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, lease)

    def update_partition_delete_state(
        self, tip: TopicIdPartition, state: RemotePartitionDeleteState, lease: Lease
    ) -> None:
        """Validated partition-deletion transition; same state is a no-op."""
        self._check_lease_tip(tip, lease)
        with self._write() as conn:
            row = self._fenced(conn, lease)
            current = RemotePartitionDeleteState(row.delete_state) if row.delete_state else None
            if check_partition_transition(current, state, f"partition {tip}"):
                if state == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
                    self._check_no_live_segments(conn, row, tip, f"cannot become {state.value}")
                self._update_partition(conn, row, delete_state=state.value)
                self._history(conn, row, lease, state.value, from_state=current.value if current else None)

    def _check_no_live_segments(
        self, conn: Connection, row: _LockedPartition, tip: TopicIdPartition, what: str
    ) -> None:
        """PartitionNotEmptyError unless every segment of the partition is DELETE_SEGMENT_FINISHED:
        a segment in any other state may still have objects in the remote tier."""
        live = int(conn.execute(self._q.live_segment_count, {"pid": row.id}).scalar_one())
        if live:
            raise PartitionNotEmptyError(
                f"partition {tip}: {what} while {live} segment(s) are not "
                f"{RemoteLogSegmentState.DELETE_SEGMENT_FINISHED.value}; delete them first"
            )

    def drop_partition_metadata(self, tip: TopicIdPartition, lease: Lease) -> None:
        """After DELETE_PARTITION_FINISHED: drop segments, epochs, lineage, gaps and DeleteRecords
        observations, keeping the partition row as a tombstone (its topic id is never copied to
        again) and the state history. Idempotent."""
        self._check_lease_tip(tip, lease)
        with self._write() as conn:
            row = self._fenced(conn, lease)
            if row.delete_state != RemotePartitionDeleteState.DELETE_PARTITION_FINISHED.value:
                raise PartitionDeletedError(
                    f"{tip}: metadata can be dropped only after DELETE_PARTITION_FINISHED, not {row.delete_state}"
                )
            if row.dropped:
                return
            self._check_no_live_segments(conn, row, tip, "metadata cannot be dropped")
            for table in (E, H, L, G, D, S):
                conn.execute(table.delete().where(table.c.partition_id == row.id))
            self._update_partition(conn, row, dropped=True, remote_log_start_offset=None)
            self._history(conn, row, lease, METADATA_DROPPED, from_state=row.delete_state)

    # --- section 10 state ----------------------------------------------------------------

    def get_remote_log_start_offset(self, tip: TopicIdPartition) -> int | None:
        query = select(P.c.remote_log_start_offset).where(P.c.topic_id == tip.topic_id, P.c.partition == tip.partition)
        with self._read() as conn:
            return conn.execute(query).scalar()

    def set_remote_log_start_offset(self, tip: TopicIdPartition, offset: int, lease: Lease) -> int:
        """Advance the platform's remote log start offset; it never moves back (a lower value is
        ignored). Returns the stored value."""
        self._check_lease_tip(tip, lease)
        with self._write() as conn:
            row = self._fenced(conn, lease)
            return self._advance_remote_log_start(conn, row, offset)

    def _advance_remote_log_start(self, conn: Connection, row: _LockedPartition, offset: int) -> int:
        if row.remote_log_start_offset is not None and offset <= row.remote_log_start_offset:
            return int(row.remote_log_start_offset)
        self._update_partition(conn, row, remote_log_start_offset=offset)
        return offset

    def record_lineage(self, tip: TopicIdPartition, entries: Sequence[EpochEntry], lease: Lease) -> None:
        """Merge a leader-epoch cache seen at copy time into the recorded lineage.

        The result is ``merge_lineage(recorded, entries)`` (KAFKA_SEMANTICS 10.2): from the new
        entries' first start offset on they replace what was recorded (they may reflect a
        truncation after an unclean election); earlier recorded epochs are kept, and the first
        new epoch keeps an earlier recorded start.
        """
        self._check_lease_tip(tip, lease)
        with self._write() as conn:
            row = self._fenced(conn, lease)
            self._merge_lineage(conn, row, entries)

    def _merge_lineage(self, conn: Connection, row: _LockedPartition, entries: Sequence[EpochEntry]) -> None:
        stored = [EpochEntry(r.epoch, r.start_offset) for r in conn.execute(self._q.lineage_of, {"pid": row.id})]
        merged = list(merge_lineage(stored, list(entries)))
        if merged == stored:
            return
        conn.execute(self._q.delete_lineage, {"pid": row.id})
        if merged:
            conn.execute(
                self._q.insert_lineage,
                [{"partition_id": row.id, "epoch": e.epoch, "start_offset": e.start_offset} for e in merged],
            )

    def get_recorded_lineage(self, tip: TopicIdPartition) -> list[EpochEntry]:
        query = (
            select(L.c.epoch, L.c.start_offset)
            .join(P, P.c.id == L.c.partition_id)
            .where(P.c.topic_id == tip.topic_id, P.c.partition == tip.partition)
            .order_by(L.c.epoch)
        )
        with self._read() as conn:
            return [EpochEntry(r.epoch, r.start_offset) for r in conn.execute(query)]

    def record_delete_records(self, tip: TopicIdPartition, offset: int, lease: Lease, source: str) -> int:
        """Record an observed DeleteRecords offset (kept only if above every earlier one, so it
        survives the broker's checkpoint entry disappearing). Returns the highest observed."""
        self._check_lease_tip(tip, lease)
        with self._write() as conn:
            row = self._fenced(conn, lease)
            highest = conn.execute(self._q.highest_delete_records, {"pid": row.id}).scalar()
            if highest is not None and offset <= highest:
                return int(highest)
            conn.execute(
                D.insert(),
                {
                    "partition_id": row.id,
                    "before_offset": offset,
                    "source": source[:255],
                    "observed_ms": row.db_now,
                    "token": lease.token,
                    "run_id": lease.run_id,
                },
            )
            return offset

    def get_delete_records_offset(self, tip: TopicIdPartition) -> int | None:
        """The highest DeleteRecords offset ever observed for the partition."""
        query = (
            select(func.max(D.c.before_offset))
            .join(P, P.c.id == D.c.partition_id)
            .where(P.c.topic_id == tip.topic_id, P.c.partition == tip.partition)
        )
        with self._read() as conn:
            return conn.execute(query).scalar()

    def delete_records_observations(self, tip: TopicIdPartition) -> list[DeleteRecordsObservation]:
        query = (
            select(D)
            .join(P, P.c.id == D.c.partition_id)
            .where(P.c.topic_id == tip.topic_id, P.c.partition == tip.partition)
            .order_by(D.c.before_offset)
        )
        with self._read() as conn:
            return [
                DeleteRecordsObservation(r.before_offset, r.source, r.observed_ms, r.token, r.run_id)
                for r in conn.execute(query)
            ]

    def record_gap(self, tip: TopicIdPartition, start: int, end: int, lease: Lease) -> None:
        """Record a tiering gap [start, end]; recording the same range again changes nothing."""
        if end < start:
            raise ValueError(f"{tip}: gap {start}..{end} is not a range")
        self._check_lease_tip(tip, lease)
        with self._write() as conn:
            row = self._fenced(conn, lease)
            conn.execute(
                self._q.insert_gap,
                {"partition_id": row.id, "start_offset": start, "end_offset": end, "detected_ms": row.db_now},
            )

    def list_gaps(self, tip: TopicIdPartition) -> list[TieringGap]:
        query = (
            select(G.c.start_offset, G.c.end_offset, G.c.detected_ms)
            .join(P, P.c.id == G.c.partition_id)
            .where(P.c.topic_id == tip.topic_id, P.c.partition == tip.partition)
            .order_by(G.c.start_offset, G.c.end_offset)
        )
        with self._read() as conn:
            return [TieringGap(r.start_offset, r.end_offset, r.detected_ms) for r in conn.execute(query)]

    # --- history -------------------------------------------------------------------------

    def state_history(
        self,
        target: uuid.UUID | TopicIdPartition | None = None,
        *,
        segment_id: uuid.UUID | None = None,
        tip: TopicIdPartition | None = None,
    ) -> list[StateChange]:
        """Every state change of a segment (by id) or of a partition (its own and its segments'), oldest first."""
        if isinstance(target, uuid.UUID):
            segment_id = target
        elif isinstance(target, TopicIdPartition):
            tip = target
        elif target is not None:
            raise TypeError(f"state_history takes a segment id or a TopicIdPartition, not {type(target).__name__}")
        if segment_id is None and tip is None:
            raise TypeError("state_history needs a segment id or a TopicIdPartition")
        query = (
            select(HI, P.c.topic_id, P.c.topic, P.c.partition).join(P, P.c.id == HI.c.partition_id).order_by(HI.c.id)
        )
        if segment_id is not None:
            query = query.where(HI.c.segment_id == str(segment_id))
        if tip is not None:
            query = query.where(P.c.topic_id == tip.topic_id, P.c.partition == tip.partition)
        with self._read() as conn:
            rows = conn.execute(query).all()
        return [
            StateChange(
                topic_id_partition=_tip_of(r),
                segment_id=uuid.UUID(r.segment_id) if r.segment_id else None,
                from_state=r.from_state,
                to_state=r.to_state,
                at_ms=r.at_ms,
                token=r.token,
                run_id=r.run_id,
            )
            for r in rows
        ]
