"""The processes drawing on a broker's upload or fetch quota (``tiering_quota_holders``), so the
processes of one broker split its cap (``storage.quota``; docs/operations.md, "Upload and fetch
quotas").

Each process heartbeats its entry while it takes from a cap: one write that prunes entries long
gone, pushes its own expiry on and counts the live holders of the same broker and kind, at the
database clock (so hosts agree). Its rate is the cap divided by that count. A process that leaves
expires its entry at once; one that dies drops out when its entry expires. The throttle figures
each holder reported stay until the entry is pruned, for the metrics (``throttle_figures``).
"""

from __future__ import annotations

import functools
import os
import socket
import uuid
from dataclasses import dataclass
from functools import cached_property

from sqlalchemy import Dialect, Table, bindparam, func, select, update
from sqlalchemy.dialects import postgresql, sqlite

from tiering_core.metadata.models import QuotaHolderRow
from tiering_core.metadata.transactions import StoreCore
from tiering_core.storage.quota import (
    COPY,
    FETCH,
    QuotaConfig,
    StorageQuotas,
    ThrottleStats,
    TokenBucket,
    release_bucket,
    shared_bucket,
)

_holders = QuotaHolderRow.__table__
assert isinstance(_holders, Table)
HOLDERS: Table = _holders

#: A holder's entry lives this long past its last heartbeat (five refreshes of ``storage.quota``).
HOLDER_TTL_MS = 10_000
#: A left or dead holder's throttle figures count in the metrics this long after its last heartbeat.
THROTTLE_WINDOW_MS = 10 * 60_000
#: Entries are pruned this long after their last heartbeat.
PRUNE_AFTER_MS = 60 * 60_000


def holder_name() -> str:
    """This process's name among the holders: host, pid and a random part (a reused pid is new)."""
    return f"{socket.gethostname()[:200]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True, slots=True)
class ThrottleFigures:
    """The throttle figures of a broker's ``kind`` quota over the holders seen in the window."""

    broker_id: int
    kind: str
    stats: ThrottleStats


class QuotaHolderStatements:
    """The quota holder statements for one dialect, built once per store."""

    def __init__(self, dialect: Dialect) -> None:
        dialect_insert = postgresql.insert if dialect.name == "postgresql" else sqlite.insert
        c = HOLDERS.c
        insert = dialect_insert(HOLDERS)
        self.upsert = insert.on_conflict_do_update(
            index_elements=["broker_id", "kind", "holder"],
            set_={
                name: insert.excluded[name]
                for name in ("expires_ms", "heartbeat_ms", "throttle_ms", "throttles", "throttle_ms_max")
            },
        )
        self.prune = HOLDERS.delete().where(c.heartbeat_ms < bindparam("before"))
        self.live = select(func.count()).where(
            c.broker_id == bindparam("broker_id"), c.kind == bindparam("kind"), c.expires_ms > bindparam("now")
        )
        self.leave = (
            update(HOLDERS)
            .where(c.broker_id == bindparam("b_id"), c.kind == bindparam("b_kind"), c.holder == bindparam("b_holder"))
            .values(
                expires_ms=bindparam("now"),
                heartbeat_ms=bindparam("now"),
                throttle_ms=bindparam("throttle_ms"),
                throttles=bindparam("throttles"),
                throttle_ms_max=bindparam("throttle_ms_max"),
            )
        )
        self.figures = (
            select(c.broker_id, c.kind, func.sum(c.throttle_ms), func.sum(c.throttles), func.max(c.throttle_ms_max))
            .where(c.heartbeat_ms >= bindparam("since"))
            .group_by(c.broker_id, c.kind)
            .order_by(c.broker_id, c.kind)
        )


def _stats_params(stats: ThrottleStats) -> dict[str, float | int]:
    return {"throttle_ms": stats.throttle_ms, "throttles": stats.throttles, "throttle_ms_max": stats.throttle_ms_max}


