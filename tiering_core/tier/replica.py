"""Replica choice in a cluster: which broker's replica a copy run copies from, and what the
cluster as a whole still holds (docs/kafka-rules.md section 10, run on several brokers).

Every rule reads the replica observations the brokers' runs recorded (``metadata.observations``)
and counts only fresh ones: an observation older than ``cluster.observation_staleness_ms`` (the
database clock judges) says nothing of the replica now.

- **Copy from the best fresh replica.** A copy run copies only when its broker holds the best
  fresh replica (``best_replica_of``: highest leader epoch, then highest LSO, ties to the lowest
  broker id). It records its own observation first, so its own replica is always among the fresh
  ones; otherwise it is skipped with the one-line reason ``ReplicaChoice.skipped_reason`` gives.
  When the best replica no longer holds the first offset not yet tiered (its broker's retention
  deleted it) but another fresh replica of the same leader epoch does, that one copies first.
  The partition's lease still fences two brokers that both believe they hold it.
- **A tiering gap is the cluster's.** Offsets one replica dropped before they were tiered are a gap
  only where no fresh replica of another broker still holds them (its local log start at or below
  the offset, its log end above it); what another replica holds is no gap (yet).
- **A partition is on the cluster** while any broker's fresh observation reports its topic id:
  its remote data is live and removal refuses it unless forced.

With one broker (or the single-broker form) there is no choice to make: ``in_cluster`` is False
and every run behaves as on a single broker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tiering_core.metadata.observations import best_replica_of
from tiering_core.tier.offsets import OffsetRange

if TYPE_CHECKING:
    from tiering_core.config import PlatformConfig
    from tiering_core.kafka.topic import TopicIdPartition
    from tiering_core.metadata.store import RemoteLogMetadataStore
    from tiering_core.metadata.values import ReplicaObservation
    from tiering_core.tier.view import TierView


def in_cluster(config: PlatformConfig) -> bool:
    """This process runs for one broker of several (``brokers:`` with more than one, one chosen):
    its replica is one of several, and the rules of the module docstring apply."""
    return config.broker_id is not None and len(config.brokers) > 1


def fresh_replicas(
    store: RemoteLogMetadataStore, tip: TopicIdPartition, staleness_ms: int
) -> dict[int, ReplicaObservation]:
    """The brokers whose latest observation of ``tip`` is at most ``staleness_ms`` old."""
    replicas, now = store.observations_of(tip)
    return {b: o for b, o in replicas.items() if now - o.observed_ms <= staleness_ms}


@dataclass(frozen=True)
class ReplicaChoice:
    """The replica a copy run on ``broker_id`` copies from: ``best`` (None: no fresh one), ``own``
    (this broker's fresh observation) and ``resume`` (the first offset not yet tiered) when the
    best replica had dropped it and ``best`` is the best replica that still holds it."""

    broker_id: int
    best: ReplicaObservation | None
    own: ReplicaObservation | None
    resume: int | None = None

    @property
    def chosen(self) -> bool:
        """This broker copies: its replica is the best fresh one (or none is fresh at all)."""
        return self.best is None or self.best.broker_id == self.broker_id

    @property
    def skipped_reason(self) -> str | None:
        """Why this broker does not copy, e.g. ``broker 2 holds a more advanced replica
        (LSO 91234 > 90990)``; None when it does."""
        best, own = self.best, self.own
        if best is None or self.chosen:
            return None
        if self.resume is not None:
            where = "" if own is None else f" (local log start {own.local_log_start_offset})"
            return (
                f"broker {best.broker_id} still holds offset {self.resume}, the first not yet tiered, "
                f"which this replica no longer has{where}"
            )
        prefix = f"broker {best.broker_id} holds a more advanced replica"
        if own is None:
            return f"{prefix} (this broker's replica has no fresh observation)"
        if best.leader_epoch != own.leader_epoch:
            return f"{prefix} (leader epoch {_shown(best.leader_epoch)} > {_shown(own.leader_epoch)})"
        if best.last_stable_offset != own.last_stable_offset:
            return f"{prefix} (LSO {_shown(best.last_stable_offset)} > {_shown(own.last_stable_offset)})"
        return (
            f"broker {best.broker_id} holds an equal replica (leader epoch {_shown(best.leader_epoch)}, "
            f"LSO {_shown(best.last_stable_offset)}) and the lower broker id"
        )


def _shown(value: int | None) -> str:
    return "unknown" if value is None else str(value)


def _holds(o: ReplicaObservation, offset: int) -> bool:
    return o.local_log_start_offset <= offset < (o.last_stable_offset if o.last_stable_offset is not None else -1)


def choose_replica(
    store: RemoteLogMetadataStore,
    tip: TopicIdPartition,
    broker_id: int,
    staleness_ms: int,
    *,
    resume: int | None = None,
) -> ReplicaChoice:
    """The replica choice for a copy run on ``broker_id`` (record its observation first).

    ``resume``: the first offset not yet tiered (None: nothing tiered yet). When the best replica
    no longer holds it (its broker's retention deleted it) but a fresh replica of the same leader
    epoch still does, the best of those copies first, so no offset another replica still holds
    is passed over as a gap."""
    replicas, now = store.observations_of(tip)
    fresh = [o for o in replicas.values() if now - o.observed_ms <= staleness_ms]
    best = best_replica_of(fresh, now_ms=now, staleness_ms=staleness_ms)
    own = replicas.get(broker_id)
    own = own if own is not None and now - own.observed_ms <= staleness_ms else None
    if best is not None and resume is not None and not _holds(best, resume):
        holders = [o for o in fresh if o.leader_epoch == best.leader_epoch and _holds(o, resume)]
        holder = best_replica_of(holders, now_ms=now, staleness_ms=staleness_ms)
        if holder is not None:
            return ReplicaChoice(broker_id, holder, own, resume)
    return ReplicaChoice(broker_id, best, own)


def cluster_gap(
    store: RemoteLogMetadataStore,
    tip: TopicIdPartition,
    gap: OffsetRange | None,
    *,
    broker_id: int,
    staleness_ms: int,
) -> OffsetRange | None:
    """What of ``gap`` (offsets the replica on ``broker_id`` dropped before they were tiered) no
    fresh replica of another broker still holds: None when one holds its first offset, else the
    gap up to the first offset another replica holds."""
    if gap is None:
        return None
    end = gap.end
    for other, o in fresh_replicas(store, tip, staleness_ms).items():
        if other == broker_id or o.log_end_offset <= gap.start:
            continue
        if o.local_log_start_offset <= gap.start:
            return None
        end = min(end, o.local_log_start_offset - 1)
    return gap if end == gap.end else OffsetRange(gap.start, end)


def tiering_gap_on(
    config: PlatformConfig, store: RemoteLogMetadataStore, view: TierView, broker_id: int | None
) -> OffsetRange | None:
    """The tiering gap of ``view`` (the replica on ``broker_id``), judged against the cluster on one
    broker of several (``cluster_gap``); on a single broker, the replica's own."""
    gap = view.tiering_gap()
    if gap is None or broker_id is None or not in_cluster(config):
        return gap
    return cluster_gap(store, view.tip, gap, broker_id=broker_id, staleness_ms=config.observation_staleness_ms)


def brokers_reporting(
    store: RemoteLogMetadataStore, tip: TopicIdPartition, staleness_ms: int
) -> dict[int, ReplicaObservation]:
    """The brokers whose fresh observation reports ``tip``'s topic id: while any does, the
    partition is on the cluster and its remote data is live."""
    return fresh_replicas(store, tip, staleness_ms)
