"""A real Apache Kafka cluster for the tests: KRaft, 1 or 3 combined broker+controller nodes.

The broker is the Apache Kafka release pinned in ``tests/real_kafka/pom.xml``. Its jars are
fetched once with Maven (``mvn dependency:copy-dependencies``) into a cache outside the
repository (``$TIERING_TEST_CACHE``, default ``~/.cache/tiering-test``); ``KAFKA_HOME`` names an
existing Kafka distribution to run instead (its ``libs/``). Each node gets its own log dirs,
listens on 127.0.0.1 and free ports, runs with a small heap, and is stopped when the cluster's
context ends (also on failure; the parent-death signal stops it if the test process is killed).

Settings are small on purpose: 1 MiB segments by default (``segment_bytes`` on a topic goes
lower through Kafka's ``internal.segment.bytes``), index entries every 1 KiB, retention checks
every second, so that a few MB written roll many segments and broker retention acts within a
test. ``python -m tests.real_kafka.cluster fetch`` fills the cache (the test command does this
before the tests run without network).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.maven import fetch_dependencies
from tests.services import (
    STARTED,
    TEST_JVM_OPTIONS,
    ServerProcess,
    ServiceUnavailable,
    StartedService,
    current_account,
    free_port,
    java_failure,
    last_line,
    port_answers,
    stop_group,
)

POM = Path(__file__).with_name("pom.xml")
START_TIMEOUT = 90.0
#: JVM options of every node: a small heap and a quick start (C1 only) on a small test machine.
JVM_OPTIONS = (
    "-Xmx384m",
    "-Xms64m",
    *TEST_JVM_OPTIONS,
    "-Djava.awt.headless=true",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
)
#: Broker settings of every test cluster (a test's own settings override them).
BROKER_SETTINGS: dict[str, str] = {
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
    "log.segment.bytes": str(1024 * 1024),  # Kafka's minimum; topics go lower (segment_bytes)
    "log.index.interval.bytes": "1024",
    "log.retention.check.interval.ms": "1000",
    "log.initial.task.delay.ms": "0",
    "log.flush.start.offset.checkpoint.interval.ms": "1000",
    "replica.high.watermark.checkpoint.interval.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
    "min.insync.replicas": "1",
    "transaction.state.log.min.isr": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
    "controller.quorum.election.timeout.ms": "1000",
    "controller.quorum.fetch.timeout.ms": "2000",
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "5000",
}


def kafka_version(pom: Path = POM) -> str:
    """The Kafka version the pom pins (its ``kafka.version`` property)."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    found = ET.parse(pom).getroot().find("m:properties/m:kafka.version", ns)
    if found is None or not found.text:
        raise ServiceUnavailable(f"{pom} has no kafka.version property")
    return found.text.strip()


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    return Path(env.get("TIERING_TEST_CACHE") or Path.home() / ".cache" / "tiering-test").expanduser()


@dataclass(frozen=True)
class KafkaDistribution:
    """Where the broker's jars are, and which Kafka that is."""

    libs: Path
    version: str
    source: str

    @property
    def classpath(self) -> str:
        return f"{self.libs}/*"

    def java(self, main: str, *args: str, jvm: tuple[str, ...] = ("-Xmx256m", *TEST_JVM_OPTIONS)) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise ServiceUnavailable("cannot run Kafka: java is not on PATH (Java 17 is needed)")
        return [java, *jvm, "-cp", self.classpath, main, *args]


def fetch_jars(pom: Path = POM, *, environ: Mapping[str, str] | None = None) -> KafkaDistribution:
    """The pinned Kafka's jars in the cache, fetched with Maven the first time."""
    version = kafka_version(pom)
    home = cache_root(environ) / f"kafka-{version}"
    libs = fetch_dependencies(pom, home, f"Kafka {version} (or set KAFKA_HOME)", f"kafka_2.13-{version}.jar")
    return KafkaDistribution(libs, version, f"Maven Central jars (cached in {home})")


