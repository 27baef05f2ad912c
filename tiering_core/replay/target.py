"""Where a replay writes: a topic of a Kafka cluster, through kafka-python's producer, exactly once.

Each source partition has a transactional producer of its own, its transactional id naming the
source topic id, partition and the target topic (``transactional_id``), and every record carries
its source coordinates in the ``tiering.source`` header (``SourceMark``). A replay starts by
initialising its transactions, which fences an earlier producer of the same id (a killed replay,
or one still running) and aborts its open transaction; then it finds where it stopped by reading
the target's committed records back (``last_replayed``): the highest source offset of its own
marks, whatever else the topic holds. Before reading it waits until every transaction open on
those target partitions when it looked has ended (the last stable offset reached the high
watermark), so a record of its own committed after another writer's still open transaction is
seen (docs/replay.md).
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiering_core.errors import ClusterUnreachableError, TieringError, one_line
from tiering_core.live.source import client_failure, client_settings, mask_client_logs

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from tiering_core.config import KafkaConfig, PlatformConfig
    from tiering_core.kafka.topic import TopicIdPartition
    from tiering_core.read.reader import FetchedRecord

#: The header each replayed record carries: its source topic id, partition and offset.
SOURCE_HEADER = "tiering.source"
#: Kafka's producer default for ``max.request.size``.
DEFAULT_MAX_REQUEST_SIZE = 1024 * 1024
#: The first window of offsets read back from a target partition's end to find a replay's last
#: record; each further window is twice as wide, down to the partition's start.
SCAN_WINDOW = 1000
_POLL_MS = 200
#: Kafka's error code for a topic the cluster does not have (UnknownTopicOrPartitionException).
_UNKNOWN_TOPIC_OR_PARTITION = 3


def replay_cluster(
    config: PlatformConfig, target: str | None = None, bootstrap_servers: str | None = None
) -> KafkaConfig:
    """The cluster a replay writes to, with that cluster's own security settings only: the target
    named (``--target``, a name of ``replay.targets``), else the ``kafka:`` section.

    ``bootstrap_servers`` (``--bootstrap-server``, ``host:port[,...]``) must be exactly the servers
    of one of those and means that cluster: a section's SASL credentials are sent to the servers
    they were configured for, never to an address given at run time."""
    from tiering_core.config.parsing import shown

    kafka, targets = config.kafka, config.replay.targets
    if target is not None and bootstrap_servers is not None:
        raise TieringError("--target and --bootstrap-server: give one of them (a target names its servers)")
    if target is not None:
        if target not in targets:
            configured = ", ".join(sorted(targets)) or "none"
            raise TieringError(
                f"replay target {shown(target)}: not a name of the config's replay.targets (configured: {configured})"
            )
        return targets[target]
    if bootstrap_servers is not None:
        return _cluster_at(kafka, targets, bootstrap_servers)
    if kafka is None:
        raise TieringError(
            "a replay needs a cluster to write to: a kafka: section in the config, or a target of replay.targets "
            "named with --target"
        )
    return kafka


def _cluster_at(kafka: KafkaConfig | None, targets: Mapping[str, KafkaConfig], bootstrap_servers: str) -> KafkaConfig:
    """The configured cluster whose servers are exactly ``bootstrap_servers``."""
    from tiering_core.config import parse_kafka_config

    try:
        servers = parse_kafka_config({"bootstrap_servers": bootstrap_servers}, Path).bootstrap_servers
    except TieringError as exc:
        reason = one_line(exc).removeprefix("kafka.bootstrap_servers: ")
        raise TieringError(f"--bootstrap-server: {reason}") from None
    clusters = ([kafka] if kafka is not None else []) + list(targets.values())
    matching = [cluster for cluster in clusters if cluster.bootstrap_servers == servers]
    if len(matching) == 1:
        return matching[0]
    if not matching:
        raise TieringError(
            f"--bootstrap-server: {','.join(servers)} are not the servers of the kafka: section or of a replay "
            "target, and a cluster's credentials go only to its own servers: name that cluster in replay.targets "
            "(with its own security settings) and pick it with --target"
        )
    raise TieringError(
        f"--bootstrap-server: {','.join(servers)} are the servers of {' and '.join(c.section for c in matching)}: "
        "pick the target with --target, or give neither for the kafka: section"
    )


class Partitioning(enum.Enum):
    """Where a replayed record goes: the source's partition number, or where its key hashes."""

    SAME = "same"
    KEY = "key"


