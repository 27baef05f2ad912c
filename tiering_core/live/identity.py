"""Whose word the cluster at ``kafka.bootstrap_servers`` is: a cluster's word (that a topic was
deleted, a partition's high watermark) counts only from the cluster the log dirs belong to.

Any Kafka cluster answers Metadata and ListOffsets. One at a wrong address (a staging cluster,
another deployment's, a typo) knows none of this cluster's topics, and read as this cluster's word
it says they were all deleted: removal would delete live remote data. So the cluster id it answers
(DescribeCluster) must be the ``cluster.id`` in the ``meta.properties`` of every configured log
dir, and of ``metadata_log_dir`` when one is named.

A process that serves no broker of a cluster (``brokers:`` with none chosen: the removal DAG's
default-queue worker) has no log dir to compare with, and the metadata store records no cluster
id: nothing tells it which cluster is this one, so the cluster's word is refused there. Removal
and DeleteRecords then run for a broker (``--broker ID`` or ``TIERING_BROKER_ID``), or are forced.
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
    if config.serves_no_broker:
        brokers = ", ".join(map(str, sorted(config.brokers)))
        return (
            f"this process serves no broker (brokers {brokers} are configured, none chosen): it has no log dir "
            f"whose cluster id the cluster at {servers} can be checked against, and a cluster's word counts only "
            f"from the cluster the log dirs belong to; run it for a broker (--broker ID or {BROKER_ID_ENV})"
        )
    named = [] if config.metadata_log_dir is None else [config.metadata_log_dir]
    what = "the log dirs and the metadata log dir" if named else "the log dirs"
    try:
        own = common_identity([*config.log_dirs, *named], what)
    except TieringError as exc:
        return f"cannot tell which cluster the log dirs belong to ({exc}): the cluster at {servers} cannot be checked"
    if not own.cluster_id:
        return (
            f"the log dirs' {META_PROPERTIES} ({own.path}) names no cluster.id: the cluster at {servers} "
            "cannot be checked"
        )
    try:
        live = cluster.cluster_id()
    except ClusterUnreachableError:
        raise
    except TieringError as exc:
        return f"cannot tell which cluster answers at {servers} ({exc})"
    if live != own.cluster_id:
        return (
            f"the cluster at {servers} has cluster id {live}, but the log dirs belong to cluster "
            f"{own.cluster_id}: its word is not this cluster's"
        )
    return None
