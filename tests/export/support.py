"""Tiered partitions with transactions and every codec, and an export section pointing at a
catalog and warehouse of the test's choosing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import yaml

from tests.engine_support import TieringEnv
from tiering_core.kafka.batch import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD
from tiering_core.kafka.log_writer import PartitionWriter

CODECS = (CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD)


def rows(n: int, tag: str) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    """Records with null keys (every 4th), null values (every 5th) and headers (every 2nd)."""
    return [
        (
            None if i % 4 == 3 else f"{tag}-{i}".encode(),
            None if i % 5 == 4 else f"v-{tag}-{i}".encode(),
            [("h", b"x"), ("n", None)] if i % 2 == 0 else [],
        )
        for i in range(n)
    ]


def with_export(env: TieringEnv, catalog: dict[str, Any], namespace: str | None = None) -> None:
    """Add an ``export`` section to the env's config file."""
    doc = yaml.safe_load(env.config_path.read_text())
    doc["export"] = {"catalog": catalog} | ({"namespace": namespace} if namespace else {})
    env.config_path.write_text(yaml.safe_dump(doc))


def with_lease_ms(env: TieringEnv, lease_ms: int) -> None:
    """Set ``metadata.lease_ms`` in the env's config file: how long a killed export's table lease
    outlives it."""
    doc = yaml.safe_load(env.config_path.read_text())
    doc["metadata"]["lease_ms"] = lease_ms
    env.config_path.write_text(yaml.safe_dump(doc))


class OpensContext(Protocol):
    """A test's platform (``TieringEnv``, or ``BesideKafka`` beside a real broker)."""

    def context(self) -> AbstractContextManager[Any]: ...


def wait_until_table_is_free(env: OpensContext, table: str, catalog: str = "tiering", timeout_s: float = 120) -> None:
    """Poll the metadata store (its clock) until no export holds ``table``'s lease."""
    with env.context() as ctx:
        deadline = time.monotonic() + timeout_s
        while ctx.metadata.current_table_lease(catalog, table) is not None:
            assert time.monotonic() < deadline, f"the export lease of {table} was never given up"
            time.sleep(0.05)


def sqlite_catalog(root: Path, warehouse: str | None = None) -> dict[str, Any]:
    wh = root / "warehouse"
    wh.mkdir(exist_ok=True)
    return {"type": "sql", "uri": f"sqlite:///{root / 'iceberg.db'}", "warehouse": warehouse or f"file://{wh}"}


def build_partition(env: TieringEnv, topic: str = "orders", partition: int = 0) -> PartitionWriter:
    """Segments of every codec, with an aborted transaction spanning a roll, a committed one,
    null keys and values, headers; the last segment stays active (never tiered)."""
    w = env.writer(topic, partition)
    for codec in CODECS:
        w.codec = codec
        w.append(rows(6, f"c{codec}"))
        w.begin_transaction(7 + codec, 0)
        w.begin_transaction(100 + codec, 0)
        w.append(rows(3, f"abort{codec}"), producer_id=7 + codec)
        w.append(rows(2, f"commit{codec}"), producer_id=100 + codec)
        w.roll()
        w.append(rows(2, f"abort{codec}b"), producer_id=7 + codec)
        w.commit(100 + codec)
        w.abort(7 + codec)
        w.append(rows(3, f"plain{codec}"))
        w.roll()
    w.append(rows(1, "active"))
    w.set_high_watermark()
    return w


def table_of(ctx: Any, topic: str) -> Any:
    """The topic's export table (it must exist)."""
    from tiering_core.export import load_catalog, open_table, table_name

    table = open_table(load_catalog(ctx.config), table_name(ctx.config.export, topic), create=False)
    assert table is not None
    return table


def offsets_by_partition(table: Any) -> dict[int, list[int]]:
    """The table's offsets per partition, sorted, duplicates kept."""
    table.refresh()
    got = table.scan(selected_fields=("partition", "offset")).to_arrow()
    found: dict[int, list[int]] = {}
    for partition, offset in zip(got["partition"].to_pylist(), got["offset"].to_pylist(), strict=True):
        found.setdefault(partition, []).append(offset)
    return {p: sorted(o) for p, o in found.items()}


#: The columns a table had before topic ids (what ``export_the_old_way`` writes).
LEGACY_COLUMNS = (
    "topic",
    "partition",
    "offset",
    "timestamp",
    "timestamp_type",
    "key",
    "value",
    "headers",
    "leader_epoch",
    "producer_id",
    "is_transactional",
)


