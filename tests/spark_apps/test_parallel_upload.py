"""Parallel upload in local[2]: the remote state of sequential copy runs; failures isolated and repaired."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from tests.engine_support import write_segments
from tests.services import S3Endpoint
from tiering_core.config import load_config
from tiering_core.context import TieringContext
from tiering_core.copy import run_copy
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.kafka.writer import PartitionWriter
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.remote_segments import segment_ref
from tiering_core.storage.layout import ObjectKind

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def make_log_dir(root: Path, partitions: int = 8) -> Path:
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


def remote_state(config: Path) -> dict[str, list[tuple]]:
    """Per partition: (start, end, epochs, size, state, per-kind crc32c, object bodies); asserts no orphans."""
    state: dict[str, list[tuple]] = {}
    with TieringContext.open(load_config(config)) as ctx:
        for record in ctx.metadata.list_partitions():
            tip = TopicIdPartition(record.topic_id, record.topic_partition)
            rows = []
            objects = 0
            for s in ctx.metadata.list_segments(tip):
                ref = segment_ref(s)
                assert s.state == FINISHED and ctx.storage.verify_segment(ref) == []
                manifest = ctx.storage.read_manifest(ref)
                assert manifest is not None
                objects += len(manifest.objects) + 1
                crc = tuple(sorted(s.custom_metadata["crc32c"].items()))
                assert crc == tuple(sorted((k.value, e.crc32c) for k, e in manifest.objects.items()))
                bodies = tuple((k.value, ctx.storage.fetch(ref, k)) for k in sorted(manifest.objects))
                rows.append(
                    (s.start_offset, s.end_offset, tuple(sorted(s.leader_epochs.items())), s.size_bytes, s.state, crc,
                     bodies)
                )
            assert len(ctx.storage.list_objects(tip)) == objects  # nothing but finished segments' objects
            state[str(record.topic_partition)] = rows
    return state


def copy_sequentially(config: Path) -> None:
    with TieringContext.open(load_config(config)) as ctx:
        for log in ctx.partitions():
            run_copy(ctx, log.topic_partition)


def test_parallel_equals_sequential_on_s3(tmp_path: Path, spark, s3_endpoint: S3Endpoint) -> None:
    from spark_apps.parallel_upload import run_parallel_upload

    log_dir = make_log_dir(tmp_path)
    sequential = make_config(tmp_path, log_dir, "seq", s3_remote(s3_endpoint))
    parallel = make_config(tmp_path, log_dir, "par", s3_remote(s3_endpoint))
    copy_sequentially(sequential)
    lines: list[str] = []
    with TieringContext.open(load_config(parallel)) as ctx:
        report = run_parallel_upload(ctx, [log.topic_partition for log in ctx.partitions()], spark, say=lines.append)
    expected_segments = sum(2 + p % 3 for p in range(8)) + 1
    assert report.failures == [] and report.segments == expected_segments and report.exit_code == 0
    assert sum("copied segment" in line for line in lines) == expected_segments
    assert "parallel upload: 8 partition(s)" in lines[-1]
    seq, par = remote_state(sequential), remote_state(parallel)
    assert sum(len(rows) for rows in par.values()) == expected_segments
    assert par == seq


def failing_uploader(bad_base: int, bad_partition: int, kill: bool):
    from spark_apps.parallel_upload import UploadOutcome, upload_on_executor

    def upload(remote, item):
        meta = item.metadata
        if meta.topic_id_partition.partition == bad_partition and meta.start_offset == bad_base:
            if kill:
                os._exit(1)  # the executor's Python worker dies mid-task
            from tiering_core.storage.factory import create_remote_storage

            with create_remote_storage(remote) as storage:  # a partial upload, then the failure
                storage.put_object(item.ref.key(ObjectKind.LOG, storage.prefix), item.files[ObjectKind.LOG])
            return UploadOutcome(None, "RemoteStorageError: injected upload failure", 0.0, "test")
        return upload_on_executor(remote, item)

    return upload


def test_failed_upload_and_killed_task_are_isolated_and_repaired(tmp_path: Path, spark) -> None:
    from spark_apps.parallel_upload import run_parallel_upload

    log_dir = make_log_dir(tmp_path, partitions=3)
    config = make_config(tmp_path, log_dir, "par")
    reference = make_config(tmp_path, log_dir, "seq")
    copy_sequentially(reference)
    tps = [TopicPartition("orders", p) for p in range(3)]
    # Partition 2 has segments 0, 20, 40, 60: segment 20 fails, then (next run) is killed.
    for kill in (False, True):
        with TieringContext.open(load_config(config)) as ctx:
            report = run_parallel_upload(ctx, tps, spark, uploader=failing_uploader(20, 2, kill), parallelism=2)
        assert report.exit_code == 1 and len(report.failures) == 1 and "orders-2" in report.failures[0]
        assert ("Python worker exited unexpectedly" in report.failures[0]) == kill
        state = remote_state(config)  # every finished segment has its objects; nothing else is stored
        assert [r[0] for r in state["orders-2"]] == [0]  # offsets never skip past the failed segment
        assert [r[0] for r in state["orders-0"]] == [0, 20]  # other partitions are not affected
        assert [r[0] for r in state["orders-1"]] == [0, 20, 40]
    with TieringContext.open(load_config(config)) as ctx:
        report = run_parallel_upload(ctx, tps, spark)
    assert report.failures == [] and report.segments == 3
    assert remote_state(config) == remote_state(reference)


def test_tiering_gap_fails_after_copying_the_rest(tmp_path: Path, spark) -> None:
    from spark_apps.parallel_upload import main

    log_dir = tmp_path / "kafka-logs"
    log_dir.mkdir()
    w = PartitionWriter(log_dir, TopicPartition("orders", 0), segment_bytes=10**9)
    write_segments(w, 2, records=10)
    w.set_high_watermark()
    config = make_config(tmp_path, log_dir, "gap")
    copy_sequentially(config)  # 0..19 tiered
    write_segments(w, 3, records=10)
    w.set_high_watermark()
    w.delete_oldest_segments(3)  # the broker drops 20..29 before it was tiered
    assert main(["--config", str(config), "--partitions", "orders-0"], spark=spark) == 3
    with TieringContext.open(load_config(config)) as ctx:
        log = ctx.partitions("orders", 0)[0]
        tip = TopicIdPartition(log.topic_id, log.topic_partition)
        assert [[g.start, g.end] for g in ctx.metadata.list_gaps(tip)] == [[20, 29]]
        finished = [(s.start_offset, s.end_offset) for s in ctx.metadata.list_segments(tip) if s.state == FINISHED]
    assert finished == [(0, 9), (10, 19), (30, 39), (40, 49)]


def test_bad_selector_is_a_one_line_reason(tmp_path: Path, capsys) -> None:
    from spark_apps.parallel_upload import main

    config = make_config(tmp_path, make_log_dir(tmp_path, partitions=1), "bad")
    assert main(["--config", str(config), "--partitions", "orders-0,orders-7"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["parallel_upload: failed: partition orders-7 is not in the log dirs"]