def kafka_distribution(*, environ: Mapping[str, str] | None = None) -> KafkaDistribution:
    """``KAFKA_HOME``'s Kafka when set, else the pinned one from the cache (fetched if missing)."""
    env = os.environ if environ is None else environ
    home = env.get("KAFKA_HOME")
    if not home:
        return fetch_jars(environ=env)
    libs = Path(home) / "libs"
    jars = sorted(libs.glob("kafka_2.13-*.jar"))
    if not jars:
        raise ServiceUnavailable(f"KAFKA_HOME={home} has no libs/kafka_2.13-*.jar: not a Kafka distribution")
    match = re.match(r"kafka_2\.13-(.+)\.jar$", jars[0].name)
    version = match.group(1) if match else "unknown"
    return KafkaDistribution(libs, version, f"KAFKA_HOME ({home})")


@dataclass
class KafkaNode:
    """One combined broker+controller node: its ports, log dirs and process (None: stopped)."""

    node_id: int
    port: int
    controller_port: int
    log_dirs: tuple[Path, ...]
    properties: Path
    log: Path
    process: ServerProcess | None = None
    sasl_port: int | None = None  # a SASL_PLAINTEXT (PLAIN) listener beside PLAINTEXT, if asked for

    @property
    def running(self) -> bool:
        return self.process is not None and not self.process.exited()


