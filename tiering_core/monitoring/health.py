"""Is tiering healthy? The figures the Tiering page's first screen answers it with, beside the
overview's alerts: the partitions at local-retention risk with their headroom (the least first),
the age of the oldest segment not yet copied, and the copy throughput, over a recent window and as
a history of buckets.

All are read from the store alone (the API server has no log dir), by the snapshot's rules: only a
fresh replica's observation counts. The oldest uncopied segment's age is what its replica's
observation measured, grown by the time since: the observation keeps the headroom before the
broker's time retention may delete that segment, so the age is the topic's local retention minus
it (unknown where no local time limit applies). Throughput comes from the recorded state history
(``metadata.copy_history``), so it is history, not the current instant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tiering_core.metadata.observations import MINUTE_MS

if TYPE_CHECKING:
    from tiering_core.context import TieringContext

#: The recent window the throughput is averaged over.
THROUGHPUT_WINDOW_MS = 60 * MINUTE_MS
#: The copy history's span and bucket width.
HISTORY_SPAN_MS = 24 * 60 * MINUTE_MS
HISTORY_BUCKET_MS = 5 * MINUTE_MS
#: At-risk partitions listed (the least headroom first); the rest are counted.
RISKS_LISTED = 20


@dataclass(frozen=True, slots=True)
class ReplicaRisk:
    """A fresh replica at local-retention risk: seconds left before the broker may delete data not
    yet copied (None: not measured; negative: past due) and its copy lag."""

    topic: str
    partition: int
    broker_id: int
    headroom_seconds: float | None
    copy_lag_bytes: int | None

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class UncopiedAge:
    """The oldest segment not yet copied: its partition, the replica that measured it, its age."""

    topic: str
    partition: int
    broker_id: int
    age_ms: int


@dataclass(slots=True)
class Health:
    """The first screen's figures at the database clock ``db_now_ms`` (module docstring)."""

    db_now_ms: int
    risks: list[ReplicaRisk] = field(default_factory=list)
    risk_count: int = 0
    oldest_uncopied: UncopiedAge | None = None
    copied_bytes: int = 0
    window_ms: int = THROUGHPUT_WINDOW_MS
    #: (bucket start ms, bytes copied in it), oldest first, over ``HISTORY_SPAN_MS``.
    copy_history: list[tuple[int, int]] = field(default_factory=list)

    @property
    def bytes_per_second(self) -> float:
        return self.copied_bytes * 1000 / self.window_ms


def _sort_key(r: ReplicaRisk) -> tuple[float, str, int, int]:
    room = float("-inf") if r.headroom_seconds is None else r.headroom_seconds
    return (room, r.topic, r.partition, r.broker_id)


def collect_health(ctx: TieringContext, *, topic: str | None = None, broker: int | None = None) -> Health:
    """The figures of every partition, or of one topic's, or of one broker's replicas."""
    store = ctx.metadata
    now, rows = store.waiting_rows(staleness_ms=ctx.config.observation_staleness_ms, topic=topic, broker=broker)
    risks: list[ReplicaRisk] = []
    oldest: UncopiedAge | None = None
    retention: dict[str, int | None] = {}
    for name, partition, broker_id, at_risk, room, lag, at in rows:
        room = None if room is None else float(room)
        if at_risk:
            risks.append(ReplicaRisk(name, partition, broker_id, room, None if lag is None else int(lag)))
        if room is None:
            continue
        if name not in retention:
            retention[name] = ctx.config.topic_config(name).effective_local_retention_ms()
        limit = retention[name]
        if limit is None or limit < 0:
            continue
        age = max(0, int(limit - room * 1000) + max(0, now - at))
        if oldest is None or age > oldest.age_ms:
            oldest = UncopiedAge(name, partition, broker_id, age)
    risks.sort(key=_sort_key)
    history = store.copied_bytes_series(since_ms=now - HISTORY_SPAN_MS, bucket_ms=HISTORY_BUCKET_MS, topic=topic)
    recent = store.copied_bytes_series(since_ms=now - THROUGHPUT_WINDOW_MS, bucket_ms=THROUGHPUT_WINDOW_MS, topic=topic)
    return Health(
        now,
        risks[:RISKS_LISTED],
        len(risks),
        oldest,
        sum(size for _, size in recent),
        copy_history=history,
    )


__all__ = ["HISTORY_BUCKET_MS", "THROUGHPUT_WINDOW_MS", "Health", "ReplicaRisk", "UncopiedAge", "collect_health"]
