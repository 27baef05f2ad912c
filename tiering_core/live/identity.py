"""Whose word the cluster at ``kafka.bootstrap_servers`` is: a cluster's word (that a topic was
deleted, a partition's high watermark) counts only from the cluster the log dirs belong to.

Any Kafka cluster answers Metadata and ListOffsets. One at a wrong address (a staging cluster,
another deployment's, a typo) knows none of this cluster's topics, and read as this cluster's word
it says they were all deleted: removal would delete live remote data. So the cluster id it answers
(DescribeCluster) must be the ``cluster.id`` in the ``meta.properties`` of every configured log
dir, and of ``metadata_log_dir`` when one is named.

``kafka.cluster_id``, when set, is the operator's word for that id: the cluster must answer with
it, and so must the log dirs where they are read. A process that serves no broker of a cluster
(``brokers:`` with none chosen: the removal DAG's default-queue worker) has no log dir to compare
with: there ``kafka.cluster_id`` alone says which cluster is this one, and without it the
cluster's word is refused (removal and DeleteRecords then run for a broker, ``--broker ID`` or
``TIERING_BROKER_ID``, or are forced).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tiering_core.config import BROKER_ID_ENV
from tiering_core.errors import ClusterUnreachableError, TieringError
from tiering_core.kafka.log_dirs import META_PROPERTIES, common_identity

if TYPE_CHECKING:
    from tiering_core.config import PlatformConfig
    from tiering_core.live.source import ClusterSource


def foreign_cluster(config: PlatformConfig, cluster: ClusterSource) -> str | None:
    """Why the word of ``cluster`` is not the word of the cluster the log dirs belong to, or None
    when its cluster id is theirs (module docstring). The log dirs are read first: a cluster is
    asked only when there is an id to compare with. ClusterUnreachableError when it does not answer."""
    servers = cluster.servers
    configured = config.kafka.cluster_id if config.kafka is not None else None
    if config.serves_no_broker:
        if configured is None:
            brokers = ", ".join(map(str, sorted(config.brokers)))
            return (
                f"this process serves no broker (brokers {brokers} are configured, none chosen): it has no log "
                f"dir whose cluster id the cluster at {servers} can be checked against, and a cluster's word counts "
                f"only from the cluster the log dirs belong to; set kafka.cluster_id, or run it for a broker "
                f"(--broker ID or {BROKER_ID_ENV})"
            )
        expected, whose = configured, "kafka.cluster_id is"
    else:
        named = [] if config.metadata_log_dir is None else [config.metadata_log_dir]
        what = "the log dirs and the metadata log dir" if named else "the log dirs"
        try:
            own = common_identity([*config.log_dirs, *named], what)
        except TieringError as exc:
            return (
                f"cannot tell which cluster the log dirs belong to ({exc}): the cluster at {servers} cannot be checked"
            )
        if not own.cluster_id:
            return (
                f"the log dirs' {META_PROPERTIES} ({own.path}) names no cluster.id: the cluster at {servers} "
                "cannot be checked"
            )
        if configured is not None and configured != own.cluster_id:
            return f"kafka.cluster_id is {configured}, but the log dirs belong to cluster {own.cluster_id}"
        expected, whose = own.cluster_id, "the log dirs belong to cluster"
    try:
        live = cluster.cluster_id()
    except ClusterUnreachableError:
        raise
    except TieringError as exc:
        return f"cannot tell which cluster answers at {servers} ({exc})"
    if live != expected:
        return f"the cluster at {servers} has cluster id {live}, but {whose} {expected}: its word is not this cluster's"
    return None