@dataclass
class KafkaCluster:
    """A running KRaft cluster: its nodes, and real clients (kafka-python) for it."""

    distribution: KafkaDistribution
    work: Path
    cluster_id: str
    nodes: dict[int, KafkaNode] = field(default_factory=dict)
    _admins: list[Any] = field(default_factory=list)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{node.port}" for node in self.nodes.values() if node.running)

    @property
    def sasl_bootstrap_servers(self) -> str:
        """The running nodes' SASL_PLAINTEXT listeners (``kafka_cluster(sasl_users=...)``)."""
        return ",".join(
            f"127.0.0.1:{node.sasl_port}" for node in self.nodes.values() if node.running and node.sasl_port
        )

    def sasl_kafka_section(self, username: str, password_env: str) -> dict[str, Any]:
        """The config's ``kafka:`` section for ``username`` on the SASL listeners, its password
        named by an environment variable (never written in the file)."""
        return {
            "bootstrap_servers": self.sasl_bootstrap_servers,
            "request_timeout_ms": 5000,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": username,
            "sasl_password_env": password_env,
        }

    # -- processes ------------------------------------------------------------------------

    def start_node(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.running:
            return
        args = self.distribution.java("kafka.Kafka", str(node.properties), jvm=JVM_OPTIONS)
        node.process = ServerProcess.start(
            f"Kafka node {node_id}",
            args,
            log=node.log,
            account=current_account(),  # the platform reads what the broker writes, as the tests do
            env={**os.environ, "KAFKA_HEAP_OPTS": "-Xmx384m"},
            cwd=self.work,
        )

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Until every running node listens and the cluster reports them all as brokers."""
        running = [node for node in self.nodes.values() if node.running]
        for node in running:
            assert node.process is not None
            node.process.wait_until(functools.partial(port_answers, "127.0.0.1", node.port), timeout)
        wanted = {node.node_id for node in running}
        deadline = time.monotonic() + timeout
        seen: set[int] = set()
        while time.monotonic() < deadline:
            with suppress(Exception):
                seen = self.live_brokers()
                if wanted <= seen:
                    return
            time.sleep(0.2)
        raise ServiceUnavailable(f"Kafka nodes {sorted(wanted - seen)} did not join within {timeout:.0f} s")

    def live_brokers(self) -> set[int]:
        admin = self.admin()
        return {int(b["broker_id"]) for b in admin.describe_cluster()["brokers"]}

    def stop_node(self, node_id: int, *, kill: bool = False) -> None:
        """Stop one node: a controlled shutdown (SIGTERM), or SIGKILL with ``kill``."""
        node = self.nodes[node_id]
        if node.process is None:
            return
        self._close_admins()
        if kill:
            stop_group(node.process.proc.pid, signal.SIGKILL)
            node.process.proc.wait(timeout=30)
        else:
            node.process.stop()
        node.process = None

    def stop(self) -> None:
        """Stop every node at once (the data is thrown away: no controlled shutdown needed)."""
        self._close_admins()
        for node in self.nodes.values():
            if node.process is not None:
                stop_group(node.process.proc.pid, signal.SIGKILL)
                with suppress(subprocess.TimeoutExpired):
                    node.process.proc.wait(timeout=30)
                node.process = None

    # -- clients --------------------------------------------------------------------------

    def admin(self) -> Any:
        """A kafka-python admin client for the running nodes (closed with the cluster)."""
        from kafka.admin import KafkaAdminClient

        if not self._admins:
            self._admins.append(KafkaAdminClient(bootstrap_servers=self.bootstrap_servers, request_timeout_ms=15000))
        return self._admins[0]

    def _close_admins(self) -> None:
        for admin in self._admins:
            with suppress(Exception):
                admin.close()
        self._admins.clear()

    def producer(self, **config: Any) -> Any:
        from kafka import KafkaProducer

        return KafkaProducer(bootstrap_servers=self.bootstrap_servers, **config)

    def consumer(self, **config: Any) -> Any:
        from kafka import KafkaConsumer

        return KafkaConsumer(bootstrap_servers=self.bootstrap_servers, enable_auto_commit=False, **config)

    def create_topic(
        self,
        name: str,
        *,
        partitions: int = 1,
        replication_factor: int = 1,
        segment_bytes: int | None = None,
        configs: Mapping[str, str] | None = None,
        replica_assignments: Mapping[int, Sequence[int]] | None = None,
    ) -> str:
        """Create a topic and wait until every partition has a leader; returns its topic id.

        ``segment_bytes`` below Kafka's 1 MiB minimum goes through ``internal.segment.bytes``,
        the topic config Kafka keeps for exactly this (small segments in tests).
        ``replica_assignments`` places each partition's replicas (partitions and replication
        factor then follow from it)."""
        from kafka.admin import NewTopic

        topic_configs = dict(configs or {})
        if segment_bytes is not None:
            key = "segment.bytes" if segment_bytes >= 1024 * 1024 else "internal.segment.bytes"
            topic_configs[key] = str(segment_bytes)
        if replica_assignments:
            partitions = len(replica_assignments)
            assignments = {p: list(replicas) for p, replicas in replica_assignments.items()}
            new = NewTopic(name, replica_assignments=assignments, topic_configs=topic_configs)
        else:
            new = NewTopic(name, partitions, replication_factor, topic_configs=topic_configs)
        self.admin().create_topics([new])
        deadline = time.monotonic() + 30
        while True:
            described = self.admin().describe_topics([name])[0]
            parts = described.get("partitions") or []
            if len(parts) == partitions and all(p["leader_id"] >= 0 for p in parts):
                return str(uuid.UUID(str(described["topic_id"])))
            if time.monotonic() > deadline:
                raise AssertionError(f"topic {name} has no leader for every partition: {described}")
            time.sleep(0.1)

    def leader(self, topic: str, partition: int) -> int:
        """The partition's leader, or -1 while the broker asked does not know the topic yet (its
        metadata lags the controller's for a moment after a creation)."""
        described = self.admin().describe_topics([topic])[0]
        if described.get("error_code") == 3:  # UNKNOWN_TOPIC_OR_PARTITION
            return -1
        for p in described["partitions"]:
            if p["partition_index"] == partition:
                return int(p["leader_id"])
        raise AssertionError(f"{topic}-{partition} is not in {described}")

    def partition_dir(self, node_id: int, topic: str, partition: int) -> Path:
        """The node's directory of ``topic-partition`` (in whichever of its log dirs holds it)."""
        node = self.nodes[node_id]
        for log_dir in node.log_dirs:
            path = log_dir / f"{topic}-{partition}"
            if path.is_dir():
                return path
        raise FileNotFoundError(f"node {node_id} holds no {topic}-{partition} in {node.log_dirs}")

    def wait_until(self, what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(0.2)


def _sasl_listener(
    port: int, controller_port: int, sasl_port: int | None, users: Mapping[str, str] | None
) -> dict[str, str]:
    """The settings of a SASL_PLAINTEXT listener (PLAIN, ``users``' passwords) beside PLAINTEXT."""
    if sasl_port is None or not users:
        return {}
    accounts = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    return {
        "listeners": (
            f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
            f"CONTROLLER://127.0.0.1:{controller_port}"
        ),
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {accounts};"
        ),
    }


