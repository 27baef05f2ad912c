"""A replica observation from a tier view: what a run on one broker saw of one partition.

The one place that turns a ``TierView`` (and the topic's config, for the local-retention verdict)
into the ``ReplicaObservation`` the metadata store records, and records a run's observations in
one batch. Copy, retention, status and the copy sensor's planning call ``record_views`` with the
broker id they run for; without one (None) nothing is recorded.

The observation's leader epoch is the tip of the replica's own leader-epoch cache (the broker's
file, not the lineage merged with the store's), the same as ``status`` shows. It also carries the
partition's figures as the run saw them: the copy lag (``TierView.copy_lag``), the delete lag
where the run computed it (``Figures``; None otherwise), the remote size (the run's own, or
for the whole batch from one aggregate query) and KIP-1257's percents of the retention limits
(``tier.retention_plan``). Once recorded, they are reported as gauges (``metrics.sink.emit``):
copy and delete lag, remote size and count, local-retention risk and headroom, the percents.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tiering_core.metadata.values import NO_BROKER, ReplicaObservation
from tiering_core.metrics import names
from tiering_core.metrics.sink import NullSink, current_sink, emit
from tiering_core.tier.retention_plan import retention_size_in_percent, size_in_percent

if TYPE_CHECKING:
    from tiering_core.config import TopicConfig
    from tiering_core.kafka.topic import TopicIdPartition
    from tiering_core.metadata.store import RemoteLogMetadataStore
    from tiering_core.tier.view import LocalRetentionRisk, TierView

#: What a run saw of one partition: its view, the topic's config, and the local-retention
#: verdict if the run already judged it (None: judged when recorded).
Observed = tuple["TierView", "TopicConfig", "LocalRetentionRisk | None"]


@dataclass(frozen=True)
class Figures:
    """What a run already computed of a partition beyond its view, as (segments, bytes): the delete
    lag (``tier.retention_plan.delete_lag``) and the remote size; None where it computed none."""

    delete_lag: tuple[int, int] | None = None
    remote: tuple[int, int] | None = None


def headroom_seconds(risk: LocalRetentionRisk) -> float | None:
    """Seconds before the broker's time retention may delete the oldest segment not yet tiered
    (negative once past due); None when nothing waits or no local time limit applies."""
    retention, age = risk.local_retention_ms, risk.oldest_uncopied_age_ms
    if retention is None or retention < 0 or age is None:
        return None
    return (retention - age) / 1000.0


def replica_observation(
    broker_id: int,
    view: TierView,
    topic: TopicConfig,
    *,
    risk: LocalRetentionRisk | None = None,
    figures: Figures | None = None,
    store: RemoteLogMetadataStore | None = None,
) -> ReplicaObservation:
    """The observation of ``view`` on ``broker_id`` (``risk``: the verdict already computed, if any;
    ``figures``: the delete lag and remote size the run computed). The retention percent needs the
    remote size and, once over ``retention.bytes``, the ``store`` (None there: not computed)."""
    verdict = view.local_retention_risk(topic) if risk is None else risk
    tip = view.broker_cache.latest_entry
    lag_segments, lag_bytes = view.copy_lag()
    delete_lag = figures.delete_lag if figures is not None else None
    remote = figures.remote if figures is not None else None
    retention_percent: int | None = None
    if remote is not None and store is not None:
        retention_percent = retention_size_in_percent(view, store, topic, remote[1])
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
        copy_lag_bytes=lag_bytes,
        copy_lag_segments=lag_segments,
        delete_lag_bytes=None if delete_lag is None else delete_lag[1],
        delete_lag_segments=None if delete_lag is None else delete_lag[0],
        remote_bytes=None if remote is None else remote[1],
        remote_segments=None if remote is None else remote[0],
        retention_size_percent=retention_percent,
        local_retention_size_percent=size_in_percent(verdict.local_bytes, verdict.local_retention_bytes),
    )


def record_views(
    store: RemoteLogMetadataStore,
    broker_id: int | None,
    views: Iterable[Observed],
    *,
    brokers: Collection[int] | None = None,
    figures: Mapping[TopicIdPartition, Figures] | None = None,
) -> int:
    """Record what a run on ``broker_id`` saw of its partitions, in one transaction, and report
    their gauges; returns how many were recorded. ``broker_id`` None: the run does not know its
    broker, nothing is recorded, only the gauges are reported (without a ``broker`` tag) where a
    sink takes them (otherwise the views are not even judged). ``brokers``: the broker ids the
    cluster has, if known (UnknownBrokerError for another). ``figures``: what the run computed per
    partition; remote sizes it did not compute are read for the whole batch in one query."""
    if broker_id is None and not reporting_gauges():
        return 0
    views = list(views)
    known = dict(figures or {})
    missing = [view.tip for view, _, _ in views if known.get(view.tip, Figures()).remote is None]
    if missing:
        totals = store.finished_totals(missing)
        for tip in missing:
            known[tip] = Figures(known.get(tip, Figures()).delete_lag, totals.get(tip, (0, 0)))
    observer = NO_BROKER if broker_id is None else broker_id  # not recorded when None
    observations = [
        replica_observation(observer, view, topic, risk=risk, figures=known.get(view.tip), store=store)
        for view, topic, risk in views
    ]
    if broker_id is not None:
        store.record_observations(observations, brokers=brokers)
    for o in observations:
        emit_gauges(o, broker_id)
    return 0 if broker_id is None else len(observations)


def reporting_gauges() -> bool:
    """A sink takes what runs report (inside a task): gauges are worth computing."""
    return not isinstance(current_sink(), NullSink)


def emit_gauges(o: ReplicaObservation, broker: int | None) -> None:
    """Report an observation's gauges (those it has) to the current sink, as ``broker``'s."""
    tp = o.topic_id_partition
    topic, partition = tp.topic, tp.partition
    for spec, value in (
        (names.REMOTE_COPY_LAG_BYTES, o.copy_lag_bytes),
        (names.REMOTE_COPY_LAG_SEGMENTS, o.copy_lag_segments),
        (names.REMOTE_DELETE_LAG_BYTES, o.delete_lag_bytes),
        (names.REMOTE_DELETE_LAG_SEGMENTS, o.delete_lag_segments),
        (names.REMOTE_LOG_SIZE_BYTES, o.remote_bytes),
        (names.LOCAL_RETENTION_HEADROOM_SECONDS, o.headroom_seconds),
        (names.RETENTION_SIZE_IN_PERCENT, o.retention_size_percent),
        (names.LOCAL_RETENTION_SIZE_IN_PERCENT, o.local_retention_size_percent),
    ):
        if value is not None:
            emit(spec, value, topic, partition, broker)
    emit(names.LOCAL_RETENTION_RISK, 1 if o.at_risk else 0, topic, partition, broker)
    if o.remote_segments is not None:
        emit(names.REMOTE_LOG_METADATA_COUNT, o.remote_segments, topic, partition, broker)