class ReplayFencedError(TieringError):
    """Another producer with this replay's transactional id took over (a second replay of the same
    source partition into the same topic): this one stops, its open transaction aborted."""


@dataclass(frozen=True)
class SourceMark:
    """A replayed record's source coordinates, as its ``tiering.source`` header holds them
    (``<topic id>:<partition>:<offset>``, ASCII)."""

    topic_id: str
    partition: int
    offset: int

    def encode(self) -> bytes:
        return f"{self.topic_id}:{self.partition}:{self.offset}".encode("ascii")

    @classmethod
    def decode(cls, value: bytes | None) -> SourceMark | None:
        """The mark ``value`` holds, None when it holds none (another writer's header)."""
        if value is None or len(value) > 128:
            return None
        parts = value.split(b":")
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
            return None
        try:
            return cls(parts[0].decode("ascii"), int(parts[1]), int(parts[2]))
        except UnicodeDecodeError:
            return None

    @classmethod
    def of(cls, headers: Sequence[tuple[str, bytes | None]]) -> SourceMark | None:
        """The mark of a record: its last ``tiering.source`` header (a replayed topic replayed
        again carries the earlier mark before its own)."""
        for key, value in reversed(headers):
            if key == SOURCE_HEADER:
                return cls.decode(value)
        return None


def is_client_error(exc: BaseException) -> bool:
    """Whether ``exc`` is one of kafka-python's errors (a partition's failure, not a bug)."""
    from kafka.errors import KafkaError

    return isinstance(exc, KafkaError)


def transactional_id(target_topic: str, tip: TopicIdPartition) -> str:
    """One per source partition and target topic: a rerun of the same replay fences the last."""
    return f"tiering-replay-{tip.topic_id}-{tip.partition}-{target_topic}"


def record_bytes(record: FetchedRecord) -> int:
    """What a record carries: its key, value and headers (keys and values)."""
    size = len(record.key or b"") + len(record.value or b"")
    for key, value in record.headers:
        size += len(key) + len(value or b"")
    return size


@dataclass(frozen=True)
class TargetTopic:
    """The target topic as the cluster describes it."""

    name: str
    topic_id: str
    partitions: int