def export_the_old_way(ctx: Any, topic: str, segments: list[Any]) -> Any:
    """``segments`` (planned ``ExportSegment``s) exported as the platform did before topic ids:
    a table without the ``topic_id`` and ``timestamp_ms`` columns, and one commit per segment whose
    summary lists the segment without its topic id and carries the ranges forward keyed by
    partition alone (``tiering.exported``). Returns the table."""
    import json as _json

    import pyarrow.parquet as pq
    from pyiceberg.transforms import DayTransform

    from tiering_core.export import DATA_SCHEMA, ExportAttempt, load_catalog, table_name, write_segment_files
    from tiering_core.tier.offsets import merge_offset_ranges

    catalog = load_catalog(ctx.config)
    name = table_name(ctx.config.export, topic)
    catalog.create_namespace_if_not_exists(name.namespace)
    if not catalog.table_exists(name.identifier):
        legacy = DATA_SCHEMA.remove(DATA_SCHEMA.get_field_index("timestamp_ms")).remove(
            DATA_SCHEMA.get_field_index("topic_id")
        )
        assert tuple(legacy.names) == LEGACY_COLUMNS
        created = catalog.create_table(name.identifier, schema=legacy)
        with created.update_spec() as spec:
            spec.add_identity("partition")
            spec.add_field("timestamp", DayTransform(), "timestamp_day")
    table = catalog.load_table(name.identifier)
    location = f"{table.location().rstrip('/')}/data/tiering-attempts/old-version"
    attempt = ExportAttempt("old-version", str(table.metadata.table_uuid), location, dict(table.io.properties))
    for segment in segments:
        files = write_segment_files(ctx.storage, segment, attempt)
        fs, _root = attempt.filesystem()
        for url in files:  # as the old version wrote them: without the columns added since
            path = attempt.filesystem(url)[1]
            with fs.open_input_file(path) as stream:
                rows = pq.read_table(stream).select(list(LEGACY_COLUMNS))
            with fs.open_output_stream(path) as out:
                pq.write_table(rows, out, compression="zstd")
        table.refresh()
        current = table.current_snapshot()
        before = {}
        if current is not None and current.summary is not None:
            before = _json.loads(current.summary.additional_properties.get("tiering.exported", "{}"))
        ranges = {int(p): [tuple(r) for r in rs] for p, rs in before.items()}
        ranges.setdefault(segment.partition, []).append((segment.start_offset, segment.end_offset))
        exported = {str(p): [r.as_list() for r in merge_offset_ranges(rs)] for p, rs in sorted(ranges.items())}
        listed = [
            {
                "partition": segment.partition,
                "segment_id": segment.segment_id,
                "start": segment.start_offset,
                "end": segment.end_offset,
            }
        ]
        with table.transaction() as tx:
            tx.add_files(
                files,
                snapshot_properties={
                    "tiering.segments": _json.dumps(listed, separators=(",", ":")),
                    "tiering.exported": _json.dumps(exported, separators=(",", ":")),
                    "tiering.topic": topic,
                    "tiering.isolation": str(segment.isolation),
                },
            )
    table.refresh()
    return table


#: An export committing after every segment that stops at its ``argv[2]``-th commit (before it)
#: and waits to be killed: ``argv[1]`` is the flag file it writes when it got there, the rest the
#: ``tiering`` command line.
_KILLED_AT_COMMIT = """
import sys, time
from pathlib import Path
import tiering_core.export.run as run
import tiering_core.export.session as session

run.COMMIT_BYTES = 1  # a commit after every segment
flag, at = Path(sys.argv[1]), int(sys.argv[2])
real = session.commit_segments
calls = []

def commit_segments(table, pending, **kwargs):
    calls.append(1)
    if len(calls) == at:  # this commit never happens: killed here, its data files written
        flag.write_text("ready")
        time.sleep(600)
    return real(table, pending, **kwargs)

session.commit_segments = commit_segments
from tiering_core.cli import main
sys.exit(main(sys.argv[3:]))
"""


def export_killed_at_commit(config_path: Path, topic: str, flag: Path, commit: int) -> None:
    """``tiering export --topic TOPIC`` in a child process committing after every segment, killed
    with SIGKILL at its ``commit``-th commit, before it is made (a typed export's dead letters and
    rows are two commits of one segment); returns once it is dead."""
    command = ["--config", str(config_path), "export", "--topic", topic]
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_AT_COMMIT, str(flag), str(commit), *command],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 300
    while not flag.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"the export never reached its commit {commit}"
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
