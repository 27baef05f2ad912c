"""The admin-backed source: one round of admin requests for every partition a run covers.

A round is one Metadata request (topic ids, partitions, leaders), one DescribeConfigs for the
topics (the configs Kafka owns, every source, so broker defaults are seen too) and three
ListOffsets requests per leader: EARLIEST (log start offset), LATEST under read_uncommitted
(high watermark) and LATEST under read_committed (last stable offset). Partitions are asked for
together, never one request per partition; a partition the cluster refuses (no leader, unknown) is
asked for again alone so that it does not hide the others.

kafka-python is imported here only, when the first round runs, and the SASL password is read from
the environment only then. A cluster that cannot be asked (it does not answer, kafka-python is not
installed, the password's variable is not set) is a :class:`ClusterUnreachableError`: a run with a
``kafka:`` section never falls back to the files.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from tiering_core.config import BROKER_OWNED_TOPIC_KEYS, BrokerTopicConfig, KafkaConfig
from tiering_core.errors import ClusterUnreachableError, TieringError, one_line
from tiering_core.kafka.checkpoints import uuid_to_topic_id
from tiering_core.kafka.topic import TopicPartition
from tiering_core.live.partition import LiveOffsets, LivePartition, unknown_partition

log = logging.getLogger(__name__)

#: Kafka's config source of a value set on the topic itself.
TOPIC_LEVEL_SOURCE = "DYNAMIC_TOPIC_CONFIG"
#: Kafka's error code for a topic the cluster does not have (UnknownTopicOrPartitionException).
UNKNOWN_TOPIC_OR_PARTITION = 3


class _MaskPassword(logging.Filter):
    """kafka-python logs at DEBUG what it is configured with and what it sends, the SASL password
    included: the admin client's settings, and the SASL handshake as a request and as raw bytes.
    Every record of its loggers keeps its place in the log with each password masked."""

    def __init__(self) -> None:
        super().__init__()
        self._forms: set[str] = set()

    def add(self, password: str) -> None:
        """Mask ``password`` from now on, as written and as a ``bytes`` repr shows it."""
        self._forms.update({password, repr(password.encode())[2:-1]} - {""})

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args  # a lone dict argument is the record's args itself (logging's own rule)
        if isinstance(args, Mapping) and "sasl_plain_password" in args:
            record.args = {**args, "sasl_plain_password": "***"}
        elif isinstance(args, tuple) and args and isinstance(args[0], Mapping) and "sasl_plain_password" in args[0]:
            record.args = ({**args[0], "sasl_plain_password": "***"}, *args[1:])
        if self._forms:
            try:
                text = masked = record.getMessage()
            except (TypeError, ValueError):  # a malformed record: logging reports it where it is emitted
                return True
            for form in self._forms:
                masked = masked.replace(form, "***")
            if masked != text:
                record.msg, record.args = masked, None
        return True

    def attach(self) -> None:
        """On every logger of kafka-python (a logger's filter does not see its children's records)."""
        names = [n for n in logging.Logger.manager.loggerDict if n == "kafka" or n.startswith("kafka.")]
        for name in names:
            logger = logging.getLogger(name)
            if self not in logger.filters:
                logger.addFilter(self)


_MASK = _MaskPassword()


class ClusterSource:
    """One admin client for a :class:`~tiering_core.context.TieringContext` (closed with it).

    ``want`` names the partitions a run covers; the first ``partition`` or ``topic_config`` asks
    the cluster about all of them at once and keeps the answers for the context's life.
    """

    def __init__(self, config: KafkaConfig) -> None:
        self.config = config
        self._admin: Any = None
        self._wanted: set[TopicPartition] = set()
        self._partitions: dict[TopicPartition, LivePartition] = {}
        self._topics: dict[str, BrokerTopicConfig] = {}
        self._failure: ClusterUnreachableError | None = None
        self._cluster_id: str | None = None

    @property
    def servers(self) -> str:
        return ",".join(self.config.bootstrap_servers)

    def want(self, tps: Iterable[TopicPartition]) -> None:
        self._wanted.update(tps)

    def partition(self, tp: TopicPartition) -> LivePartition:
        if tp not in self._partitions:
            self._round({tp})
        return self._partitions[tp]

    def topic_config(self, topic: str) -> BrokerTopicConfig:
        if topic not in self._topics:
            self._round({tp for tp in self._wanted if tp.topic == topic}, topics={topic})
        return self._topics[topic]

    def cluster_id(self) -> str:
        """The cluster id of the cluster that answers (DescribeCluster), asked once per context: the
        word of a cluster counts only when this is the log dirs' ``cluster.id`` (``live.identity``).
        Not answering is ClusterUnreachableError; refusing, or answering no cluster id, a TieringError."""
        if self._cluster_id is None:
            admin = self._client()
            from kafka.errors import BrokerResponseError, KafkaError

            try:
                described = admin.describe_cluster()
            except BrokerResponseError as exc:
                why = one_line(exc)
                raise TieringError(f"kafka: the cluster at {self.servers} refused DescribeCluster: {why}") from None
            except (KafkaError, OSError) as exc:
                raise self._unreachable(exc) from None
            cluster_id = described.get("cluster_id")
            if not cluster_id:
                raise TieringError(f"kafka: the cluster at {self.servers} answered DescribeCluster with no cluster id")
            self._cluster_id = str(cluster_id)
        return self._cluster_id

    def close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            try:
                admin.close()
            except Exception as exc:  # closing must not hide the run's own outcome
                log.warning("kafka: closing the admin client failed: %s", one_line(exc))

    def delete_records(self, tp: TopicPartition, before_offset: int) -> int:
        """Send a DeleteRecords for ``tp`` to its leader; returns the log start offset it answers.

        The cluster refusing it (an offset beyond its high watermark, no authorization, an unknown
        partition) is a TieringError naming Kafka's error; not answering, ClusterUnreachableError."""
        admin = self._client()
        from kafka import TopicPartition as KafkaTopicPartition
        from kafka.errors import BrokerResponseError, KafkaError

        key = KafkaTopicPartition(tp.topic, tp.partition)
        try:
            answer = admin.delete_records({key: before_offset}, timeout_ms=self.config.request_timeout_ms)
        except BrokerResponseError as exc:
            why = one_line(exc)
            raise TieringError(f"{tp}: the cluster refused a DeleteRecords to {before_offset}: {why}") from None
        except (KafkaError, OSError) as exc:
            raise ClusterUnreachableError(
                f"kafka: the cluster at {self.servers} did not answer the DeleteRecords of {tp} to {before_offset} "
                f"({type(exc).__name__}: {one_line(exc)})"
            ) from None
        return int(answer[key]["low_watermark"])

    # --- one round ----------------------------------------------------------------------------

    def _fail(self, message: str) -> ClusterUnreachableError:
        """The run's one-line failure, kept: every later question fails the same way at once."""
        self._failure = ClusterUnreachableError(
            f"{message}; status, copy and retention do not fall back to the files while the config has a kafka section"
        )
        return self._failure

    def _unreachable(self, exc: BaseException) -> ClusterUnreachableError:
        return self._fail(f"kafka: the cluster at {self.servers} did not answer ({client_failure(exc)})")

    def _client(self) -> Any:
        """The admin client, made on first need: the SASL password is read from the environment
        only now, and a missing password, a missing kafka-python or a cluster that does not answer
        is the run's one-line error (never a traceback, never the password)."""
        if self._failure is not None:
            raise self._failure
        if self._admin is None:
            settings = self._client_settings()
            try:
                from kafka.admin import KafkaAdminClient

                _MASK.attach()  # before the client connects: the handshake is logged as it is sent
                self._admin = KafkaAdminClient(**settings)
            except ImportError as exc:
                raise self._fail(
                    f"kafka: the cluster at {self.servers} cannot be asked: kafka-python is not installed "
                    f"({one_line(exc)}); install the project with its kafka extra "
                    "(pip install 'kafka-tiering[kafka]')"
                ) from None
            except Exception as exc:
                raise self._unreachable(exc) from None
        return self._admin

    def _client_settings(self) -> dict[str, Any]:
        try:
            return client_settings(self.config)
        except ClusterUnreachableError as exc:
            raise self._fail(str(exc)) from None

    def _round(self, tps: set[TopicPartition], topics: set[str] | None = None) -> None:
        """Ask for ``tps``, every wanted partition not yet answered, and their topics' configs."""
        pending = (tps | self._wanted) - set(self._partitions)
        topic_names = sorted({tp.topic for tp in pending} | (topics or set()))
        admin = self._client()
        from kafka.errors import KafkaError

        try:
            described = {t["name"]: t for t in admin.describe_topics(topic_names)}
            known = [name for name in topic_names if _topic_id(described.get(name)) is not None]
            self._topics.update(self._configs(admin, known))
            for name in topic_names:
                self._topics.setdefault(name, BrokerTopicConfig())
            leaders: dict[TopicPartition, tuple[str, int]] = {}
            for tp in pending:
                topic = described.get(tp.topic)
                error = _metadata_error(topic)
                topic_id = _topic_id(topic)
                leader = _leader(topic, tp.partition)
                if error is not None:
                    why = f"{tp}: the cluster answered {error} for topic {tp.topic!r}: whether it exists is unknown"
                    self._partitions[tp] = LivePartition(tp, None, None, why, metadata_error=error)
                elif topic_id is None or leader is None:
                    self._partitions[tp] = unknown_partition(tp, topic_id)
                elif leader < 0:
                    self._partitions[tp] = LivePartition(tp, topic_id, None, f"{tp}: the partition has no leader now")
                else:
                    leaders[tp] = (topic_id, leader)
            for tp, answer in self._offsets(admin, list(leaders)).items():
                topic_id, leader = leaders[tp]
                if isinstance(answer, LiveOffsets):
                    self._partitions[tp] = LivePartition(tp, topic_id, answer, leader_id=leader)
                else:
                    why = f"{tp}: ListOffsets failed: {answer}"
                    self._partitions[tp] = LivePartition(tp, topic_id, None, why, leader_id=leader)
        except (KafkaError, OSError) as exc:
            raise self._unreachable(exc) from None

    def _configs(self, admin: Any, topics: list[str]) -> dict[str, BrokerTopicConfig]:
        if not topics:
            return {}
        from kafka.admin import ConfigResource, ConfigResourceType

        wanted = dict.fromkeys(BROKER_OWNED_TOPIC_KEYS)
        answer = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, wanted) for topic in topics], config_filter="all"
        ).get("topic", {})
        return {topic: broker_topic_config(answer.get(topic) or {}) for topic in topics}

    def _offsets(self, admin: Any, tps: list[TopicPartition]) -> dict[TopicPartition, LiveOffsets | str]:
        """The three ListOffsets answers of ``tps``, batched; a refused batch is asked again one by one."""
        if not tps:
            return {}
        from kafka.errors import BrokerResponseError

        try:
            return dict(zip(tps, self._list_offsets(admin, tps), strict=True))
        except BrokerResponseError as exc:
            if len(tps) == 1:
                return {tps[0]: one_line(exc)}
        out: dict[TopicPartition, LiveOffsets | str] = {}
        for tp in tps:
            out.update(self._offsets(admin, [tp]))
        return out

    def _list_offsets(self, admin: Any, tps: list[TopicPartition]) -> list[LiveOffsets]:
        from kafka import TopicPartition as KafkaTopicPartition
        from kafka.admin import OffsetSpec

        timeout = self.config.request_timeout_ms

        def ask(spec: Any, isolation: str) -> dict[tuple[str, int], int]:
            specs = {KafkaTopicPartition(tp.topic, tp.partition): spec for tp in tps}
            answer = admin.list_partition_offsets(specs, isolation_level=isolation, timeout_ms=timeout)
            return {(k.topic, k.partition): int(v.offset) for k, v in answer.items()}

        earliest = ask(OffsetSpec.EARLIEST, "read_uncommitted")
        latest = ask(OffsetSpec.LATEST, "read_uncommitted")
        stable = ask(OffsetSpec.LATEST, "read_committed")
        return [
            LiveOffsets(
                log_start_offset=earliest[(tp.topic, tp.partition)],
                high_watermark=latest[(tp.topic, tp.partition)],
                last_stable_offset=stable[(tp.topic, tp.partition)],
            )
            for tp in tps
        ]


