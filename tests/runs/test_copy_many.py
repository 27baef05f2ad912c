"""The multi-partition copy driver on this process's thread pool: the remote state of one serial
``run_copy`` per partition, at most ``threads`` uploads at a time, and a failed upload stopping
only its partition (filesystem tier, SQLite store)."""

from __future__ import annotations

import threading
from pathlib import Path

from tests.engine_support import counted_view_builds
from tests.runs.copy_many_support import bases, copy_sequentially, make_config, make_log_dir, remote_state
from tiering_core.config import load_config
from tiering_core.context import TieringContext
from tiering_core.engine.executor import InProcessExecutor
from tiering_core.events import RunEvent
from tiering_core.events.copy import ParallelUploadFinished, SegmentCopied, SegmentNotFinished, UploadsPlanned
from tiering_core.kafka.topic import TopicPartition
from tiering_core.runs.copy_many import UploadOutcome, copy_partitions, upload_task
from tiering_core.runs.segment_copy import SegmentUpload
from tiering_core.storage.layout import ObjectKind
from tiering_core.storage.remote import RemoteStorage

PARTITIONS = 4
#: Segments of make_log_dir's partitions: 2 + p % 3 each, and one more after partition 3's leader change.
SEGMENTS = sum(2 + p % 3 for p in range(PARTITIONS)) + 1


class Concurrency:
    """An upload task wrapper that counts the uploads running at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0

    def upload(self, storage: RemoteStorage, upload: SegmentUpload) -> UploadOutcome:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            return upload_task(storage, upload)
        finally:
            with self.lock:
                self.running -= 1


def test_a_thread_pool_copy_of_many_partitions_leaves_what_serial_copies_leave(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path, partitions=PARTITIONS)
    serial = make_config(tmp_path, log_dir, "serial")
    pooled = make_config(tmp_path, log_dir, "pooled")
    assert copy_sequentially(serial) == []
    events: list[RunEvent] = []
    uploads = Concurrency()
    tps = [TopicPartition("orders", p) for p in range(PARTITIONS)]
    with TieringContext.open(load_config(pooled)) as ctx:
        report = copy_partitions(
            ctx, tps, InProcessExecutor(ctx.storage, threads=3), events=events.append, uploader=uploads.upload
        )
    assert report.failures == [] and report.gaps == [] and report.segments == SEGMENTS
    assert [(r.partition, r.segments_copied) for r in report.results] == [(0, 2), (1, 3), (2, 4), (3, 3)]
    assert 1 <= uploads.most <= 3
    planned = events[0]
    assert isinstance(planned, UploadsPlanned) and (planned.segments, planned.partitions, planned.slots) == (
        SEGMENTS,
        PARTITIONS,
        3,
    )
    copied = [e for e in events if isinstance(e, SegmentCopied)]
    for p in range(PARTITIONS):  # each partition's segments committed in offset order
        offsets = [e.base_offset for e in copied if e.topic_partition.partition == p]
        assert offsets == sorted(offsets) and len(offsets) == report.results[p].segments_copied
    assert isinstance(events[-1], ParallelUploadFinished) and events[-1].segments == SEGMENTS
    seq, par = remote_state(serial), remote_state(pooled)
    assert par["orders-3"]["lineage"] != par["orders-0"]["lineage"]  # the leader change is recorded
    assert par == seq


def test_a_failed_upload_on_the_thread_pool_stops_only_its_partition(tmp_path: Path) -> None:
    """Segment 20 of partition 2 fails after part of it was stored: partition 2 keeps segment 0
    and cleans up what it stored of 20 and anything after it; the other partitions finish, and
    the next run copies the rest."""
    log_dir = make_log_dir(tmp_path, partitions=PARTITIONS)
    config = make_config(tmp_path, log_dir, "pooled")
    reference = make_config(tmp_path, log_dir, "serial")
    copy_sequentially(reference)

    def uploader(storage: RemoteStorage, upload: SegmentUpload) -> UploadOutcome:
        meta = upload.metadata
        if (meta.topic_id_partition.partition, meta.start_offset) == (2, 20):
            storage.put_object(upload.ref.key(ObjectKind.LOG, storage.prefix), upload.files[ObjectKind.LOG])
            return UploadOutcome(None, "RemoteStorageError: injected upload failure", 0.0, "test")
        return upload_task(storage, upload)

    events: list[RunEvent] = []
    tps = [TopicPartition("orders", p) for p in range(PARTITIONS)]
    with TieringContext.open(load_config(config)) as ctx:
        report = copy_partitions(
            ctx, tps, InProcessExecutor(ctx.storage, threads=3), events=events.append, uploader=uploader
        )
    assert len(report.failures) == 1
    assert report.failures[0] == (
        "orders-2: copying segment 20 failed and was cleaned up: RemoteStorageError: injected upload failure"
    )
    assert [(r.partition, r.segments_copied) for r in report.results] == [(0, 2), (1, 3), (2, 1), (3, 3)]
    not_finished = [e.base_offset for e in events if isinstance(e, SegmentNotFinished)]
    assert all(base > 20 for base in not_finished)  # only segments after the failed one, never before
    state = remote_state(config)  # every finished segment intact, nothing else stored
    assert bases(state, "orders-2") == [0]
    expected = remote_state(reference)
    assert {tp: state[tp] for tp in state if tp != "orders-2"} == {
        tp: expected[tp] for tp in expected if tp != "orders-2"
    }
    with TieringContext.open(load_config(config)) as ctx:  # the next run copies the rest
        report = copy_partitions(ctx, tps, InProcessExecutor(ctx.storage, threads=3))
    assert report.failures == [] and report.segments == 3
    assert remote_state(config) == expected


def test_a_copy_of_many_partitions_builds_each_partition_s_view_at_most_twice(tmp_path: Path) -> None:
    """Under the partition's lease, and once at its end: nothing else reads a view."""
    log_dir = make_log_dir(tmp_path, partitions=PARTITIONS)
    tps = [TopicPartition("orders", p) for p in range(PARTITIONS)]
    with TieringContext.open(load_config(make_config(tmp_path, log_dir, "counted"))) as ctx:
        with counted_view_builds() as builds:
            report = copy_partitions(ctx, tps, InProcessExecutor(ctx.storage, threads=2))
    assert report.failures == [] and report.segments == SEGMENTS
    assert sorted(path.name for path in builds) == sorted(str(tp) for tp in tps)
    assert max(builds.values()) <= 2
