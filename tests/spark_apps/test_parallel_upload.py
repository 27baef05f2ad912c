"""Parallel upload in local[2]: the remote state of sequential copy runs; failures isolated and repaired.

Executor-side faults (a failed upload, a killed Python worker) and barriers between executors
and the driver go through files in the test's directory: executors are other processes.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from spark_apps import runtime
from spark_apps.parallel_upload import exit_code
from tests.engine_support import expire_lease, segment_objects, wait_until, write_segments
from tests.runs.copy_many_support import (
    FINISHED,
    STARTED,
    bases,
    copy_sequentially,
    make_config,
    make_log_dir,
    remote_state,
    s3_remote,
    tip,
)
from tests.services import S3Endpoint
from tiering_core.config import load_config
from tiering_core.context import TieringContext
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.report.lines import event_line
from tiering_core.runs.copy_many import Uploader, UploadOutcome, copy_partitions, upload_task
from tiering_core.runs.copy_report import ParallelCopyReport
from tiering_core.storage.layout import ObjectKind


def run_parallel_upload(
    ctx: TieringContext,
    partitions: list[TopicPartition],
    spark: Any,
    *,
    uploader: Uploader = upload_task,
    parallelism: int | None = None,
    say: Callable[[str], None] = runtime.say,
) -> ParallelCopyReport:
    """The app's driver on the session's executors (``parallelism`` uploads at a time), each
    event's line to ``say``."""
    executor = runtime.SparkExecutor(spark.sparkContext, ctx.config.remote, parallelism)
    return copy_partitions(
        ctx,
        partitions,
        executor,
        run_id=f"spark-{uuid.uuid4().hex}",
        uploader=uploader,
        events=lambda e: say(event_line(e)),
    )


def test_parallel_equals_sequential_on_s3(tmp_path: Path, spark, s3_endpoint: S3Endpoint) -> None:
    log_dir = make_log_dir(tmp_path)
    sequential = make_config(tmp_path, log_dir, "seq", s3_remote(s3_endpoint))
    parallel = make_config(tmp_path, log_dir, "par", s3_remote(s3_endpoint))
    assert copy_sequentially(sequential) == []
    lines: list[str] = []
    with TieringContext.open(load_config(parallel)) as ctx:
        report = run_parallel_upload(ctx, [log.topic_partition for log in ctx.partitions()], spark, say=lines.append)
    expected_segments = sum(2 + p % 3 for p in range(8)) + 1
    assert report.failures == [] and report.segments == expected_segments and exit_code(report) == 0
    assert sum("copied segment" in line for line in lines) == expected_segments
    assert "parallel upload: 8 partition(s)" in lines[-1]
    seq, par = remote_state(sequential), remote_state(parallel)
    assert sum(len(p["segments"]) for p in par.values()) == expected_segments
    assert par["orders-3"]["lineage"] != par["orders-0"]["lineage"]  # the leader change is recorded
    assert par == seq


# --- executor-side faults ----------------------------------------------------------------------


def failing_uploader(markers: Path, bad_partition: int, bad_base: int, mode: str, after_base: int):
    """Every upload leaves ``done-<partition>-<base>`` once uploaded. Segment ``bad_base`` of
    ``bad_partition`` waits until segment ``after_base`` of its partition has been uploaded (so
    a later segment is deterministically uploaded already), then fails as ``mode`` says:
    ``fail`` (a partial upload, then an error), ``kill`` (the Python worker dies before
    uploading), ``kill-after-log`` (dies after the .log is stored), ``kill-after-manifest``
    (dies after the whole segment, manifest included, is stored)."""

    def upload(storage, item):
        meta = item.metadata
        key = (meta.topic_id_partition.partition, meta.start_offset)
        if key == (bad_partition, bad_base):
            deadline = time.monotonic() + 60
            while not (markers / f"done-{bad_partition}-{after_base}").exists():
                if time.monotonic() > deadline:
                    raise TimeoutError("the later segment was never uploaded")
                time.sleep(0.02)
            if mode == "kill":
                os._exit(1)  # the executor's Python worker dies mid-task
            if mode == "kill-after-manifest":
                storage.copy_segment(item.ref, item.files)
                os._exit(1)
            storage.put_object(item.ref.key(ObjectKind.LOG, storage.prefix), item.files[ObjectKind.LOG])
            if mode == "kill-after-log":
                os._exit(1)
            return UploadOutcome(None, "RemoteStorageError: injected upload failure", 0.0, "test")
        outcome = upload_task(storage, item)
        (markers / f"done-{key[0]}-{key[1]}").touch()
        return outcome

    return upload


