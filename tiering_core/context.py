"""One place that opens what a run needs: config, metadata store, remote storage, log dirs, and,
with a ``kafka:`` section, the cluster (one admin client per context, closed with it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from tiering_core.config import PlatformConfig, TopicConfig
from tiering_core.errors import NoRemoteDataError, PartitionNotInLogDirsError, TieringError
from tiering_core.kafka.partition_log import CLUSTER_METADATA_TOPIC, PartitionLog, discover_partitions
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition

if TYPE_CHECKING:
    from tiering_core.live.partition import LivePartition
    from tiering_core.live.source import ClusterSource
    from tiering_core.metadata.store import RemoteLogMetadataStore
    from tiering_core.storage.quota import StorageQuotas
    from tiering_core.storage.remote import RemoteStorage


@dataclass(frozen=True)
class AwsCredentials:
    """Credentials and endpoint from outside the config file (e.g. an Airflow connection).

    Values given here override the config's ``remote`` section; ``None`` keeps the config's
    value or the standard AWS credential chain.
    """

    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    endpoint_url: str | None = None
    region: str | None = None

    def __repr__(self) -> str:  # never print secrets
        return f"AwsCredentials(endpoint_url={self.endpoint_url!r}, region={self.region!r}, access_key_id=***)"


class TieringContext:
    """The config plus the open metadata store and remote storage of one process; the storage
    takes from this process's broker's upload and fetch quotas, if capped (``storage.quota``).

    With a ``kafka:`` section the cluster is a source too (``tiering_core.live``): the partitions a
    command selects are asked about in one round of admin requests, on first need.
    """

    def __init__(
        self,
        config: PlatformConfig,
        metadata: RemoteLogMetadataStore,
        storage: RemoteStorage,
        cluster: ClusterSource | None = None,
    ) -> None:
        self.config = config
        self.metadata = metadata
        self.storage = storage
        if storage.write_check is None:  # the prefix must be this store's before anything is written
            from tiering_core.engine.binding import PrefixBinding

            storage.write_check = PrefixBinding(metadata, storage)
        caps = config.quota_config
        self._quotas: StorageQuotas | None = None
        if caps.copy_bytes_per_second is not None or caps.fetch_bytes_per_second is not None:
            from tiering_core.metadata.quota_holders import open_quotas
            from tiering_core.metadata.values import NO_BROKER

            broker = NO_BROKER if config.broker_id is None else config.broker_id
            self._quotas = storage.quotas = open_quotas(metadata, broker, caps)
        if cluster is None and config.kafka is not None:
            from tiering_core.live.source import ClusterSource

            cluster = ClusterSource(config.kafka)
        self.cluster = cluster

    @classmethod
    def open(cls, config: PlatformConfig, credentials: AwsCredentials | None = None) -> TieringContext:
        from tiering_core.metadata.store import RemoteLogMetadataStore
        from tiering_core.storage.factory import create_remote_storage

        remote = config.remote
        secrets: dict[str, str] = {}
        if credentials is not None:
            remote = replace(
                remote,
                endpoint_url=credentials.endpoint_url or remote.endpoint_url,
                region=credentials.region or remote.region,
            )
            if credentials.access_key_id:
                secrets["aws_access_key_id"] = credentials.access_key_id
            if credentials.secret_access_key:
                secrets["aws_secret_access_key"] = credentials.secret_access_key
            if credentials.session_token:
                secrets["aws_session_token"] = credentials.session_token
            config = replace(config, remote=remote)
        metadata = RemoteLogMetadataStore(
            config.metadata.url, lease_ms=config.metadata.lease_ms, timeouts=config.metadata.timeouts
        )
        try:
            storage = create_remote_storage(remote, session=None, **secrets)
        except Exception:
            metadata.close()
            raise
        return cls(config, metadata, storage)

    def close(self) -> None:
        try:
            if self._quotas is not None:
                from tiering_core.metadata.quota_holders import close_quotas

                quotas, self._quotas = self._quotas, None
                close_quotas(quotas)
            if self.cluster is not None:
                self.cluster.close()
        finally:
            try:
                self.storage.close()
            finally:
                self.metadata.close()

    def __enter__(self) -> TieringContext:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def partitions(self, topic: str | None = None, partition: int | None = None) -> list[PartitionLog]:
        """The broker partitions in the log dirs, filtered by the ``--topic/--partition`` selectors."""
        logs = select_partitions(self.config, topic, partition)
        if self.cluster is not None:
            self.cluster.want(log.topic_partition for log in logs)
        return logs

    def tiered_partitions(self, topic: str | None = None, partition: int | None = None) -> list[TopicIdPartition]:
        """The partitions of the ``--topic/--partition`` selection the metadata store holds live
        remote data of, whichever broker copied them (every topic id of each), by topic, partition
        and topic id: what a process that serves no broker selects, reading no log dir. A topic or
        partition named that the store holds none of is ``NoRemoteDataError`` naming it."""
        if partition is not None and topic is None:
            raise TieringError("--partition needs --topic")
        found = sorted(
            (
                r.topic_id_partition
                for r in self.metadata.list_partitions()
                if r.live and topic in (None, r.topic) and partition in (None, r.partition)
            ),
            key=lambda tip: (tip.topic, tip.partition, tip.topic_id),
        )
        if not found and topic is not None:
            raise NoRemoteDataError(topic if partition is None else f"{topic}-{partition}")
        return found

    def selected_partitions(
        self, topic: str | None = None, partition: int | None = None
    ) -> Sequence[TopicPartition | TopicIdPartition]:
        """The selection of a run that needs the metadata store and the remote tier, not the
        broker's disk: on a broker, its partitions in the log dirs; where the process serves no
        broker (a cluster's default-queue worker), those the store holds (``tiered_partitions``)."""
        if self.config.serves_no_broker:
            return self.tiered_partitions(topic, partition)
        return [log.topic_partition for log in self.partitions(topic, partition)]

    def selected_partition(self, topic: str, partition: int) -> TopicPartition | TopicIdPartition:
        """One named partition as ``selected_partitions`` takes it. Held by the store under several
        topic ids (a topic made again, the old one's data not removed yet) it is an error naming
        them: only the broker that holds the partition knows which one is current."""
        found = self.selected_partitions(topic, partition)
        if len(found) > 1:
            raise TieringError(
                f"{topic}-{partition}: the metadata store holds remote data of {len(found)} topic ids "
                f"({', '.join(str(tp) for tp in found)}); run this on the broker that holds the partition"
            )
        return found[0]

    def partition_log(self, tp: TopicPartition) -> PartitionLog:
        """One partition's directory, looked up by name rather than by listing the log dirs."""
        log = find_partition(self.config, tp)
        if self.cluster is not None:
            self.cluster.want([tp])
        return log

    @property
    def offsets_source(self) -> str:
        """Where offsets come from: ``broker`` (a ``kafka:`` section) or ``files``."""
        return "files" if self.cluster is None else "broker"

    def live_partition(self, log: PartitionLog) -> LivePartition | None:
        """The cluster's view of a partition; None without a ``kafka:`` section."""
        return None if self.cluster is None else self.cluster.partition(log.topic_partition)

    def topic_config(self, topic: str) -> TopicConfig:
        """The topic's tiering config: with a ``kafka:`` section, the cluster's topic configs in it."""
        if self.cluster is None:
            return self.config.topic_config(topic)
        return self.config.topic_config(topic, self.cluster.topic_config(topic))


def find_partition(config: PlatformConfig, tp: TopicPartition) -> PartitionLog:
    """``<topic>-<n>`` in the first log dir that holds it, as ``discover_partitions`` would find it
    (a symbolic link is not a partition directory, KRaft's metadata log is never one of ours);
    absent, an error naming the partition."""
    log_dirs = _checked_log_dirs(config)
    if tp.topic != CLUSTER_METADATA_TOPIC:
        for log_dir in log_dirs:
            entry = log_dir / f"{tp.topic}-{tp.partition}"  # a TopicPartition's name is a valid one
            if entry.is_dir() and not entry.is_symlink():
                return PartitionLog(entry, log_dir)
    raise PartitionNotInLogDirsError(tp)


def _checked_log_dirs(config: PlatformConfig) -> tuple[Path, ...]:
    log_dirs = config.require_log_dirs()
    for log_dir in log_dirs:
        if not log_dir.is_dir():
            raise TieringError(f"log dir {log_dir} does not exist or is not a directory")
    return log_dirs


def select_partitions(
    config: PlatformConfig, topic: str | None = None, partition: int | None = None
) -> list[PartitionLog]:
    """Partitions under ``config.log_dirs``; a named topic or partition that is absent is an error,
    and so is reading partitions where several brokers are configured and none was chosen."""
    if partition is not None and topic is None:
        raise TieringError("--partition needs --topic")
    logs = sorted(discover_partitions(list(_checked_log_dirs(config))), key=lambda log: log.topic_partition)
    if topic is not None:
        logs = [log for log in logs if log.topic_partition.topic == topic]
        if not logs:
            raise TieringError(
                f"topic {topic!r} has no partition in the log dirs {', '.join(map(str, config.log_dirs))}"
            )
    if partition is not None:
        logs = [log for log in logs if log.topic_partition.partition == partition]
        if not logs:
            raise TieringError(f"partition {topic}-{partition} is not in the log dirs")
    return logs
