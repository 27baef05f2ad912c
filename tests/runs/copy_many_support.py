"""What the multi-partition copy's tests share (the core driver's and the Spark app's): a log dir
of several partitions, a config per side, and the remote state a reader and the next run see."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.engine_support import segment_objects, write_segments
from tests.services import S3Endpoint
from tiering_core.config import load_config
from tiering_core.context import TieringContext
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.errors import TieringError
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.runs.copy import run_copy
from tiering_core.storage.layout import ObjectKind
from tiering_core.tier.view import load_tier_view

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED


def make_log_dir(root: Path, partitions: int = 8) -> Path:
    """Partition p has 2 + p % 3 closed segments of 20 records (bases 0, 20, 40, ...)."""
    log_dir = root / "kafka-logs"
    log_dir.mkdir()
    clock = iter(range(1_700_000_000_000, 1_700_000_000_000 + 10**6))
    for p in range(partitions):
        w = PartitionWriter(log_dir, TopicPartition("orders", p), segment_bytes=10**9, clock=lambda: next(clock))
        write_segments(w, 2 + p % 3, records=20)
        if p == 3:
            w.become_leader(2)
            w.append([(b"t", b"x")], producer_id=11, transactional=True)
            w.abort(11)
            write_segments(w, 1, records=20)
        w.append_records(3)
        w.set_high_watermark()
    return log_dir


def make_config(root: Path, log_dir: Path, name: str, remote: dict[str, Any] | None = None) -> Path:
    path = root / f"{name}.yaml"
    doc = {
        "log_dirs": [str(log_dir)],
        "metadata": {"url": f"sqlite:///{root / f'{name}.db'}", "lease_ms": 60_000},
        "remote": remote or {"backend": "filesystem", "root": str(root / f"{name}-tier")},
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def s3_remote(endpoint: S3Endpoint) -> dict[str, Any]:
    return {"backend": "s3", "bucket": endpoint.new_bucket(), "prefix": "p/", "endpoint_url": endpoint.url}


def normalised_manifest(data: bytes, segment_id: str) -> str:
    """A manifest with its attempt's UUID and creation time taken out (they differ per attempt)."""
    doc = json.loads(data.decode().replace(segment_id, "<segment-id>"))
    doc["created_at_ms"] = 0
    return json.dumps(doc, sort_keys=True)


def remote_state(config: Path) -> dict[str, dict[str, Any]]:
    """Per partition: what a reader and the next run see of the remote tier, attempt UUIDs aside.

    Partition metadata (remote log start offset, recorded lineage, gaps, highest copied offset),
    its published state object, and per segment its offsets, max timestamp, epochs, size, state,
    recorded checksums, the body of every object and the manifest. Asserts every segment is
    finished and intact and that nothing else is stored (no orphans).
    """
    state: dict[str, dict[str, Any]] = {}
    with TieringContext.open(load_config(config)) as ctx:
        logs = {log.topic_partition: log for log in ctx.partitions()}
        for record in ctx.metadata.list_partitions():
            tip = TopicIdPartition(record.topic_id, record.topic_partition)
            rows = []
            objects = 0
            for s in ctx.metadata.list_segments(tip):
                ref = segment_ref(s)
                assert s.state == FINISHED and ctx.storage.verify_segment(ref) == [], s
                manifest = ctx.storage.read_manifest(ref)
                assert manifest is not None
                objects += len(manifest.objects) + 1
                crc = tuple(sorted(s.custom_metadata["crc32c"].items()))
                assert crc == tuple(sorted((k.value, e.crc32c) for k, e in manifest.objects.items()))
                bodies = tuple((k.value, ctx.storage.fetch(ref, k)) for k in sorted(manifest.objects))
                rows.append(
                    (
                        s.start_offset,
                        s.end_offset,
                        s.max_timestamp,
                        tuple(sorted(s.leader_epochs.items())),
                        s.size_bytes,
                        s.state,
                        crc,
                        bodies,
                        normalised_manifest(
                            ctx.storage.get_range(ref.key(ObjectKind.MANIFEST, ctx.storage.prefix), 0, None),
                            str(s.segment_id),
                        ),
                    )
                )
            assert len(segment_objects(ctx, tip)) == objects  # nothing but finished segments' objects
            view = load_tier_view(logs[record.topic_partition], ctx.metadata)
            state[str(record.topic_partition)] = {
                "remote_log_start_offset": ctx.metadata.get_remote_log_start_offset(tip),
                "lineage": ctx.metadata.get_recorded_lineage(tip),
                "gaps": [(g.start, g.end) for g in ctx.metadata.list_gaps(tip)],
                "partition_state": ctx.storage.read_partition_state(tip),  # its written time apart
                "highest_copied_offset": view.highest_copied_offset,
                "segments": rows,
            }
    return state


def bases(state: dict[str, dict[str, Any]], tp: str) -> list[int]:
    return [row[0] for row in state[tp]["segments"]]


def copy_sequentially(config: Path) -> list[str]:
    """What ``tiering copy`` leaves: one run per partition; a failing partition stops there."""
    errors = []
    with TieringContext.open(load_config(config)) as ctx:
        for log in ctx.partitions():
            try:
                run_copy(ctx, log.topic_partition)
            except TieringError as exc:
                errors.append(str(exc))
    return errors


def tip(config: Path, partition: int) -> TopicIdPartition:
    with TieringContext.open(load_config(config)) as ctx:
        log = ctx.partitions("orders", partition)[0]
        return TopicIdPartition(log.topic_id, log.topic_partition)