def test_failed_uploads_and_killed_tasks_are_isolated_and_repaired(tmp_path: Path, spark) -> None:
    log_dir = make_log_dir(tmp_path, partitions=3)
    config = make_config(tmp_path, log_dir, "par")
    reference = make_config(tmp_path, log_dir, "seq")
    copy_sequentially(reference)
    tps = [TopicPartition("orders", p) for p in range(3)]
    # Partition 2 has segments 0, 20, 40, 60: segment 20 fails each run, in another way, after
    # segment 40 was uploaded.
    for mode in ("fail", "kill", "kill-after-log", "kill-after-manifest"):
        markers = tmp_path / f"markers-{mode}"
        markers.mkdir()
        lines: list[str] = []
        with TieringContext.open(load_config(config)) as ctx:
            report = run_parallel_upload(
                ctx,
                tps,
                spark,
                uploader=failing_uploader(markers, 2, 20, mode, 40),
                parallelism=2,
                say=lines.append,
            )
        assert exit_code(report) == 1 and len(report.failures) == 1, (mode, report.failures)
        assert "orders-2: copying segment 20 failed" in report.failures[0]
        assert ("Python worker exited unexpectedly" in report.failures[0]) == mode.startswith("kill"), mode
        assert (markers / "done-2-40").exists()  # segment 40 was uploaded, and is cleaned up:
        assert "orders-2: segment 40 not finished (an earlier segment failed); cleaned up" in lines, mode
        state = remote_state(config)  # every finished segment has its objects; nothing else is stored
        assert bases(state, "orders-2") == [0]  # offsets never skip past the failed segment
        assert bases(state, "orders-0") == [0, 20]  # other partitions are not affected
        assert bases(state, "orders-1") == [0, 20, 40]
        with TieringContext.open(load_config(config)) as ctx:
            assert [s.state for s in ctx.metadata.list_segments(tip(config, 2))] == [FINISHED]
    with TieringContext.open(load_config(config)) as ctx:
        report = run_parallel_upload(ctx, tps, spark)
    assert report.failures == [] and report.segments == 3
    assert remote_state(config) == remote_state(reference)


def test_a_segment_failing_its_check_stops_its_partition_after_the_segments_before_it(tmp_path: Path, spark) -> None:
    """Segment 40 of partition 2 fails its CRC check on the driver while segments 0 and 20 are
    still uploading: those still finish (as a sequential run would), 40 and 60 do not."""

    log_dir = make_log_dir(tmp_path, partitions=3)
    damaged = log_dir / "orders-2" / f"{40:020d}.log"
    data = bytearray(damaged.read_bytes())
    data[70] ^= 0x10  # a record byte of the first batch: its CRC no longer matches
    damaged.write_bytes(bytes(data))
    config = make_config(tmp_path, log_dir, "par")
    reference = make_config(tmp_path, log_dir, "seq")
    sequential_errors = copy_sequentially(reference)
    assert len(sequential_errors) == 1 and "segment 40 not copied" in sequential_errors[0]
    markers = tmp_path / "markers"
    markers.mkdir()

    def say(line: str) -> None:
        if line.startswith("orders-2: segment 40 not copied"):
            (markers / "refused").touch()

    def uploader(storage, item):
        meta = item.metadata
        if (meta.topic_id_partition.partition, meta.start_offset) == (2, 20):
            deadline = time.monotonic() + 60
            while not (markers / "refused").exists():  # still in flight when 40 is refused
                if time.monotonic() > deadline:
                    raise TimeoutError("segment 40 was never refused")
                time.sleep(0.02)
        return upload_task(storage, item)

    tps = [TopicPartition("orders", p) for p in range(3)]
    with TieringContext.open(load_config(config)) as ctx:
        report = run_parallel_upload(ctx, tps, spark, uploader=uploader, parallelism=2, say=say)
    state = remote_state(config)
    assert bases(state, "orders-2") == [0, 20]
    assert state == remote_state(reference)
    assert exit_code(report) == 1 and len(report.failures) == 1
    assert report.failures[0].startswith("orders-2: segment 40 not copied") and "CRC mismatch" in report.failures[0]