def broker_topic_config(described: Mapping[str, Mapping[str, Any]]) -> BrokerTopicConfig:
    """A DescribeConfigs answer for one topic (``config_filter="all"``) as a :class:`BrokerTopicConfig`."""
    topic_level = {
        name: str(entry["value"])
        for name, entry in described.items()
        if name in BROKER_OWNED_TOPIC_KEYS
        and entry.get("config_source") == TOPIC_LEVEL_SOURCE
        and entry.get("value") is not None
    }

    def effective(name: str) -> int | None:
        value = (described.get(name) or {}).get("value")
        try:
            return None if value is None else int(value)
        except ValueError:
            return None

    return BrokerTopicConfig(
        topic_level=topic_level, retention_ms=effective("retention.ms"), retention_bytes=effective("retention.bytes")
    )


def _metadata_error(described: Mapping[str, Any] | None) -> str | None:
    """The name of the error the cluster's Metadata answered for a topic, unless it is none or
    UNKNOWN_TOPIC_OR_PARTITION (the controller's word that no such topic exists): an answer that
    says nothing of the topic (not authorized, no answer at all) must never read as "deleted"."""
    if described is None:
        return "no answer"
    code = int(described.get("error_code") or 0)
    if code in (0, UNKNOWN_TOPIC_OR_PARTITION):
        return None
    from kafka.errors import for_code

    return str(for_code(code).__name__)