class ReplayTarget:
    """A cluster a replay writes to, and its clients' settings (the SASL password read once)."""

    def __init__(self, kafka: KafkaConfig, topic: str) -> None:
        self.kafka = kafka
        self.topic = topic
        self.servers = ",".join(kafka.bootstrap_servers)
        self.settings = client_settings(kafka)
        try:
            import kafka as kafka_python  # noqa: F401
        except ImportError as exc:
            raise ClusterUnreachableError(
                f"kafka: the cluster at {self.servers} cannot be written: kafka-python is not installed "
                f"({one_line(exc)}); install the project with its kafka extra (pip install 'kafka-tiering[kafka]')"
            ) from None
        mask_client_logs()
        self._admin: Any = None

    def _unreachable(self, exc: BaseException) -> ClusterUnreachableError:
        return ClusterUnreachableError(f"kafka: the cluster at {self.servers} did not answer ({client_failure(exc)})")

    def admin(self) -> Any:
        if self._admin is None:
            from kafka.admin import KafkaAdminClient

            try:
                self._admin = KafkaAdminClient(**self.settings)
            except Exception as exc:
                raise self._unreachable(exc) from None
        return self._admin

    def close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            admin.close()

    def describe(self) -> TargetTopic:
        """The target topic; a TieringError when the cluster does not have it (a replay never
        creates a topic: its partitions, retention and configs are the operator's to choose)."""
        import uuid

        from kafka.errors import KafkaError

        try:
            described = self.admin().describe_topics([self.topic])[0]
        except (KafkaError, OSError) as exc:
            raise self._unreachable(exc) from None
        if described.get("error_code") == _UNKNOWN_TOPIC_OR_PARTITION:
            raise TieringError(
                f"target topic {self.topic} does not exist in the cluster at {self.servers}: create it first "
                "(its partitions and retention are yours to choose)"
            )
        if described.get("error_code"):
            raise TieringError(
                f"target topic {self.topic}: the cluster at {self.servers} answered error {described['error_code']}"
            )
        from tiering_core.kafka.checkpoints import uuid_to_topic_id

        topic_id = uuid_to_topic_id(uuid.UUID(str(described["topic_id"])))
        return TargetTopic(self.topic, topic_id, len(described.get("partitions") or []))

    def offsets(self, partitions: Sequence[int]) -> dict[int, tuple[int, int, int]]:
        """Per target partition: its log start, high watermark and last stable offset."""
        from kafka import TopicPartition as KafkaTopicPartition
        from kafka.admin import OffsetSpec
        from kafka.errors import KafkaError

        timeout = self.kafka.request_timeout_ms
        keys = [KafkaTopicPartition(self.topic, p) for p in partitions]

        def ask(spec: Any, isolation: str) -> dict[int, int]:
            answer = self.admin().list_partition_offsets(
                {k: spec for k in keys}, isolation_level=isolation, timeout_ms=timeout
            )
            return {k.partition: int(v.offset) for k, v in answer.items()}

        try:
            earliest = ask(OffsetSpec.EARLIEST, "read_uncommitted")
            latest = ask(OffsetSpec.LATEST, "read_uncommitted")
            stable = ask(OffsetSpec.LATEST, "read_committed")
        except (KafkaError, OSError) as exc:
            raise self._unreachable(exc) from None
        return {p: (earliest[p], latest[p], stable[p]) for p in partitions}


