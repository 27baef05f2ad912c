"""The rebuild job in local[2]: finds deleted and corrupted remote indexes on S3 and repairs them."""

from __future__ import annotations

from pathlib import Path

from tests.engine_support import TieringEnv, expire_lease, serving_no_broker, tip_of
from tests.runs.test_rebuild import (
    MAX_TIMESTAMP_MSB,
    broker_file,
    build_partition,
    flip_remote_byte,
)
from tests.runs.test_rebuild import remote_state as partition_state
from tests.services import S3Endpoint
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.kafka.topic import TopicPartition
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.runs.copy import run_copy
from tiering_core.runs.rebuild import IndexStatus
from tiering_core.storage.layout import ObjectKind

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
INDEXES = (ObjectKind.OFFSET_INDEX, ObjectKind.TIME_INDEX, ObjectKind.TRANSACTION_INDEX)
TIME_INDEX = ObjectKind.TIME_INDEX


def s3_env(tmp_path: Path, endpoint: S3Endpoint) -> TieringEnv:
    log_dir = tmp_path / "kafka-logs"
    log_dir.mkdir()
    remote = {"backend": "s3", "bucket": endpoint.new_bucket(), "prefix": "r/", "endpoint_url": endpoint.url}
    env = TieringEnv(tmp_path, log_dir, tmp_path / "tiering.yaml", remote, f"sqlite:///{tmp_path / 'm.db'}")
    env.write_config()
    return env


def test_rebuild_job_finds_and_repairs_deleted_and_corrupted_indexes(tmp_path: Path, spark, s3_endpoint) -> None:
    from spark_apps.rebuild_indexes import main, run_rebuild

    env = s3_env(tmp_path, s3_endpoint)
    writers = [build_partition(env, p) for p in range(2)]
    tps = [w.tp for w in writers]
    with env.context() as ctx:
        for w in writers:
            run_copy(ctx, w.tp)
        p0 = [s for s in ctx.metadata.list_segments(tip_of(writers[0])) if s.state == FINISHED]
        p1 = [s for s in ctx.metadata.list_segments(tip_of(writers[1])) if s.state == FINISHED]
        storage = ctx.storage
        storage.delete_keys([segment_ref(p0[0]).key(ObjectKind.OFFSET_INDEX, storage.prefix)])  # deleted
        for seg, kind in ((p1[1], ObjectKind.TIME_INDEX), (p0[1], ObjectKind.TRANSACTION_INDEX)):  # corrupted
            body = bytearray(storage.fetch(segment_ref(seg), kind))
            body[-3] ^= 0x5A
            storage.put_object(segment_ref(seg).key(kind, storage.prefix), bytes(body))

        lines: list[str] = []
        check = run_rebuild(ctx, tps, spark, repair=False, say=lines.append)
        statuses = {(c.partition, c.base_offset): c.status for c in check.checks}
        assert statuses == {
            (0, p0[0].start_offset): IndexStatus.MISSING,
            (0, p0[1].start_offset): IndexStatus.DIFFERED,
            (0, p0[2].start_offset): IndexStatus.OK,
            (1, p1[0].start_offset): IndexStatus.OK,
            (1, p1[1].start_offset): IndexStatus.DIFFERED,
            (1, p1[2].start_offset): IndexStatus.OK,
        }
        assert check.exit_code == 1
        assert sum(": differed: " in line for line in lines) == 2 and ": missing: " in "".join(lines)
        assert lines[-1].startswith("rebuild-indexes: 2 partition(s), 6 segment(s): 3 ok, 1 missing, 2 differed")

    # The app itself (in-process session): repair, local check, exit 0.
    assert main(["--config", str(env.config_path), "--partitions", "orders-0,orders-1", "--local"], spark=spark) == 0

    with env.context() as ctx:
        storage = ctx.storage
        for w in writers:
            finished = [s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED]
            assert len(finished) == 3
            for s in finished:
                ref = segment_ref(s)
                assert storage.verify_segment(ref) == []
                manifest = storage.read_manifest(ref)
                assert s.custom_metadata["crc32c"] == {k.value: e.crc32c for k, e in manifest.objects.items()}
                for kind in INDEXES:  # byte for byte what the broker wrote
                    expected = broker_file(w, s.start_offset, kind)
                    assert (storage.fetch(ref, kind) if kind in manifest.objects else None) == expected
        repaired_ids = {s.segment_id for s in ctx.metadata.list_segments(tip_of(writers[0]))}
        assert p0[0].segment_id not in repaired_ids and p0[2].segment_id in repaired_ids
        again = run_rebuild(ctx, [TopicPartition("orders", 0)], spark, repair=True, local=True)
    assert [c.status for c in again.checks] == [IndexStatus.OK] * 7 and again.exit_code == 0


