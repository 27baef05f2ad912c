"""Whether a partition's topic id was really deleted: the evidence partition removal acts on
(docs/kafka-rules.md section 7).

Kafka deletes a partition only on the controller's word, and so does removal: the topic id must be
absent from the cluster's metadata. With a ``kafka:`` section the cluster itself is asked
(Metadata), and its word counts only when its cluster id is the log dirs' (``live.identity``: a
cluster at a wrong address knows none of the topics); without one, the KRaft metadata image on
the broker's disk (``__cluster_metadata-0``) must hold a committed RemoveTopicRecord of it, and
belong to the cluster and node of the configured log dirs. Nothing on a replica's disk is that
word: an empty or unmounted log dir, a missing directory, a ``<topic>-<partition>.<uuid>-delete``
directory (Kafka renames so on a reassignment and at the end of a log-dir move too) all look like
a deletion and are not one. On a cluster (``brokers:``) a topic id another broker's fresh
observation reports is on the cluster too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tiering_core.errors import ClusterUnreachableError, TieringError
from tiering_core.kafka.cluster_metadata import (
    ClusterMetadataImage,
    TopicIdState,
    find_metadata_log_dir,
    read_cluster_metadata,
)
from tiering_core.kafka.log_dirs import common_identity, future_topic_ids
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.runs.errors import RemovalRefusedError

if TYPE_CHECKING:
    from tiering_core.config import PlatformConfig
    from tiering_core.context import TieringContext

FORCE = "nothing deleted; --force (force in the removal DAG) removes it anyway"


def broker_topic_ids(ctx: TieringContext, tp: TopicPartition) -> dict[str, str]:
    """Topic id -> partition directory, of ``tp`` in the broker's log dirs (from partition.metadata),
    also while the broker moves it between its log dirs (``-future``).

    A directory whose topic id cannot be read refuses the removal: the remote data may be its.
    A process that serves no broker of a cluster (a worker without a broker disk) has no log dir
    to read: every broker's evidence is then its fresh observations (``reported_topic_ids``), and
    the controller's word is asked all the same (and is none: without a log dir, neither the
    metadata image nor the cluster's id can be checked, ``live.identity``).
    """
    found: dict[str, str] = {}
    if ctx.config.serves_no_broker:
        return found
    try:
        logs = ctx.partitions()
    except TieringError as exc:
        raise RemovalRefusedError(
            f"{tp}: cannot tell whether the broker still holds it ({exc}); name the topic id to remove"
        ) from exc
    for partition_log in logs:
        if partition_log.topic_partition != tp:
            continue
        try:
            found[partition_log.topic_id] = str(partition_log.path)
        except TieringError as exc:
            raise RemovalRefusedError(
                f"{tp}: cannot tell which topic id the broker holds in {partition_log.path} ({exc}); "
                "name the topic id to remove"
            ) from exc
    for log_dir in ctx.config.log_dirs:  # a partition moving between log dirs is live (its -future dir)
        for topic_id, path in future_topic_ids(log_dir, tp).items():
            found.setdefault(topic_id, str(path))
    return found


def reported_topic_ids(ctx: TieringContext, tp: TopicPartition, topic_ids: Sequence[str]) -> dict[str, str]:
    """Of ``topic_ids``, those another broker of the cluster reports (a fresh observation of that
    topic id, ``tier.replica.brokers_reporting``): topic id -> which broker, for the message. This
    broker's own observations are left out: its log dirs were read directly (and the single-broker
    form has no other broker)."""
    from tiering_core.tier.replica import brokers_reporting

    own = ctx.config.broker_id
    found: dict[str, str] = {}
    if not ctx.config.brokers:
        return found
    now = ctx.metadata.database_now_ms()
    for topic_id in topic_ids:
        reporting = {
            b: o
            for b, o in brokers_reporting(
                ctx.metadata, TopicIdPartition(topic_id, tp), ctx.config.observation_staleness_ms
            ).items()
            if b != own
        }
        if reporting:
            found[topic_id] = ", ".join(
                f"broker {b} (seen {max(0, now - o.observed_ms) // 1000} s ago)" for b, o in sorted(reporting.items())
            )
    return found


def deletion_unproven(ctx: TieringContext, tp: TopicPartition, topic_ids: Sequence[str]) -> str | None:
    """Why the deletion of ``topic_ids`` is not the controller's word, or None when it is: with a
    ``kafka:`` section the cluster no longer reports them, without one the broker's KRaft metadata
    image holds a committed RemoveTopicRecord of each (``broker_metadata_image``)."""
    if ctx.cluster is not None:
        still_live = _cluster_still_reports(ctx, tp, topic_ids)
        return None if still_live is None else f"{still_live}; {FORCE}"
    try:
        image = broker_metadata_image(ctx.config)
    except TieringError as exc:
        ids = ", ".join(topic_ids)
        return f"{tp}: no word from the controller that topic id {ids} was deleted: {exc}; {FORCE}"
    for topic_id in topic_ids:
        reason = _image_unproven(image, tp, topic_id)
        if reason is not None:
            return f"{reason}; {FORCE}"
    return None


def broker_metadata_image(config: PlatformConfig) -> ClusterMetadataImage:
    """The KRaft metadata image on this broker's disk (its ``metadata.log.dir``), refused
    (``TieringError`` naming what is wrong) unless the configured log dirs and the metadata log
    dir are live Kafka log dirs of one node of one cluster (their ``meta.properties``)."""
    log_dirs = config.require_log_dirs()
    where = find_metadata_log_dir(log_dirs, config.metadata_log_dir, config.metadata_log_dir_key)
    common_identity([*log_dirs, where], "the log dirs and the metadata log dir")
    return read_cluster_metadata(where)


def _image_unproven(image: ClusterMetadataImage, tp: TopicPartition, topic_id: str) -> str | None:
    state = image.state_of(topic_id)
    if state is TopicIdState.DELETED:
        return None
    if state is TopicIdState.LIVE:
        return (
            f"{tp}: the cluster's metadata on this broker ({image.path}) still has topic id {topic_id} (topic "
            f"{image.topics[topic_id].name!r}): Kafka has not deleted it (a reassignment and a log-dir move also "
            "leave a -delete directory)"
        )
    if state is TopicIdState.DELETION_UNCOMMITTED:
        return (
            f"{tp}: the metadata log in {image.path} deletes topic id {topic_id} at offset "
            f"{image.removed[topic_id].offset}, but it is proven committed only below offset {image.committed_offset}: "
            "the broker's next snapshot (one every metadata.log.max.snapshot.interval.ms, an hour by default) "
            "or a new active controller proves it; a kafka: section asks the cluster itself"
        )
    return (
        f"{tp}: no word from the controller that topic id {topic_id} was deleted: the metadata log in {image.path} "
        f"(offsets {image.log_start_offset} to {image.end_offset - 1}) neither has it nor deletes it (deleted "
        "before the oldest record kept, metadata.max.retention.ms, or a metadata log of another cluster or out "
        "of date); a kafka: section asks the cluster itself"
    )


def _cluster_still_reports(ctx: TieringContext, tp: TopicPartition, topic_ids: Sequence[str]) -> str | None:
    """With a ``kafka:`` section, the cluster itself must no longer report the topic id; and it
    must be the cluster the log dirs belong to (``live.identity``): any other cluster does not know
    the topic either. A process that serves no broker has no log dir to compare with: refused."""
    from tiering_core.live.identity import foreign_cluster

    assert ctx.cluster is not None
    try:
        foreign = foreign_cluster(ctx.config, ctx.cluster)
        if foreign is not None:
            return f"{tp}: no word from the controller that topic id {', '.join(topic_ids)} was deleted: {foreign}"
        live = ctx.cluster.partition(tp)
    except ClusterUnreachableError as exc:
        return f"{tp}: cannot ask the cluster whether it still holds topic id {', '.join(topic_ids)} ({exc})"
    if live.metadata_error is not None:
        return (
            f"{tp}: cannot tell whether the cluster still holds topic id {', '.join(topic_ids)}: its Metadata "
            f"answered {live.metadata_error} for topic {tp.topic!r}, not that the topic is unknown"
        )
    if live.topic_id is not None and live.topic_id in topic_ids:
        return (
            f"{tp}: the cluster at {ctx.cluster.servers} still reports topic {tp.topic!r} with topic id "
            f"{live.topic_id}: Kafka has not deleted it (its directory moved, to a log dir or broker not in the config)"
        )
    return None