def _properties(settings: Mapping[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in settings.items())


@contextmanager
def kafka_cluster(
    nodes: int = 1,
    *,
    log_dirs_per_node: int = 1,
    settings: Mapping[str, str] | None = None,
    node_settings: Mapping[int, Mapping[str, str]] | None = None,
    distribution: KafkaDistribution | None = None,
    prefix: str = "tiering-kafka-",
    keep_in: Path | None = None,
    sasl_users: Mapping[str, str] | None = None,
) -> Iterator[KafkaCluster]:
    """Format KRaft storage for ``nodes`` combined nodes, start them, yield the running cluster,
    and stop every node afterwards (also when the body raised). The nodes' directories are thrown
    away, unless ``keep_in`` (a new, empty directory) names where they go. ``sasl_users`` (user ->
    password) adds a SASL_PLAINTEXT listener with the PLAIN mechanism to every node, for those
    users; the PLAINTEXT listener stays for the brokers and the tests' own clients. ``settings``
    apply to every node, ``node_settings`` (by node id) to one node over them (e.g. a broker
    default ``log.segment.bytes`` of its own, so that its replicas roll at offsets of their own)."""
    dist = distribution or kafka_distribution()
    if keep_in is not None:
        keep_in.mkdir(parents=True, exist_ok=True)
        if any(keep_in.iterdir()):
            raise ServiceUnavailable(f"{keep_in} is not empty: a local cluster needs a new directory")
    work = keep_in if keep_in is not None else Path(tempfile.mkdtemp(prefix=prefix))
    cluster = KafkaCluster(dist, work, _random_cluster_id(dist, work))
    try:
        ports = {i: (free_port(), free_port()) for i in range(1, nodes + 1)}
        sasl_ports = {i: free_port() for i in ports} if sasl_users else {}
        voters = ",".join(f"{i}@127.0.0.1:{c}" for i, (_, c) in ports.items())
        replicas = str(min(nodes, 3))
        for i, (port, controller_port) in ports.items():
            node_dir = work / f"node-{i}"
            log_dirs = tuple(node_dir / f"logs-{d}" for d in range(1, log_dirs_per_node + 1))
            props = {
                "process.roles": "broker,controller",
                "node.id": str(i),
                "controller.quorum.voters": voters,
                "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
                "controller.listener.names": "CONTROLLER",
                "inter.broker.listener.name": "PLAINTEXT",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                "log.dirs": ",".join(str(d) for d in log_dirs),
                "offsets.topic.replication.factor": replicas,
                "transaction.state.log.replication.factor": replicas,
                "default.replication.factor": "1",
                **BROKER_SETTINGS,
                **_sasl_listener(port, controller_port, sasl_ports.get(i), sasl_users),
                **(settings or {}),
                **((node_settings or {}).get(i) or {}),
            }
            node_dir.mkdir(parents=True)
            properties = node_dir / "server.properties"
            properties.write_text(_properties(props))
            _format_storage(dist, cluster.cluster_id, properties, node_dir / "format.log")
            cluster.nodes[i] = KafkaNode(
                i, port, controller_port, log_dirs, properties, node_dir / "kafka.log", sasl_port=sasl_ports.get(i)
            )
        for i in cluster.nodes:
            cluster.start_node(i)
        cluster.wait_ready()
        STARTED.append(
            StartedService(
                f"Kafka {dist.version} ({nodes} KRaft node{'s' * (nodes > 1)})", cluster.bootstrap_servers, dist.source
            )
        )
        yield cluster
    finally:
        cluster.stop()
        if keep_in is None:
            shutil.rmtree(work, ignore_errors=True)


def _random_cluster_id(dist: KafkaDistribution, work: Path) -> str:
    proc = subprocess.run(
        dist.java("kafka.tools.StorageTool", "random-uuid"), capture_output=True, text=True, cwd=work, timeout=120
    )
    if proc.returncode != 0:
        raise ServiceUnavailable(f"kafka-storage random-uuid failed: {java_failure(proc.stdout + proc.stderr)}")
    return last_line(proc.stdout)


def _format_storage(dist: KafkaDistribution, cluster_id: str, properties: Path, log: Path) -> None:
    proc = subprocess.run(
        dist.java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(properties)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        why = java_failure(proc.stdout + proc.stderr)
        raise ServiceUnavailable(f"kafka-storage format -t {cluster_id} failed (exit {proc.returncode}): {why}")


LOCAL_TOPIC = "events"


def serve(directory: Path, nodes: int, records: int) -> None:
    """Run a local cluster in ``directory`` until interrupted, with a topic ``events`` holding
    ``records`` records and a platform config beside node 1 (SQLite, a filesystem tier)."""
    with kafka_cluster(nodes, keep_in=directory) as cluster:
        cluster.create_topic(LOCAL_TOPIC, partitions=2, replication_factor=min(nodes, 3), segment_bytes=64 * 1024)
        producer = cluster.producer(linger_ms=5)
        for i in range(records):
            producer.send(LOCAL_TOPIC, key=f"key-{i}".encode(), value=f"event {i}".encode() * 8)
        producer.flush()
        producer.close()
        config = directory / "tiering.yaml"
        config.write_text(
            "log_dirs: [" + ", ".join(str(d) for d in cluster.nodes[1].log_dirs) + "]\n"
            f"metadata: {{url: 'sqlite:///{directory / 'metadata.db'}'}}\n"
            f"remote: {{backend: filesystem, root: {directory / 'tier'}}}\n"
            f"kafka: {{bootstrap_servers: '{cluster.bootstrap_servers}'}}\n"
            "topics: {'*': {remote.storage.enable: true}}\n"
        )
        print(f"Kafka {cluster.distribution.version}: {nodes} node(s) at {cluster.bootstrap_servers}", flush=True)
        print(f"topic {LOCAL_TOPIC!r}: {records} records; platform config: {config}", flush=True)
        print("Ctrl-C stops the cluster (its directory stays).", flush=True)
        with suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    """``fetch``: fill the jar cache (or check KAFKA_HOME) and say which Kafka the tests will run;
    ``serve DIR [NODES [RECORDS]]``: a local cluster to run the platform against."""
    if not argv or argv[0] not in ("fetch", "serve") or (argv[0] == "serve" and not 2 <= len(argv) <= 4):
        print("usage: python -m tests.real_kafka.cluster fetch | serve DIR [NODES [RECORDS]]", file=sys.stderr)
        return 2
    try:
        if argv[0] == "serve":
            signal.signal(signal.SIGTERM, _interrupt)
            serve(
                Path(argv[1]).resolve(), int(argv[2]) if len(argv) > 2 else 1, int(argv[3]) if len(argv) > 3 else 20000
            )
            return 0
        dist = kafka_distribution()
    except ServiceUnavailable as exc:
        print(f"Kafka for the tests: unavailable: {exc}", file=sys.stderr)
        return 1
    print(f"Kafka for the tests: {dist.version} from {dist.source}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