# --- the driver --------------------------------------------------------------------------------


class DriverAbort(Exception):
    """The driver fails mid-run (a bug, a lost database connection, a signal)."""


def test_a_driver_abort_cancels_queued_uploads_cleans_up_and_releases(tmp_path: Path, spark) -> None:
    log_dir = make_log_dir(tmp_path, partitions=4)
    config = make_config(tmp_path, log_dir, "par")
    reference = make_config(tmp_path, log_dir, "seq")
    copy_sequentially(reference)
    markers, ended = tmp_path / "markers", tmp_path / "ended"
    markers.mkdir()
    ended.mkdir()
    aborted = tmp_path / "aborted"
    total = sum(2 + p % 3 for p in range(4)) + 1

    def uploader(storage, item):
        meta = item.metadata
        name = f"{meta.topic_id_partition.partition}-{meta.start_offset}"
        first = not any(markers.iterdir())  # one upload at a time: the first one finds no marker
        (markers / name).write_text(str(os.getpid()))
        try:
            deadline = time.monotonic() + 60
            while not first and not aborted.exists():  # every later upload is still in flight at the abort
                if time.monotonic() > deadline:
                    raise TimeoutError("the driver never aborted")
                time.sleep(0.02)
            return upload_task(storage, item)
        finally:
            (ended / name).touch()

    tps = [TopicPartition("orders", p) for p in range(4)]
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        if "copied segment" in line:
            aborted.touch()
            raise DriverAbort("the driver failed after its first commit")

    def aborted_tasks_gone() -> bool:
        """An aborted driver takes its executors with it; here the session lives on, so the next
        run waits until every task the aborted one started has ended or its worker is gone."""
        return all(
            (ended / marker.name).exists() or not psutil.pid_exists(int(marker.read_text() or 0))
            for marker in markers.iterdir()
        )

    with TieringContext.open(load_config(config)) as ctx, pytest.raises(DriverAbort):
        run_parallel_upload(ctx, tps, spark, uploader=uploader, parallelism=1, say=say)
    started = {p.name for p in markers.iterdir()}
    assert len(started) <= 3 < total  # the first, the one in flight, at most one more: not all queued ones
    in_flight = [line for line in lines if "was uploading when the run was aborted" in line]
    assert len(in_flight) <= 2  # the one running, and one a slot had just taken
    with TieringContext.open(load_config(config)) as ctx:
        segments = [s for p in range(4) for s in ctx.metadata.list_segments(tip(config, p))]
        # One finished; every upload that never ran was cleaned up; the one running may be left
        # STARTED (its task may still write for a moment) for the next run's recovery.
        assert sorted(s.state.value for s in segments) == sorted([FINISHED.value] + [STARTED.value] * len(in_flight))
        for p in range(4):  # every lease was released
            ctx.metadata.release_lease(ctx.metadata.acquire_lease(tip(config, p), holder="copy:check"))
    wait_until(aborted_tasks_gone)
    with TieringContext.open(load_config(config)) as ctx:
        report = run_parallel_upload(ctx, tps, spark)
    assert report.failures == [] and report.segments == total - 1 and report.cleaned_up == len(in_flight)
    assert remote_state(config) == remote_state(reference)  # and no orphans


