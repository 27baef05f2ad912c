"""The cluster view (``tiering status --cluster``): every partition as the brokers last reported it,
built from the metadata store alone, so it reads no log dir and needs no broker id.

One row per partition the store knows (observed by a broker, or tiered): each broker's replica
(HW, LSO, leader epoch, local log start, age of its observation), the best fresh replica
(``tier.replica``'s rule), the copy lag measured on it (offsets below its LSO not yet tiered), the
recorded gaps, the local-retention risk, remote size and delete state. A broker counts as stale for
a partition when its observation of it is older than ``cluster.observation_staleness_ms``; a broker
of the config that has reported nothing fresh at all is stale everywhere (a broker no worker serves
shows up here, never as a wait).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.observations import best_replica_of, is_fresh
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.tier.offsets import recorded_gaps
from tiering_core.tier.status import copy_lag_offsets
from tiering_core.tier.view import load_remote_tier_view

if TYPE_CHECKING:
    from tiering_core.context import TieringContext
    from tiering_core.metadata.store import PartitionRecord
    from tiering_core.metadata.values import ReplicaObservation


def is_stale(observation: ReplicaObservation, now_ms: int, staleness_ms: int) -> bool:
    """An observation older than the staleness (database clock): its broker is stale for the partition."""
    return not is_fresh(observation.observed_ms, now_ms, staleness_ms)


def silent_brokers(brokers: Iterable[int], reporting: Collection[int]) -> set[int]:
    """The brokers of the config that reported nothing fresh anywhere (``reporting``: those that
    did): stale everywhere."""
    return {b for b in brokers if b not in reporting}


@dataclass(frozen=True)
class ReplicaState:
    """One broker's replica of a partition as its last observation says (``age_ms`` old)."""

    broker_id: int
    high_watermark: int | None
    last_stable_offset: int | None
    log_end_offset: int
    leader_epoch: int | None
    local_log_start_offset: int
    at_risk: bool
    age_ms: int
    stale: bool

    @classmethod
    def of(cls, o: ReplicaObservation, now_ms: int, staleness_ms: int) -> ReplicaState:
        return cls(
            o.broker_id,
            o.high_watermark,
            o.last_stable_offset,
            o.log_end_offset,
            o.leader_epoch,
            o.local_log_start_offset,
            o.at_risk,
            max(0, now_ms - o.observed_ms),
            is_stale(o, now_ms, staleness_ms),
        )


@dataclass
class ClusterPartitionStatus:
    """A partition across the cluster (module docstring); ``copy_lag_offsets`` is None without a
    fresh replica to measure it on."""

    topic: str
    partition: int
    topic_id: str
    replicas: list[ReplicaState] = field(default_factory=list)
    best_broker: int | None = None
    highest_copied_offset: int = -1
    copy_lag_offsets: int | None = None
    stale_brokers: list[int] = field(default_factory=list)
    gaps: list[list[int]] = field(default_factory=list)
    at_risk: bool = False
    remote_segments: int = 0
    remote_bytes: int = 0
    delete_state: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe, for ``status --cluster --json``."""
        return asdict(self)


def cluster_status(
    ctx: TieringContext, topic: str | None = None, partition: int | None = None
) -> list[ClusterPartitionStatus]:
    """The cluster view of every partition the store knows (optionally of one topic or partition)."""
    store, staleness = ctx.metadata, ctx.config.observation_staleness_ms
    seen = store.latest_observations(topic=topic)
    now = seen.db_now_ms
    by_tip: dict[TopicIdPartition, dict[int, ReplicaObservation]] = dict(seen.replicas)
    records: dict[TopicIdPartition, PartitionRecord] = {}
    for known in store.list_partitions():
        if known.dropped:
            continue
        tip = TopicIdPartition(known.topic_id, known.topic_partition)
        records[tip] = known
        by_tip.setdefault(tip, {})
    if partition is not None:
        by_tip = {t: r for t, r in by_tip.items() if t.partition == partition}
    if topic is not None:
        by_tip = {t: r for t, r in by_tip.items() if t.topic == topic}
    reporting = {
        b for replicas in seen.replicas.values() for b, o in replicas.items() if is_fresh(o.observed_ms, now, staleness)
    }
    silent = silent_brokers(ctx.config.brokers, reporting)
    finished = (RemoteLogSegmentState.COPY_SEGMENT_FINISHED,)
    rows: list[ClusterPartitionStatus] = []
    for tip, replicas in by_tip.items():
        states = [ReplicaState.of(o, now, staleness) for _, o in sorted(replicas.items())]
        best = best_replica_of(replicas.values(), now_ms=now, staleness_ms=staleness)
        copied = load_remote_tier_view(store, tip).highest_copied_offset
        lso = best.last_stable_offset if best is not None else None
        record = records.get(tip)
        segments, size = store.segment_totals(tip, finished)
        rows.append(
            ClusterPartitionStatus(
                topic=tip.topic,
                partition=tip.partition,
                topic_id=tip.topic_id,
                replicas=states,
                best_broker=best.broker_id if best is not None else None,
                highest_copied_offset=copied,
                copy_lag_offsets=copy_lag_offsets(lso, copied),
                stale_brokers=sorted({s.broker_id for s in states if s.stale} | silent),
                gaps=recorded_gaps(store, tip),
                at_risk=any(s.at_risk and not s.stale for s in states),
                remote_segments=segments,
                remote_bytes=size,
                delete_state=(
                    record.delete_state.value if record is not None and record.delete_state is not None else None
                ),
            )
        )
    return sorted(rows, key=lambda r: (r.topic, r.partition, r.topic_id))