def test_a_flipped_header_bit_in_a_remote_log_is_reported_and_not_repaired(
    tmp_path: Path, spark, s3_endpoint, capsys
) -> None:
    from spark_apps.rebuild_indexes import main

    env = s3_env(tmp_path, s3_endpoint)
    w = build_partition(env, 0)
    with env.context() as ctx:
        run_copy(ctx, w.tp)
        seg1 = [s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED][1]
        flip_remote_byte(ctx, seg1, ObjectKind.LOG, MAX_TIMESTAMP_MSB)
    before = partition_state(env, w)
    capsys.readouterr()
    assert main(["--config", str(env.config_path), "--partitions", "orders-0"], spark=spark) == 1
    out, err = capsys.readouterr()
    named = [line for line in err.splitlines() if str(seg1.segment_id) in line]
    assert len(named) == 1 and "error: damaged log" in named[0] and "recorded at copy time" in named[0]
    assert "1 damaged segment(s) left unrepaired" in out
    assert partition_state(env, w) == before  # nothing repaired, nothing deleted, no new attempt


def test_a_repair_fenced_on_spark_leaves_no_orphan_objects(tmp_path: Path, spark, s3_endpoint, monkeypatch) -> None:
    """The driver stalls once a repair has started: its lease lapses and another run takes the
    partition. The driver notices before it would commit the repair (it renews first), so the
    repair's objects are deleted and the loss is reported for the partition."""
    import spark_apps.rebuild_indexes as app
    import tiering_core.runs.rebuild.run as rebuild

    env = s3_env(tmp_path, s3_endpoint)
    w = build_partition(env, 0)
    with env.context() as ctx:
        run_copy(ctx, w.tp)
        seg0 = next(s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED)
        ctx.storage.delete_keys([segment_ref(seg0).key(ObjectKind.OFFSET_INDEX, ctx.storage.prefix)])
    attempts = []
    other = []
    real_start = rebuild.start_index_repair

    def start_then_lose_the_lease(store, damaged, lease):  # the driver stalls; another run takes over
        attempt = real_start(store, damaged, lease)
        attempts.append(attempt)
        with env.context() as ctx2:
            expire_lease(ctx2.metadata, tip_of(w))
            other.append(ctx2.metadata.acquire_lease(tip_of(w), holder="copy:other"))
        return attempt

    monkeypatch.setattr(rebuild, "start_index_repair", start_then_lose_the_lease)
    with env.context() as ctx:
        report = app.run_rebuild(ctx, [w.tp], spark, repair=True)
    monkeypatch.undo()
    assert report.exit_code == 1 and len(attempts) == 1
    assert [c.status for c in report.checks] == [IndexStatus.ERROR, IndexStatus.OK, IndexStatus.OK]
    assert (report.checks[0].error or "").startswith("repair not finished, the run lost the partition's lease")
    assert len(report.failures) == 1 and report.failures[0].startswith("orders-0: lost the partition's lease")
    _, objects = partition_state(env, w)
    assert not [k for k in objects if str(attempts[0].segment_id) in k]  # the repair's objects are gone
    with env.context() as ctx:
        ctx.metadata.release_lease(other[0])
    with env.context() as ctx:
        again = app.run_rebuild(ctx, [w.tp], spark, repair=True)
    assert again.results[0].segments_cleaned_up == 1
    assert [c.status for c in again.checks] == [IndexStatus.REPAIRED, IndexStatus.OK, IndexStatus.OK]