@pytest.mark.parametrize("taken", [True, False], ids=["taken-by-another-run", "expired"])
def test_a_partition_losing_its_lease_mid_run_stops_alone(tmp_path: Path, spark, taken: bool) -> None:
    """Partition 1's lease is lost while its segment 20 uploads (its renewals are lost, then it
    lapses; another run takes it, or nobody does). The other partitions finish."""

    log_dir = make_log_dir(tmp_path, partitions=3)
    config = make_config(tmp_path, log_dir, "par")
    reference = make_config(tmp_path, log_dir, "seq")
    copy_sequentially(reference)
    markers = tmp_path / "markers"
    markers.mkdir()
    tip1 = tip(config, 1)

    def say(line: str) -> None:
        if line.startswith("orders-1: copied segment 0 "):
            (markers / "committed-0").touch()

    def uploader(storage, item):
        meta = item.metadata
        if (meta.topic_id_partition.partition, meta.start_offset) == (1, 20):
            deadline = time.monotonic() + 60
            while not (markers / "committed-0").exists():
                assert time.monotonic() < deadline
                time.sleep(0.02)
            (markers / "uploading-20").touch()
            while not (markers / "lease-lost").exists():
                assert time.monotonic() < deadline
                time.sleep(0.02)
        return upload_task(storage, item)

    other = []

    def lose_the_lease() -> None:
        wait_until((markers / "uploading-20").exists)
        with TieringContext.open(load_config(config)) as ctx2:
            expire_lease(ctx2.metadata, tip1)
            if taken:
                other.append(ctx2.metadata.acquire_lease(tip1, holder="copy:other"))
        (markers / "lease-lost").touch()

    tps = [TopicPartition("orders", p) for p in range(3)]
    thief = threading.Thread(target=lose_the_lease)
    thief.start()
    with TieringContext.open(load_config(config)) as ctx:
        real_renew = ctx.metadata.renew_lease

        def renew_lease(lease, **kwargs):  # partition 1's renewals are lost once 20 uploads
            if lease.topic_id_partition == tip1 and (markers / "uploading-20").exists():
                return lease
            return real_renew(lease, **kwargs)

        ctx.metadata.renew_lease = renew_lease  # type: ignore[method-assign]
        report = run_parallel_upload(ctx, tps, spark, uploader=uploader, parallelism=2, say=say)
    thief.join()
    if taken:
        assert report.fenced == ["orders-1"] and report.failures == [] and exit_code(report) == 0
    else:
        assert report.fenced == [] and exit_code(report) == 1 and len(report.failures) == 1
        assert report.failures[0].startswith("orders-1: the partition's lease expired while copying segment 20")
    assert [(r.partition, r.segments_copied) for r in report.results] == [(0, 2), (1, 1), (2, 4)]
    with TieringContext.open(load_config(config)) as ctx:
        segments = ctx.metadata.list_segments(tip1)
        finished = [s for s in segments if s.state == FINISHED]
        assert [s.start_offset for s in finished] == [0]
        keys = {o.key for o in segment_objects(ctx, tip1)}  # the fenced uploads' objects are gone
        assert keys == {e.key for e in ctx.storage.read_manifest(segment_ref(finished[0])).objects.values()} | {
            segment_ref(finished[0]).key(ObjectKind.MANIFEST, ctx.storage.prefix)
        }
        for p in (0, 2):  # the others finished and gave their leases back
            ctx.metadata.release_lease(ctx.metadata.acquire_lease(tip(config, p), holder="copy:check"))
        if taken:
            ctx.metadata.release_lease(other[0])
    with TieringContext.open(load_config(config)) as ctx:  # the next run repairs the partition
        report = run_parallel_upload(ctx, tps, spark)
    assert report.failures == [] and report.segments == 2
    assert remote_state(config) == remote_state(reference)


