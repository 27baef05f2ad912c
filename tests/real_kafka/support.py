"""The platform beside a real broker: a config on a node's log dirs, the ``tiering`` command run in
process, and what a real consumer reads, to compare the two offset by offset."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.real_kafka.cluster import KafkaCluster
from tests.services import S3Endpoint
from tiering_core.cli.main import main as tiering_main
from tiering_core.config import load_config
from tiering_core.context import TieringContext


@dataclass(frozen=True)
class CommandResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        assert self.code == 0, f"exit {self.code}: {self.stderr.strip()}"
        return json.loads(self.stdout)


@dataclass
class BesideKafka:
    """The platform configured on one node's log dirs (S3 through moto, SQLite metadata)."""

    root: Path
    cluster: KafkaCluster
    node_id: int
    config_path: Path
    document: dict[str, Any]

    @classmethod
    def create(
        cls,
        root: Path,
        cluster: KafkaCluster,
        node_id: int,
        s3: S3Endpoint,
        *,
        topics: dict[str, Any] | None = None,
        live: bool = False,
    ) -> BesideKafka:
        root.mkdir(parents=True, exist_ok=True)
        document: dict[str, Any] = {
            "log_dirs": [str(d) for d in cluster.nodes[node_id].log_dirs],
            "metadata": {"url": f"sqlite:///{root / 'metadata.db'}", "lease_ms": 30_000},
            "remote": {
                "backend": "s3",
                "bucket": s3.new_bucket(),
                "prefix": "tier/",
                "endpoint_url": s3.url,
                "region": s3.region,
            },
            "topics": {
                "*": {"remote.storage.enable": True, "retention.ms": -1, "retention.bytes": -1},
                **(topics or {}),
            },
        }
        if live:
            document["kafka"] = {"bootstrap_servers": cluster.bootstrap_servers}
        beside = cls(root, cluster, node_id, root / "tiering.yaml", document)
        beside.write()
        return beside

    def write(self) -> None:
        self.config_path.write_text(yaml.safe_dump(self.document))

    @contextmanager
    def context(self) -> Iterator[TieringContext]:
        """The platform's context on this config, as a command opens it."""
        with TieringContext.open(load_config(self.config_path)) as ctx:
            yield ctx

    def run(self, *argv: str) -> CommandResult:
        """``tiering --config ... ARGV`` in this process."""
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = tiering_main([argv[0], "--config", str(self.config_path), *argv[1:]])
            except SystemExit as exc:  # argparse errors
                code = int(exc.code or 0)
        return CommandResult(code, out.getvalue(), err.getvalue())

    def ok(self, *argv: str) -> CommandResult:
        result = self.run(*argv)
        assert result.code == 0, f"tiering {' '.join(argv)}: exit {result.code}: {result.stderr.strip()}"
        return result

    def status(self, topic: str, partition: int = 0) -> dict[str, Any]:
        rows = self.ok("status", "--topic", topic, "--partition", str(partition), "--json").json()
        assert len(rows) == 1, rows
        return dict(rows[0])

    def remote_records(self, topic: str, partition: int, start: int, count: int, *extra: str) -> list[dict[str, Any]]:
        """``tiering fetch`` from ``start``, following the answers until ``count`` records came."""
        got: list[dict[str, Any]] = []
        offset = start
        while len(got) < count:
            batch = self.ok(
                "fetch",
                "--topic",
                topic,
                "--partition",
                str(partition),
                "--offset",
                str(offset),
                "--max-records",
                str(min(count - len(got), 5000)),
                "--json",
                *extra,
            ).json()
            if not batch:
                break
            got.extend(batch)
            offset = batch[-1]["offset"] + 1
        return got


@dataclass(frozen=True)
class ConsumedRecord:
    """What a real consumer returned, in the shape of ``tiering fetch --json``."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]

    @classmethod
    def from_fetch(cls, row: dict[str, Any]) -> ConsumedRecord:
        def raw(text: str | None) -> bytes | None:
            return None if text is None else base64.b64decode(text)

        headers = tuple((h["key"], raw(h["value"]) or b"") for h in row["headers"])
        return cls(row["offset"], row["timestamp"], raw(row["key"]), raw(row["value"]), headers)


def consume(
    cluster: KafkaCluster,
    topic: str,
    partition: int,
    *,
    isolation_level: str = "read_uncommitted",
    start: int = 0,
    until: int | None = None,
    timeout_s: float = 60.0,
) -> list[ConsumedRecord]:
    """Every record a real consumer (kafka-python) reads from ``start`` below ``until`` (default: the
    end it may read to: the HW for read_uncommitted, the LSO for read_committed)."""
    import time

    from kafka import TopicPartition as KafkaTP

    consumer = cluster.consumer(isolation_level=isolation_level, fetch_max_bytes=4 * 1024 * 1024)
    try:
        tp = KafkaTP(topic, partition)
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp] if until is None else until
        consumer.seek(tp, start)
        out: list[ConsumedRecord] = []
        deadline = time.monotonic() + timeout_s
        while consumer.position(tp) < end:
            if time.monotonic() > deadline:
                raise AssertionError(f"consumer stuck at {consumer.position(tp)} before {end} on {topic}-{partition}")
            for records in consumer.poll(timeout_ms=500).values():
                for r in records:
                    if r.offset < end:
                        out.append(
                            ConsumedRecord(
                                r.offset, r.timestamp, r.key, r.value, tuple((k, v or b"") for k, v in r.headers)
                            )
                        )
        return out
    finally:
        consumer.close()


def offsets(records: Sequence[ConsumedRecord]) -> list[int]:
    return [r.offset for r in records]


def beside_every_node(first: BesideKafka) -> dict[int, BesideKafka]:
    """The platform as one deployment over a whole cluster: a BesideKafka per node that shares
    ``first``'s metadata store and bucket and differs only in ``log_dirs`` (a copy run reads one
    broker's log dirs; the remote tier and its metadata are the cluster's)."""
    import copy

    out: dict[int, BesideKafka] = {}
    for node_id, node in first.cluster.nodes.items():
        if node_id == first.node_id:
            out[node_id] = first
            continue
        document = copy.deepcopy(first.document)
        document["log_dirs"] = [str(d) for d in node.log_dirs]
        beside = BesideKafka(first.root, first.cluster, node_id, first.root / f"tiering-node-{node_id}.yaml", document)
        beside.write()
        out[node_id] = beside
    return out