def test_a_rebuild_on_spark_counts_its_remote_reads_and_index_repairs(tmp_path: Path, spark, s3_endpoint) -> None:
    """Like ``tiering rebuild-indexes``: each examination is a remote fetch request of the segment's
    ``.log``, each index file a repair replaced an index repair, stored for the partition."""
    from spark_apps.rebuild_indexes import run_rebuild
    from tiering_core.metadata.values import NO_BROKER
    from tiering_core.monitoring.collect import collect_metrics

    env = s3_env(tmp_path, s3_endpoint)
    w = build_partition(env, 0)
    with env.context() as ctx:
        run_copy(ctx, w.tp)
        seg0, seg1, seg2 = [s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED]
        ctx.storage.delete_keys([segment_ref(seg0).key(ObjectKind.OFFSET_INDEX, ctx.storage.prefix)])
        report = run_rebuild(ctx, [w.tp], spark, repair=True, say=lambda line: None)
        assert [c.status for c in report.checks] == [IndexStatus.REPAIRED, IndexStatus.OK, IndexStatus.OK]
        (metrics,) = [p for p in collect_metrics(ctx).partitions if p.topic_id == w.topic_id and p.partition == 0]
    reads = metrics.counters_by_broker[NO_BROKER]
    assert (reads.fetch_requests, reads.fetch_errors, reads.index_repairs) == (3, 0, 1)
    assert reads.fetch_bytes == seg0.size_bytes + seg1.size_bytes + seg2.size_bytes  # each .log read whole once


def test_a_worker_serving_no_broker_repairs_what_the_store_holds_and_says_local_indexes_are_skipped(
    tmp_path: Path, spark, s3_endpoint, capsys, monkeypatch
) -> None:
    """A cluster's default-queue worker, without the broker's disk: every partition of the topic
    the store holds is checked and repaired; ``--local`` is skipped in one line saying why; a
    partition the store holds nothing of is named, before anything is held or changed."""
    import shutil

    from spark_apps.rebuild_indexes import main

    monkeypatch.delenv("TIERING_BROKER_ID", raising=False)
    env = s3_env(tmp_path, s3_endpoint)
    writers = [build_partition(env, p) for p in range(2)]
    expected: dict[int, dict[int, bytes | None]] = {}
    with env.context() as ctx:
        for w in writers:
            run_copy(ctx, w.tp)
            tiered = [s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED]
            expected[w.tp.partition] = {s.start_offset: broker_file(w, s.start_offset, TIME_INDEX) for s in tiered}
        damaged = tiered[1]  # orders-1's second segment loses its time index
        ctx.storage.delete_keys([segment_ref(damaged).key(TIME_INDEX, ctx.storage.prefix)])
        before = [(s.segment_id, s.state) for s in ctx.metadata.list_segments(tip_of(writers[1]))]
    cluster = str(serving_no_broker(env.config_path, tmp_path))
    shutil.rmtree(env.log_dir)  # no broker disk on this host
    capsys.readouterr()
    assert main(["--config", cluster, "--partitions", "orders-1,orders-9", "--local"], spark=spark) == 1
    err = capsys.readouterr().err
    assert err == "rebuild_indexes: failed: partition orders-9 has no remote data (unknown to the metadata store)\n"
    with env.context() as ctx:  # nothing held, nothing changed
        assert [(s.segment_id, s.state) for s in ctx.metadata.list_segments(tip_of(writers[1]))] == before
    assert main(["--config", cluster, "--topic", "orders", "--local"], spark=spark) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if "local indexes" in line] == [
        "rebuild-indexes: local indexes of 2 partition(s) skipped: this process serves no broker (no log dir to "
        "read); the remote segments are checked"
    ]
    assert sum(": repaired: " in line for line in out) == 1, out
    with env.context() as ctx:
        for w in writers:
            finished = [s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED]
            assert damaged.segment_id not in {s.segment_id for s in finished} and len(finished) == 3
            stored = {s.start_offset: ctx.storage.fetch(segment_ref(s), TIME_INDEX) for s in finished}
            assert stored == expected[w.tp.partition]  # byte for byte what the broker wrote