class QuotaHolderStore(StoreCore):
    """Heartbeats of the processes sharing a broker's quotas, and their throttle figures."""

    @cached_property
    def _hq(self) -> QuotaHolderStatements:
        return QuotaHolderStatements(self.engine.dialect)

    def heartbeat_quota(
        self, broker_id: int, kind: str, holder: str, stats: ThrottleStats, *, ttl_ms: int = HOLDER_TTL_MS
    ) -> int:
        """Make or renew ``holder``'s entry for ``broker_id``'s ``kind`` quota until ``ttl_ms``
        from now, with its throttle figures; the live holders of that quota, itself included."""
        with self._write() as conn:
            now = self._db_now(conn)
            conn.execute(self._hq.prune, {"before": now - PRUNE_AFTER_MS})
            conn.execute(
                self._hq.upsert,
                {
                    "broker_id": broker_id,
                    "kind": kind,
                    "holder": holder,
                    "expires_ms": now + ttl_ms,
                    "heartbeat_ms": now,
                    **_stats_params(stats),
                },
            )
            return int(conn.execute(self._hq.live, {"broker_id": broker_id, "kind": kind, "now": now}).scalar_one())

    def leave_quota(self, broker_id: int, kind: str, holder: str, stats: ThrottleStats) -> None:
        """``holder`` no longer draws on the quota: its entry expires now, its figures stay."""
        with self._write() as conn:
            now = self._db_now(conn)
            conn.execute(
                self._hq.leave,
                {"b_id": broker_id, "b_kind": kind, "b_holder": holder, "now": now, **_stats_params(stats)},
            )

    def quota_holders(self, broker_id: int, kind: str) -> int:
        """The live holders of ``broker_id``'s ``kind`` quota now."""
        with self._read() as conn:
            now = self._db_now(conn)
            return int(conn.execute(self._hq.live, {"broker_id": broker_id, "kind": kind, "now": now}).scalar_one())

    def throttle_figures(self, *, window_ms: int = THROTTLE_WINDOW_MS) -> list[ThrottleFigures]:
        """Per broker and kind, the throttle figures of the holders heard from within ``window_ms``."""
        with self._read() as conn:
            since = self._db_now(conn) - window_ms
            rows = conn.execute(self._hq.figures, {"since": since}).all()
        return [
            ThrottleFigures(int(b), str(k), ThrottleStats(float(total or 0), int(count or 0), float(top or 0)))
            for b, k, total, count, top in rows
        ]


class StoreQuotaShare:
    """A process's share of one broker's quota through the store's holders (``QuotaShare``)."""

    def __init__(
        self,
        store: QuotaHolderStore,
        broker_id: int,
        kind: str,
        holder: str | None = None,
        *,
        ttl_ms: int = HOLDER_TTL_MS,
    ) -> None:
        self.store = store
        self.broker_id = broker_id
        self.kind = kind
        self.holder = holder or holder_name()
        self.ttl_ms = ttl_ms

    def refresh(self, stats: ThrottleStats) -> int:
        return self.store.heartbeat_quota(self.broker_id, self.kind, self.holder, stats, ttl_ms=self.ttl_ms)

    def leave(self, stats: ThrottleStats) -> None:
        self.store.leave_quota(self.broker_id, self.kind, self.holder, stats)


def open_quotas(store: QuotaHolderStore, broker_id: int, caps: QuotaConfig) -> StorageQuotas:
    """The process's buckets of ``broker_id``'s capped quotas, shared with the other processes of
    the broker through ``store``; ``close_quotas`` when done."""
    buckets: dict[str, TokenBucket] = {}
    for kind in (COPY, FETCH):
        cap = caps.cap(kind)
        if cap is not None:
            share = functools.partial(StoreQuotaShare, store, broker_id, kind)
            buckets[kind] = shared_bucket(store.url, broker_id, kind, cap, share)
    return StorageQuotas(copy=buckets.get(COPY), fetch=buckets.get(FETCH))


def close_quotas(quotas: StorageQuotas) -> None:
    """Release the buckets of ``open_quotas`` (the last user in the process leaves the share)."""
    for bucket in (quotas.copy, quotas.fetch):
        if bucket is not None:
            release_bucket(bucket)