def test_a_partition_releases_its_lease_once_its_segments_are_committed(tmp_path: Path, spark) -> None:
    """While partition 2's last upload is held up, partitions 0 and 1 are done: their leases are
    free for other runs (retention, removal) instead of being held until the whole run ends."""

    log_dir = make_log_dir(tmp_path, partitions=3)
    config = make_config(tmp_path, log_dir, "par")
    markers = tmp_path / "markers"
    markers.mkdir()
    tips = [tip(config, p) for p in range(3)]

    def uploader(storage, item):
        meta = item.metadata
        if (meta.topic_id_partition.partition, meta.start_offset) == (2, 60):
            (markers / "holding").touch()
            deadline = time.monotonic() + 60
            while not (markers / "looked").exists():
                if time.monotonic() > deadline:
                    raise TimeoutError("nobody looked")
                time.sleep(0.02)
        return upload_task(storage, item)

    seen: dict[str, bool] = {}

    def look() -> None:
        try:
            wait_until((markers / "holding").exists)
            with TieringContext.open(load_config(config)) as ctx2:
                store = ctx2.metadata
                try:
                    wait_until(
                        lambda: store.current_lease(tips[0]) is None and store.current_lease(tips[1]) is None,
                        timeout=30,
                    )
                    seen["released"] = True
                except AssertionError:
                    seen["released"] = False
                seen["last held"] = store.current_lease(tips[2]) is not None
        finally:
            (markers / "looked").touch()

    watcher = threading.Thread(target=look)
    watcher.start()
    with TieringContext.open(load_config(config)) as ctx:
        report = run_parallel_upload(ctx, [TopicPartition("orders", p) for p in range(3)], spark, uploader=uploader)
    watcher.join()
    assert report.failures == [] and report.segments == 2 + 3 + 4
    assert seen == {"released": True, "last held": True}  # while partition 2 still uploaded


def test_a_segment_the_broker_deletes_mid_run_fails_its_partition_with_one_line(tmp_path: Path, spark) -> None:
    log_dir = make_log_dir(tmp_path, partitions=3)
    config = make_config(tmp_path, log_dir, "par")
    reference = make_config(tmp_path, log_dir, "seq")

    def broker_retention(line: str) -> None:  # right after planning, the broker drops 1's oldest segment
        if line.startswith("parallel upload:") and "planned" in line:
            for path in (log_dir / "orders-1").glob(f"{0:020d}.*"):
                path.unlink()

    tps = [TopicPartition("orders", p) for p in range(3)]
    with TieringContext.open(load_config(config)) as ctx:
        report = run_parallel_upload(ctx, tps, spark, say=broker_retention)
    assert exit_code(report) == 1 and len(report.failures) == 1
    assert report.failures[0].startswith("orders-1: segment 0 could not be read while copying it")
    assert "\n" not in report.failures[0]
    with TieringContext.open(load_config(config)) as ctx:
        assert ctx.metadata.list_segments(tip(config, 1)) == [] and ctx.storage.list_objects(tip(config, 1)) == []
        report = run_parallel_upload(ctx, tps, spark)  # the next run copies what the broker still has
    assert report.failures == [] and report.segments == 2
    copy_sequentially(reference)
    assert remote_state(config) == remote_state(reference)


