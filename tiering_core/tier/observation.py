"""A replica observation from a tier view: what a run on one broker saw of one partition.

The one place that turns a ``TierView`` (and the topic's config, for the local-retention verdict)
into the ``ReplicaObservation`` the metadata store records, and records a run's observations in
one batch. Copy, retention, status and the copy sensor's planning call ``record_views`` with the
broker id they run for; without one (None) nothing is recorded.

The observation's leader epoch is the tip of the replica's own leader-epoch cache (the broker's
file, not the lineage merged with the store's), the same as ``status`` shows.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from tiering_core.metadata.values import ReplicaObservation

if TYPE_CHECKING:
    from tiering_core.config import TopicConfig
    from tiering_core.metadata.store import RemoteLogMetadataStore
    from tiering_core.tier.view import LocalRetentionRisk, TierView

#: What a run saw of one partition: its view, the topic's config, and the local-retention
#: verdict if the run already judged it (None: judged when recorded).
Observed = tuple["TierView", "TopicConfig", "LocalRetentionRisk | None"]


def headroom_seconds(risk: LocalRetentionRisk) -> float | None:
    """Seconds before the broker's time retention may delete the oldest segment not yet tiered
    (negative once past due); None when nothing waits or no local time limit applies."""
    retention, age = risk.local_retention_ms, risk.oldest_uncopied_age_ms
    if retention is None or retention < 0 or age is None:
        return None
    return (retention - age) / 1000.0


def replica_observation(
    broker_id: int, view: TierView, topic: TopicConfig, *, risk: LocalRetentionRisk | None = None
) -> ReplicaObservation:
    """The observation of ``view`` on ``broker_id`` (``risk``: the verdict already computed, if any)."""
    verdict = view.local_retention_risk(topic) if risk is None else risk
    tip = view.broker_cache.latest_entry
    return ReplicaObservation(
        broker_id=broker_id,
        topic_id_partition=view.tip,
        high_watermark=view.high_watermark,
        last_stable_offset=view.last_stable_offset,
        log_end_offset=view.log_end_offset,
        local_log_start_offset=view.local_log_start_offset,
        local_bytes=verdict.local_bytes,
        leader_epoch=None if tip is None else tip.epoch,
        leader_epoch_start_offset=None if tip is None else tip.start_offset,
        at_risk=verdict.at_risk,
        headroom_seconds=headroom_seconds(verdict),
    )


def record_views(
    store: RemoteLogMetadataStore,
    broker_id: int | None,
    views: Iterable[Observed],
    *,
    brokers: Collection[int] | None = None,
) -> int:
    """Record what a run on ``broker_id`` saw of its partitions, in one transaction; returns how
    many. ``broker_id`` None: the run does not know its broker, nothing is recorded (the views are
    not even judged). ``brokers``: the broker ids the cluster has, if known (UnknownBrokerError
    for another)."""
    if broker_id is None:
        return 0
    observations = [replica_observation(broker_id, view, topic, risk=risk) for view, topic, risk in views]
    store.record_observations(observations, brokers=brokers)
    return len(observations)
