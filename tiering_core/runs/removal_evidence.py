"""Whether a partition's topic id was really deleted: the evidence partition removal acts on.

Absence is no proof: an empty or unmounted log dir, a log dir missing from the config, a
partition moved to another broker or (by AlterReplicaLogDirs) to another log dir all look like a
deleted partition. A topic id counts as deleted only when every configured log dir is a live
Kafka log dir of one broker (its ``meta.properties`` names it), the partition's own trace says so
(the broker's ``<topic>-<partition>.<uuid>-delete`` directory holding that topic id), no
``-future`` directory of it is in the log dirs, and, with a ``kafka:`` section, the cluster no
longer reports it. On a cluster (``brokers:``) a topic id another broker's fresh observation
reports is on the cluster too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tiering_core.errors import ClusterUnreachableError, TieringError
from tiering_core.kafka.log_dirs import (
    DELETE_DIR_SUFFIX,
    LogDirError,
    deleted_topic_ids,
    future_topic_ids,
    read_log_dir_identity,
)
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.runs.errors import RemovalRefusedError

if TYPE_CHECKING:
    from tiering_core.context import TieringContext


def broker_topic_ids(ctx: TieringContext, tp: TopicPartition) -> dict[str, str]:
    """Topic id -> partition directory, of ``tp`` in the broker's log dirs (from partition.metadata),
    also while the broker moves it between its log dirs (``-future``).

    A directory whose topic id cannot be read refuses the removal: the remote data may be its.
    """
    found: dict[str, str] = {}
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
    """Why the deletion of ``topic_ids`` is not proven, or None: every configured log dir must be
    a live Kafka log dir of one broker, and each topic id must have left its ``-delete`` trace."""
    force = "nothing deleted; --force (force in the removal DAG) removes it anyway"
    still_live = _cluster_still_reports(ctx, tp, topic_ids)
    if still_live is not None:
        return f"{still_live}; {force}"
    identities = []
    for log_dir in ctx.config.log_dirs:
        try:
            identities.append(read_log_dir_identity(log_dir))
        except LogDirError as exc:
            return (
                f"{tp}: no positive evidence that it was deleted: {exc}, so a partition missing from it "
                f"proves nothing; {force}"
            )
    if len({(i.node_id, i.cluster_id or "") for i in identities}) > 1:
        which = ", ".join(f"{i.path} (node {i.node_id}, cluster {i.cluster_id})" for i in identities)
        return f"{tp}: the configured log dirs belong to more than one broker ({which}); {force}"
    traces: dict[str, Path] = {}
    for log_dir in ctx.config.log_dirs:
        traces.update(deleted_topic_ids(log_dir, tp))
    missing = [t for t in topic_ids if t not in traces]
    if missing:
        return (
            f"{tp}: no positive evidence that topic id {', '.join(missing)} was deleted: it is not in the "
            f"log dirs, but no {tp}.<uuid>{DELETE_DIR_SUFFIX} directory there holds it (the broker renames "
            "a deleted partition's directory so before removing it; a partition moved to another broker, "
            f"a log dir missing from the config, or a trace already removed leaves none); {force}"
        )
    return None


def _cluster_still_reports(ctx: TieringContext, tp: TopicPartition, topic_ids: Sequence[str]) -> str | None:
    """With a ``kafka:`` section, the cluster itself must no longer report the topic id: a partition
    moved to a log dir or broker not in the config leaves the same ``-delete`` trace a deletion does."""
    if ctx.cluster is None:
        return None
    try:
        live = ctx.cluster.partition(tp)
    except ClusterUnreachableError as exc:
        return f"{tp}: cannot ask the cluster whether it still holds topic id {', '.join(topic_ids)} ({exc})"
    if live.topic_id is not None and live.topic_id in topic_ids:
        return (
            f"{tp}: the cluster at {ctx.cluster.servers} still reports topic {tp.topic!r} with topic id "
            f"{live.topic_id}: its directory moved (to a log dir or broker not in the config), it was not deleted"
        )
    return None