def test_bad_selector_is_a_one_line_reason(tmp_path: Path, capsys) -> None:
    from spark_apps.parallel_upload import main

    config = make_config(tmp_path, make_log_dir(tmp_path, partitions=1), "bad")
    assert main(["--config", str(config), "--partitions", "orders-0,orders-7"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["parallel_upload: failed: partition orders-7 is not in the log dirs"]


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
        tip0 = TopicIdPartition(log.topic_id, log.topic_partition)
        assert [[g.start, g.end] for g in ctx.metadata.list_gaps(tip0)] == [[20, 29]]
        finished = [(s.start_offset, s.end_offset) for s in ctx.metadata.list_segments(tip0) if s.state == FINISHED]
    assert finished == [(0, 9), (10, 19), (30, 39), (40, 49)]


# --- what the run records, and the copy quota ------------------------------------------------


def observed(config: Path) -> dict[str, dict[int, tuple[object, ...]]]:
    """Per partition, per broker: what the latest observation recorded of it (its time aside)."""
    with TieringContext.open(load_config(config)) as ctx:
        replicas = ctx.metadata.latest_observations().replicas
    fields = ("high_watermark", "last_stable_offset", "log_end_offset", "local_log_start_offset", "local_bytes")
    lags = ("leader_epoch", "copy_lag_segments", "copy_lag_bytes", "remote_segments", "remote_bytes")
    return {
        str(tip.topic_partition): {b: tuple(getattr(o, f) for f in (*fields, *lags)) for b, o in by_broker.items()}
        for tip, by_broker in replicas.items()
    }


def test_the_app_records_its_broker_s_observations_as_tiering_copy_does(
    tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The single-broker form: the run records under the broker its log dir's ``meta.properties``
    names, the same observations ``tiering copy`` records of the same log dir."""
    from spark_apps.parallel_upload import main
    from tiering_core.cli import main as tiering
    from tiering_core.config import implied_broker_id

    monkeypatch.delenv("TIERING_BROKER_ID", raising=False)
    log_dir = make_log_dir(tmp_path, partitions=2)
    sequential = make_config(tmp_path, log_dir, "seq")
    parallel = make_config(tmp_path, log_dir, "par")
    assert tiering(["--config", str(sequential), "copy"]) == 0
    assert main(["--config", str(parallel)], spark=spark) == 0
    broker = implied_broker_id(load_config(parallel))
    found = observed(parallel)
    assert broker is not None and sorted(found) == ["orders-0", "orders-1"]
    assert all(list(by_broker) == [broker] for by_broker in found.values())
    assert all(row[6] == 0 for by_broker in found.values() for row in by_broker.values())  # no copy lag left
    assert found == observed(sequential)


def test_the_uploads_on_spark_keep_together_to_the_broker_s_copy_quota(
    tmp_path: Path, spark, s3_endpoint: S3Endpoint
) -> None:
    """``remote.log.manager.copy.max.bytes.per.second`` bounds the bytes the endpoint receives from
    all the tasks together, counted there as they arrive (uploads stream, taking tokens as they
    read): over any few seconds no more than the cap allows plus a burst, and over the run no
    more than the cap since it started. Each slot sends at its part of the driver's share; at the
    whole cap each, the two uploads here would arrive twice as fast."""
    from spark_apps.parallel_upload import main
    from tests.storage.countproxy import CountingProxy
    from tests.storage.quota_support import COPY_KEY, MiB, quota_env

    cap, window = 2 * MiB, 3.0
    with CountingProxy.before(s3_endpoint.url) as proxy:
        env = quota_env(tmp_path, s3_endpoint.new_bucket(), proxy.url, {COPY_KEY: cap})
        for partition in range(2):  # one closed segment of about 8 MiB each: both slots upload at once
            w = env.writer("orders", partition)
            w.append_records(8 * 1000, value_size=1000, per_batch=50)
            w.roll()
            w.set_high_watermark()
        started = time.monotonic()
        assert main(["--config", str(env.config_path), "--parallelism", "2"], spark=spark) == 0
        elapsed = time.monotonic() - started
        with env.context() as ctx:
            tips = [r.topic_id_partition for r in ctx.metadata.list_partitions()]
            stored = sum(s.size_bytes for tip in tips for s in ctx.metadata.list_segments(tip))
        received, span = proxy.uploaded.total, proxy.uploaded.span()
        busiest = proxy.uploaded.max_over_windows(window)
    assert span is not None and received >= stored > 15 * MiB  # every segment through the endpoint
    burst = cap  # one second of each slot's part of the cap, both slots at once
    assert busiest <= cap * window + burst + MiB // 2, (busiest, window)
    assert received <= cap * (span[1] - started) + burst, (received, span[1] - started)
    assert elapsed >= (stored - burst) / cap  # no faster than the cap allows (a busy machine is only slower)