class PartitionWriter:
    """One source partition's transactional producer into the target topic."""

    def __init__(
        self,
        target: ReplayTarget,
        tip: TopicIdPartition,
        partitioning: Partitioning,
        target_partitions: int,
        *,
        max_request_size: int = DEFAULT_MAX_REQUEST_SIZE,
        transaction_timeout_ms: int = 60_000,
    ) -> None:
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        self.target = target
        self.tip = tip
        self.partitioning = partitioning
        self.transaction_timeout_ms = transaction_timeout_ms
        self.partition = tip.partition if partitioning is Partitioning.SAME else None
        self.target_partitions = [tip.partition] if self.partition is not None else list(range(target_partitions))
        self.transactional_id = transactional_id(target.topic, tip)
        try:
            self.producer = KafkaProducer(
                **target.settings,
                transactional_id=self.transactional_id,
                transaction_timeout_ms=transaction_timeout_ms,
                max_request_size=max_request_size,
                batch_size=max_request_size,
                linger_ms=5,
            )
        except (KafkaError, OSError) as exc:
            raise target._unreachable(exc) from None
        try:
            self.producer.init_transactions()
        except (KafkaError, OSError) as exc:
            self.producer.close(timeout=0)
            raise TieringError(
                f"{tip}: transactions of {self.transactional_id} could not be initialised on the cluster at "
                f"{target.servers}: {type(exc).__name__}: {one_line(exc)}"
            ) from None

    def close(self) -> None:
        self.producer.close(timeout=5)

    def last_replayed(self, clock: Any = time.monotonic) -> int | None:
        """The highest source offset of this partition the target holds committed (None: none),
        read back from the target partitions' ends, its own marks only."""
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KafkaTopicPartition

        ends = self._settled_ends(clock)
        consumer = KafkaConsumer(
            **self.target.settings, isolation_level="read_committed", enable_auto_commit=False, group_id=None
        )
        try:
            best: int | None = None
            for partition, (start, end) in ends.items():
                key = KafkaTopicPartition(self.target.topic, partition)
                consumer.assign([key])
                window, hi = SCAN_WINDOW, end
                while hi > start:
                    lo = max(start, hi - window)
                    found = self._scan(consumer, key, lo, hi, clock)
                    if found is not None:
                        best = found if best is None else max(best, found)
                        break
                    hi, window = lo, window * 2
            return best
        finally:
            consumer.close()

    def _settled_ends(self, clock: Any) -> dict[int, tuple[int, int]]:
        """Per target partition, its log start and the high watermark once the last stable offset
        reached it: every transaction open when we looked has committed or aborted."""
        first = self.target.offsets(self.target_partitions)
        deadline = clock() + self.transaction_timeout_ms / 1000 + 30
        while True:
            now = self.target.offsets(self.target_partitions)
            open_ = [p for p in self.target_partitions if now[p][2] < first[p][1]]
            if not open_:
                return {p: (now[p][0], first[p][1]) for p in self.target_partitions}
            if clock() > deadline:
                raise TieringError(
                    f"{self.target.topic}-{open_[0]}: a transaction has been open on the target for longer than "
                    f"{self.transaction_timeout_ms // 1000} s, so where the replay stopped cannot be read yet"
                )
            time.sleep(_POLL_MS / 1000)

    def _scan(self, consumer: Any, key: Any, lo: int, hi: int, clock: Any) -> int | None:
        """The highest source offset of this partition among the committed records [lo, hi)."""
        consumer.seek(key, lo)
        found: int | None = None
        deadline = clock() + self.target.kafka.request_timeout_ms / 1000 * 4
        while consumer.position(key) < hi:
            if clock() > deadline:
                raise TieringError(f"{key.topic}-{key.partition}: reading offsets {lo}..{hi - 1} back timed out")
            for records in consumer.poll(timeout_ms=_POLL_MS).values():
                for record in records:
                    if record.offset >= hi:
                        continue
                    mark = SourceMark.of(record.headers)
                    if mark is not None and mark.topic_id == self.tip.topic_id and mark.partition == self.tip.partition:
                        found = mark.offset if found is None else max(found, mark.offset)
        return found

    def write(self, records: Sequence[FetchedRecord]) -> None:
        """``records`` in one transaction, each with its mark. A fence is ReplayFencedError; any
        other failure aborts the transaction and names the offsets."""
        from kafka.errors import KafkaError, ProducerFencedError

        topic, partition = self.target.topic, self.partition
        prefix = f"{self.tip.topic_id}:{self.tip.partition}:".encode("ascii")  # SourceMark.encode, made once
        send = self.producer.send
        self.producer.begin_transaction()
        try:
            for record in records:
                headers = [*record.headers, (SOURCE_HEADER, prefix + str(record.offset).encode("ascii"))]
                try:
                    send(
                        topic,
                        value=record.value,
                        key=record.key,
                        headers=headers,
                        partition=partition,
                        timestamp_ms=record.timestamp,
                    )
                except (KafkaError, ValueError, TypeError) as exc:  # kafka-python refuses some by ValueError
                    raise TieringError(
                        f"{self.tip}: offset {record.offset} cannot be sent to {topic}: {type(exc).__name__}: "
                        f"{one_line(exc)}"
                    ) from None
            self.producer.commit_transaction()
        except ProducerFencedError:
            raise ReplayFencedError(
                f"{self.tip}: another replay into {topic} took over (transactional id {self.transactional_id})"
            ) from None
        except (KafkaError, TieringError) as exc:
            self._abort()
            if isinstance(exc, TieringError):
                raise
            raise TieringError(
                f"{self.tip}: offsets {records[0].offset}..{records[-1].offset} not committed to {topic}: "
                f"{type(exc).__name__}: {one_line(exc)}"
            ) from None

    def _abort(self) -> None:
        from kafka.errors import KafkaError

        try:
            self.producer.abort_transaction()
        except KafkaError as exc:  # the next replay's initialisation aborts it (fencing this producer)
            log.warning(
                "%s: abort of the open transaction failed (%s); the next replay aborts it", self.tip, one_line(exc)
            )