def _topic_id(described: Mapping[str, Any] | None) -> str | None:
    """The topic id in Kafka's own string form (as ``partition.metadata`` has it); None when unknown."""
    if not described or described.get("error_code") or not described.get("topic_id"):
        return None
    value = uuid.UUID(str(described["topic_id"]))
    return None if value.int == 0 else uuid_to_topic_id(value)


def _leader(described: Mapping[str, Any] | None, partition: int) -> int | None:
    for p in (described or {}).get("partitions") or []:
        if p["partition_index"] == partition:
            return int(p["leader_id"])
    return None


def client_failure(exc: BaseException) -> str:
    """A Kafka client's failure in one line, its type named once (kafka-python's messages often
    name it already: ``KafkaTimeoutError: Unable to bootstrap from [...]``)."""
    reason = one_line(exc) or type(exc).__name__
    return reason if reason.startswith(type(exc).__name__) else f"{type(exc).__name__}: {reason}"


def client_settings(config: KafkaConfig) -> dict[str, Any]:
    """kafka-python's connection settings for the cluster of ``config`` (any of its clients takes
    them). The SASL password is read from its environment variable only now and masked in
    kafka-python's log records from now on; an unset variable is a ClusterUnreachableError."""
    servers = ",".join(config.bootstrap_servers)
    settings: dict[str, Any] = {
        "bootstrap_servers": list(config.bootstrap_servers),
        "client_id": config.client_id,
        "request_timeout_ms": config.request_timeout_ms,
        "bootstrap_timeout_ms": config.request_timeout_ms,
        "security_protocol": config.security_protocol,
    }
    if config.sasl_mechanism is not None:
        settings["sasl_mechanism"] = config.sasl_mechanism
        settings["sasl_plain_username"] = config.sasl_plain_username
    if config.sasl_password_env is not None:
        password = os.environ.get(config.sasl_password_env)
        if not password:
            raise ClusterUnreachableError(
                f"{config.section}.sasl_password_env: the environment variable {config.sasl_password_env} is not set, "
                f"so the cluster at {servers} cannot be asked"
            )
        _MASK.add(password)
        settings["sasl_plain_password"] = password
    if config.ssl_cafile is not None:
        settings["ssl_cafile"] = str(config.ssl_cafile)
    return settings


def mask_client_logs() -> None:
    """Mask the SASL password in kafka-python's log records: call once kafka-python is imported and
    before a client connects (its handshake is logged as it is sent)."""
    _MASK.attach()
