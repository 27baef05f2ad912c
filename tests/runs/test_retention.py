"""Remote retention (docs/kafka-rules.md section 6 read with 10): size, time, log start, lineage, delete lag,
copies in flight and killed, DeleteRecords applied through the platform (and a replica's log start,
never one), dry runs and runs killed at each step."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.engine_support import (
    TieringEnv,
    assert_partition_state_published,
    expire_lease,
    new_leader_copies,
    old_leader_copies,
    segment_objects,
    tip_of,
    write_segments,
)
from tiering_core.errors import TieringGapError
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.kafka.partition_log import PartitionLog
from tiering_core.kafka.topic import TopicIdPartition
from tiering_core.metadata.errors import TopicIdConflictError
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.runs.copy import run_copy
from tiering_core.runs.copy_report import CopyResult
from tiering_core.runs.delete_records import apply_delete_records
from tiering_core.runs.retention import run_retention
from tiering_core.storage.layout import parse_segment_key
from tiering_core.tier.retention_plan import (
    REASON_COPY_LEFTOVER,
    REASON_DANGLING,
    delete_lag,
    plan_retention,
    retention_size_total,
    time_retention_limit,
)
from tiering_core.tier.view import load_tier_view, tier_view

ROOT = Path(__file__).resolve().parents[2]
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
DELETING = RemoteLogSegmentState.DELETE_SEGMENT_STARTED


# --- helpers shared with test_removal ---------------------------------------------------------


def remote_ranges(env: TieringEnv, writer: PartitionWriter, states: tuple = (FINISHED,)) -> list[tuple[int, int]]:
    with env.context() as ctx:
        return [(s.start_offset, s.end_offset) for s in ctx.metadata.list_segments(tip_of(writer)) if s.state in states]


def snapshot_state(env: TieringEnv, tip: TopicIdPartition) -> tuple:
    """Everything a run may change: segment rows, the partition row, the objects."""
    with env.context() as ctx:
        rows = [
            (s.segment_id, s.state, s.start_offset, s.end_offset, s.event_time)
            for s in ctx.metadata.list_segments(tip, include_deleted=True)
        ]
        record = ctx.metadata.get_partition(tip)
        partition = (
            None
            if record is None
            else (record.delete_state, record.dropped, record.remote_log_start_offset, record.lease_holder)
        )
        observed = [o.offset for o in ctx.metadata.delete_records_observations(tip)]
        keys = sorted(o.key for o in ctx.storage.list_objects(tip))
    return rows, partition, observed, keys


def end_state(env: TieringEnv, tips: list[TopicIdPartition]) -> list[tuple]:
    """What two runs must agree on: metadata rows (no timestamps), partition rows, object keys."""
    out = []
    with env.context() as ctx:
        for tip in tips:
            rows = sorted(
                (str(s.segment_id), s.state.value, s.start_offset, s.end_offset)
                for s in ctx.metadata.list_segments(tip, include_deleted=True)
            )
            record = ctx.metadata.get_partition(tip)
            partition = (
                None
                if record is None
                else (
                    record.delete_state.value if record.delete_state else None,
                    record.dropped,
                    record.remote_log_start_offset,
                )
            )
            keys = sorted(o.key for o in ctx.storage.list_objects(tip))
            out.append((tip.topic_id, rows, partition, keys))
    return out


def assert_objects_match_metadata(env: TieringEnv, tip: TopicIdPartition) -> None:
    """No object without live metadata and no live (finished) metadata without its objects; the
    partition's state object what the store holds."""
    with env.context() as ctx:
        live = {s.segment_id: s for s in ctx.metadata.list_segments(tip)}
        assert all(s.state == FINISHED for s in live.values()), [s.state for s in live.values()]
        assert_partition_state_published(ctx, tip)
        for obj in segment_objects(ctx, tip):
            parsed = parse_segment_key(obj.key, ctx.storage.prefix)
            assert parsed is not None and parsed[0].segment_id in live, f"object without metadata: {obj.key}"
        for segment in live.values():
            from tiering_core.engine.segment_ops import segment_ref

            assert ctx.storage.verify_segment(segment_ref(segment)) == [], segment


def twin_of(env: TieringEnv) -> TieringEnv:
    """A copy of a filesystem-backed environment (log dir, SQLite file, objects) in another
    directory, for an uninterrupted run to compare a killed and resumed one with."""
    twin_root = env.root.parent / f"{env.root.name}-twin"
    shutil.copytree(env.root, twin_root)
    config = twin_root / env.config_path.name
    config.write_text(env.config_path.read_text().replace(str(env.root), str(twin_root)))
    remote = {**env.remote, "root": env.remote["root"].replace(str(env.root), str(twin_root))}
    url = env.metadata_url.replace(str(env.root), str(twin_root))
    return TieringEnv(twin_root, twin_root / env.log_dir.name, config, remote, url, dict(env.topics))


def run_killed(script: str, env: TieringEnv, *args: str) -> None:
    """Run ``script`` in a fresh interpreter; it must die of SIGKILL."""
    proc = subprocess.run(
        [sys.executable, "-c", script, str(env.config_path), *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-3000:]


@contextmanager
def copy_blocked_mid_upload(env: TieringEnv, w: PartitionWriter) -> Iterator[list[CopyResult]]:
    """A copy run in another thread, holding the partition's lease, stopped inside the upload of
    its first segment (after COPY_SEGMENT_STARTED) until the block ends; yields its result list."""
    uploading, release = threading.Event(), threading.Event()
    results: list[CopyResult] = []
    errors: list[BaseException] = []

    def copy() -> None:
        try:
            with env.context() as ctx:
                upload = ctx.storage.copy_segment

                def held(ref: Any, files: Any, **kwargs: Any) -> Any:
                    uploading.set()
                    assert release.wait(60)
                    return upload(ref, files, **kwargs)

                ctx.storage.copy_segment = held  # type: ignore[method-assign]
                results.append(run_copy(ctx, w.tp))
        except BaseException as exc:  # surfaced in the test thread
            errors.append(exc)
            uploading.set()

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    assert uploading.wait(60)
    try:
        assert not errors, errors
        yield results
    finally:
        release.set()
        thread.join(60)
    assert not errors, errors
    assert not thread.is_alive()


def gapped_partition(env: TieringEnv) -> PartitionWriter:
    """A partition tiered with two gaps: copied [0..4], [5..9]; the broker deleted [10..14] before
    it was tiered; copied [15..19], [20..24]; then it deleted [25..34]; copied [35..39]. Each
    part's records carry one timestamp: 1_000_000, then 2_000_000, then 3_000_000."""
    clock = {"now": 1_000_000}
    w = env.writer(clock=lambda: clock["now"])
    write_segments(w, 2)
    w.set_high_watermark()
    with env.context() as ctx:
        run_copy(ctx, w.tp)
    for now, segments, deleted in ((2_000_000, 3, 3), (3_000_000, 3, 4)):
        clock["now"] = now
        write_segments(w, segments)
        w.set_high_watermark()
        w.delete_oldest_segments(deleted)
        with env.context() as ctx, pytest.raises(TieringGapError):
            run_copy(ctx, w.tp)
    assert remote_ranges(env, w) == [(0, 4), (5, 9), (15, 19), (20, 24), (35, 39)]
    return w


def assert_gaps_reported(env: TieringEnv, writer: PartitionWriter, gaps: list[list[int]]) -> None:
    """``status`` (its JSON, its table and the cluster view), the metrics exposition and the
    page's figures (its alerts and its partition rows) each report exactly ``gaps`` for the
    partition, and no other gap."""
    from prometheus_client.parser import text_string_to_metric_families

    from tiering_core.monitoring.collect import collect_metrics
    from tiering_core.monitoring.exposition import render
    from tiering_core.monitoring.overview import AlertEntry, collect_overview
    from tiering_core.report.tables import format_status_table
    from tiering_core.tier.cluster import cluster_status
    from tiering_core.tier.status import collect_status

    tp = writer.tp
    lost = sum(end - start + 1 for start, end in gaps)
    with env.context() as ctx:
        (row,) = collect_status(ctx, tp.topic, tp.partition)
        (cluster,) = cluster_status(ctx, tp.topic, tp.partition)
        snapshot = collect_metrics(ctx)
        overview = collect_overview(ctx)
    assert row.to_dict()["gaps"] == cluster.gaps == gaps
    table = format_status_table([row])
    named = "GAP " + ",".join(f"{a}..{b}" for a, b in gaps)
    assert (named in table) if gaps else ("GAP " not in table), table
    (partition,) = snapshot.partitions
    assert (partition.gap_count, partition.gap_offsets) == (len(gaps), lost)
    exposed = {
        s.name: s.value
        for family in text_string_to_metric_families(render(snapshot))
        for s in family.samples
        if s.name in ("tiering_gaps", "tiering_gap_offsets")
        and s.labels == {"topic": tp.topic, "partition": str(tp.partition)}
    }
    assert exposed == {"tiering_gaps": len(gaps), "tiering_gap_offsets": lost}
    assert overview.gaps == ([AlertEntry(tp.topic, str(tp), lost)] if gaps else [])
    (summary,) = overview.topics
    assert (summary.gap_partitions, summary.gap_offsets) == ((1, lost) if gaps else (0, 0))


# --- the broker's own retention ---------------------------------------------------------------


def test_broker_local_retention_never_deletes_remote_data(tiering_env: TieringEnv) -> None:
    from tiering_core.read.reader import open_reader

    w = tiering_env.writer()
    write_segments(w, 2)
    w.become_leader(1)
    write_segments(w, 2)
    w.set_high_watermark()
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
    w.delete_oldest_segments(3)  # epoch 0 is gone from the broker's cache
    assert [e.epoch for e in w.epochs.entries] == [1]
    with tiering_env.context() as ctx:
        result = run_retention(ctx, w.tp)
        assert result.segments_deleted == 0 and result.new_remote_log_start_offset is None
        listed = [(s.start_offset, s.end_offset, s.leader_epochs) for s in ctx.metadata.list_segments(tip_of(w))]
        records = open_reader(ctx, w.tp).read(0, 100)  # what `tiering fetch` reads
    assert listed == [(0, 4, {0: 0}), (5, 9, {0: 5}), (10, 14, {1: 10}), (15, 19, {1: 15})]
    assert [r.offset for r in records] == list(range(20))
    assert [r.leader_epoch for r in records] == [0] * 10 + [1] * 10
    assert [r.key for r in records[:5]] == [f"key-{i}".encode() for i in range(5)]


def test_a_replica_log_start_inside_its_segment_deletes_nothing(fs_env: TieringEnv) -> None:
    """A follower copies its leader's log start (Kafka's maybeIncrementLogStartOffset) and rolls its
    segments at offsets of its own, so the leader's own retention shows in the follower's files as a
    log start inside a segment, checkpointed in log-start-offset-checkpoint; it stays there on a
    follower that becomes leader, and a DeleteRecords sent to the cluster directly looks the same.
    None of it is a DeleteRecords applied through the platform: with retention.ms -1 retention
    deletes nothing, and nothing is recorded."""
    w = fs_env.writer()
    write_segments(w, 3)  # [0..4], [5..9], [10..14]
    w.append_records(2)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        assert run_copy(ctx, w.tp).segments_copied == 3
    w.delete_records(7)  # the files of a replica whose log start moved to 7: first base 5, entry 7
    log = PartitionLog.open(w.path)
    assert (log.segments[0].base_offset, log.log_start_offset_checkpoint) == (5, 7)
    before = snapshot_state(fs_env, tip_of(w))
    with fs_env.context() as ctx:
        view = tier_view(ctx, log)
        assert (view.local_log_start_offset, view.global_log_start_offset, view.delete_records_offset) == (7, 0, None)
        assert run_retention(ctx, w.tp, dry_run=True).planned == []
        assert delete_lag(view, ctx.metadata, ctx.topic_config("orders"), int(time.time() * 1000)) == (0, 0)
        result = run_retention(ctx, w.tp)
        assert (result.segments_deleted, result.remote_log_start_offset) == (0, 0)
    assert snapshot_state(fs_env, tip_of(w)) == before
    assert remote_ranges(fs_env, w) == [(0, 4), (5, 9), (10, 14)]


def test_the_clusters_log_start_inside_a_tiered_segment_deletes_nothing(fs_env: TieringEnv) -> None:
    """The cluster's log start (``kafka:`` section) inside a tiered segment, the leader's retention or
    a DeleteRecords sent to the cluster directly, long before the checkpoint file shows it: read from
    the leader's files or a follower's, it is the local log start at once, never the global one."""
    from tiering_core.kafka.log_writer import DEMO_NODE_ID
    from tiering_core.live.partition import LiveOffsets, LivePartition

    w = fs_env.writer()
    write_segments(w, 3)  # [0..4], [5..9], [10..14]
    w.append_records(2)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        assert run_copy(ctx, w.tp).segments_copied == 3
        log = ctx.partition_log(w.tp)
        assert log.log_start_offset_checkpoint is None  # the file does not show it yet
        for leader in (DEMO_NODE_ID, DEMO_NODE_ID + 1):
            live = LivePartition(w.tp, w.topic_id, LiveOffsets(7, 17, 17), leader_id=leader)
            view = load_tier_view(log, ctx.metadata, live)
            assert (view.local_log_start_offset, view.global_log_start_offset) == (7, 0)
            assert view.copy_candidates() == [] and view.tiering_gap() is None
            plan = plan_retention(view, ctx.metadata, ctx.topic_config("orders"), int(time.time() * 1000))
            assert (plan.deletions, plan.new_log_start_offset) == ((), None)
        assert ctx.metadata.delete_records_observations(tip_of(w)) == []


def test_delete_records_rows_an_older_version_took_from_a_replica_do_not_count(fs_env: TieringEnv) -> None:
    """Rows an older version recorded as DeleteRecords from the checkpoint file, the cluster's log start
    or the metadata schema 0001 column are kept (nothing stored is deleted) but never move the global
    log start; one applied through the platform does, also below them, and applying it again
    changes nothing more."""
    from sqlalchemy import create_engine, text

    w = fs_env.writer()
    write_segments(w, 3)
    w.append_records(2)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
    engine = create_engine(fs_env.metadata_url)
    try:
        with engine.begin() as conn:
            pid = conn.execute(text("SELECT id FROM tiering_partitions")).scalar_one()
            for offset, source in (
                (7, "log-start-offset-checkpoint"),
                (9, "ListOffsets (the cluster's log start offset)"),
                (12, "metadata schema 0001"),
            ):
                conn.execute(
                    text(
                        "INSERT INTO tiering_delete_records (partition_id, before_offset, source, observed_ms, token) "
                        "VALUES (:pid, :offset, :source, 0, 1)"
                    ),
                    {"pid": pid, "offset": offset, "source": source},
                )
    finally:
        engine.dispose()
    with fs_env.context() as ctx:
        tip = tip_of(w)
        assert ctx.metadata.get_delete_records_offset(tip) is None
        assert tier_view(ctx, ctx.partition_log(w.tp)).global_log_start_offset == 0
        assert run_retention(ctx, w.tp).segments_deleted == 0
        applied = apply_delete_records(ctx, w.tp, 6)  # below the rows of old: recorded all the same
        assert (applied.log_start_offset, applied.sent_to_cluster) == (6, False)
        assert apply_delete_records(ctx, w.tp, 6).log_start_offset == 6  # again: nothing more
        assert apply_delete_records(ctx, w.tp, 3).log_start_offset == 6  # lower: the log start stays
        rows = ctx.metadata.delete_records_observations(tip)
        assert [(r.offset, r.applied) for r in rows] == [(6, True), (7, False), (9, False), (12, False)]
        assert ctx.metadata.get_delete_records_offset(tip) == 6
        result = run_retention(ctx, w.tp)
        assert [p["reason"] for p in result.planned] == ["log-start-offset-breach"]
    assert remote_ranges(fs_env, w) == [(5, 9), (10, 14)]


# --- size, time and log-start breaches --------------------------------------------------------


@pytest.mark.parametrize("k", [0, 1, 17, 50])
def test_size_retention_deletes_exactly_the_first_k(fs_env: TieringEnv, k: int) -> None:
    w = fs_env.writer()
    write_segments(w, 50, records=2)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        assert run_copy(ctx, w.tp).segments_copied == 50
        remote = [s.size_bytes for s in ctx.metadata.list_segments(tip_of(w))]
    # Local data above the highest copied offset: three closed segments and a non-empty active one.
    write_segments(w, 3, records=4)
    w.append_records(7, value_size=80)
    w.set_high_watermark()
    segments = sorted(w.path.glob("*.log"))
    local_above = sum(p.stat().st_size for p in segments[50:])
    assert len(segments) == 54 and segments[-1].stat().st_size > 0 and local_above > max(remote)
    keep_bytes = sum(remote[k:]) + local_above
    fs_env.write_config(orders={"retention.bytes": keep_bytes})
    with fs_env.context() as ctx:
        view = load_tier_view(ctx.partitions("orders", 0)[0], ctx.metadata)
        assert retention_size_total(view, ctx.metadata) == sum(remote) + local_above
        result = run_retention(ctx, w.tp)
    assert result.segments_deleted == k and result.bytes_deleted == sum(remote[:k])
    assert remote_ranges(fs_env, w) == [(2 * i, 2 * i + 1) for i in range(k, 50)]
    assert result.remote_log_start_offset == (2 * k if k else 0)


def test_time_retention(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    t = {"now": 1_000_000}
    w.clock = lambda: t["now"]
    for _ in range(4):
        w.append_records(3)
        w.roll()
        t["now"] += 1000
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
    fs_env.write_config(orders={"retention.ms": 1500})
    with fs_env.context() as ctx:
        result = run_retention(ctx, w.tp, now_ms=1_000_000 + 3000)  # limit 1_001_500: segments 0 and 1
    assert result.segments_deleted == 2 and result.new_remote_log_start_offset == 6
    assert remote_ranges(fs_env, w) == [(6, 8), (9, 11)]


def test_a_gap_retention_has_passed_is_history_and_one_at_the_log_start_is_still_lost(
    fs_env: TieringEnv,
) -> None:
    """Retention deleting only the segments below a gap moves the remote log start to the gap's
    first offset (the last deleted end + 1): those offsets would still be retained had they been
    tiered, so they are still reported lost. Once it deletes a segment after the gap, the log
    start is past it: history, in status, the metrics and the page alike. Each move is published
    in the partition's state object; a run that moves nothing leaves it as it was."""
    w = gapped_partition(fs_env)
    assert_gaps_reported(fs_env, w, [[10, 14], [25, 34]])
    fs_env.write_config(orders={"retention.ms": 1000})
    with fs_env.context() as ctx:
        result = run_retention(ctx, w.tp, now_ms=1_500_000)  # [0..4], [5..9] are older than 1s
        published = assert_partition_state_published(ctx, tip_of(w))
    assert (result.segments_deleted, result.remote_log_start_offset) == (2, 10)
    assert (published.remote_log_start_offset, published.gaps) == (10, ((10, 14), (25, 34)))
    assert_gaps_reported(fs_env, w, [[10, 14], [25, 34]])
    with fs_env.context() as ctx:
        result = run_retention(ctx, w.tp, now_ms=2_500_000)  # [15..19], [20..24] too
        published = assert_partition_state_published(ctx, tip_of(w))
    assert (result.segments_deleted, result.remote_log_start_offset) == (2, 25)
    assert (published.remote_log_start_offset, published.gaps) == (25, ((25, 34),))
    assert_gaps_reported(fs_env, w, [[25, 34]])
    with fs_env.context() as ctx:
        result = run_retention(ctx, w.tp, now_ms=3_500_000)  # and [35..39]
        published = assert_partition_state_published(ctx, tip_of(w))
    assert (result.segments_deleted, result.remote_log_start_offset) == (1, 40)
    assert (published.remote_log_start_offset, published.gaps) == (40, ())
    assert remote_ranges(fs_env, w) == []
    assert_gaps_reported(fs_env, w, [])
    with fs_env.context() as ctx:
        assert run_retention(ctx, w.tp, now_ms=4_500_000).segments_deleted == 0
        unchanged = ctx.storage.read_partition_state(tip_of(w))
    assert unchanged is not None and unchanged.updated_at_ms == published.updated_at_ms  # not written again


def test_time_retention_needs_a_non_negative_cleanup_limit(fs_env: TieringEnv) -> None:
    """Kafka's ``cleanupUntilMs >= 0``: with now - retention.ms < 0 nothing breaches time, not even
    a segment whose records carry no timestamp (-1)."""
    from tiering_core.config import TopicConfig

    assert time_retention_limit(TopicConfig(retention_ms=1001), 1000) is None
    assert time_retention_limit(TopicConfig(retention_ms=1000), 1000) == 0
    assert time_retention_limit(TopicConfig(retention_ms=-1), 1000) is None
    w = fs_env.writer()
    for _ in range(2):
        w.append([(b"k", b"no timestamp")], timestamp=-1)
        w.roll()
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        assert [s.max_timestamp for s in ctx.metadata.list_segments(tip_of(w))] == [-1, -1]
    fs_env.write_config(orders={"retention.ms": 1001})
    with fs_env.context() as ctx:
        assert run_retention(ctx, w.tp, now_ms=1000).segments_deleted == 0  # limit would be -1
        assert run_retention(ctx, w.tp, now_ms=1001).segments_deleted == 2  # limit 0: -1 <= 0


def test_log_start_breach_after_delete_records(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    write_segments(w, 4)
    w.set_high_watermark()
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        apply_delete_records(ctx, w.tp, 12)  # through the platform
    w.delete_records(12)  # and on the broker
    with tiering_env.context() as ctx:
        result = run_retention(ctx, w.tp)
    assert result.segments_deleted == 2
    assert [p["reason"] for p in result.planned] == ["log-start-offset-breach"] * 2
    assert remote_ranges(tiering_env, w) == [(10, 14), (15, 19)]


# --- dangling deletes, dry runs, disabled tiering, removed partitions ---------------------------


def leave_dangling_delete(env: TieringEnv, w: PartitionWriter, index: int = 0) -> None:
    """A retention run that died after DELETE_SEGMENT_STARTED of one segment."""
    with env.context() as ctx:
        segment = ctx.metadata.list_segments(tip_of(w))[index]
        lease = ctx.metadata.acquire_lease(tip_of(w), holder="crashed-retention")
        ctx.metadata.update_segment_state(segment.segment_id, DELETING, lease)
        ctx.metadata.release_lease(lease)


def test_dangling_delete_is_finished_and_dry_run_changes_nothing(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
    leave_dangling_delete(fs_env, w)
    before = snapshot_state(fs_env, tip_of(w))
    with fs_env.context() as ctx:
        dry = run_retention(ctx, w.tp, dry_run=True)
    assert [p["reason"] for p in dry.planned] == [REASON_DANGLING]
    assert snapshot_state(fs_env, tip_of(w)) == before
    with fs_env.context() as ctx:
        assert run_retention(ctx, w.tp).segments_deleted == 1
    assert remote_ranges(fs_env, w, states=tuple(RemoteLogSegmentState)) == [(5, 9), (10, 14)]


def test_dry_run_reports_the_log_start_offset_it_would_record(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    write_segments(w, 4)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        sizes = [s.size_bytes for s in ctx.metadata.list_segments(tip_of(w))]
    fs_env.write_config(orders={"retention.bytes": sum(sizes[2:])})
    before = snapshot_state(fs_env, tip_of(w))
    with fs_env.context() as ctx:
        dry = run_retention(ctx, w.tp, dry_run=True)
    assert snapshot_state(fs_env, tip_of(w)) == before
    assert dry.new_remote_log_start_offset == 10
    assert [(p["start_offset"], p["reason"]) for p in dry.planned] == [
        (0, "retention.bytes-breach"),
        (5, "retention.bytes-breach"),
    ]
    with fs_env.context() as ctx:
        real = run_retention(ctx, w.tp)
    assert real.new_remote_log_start_offset == 10 == real.remote_log_start_offset
    assert [p["segment_id"] for p in real.planned] == [p["segment_id"] for p in dry.planned]


def test_dangling_delete_is_finished_even_with_tiering_disabled(fs_env: TieringEnv) -> None:
    """remote.storage.enable=false without remote.log.delete.on.disable keeps the data, but a
    deletion already started is still finished (its objects may be half gone)."""
    w = fs_env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
    leave_dangling_delete(fs_env, w, index=1)
    fs_env.write_config(orders={"remote.storage.enable": False, "retention.ms": 0})
    with fs_env.context() as ctx:
        result = run_retention(ctx, w.tp)
    assert result.segments_deleted == 1 and [p["reason"] for p in result.planned] == [REASON_DANGLING]
    assert remote_ranges(fs_env, w, states=tuple(RemoteLogSegmentState)) == [(0, 4), (10, 14)]
    assert_objects_match_metadata(fs_env, tip_of(w))


def test_retention_on_a_removed_partition_does_nothing(fs_env: TieringEnv) -> None:
    from tiering_core.runs.removal import delete_partition

    w = fs_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        delete_partition(ctx, w.tp, topic_id=w.topic_id, force=True)  # still in the log dirs: named, forced
    fs_env.write_config(orders={"retention.ms": 0})
    before = snapshot_state(fs_env, tip_of(w))
    with fs_env.context() as ctx:
        for dry_run in (True, False):
            result = run_retention(ctx, w.tp, dry_run=dry_run)
            assert result.skipped_reason == "removed" and result.segments_deleted == 0 and not result.planned
    assert snapshot_state(fs_env, tip_of(w)) == before


# --- delete lag -------------------------------------------------------------------------------


def test_delete_lag_counts_breaches_and_started_deletions_once(fs_env: TieringEnv) -> None:
    w = fs_env.writer()
    write_segments(w, 5)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        sizes = [s.size_bytes for s in ctx.metadata.list_segments(tip_of(w))]
    leave_dangling_delete(fs_env, w, index=0)  # started deletions: counted however retention sees them
    leave_dangling_delete(fs_env, w, index=3)
    # The size total counts the finished segments 1, 2 and 4: keeping one leaves 1 and 2 breaching.
    fs_env.write_config(orders={"retention.bytes": sizes[4]})
    before = snapshot_state(fs_env, tip_of(w))
    with fs_env.context() as ctx:
        view = load_tier_view(ctx.partitions("orders", 0)[0], ctx.metadata)
        topic = ctx.config.topic_config("orders")
        plan = plan_retention(view, ctx.metadata, topic, 0, copy_in_progress=False)
        lag = delete_lag(view, ctx.metadata, topic, 0)
    assert snapshot_state(fs_env, tip_of(w)) == before  # read-only
    assert [(d.segment.start_offset, d.reason) for d in plan.deletions] == [
        (0, REASON_DANGLING),
        (5, "retention.bytes-breach"),
        (10, "retention.bytes-breach"),
        (15, REASON_DANGLING),
    ]
    assert lag == (4, sum(sizes[:4]))
    with fs_env.context() as ctx:
        result = run_retention(ctx, w.tp, now_ms=0)
    assert (result.segments_deleted, result.bytes_deleted) == lag
    with fs_env.context() as ctx:
        view = load_tier_view(ctx.partitions("orders", 0)[0], ctx.metadata)
        assert delete_lag(view, ctx.metadata, topic, 0) == (0, 0)
    assert remote_ranges(fs_env, w) == [(20, 24)]


# --- copies in flight and killed copies -------------------------------------------------------


def copied_then_one_more(env: TieringEnv) -> PartitionWriter:
    """Three segments copied, a fourth closed and not copied, a non-empty active segment."""
    w = env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    with env.context() as ctx:
        assert run_copy(ctx, w.tp).segments_copied == 3
    write_segments(w, 1)
    w.append_records(4)
    w.set_high_watermark()
    return w


def test_retention_bytes_zero_deletes_nothing_while_a_copy_runs(fs_env: TieringEnv) -> None:
    w = copied_then_one_more(fs_env)
    fs_env.write_config(orders={"retention.bytes": 0})
    with copy_blocked_mid_upload(fs_env, w) as copied:
        assert remote_ranges(fs_env, w, states=(STARTED,)) == [(15, 19)]
        before = snapshot_state(fs_env, tip_of(w))
        with fs_env.context() as ctx:
            result = run_retention(ctx, w.tp)
        assert result.fenced and result.segments_deleted == 0
        assert snapshot_state(fs_env, tip_of(w)) == before
    assert copied[0].segments_copied == 1
    with fs_env.context() as ctx:
        result = run_retention(ctx, w.tp)
    assert result.segments_deleted == 4 and result.copies_cleaned == 0
    assert remote_ranges(fs_env, w, states=tuple(RemoteLogSegmentState)) == []
    assert result.remote_log_start_offset == 20


def test_segment_being_copied_counts_against_the_size_budget_not_the_remote_size(fs_env: TieringEnv) -> None:
    from tiering_core.tier.status import collect_status

    w = copied_then_one_more(fs_env)
    local = {int(p.stem): p.stat().st_size for p in w.path.glob("*.log")}
    with copy_blocked_mid_upload(fs_env, w):
        with fs_env.context() as ctx:
            finished = ctx.metadata.list_segments(tip_of(w))[:3]
            assert [s.state for s in finished] == [FINISHED] * 3
            copying = ctx.metadata.list_segments(tip_of(w))[3]
            assert (copying.state, copying.start_offset) == (STARTED, 15)
            view = load_tier_view(ctx.partitions("orders", 0)[0], ctx.metadata)
            total = retention_size_total(view, ctx.metadata)
            assert total == sum(s.size_bytes for s in finished) + local[15] + local[20]
            (row,) = collect_status(ctx, "orders", 0)
            assert (row.remote_segments, row.remote_bytes) == (3, sum(s.size_bytes for s in finished))
        # A budget that only the first segment breaches, counting the segment being copied.
        fs_env.write_config(orders={"retention.bytes": total - finished[0].size_bytes})
        with fs_env.context() as ctx:
            topic = ctx.config.topic_config("orders")
            plan = plan_retention(view, ctx.metadata, topic, 0)  # a copy may be running: stop at it
            assert [d.segment.start_offset for d in plan.deletions] == [0]
            assert delete_lag(view, ctx.metadata, topic, 0) == (1, finished[0].size_bytes)
            assert run_retention(ctx, w.tp).fenced
    with fs_env.context() as ctx:
        result = run_retention(ctx, w.tp)  # the copied segment moved from local to remote: same total
    assert result.segments_deleted == 1
    assert remote_ranges(fs_env, w) == [(5, 9), (10, 14), (15, 19)]


COPY_KILLED_MID_UPLOAD = textwrap.dedent(
    """
    import os, signal, sys
    import tiering_core.runs.copy as copy_mod
    from tiering_core.config import load_config
    from tiering_core.context import TieringContext
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.storage.layout import ObjectKind

    def upload_then_die(storage, upload):  # one object of the segment is stored, then the kill
        storage.put_object(upload.ref.key(ObjectKind.LOG, storage.prefix), upload.files[ObjectKind.LOG])
        os.kill(os.getpid(), signal.SIGKILL)

    with TieringContext.open(load_config(sys.argv[1])) as ctx:
        copy_mod.run_copy(ctx, TopicPartition("orders", 0), uploader=upload_then_die)
    """
)


def test_killed_copy_leftover_is_cleaned_and_does_not_stop_retention(fs_env: TieringEnv) -> None:
    w = copied_then_one_more(fs_env)
    run_killed(COPY_KILLED_MID_UPLOAD, fs_env)
    assert remote_ranges(fs_env, w, states=(STARTED,)) == [(15, 19)]
    with fs_env.context() as ctx:
        leftover_keys = [o.key for o in ctx.storage.list_objects(tip_of(w)) if "00000000000000000015-" in o.key]
    assert leftover_keys  # the killed copy stored an object
    with fs_env.context() as ctx:
        expire_lease(ctx.metadata, tip_of(w))  # its lease lapses
    fs_env.write_config(orders={"retention.bytes": 0})
    before = snapshot_state(fs_env, tip_of(w))
    with fs_env.context() as ctx:
        dry = run_retention(ctx, w.tp, dry_run=True)
    assert snapshot_state(fs_env, tip_of(w)) == before
    assert dry.copies_cleaned == 1 and dry.stopped_at is None
    assert [(p["start_offset"], p["reason"]) for p in dry.planned] == [
        (0, "retention.bytes-breach"),
        (5, "retention.bytes-breach"),
        (10, "retention.bytes-breach"),
        (15, REASON_COPY_LEFTOVER),
    ]
    with fs_env.context() as ctx:
        result = run_retention(ctx, w.tp)
    assert result.copies_cleaned == 1 and result.segments_deleted == 3 and result.stopped_at is None
    assert remote_ranges(fs_env, w, states=tuple(RemoteLogSegmentState)) == []
    assert_objects_match_metadata(fs_env, tip_of(w))
    with fs_env.context() as ctx:
        assert segment_objects(ctx, tip_of(w)) == []


# --- overlapping re-uploads and unclean elections -----------------------------------------------


def reupload_first_segment(env: TieringEnv, w: PartitionWriter) -> None:
    """A second finished copy of segment [0..4] overlapping the first (as a re-upload is)."""
    from tiering_core.runs.segment_copy import finish_segment, prepare_segment_upload, upload_segment
    from tiering_core.tier.view import CopyCandidate

    with env.context() as ctx:
        partition_log = ctx.partitions("orders", 0)[0]
        view = load_tier_view(partition_log, ctx.metadata)
        segments = partition_log.segments
        lease = ctx.metadata.acquire_lease(tip_of(w), holder="reupload")
        upload = prepare_segment_upload(
            view, CopyCandidate(segments[0], segments[1].base_offset), run_token=lease.token
        )
        ctx.metadata.add_segment(upload.metadata, lease)
        finish_segment(ctx.metadata, upload, upload_segment(ctx.storage, upload), lease)
        ctx.metadata.release_lease(lease)


@pytest.mark.parametrize("breach", ["retention.bytes", "delete-records"])
def test_overlapping_reuploads_are_both_deleted_when_breached(fs_env: TieringEnv, breach: str) -> None:
    w = fs_env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
    reupload_first_segment(fs_env, w)
    assert remote_ranges(fs_env, w) == [(0, 4), (0, 4), (5, 9), (10, 14)]
    with fs_env.context() as ctx:
        sizes = [s.size_bytes for s in ctx.metadata.list_segments(tip_of(w))]
    if breach == "retention.bytes":
        fs_env.write_config(orders={"retention.bytes": sum(sizes[2:])})  # exactly both copies of [0..4]
    else:  # inside [5..9]: [0..4] ends below the log start
        with fs_env.context() as ctx:
            apply_delete_records(ctx, w.tp, 7)
        w.delete_records(7)
    with fs_env.context() as ctx:
        result = run_retention(ctx, w.tp)
    assert result.segments_deleted == 2
    assert remote_ranges(fs_env, w) == [(5, 9), (10, 14)]
    assert_objects_match_metadata(fs_env, tip_of(w))


@pytest.mark.parametrize(
    ("delete_records", "kept"),
    [(None, True), (120, True), (160, False), (200, False)],
    ids=["no-delete-records", "log-start-below-it", "epochs-predate-lineage", "log-start-passes-it"],
)
def test_divergent_segment_after_an_unclean_election(
    tiering_env: TieringEnv, delete_records: int | None, kept: bool
) -> None:
    from tiering_core.read.reader import open_reader
    from tiering_core.tier.status import collect_status

    w = tiering_env.writer()
    w.append_records(100)
    w.become_leader(1)
    w.append_records(100)
    w.roll()  # [0..199] epochs {0:0, 1:100}
    w.append_records(5)
    w.set_high_watermark()
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        (divergent,) = ctx.metadata.list_segments(tip_of(w))
    assert (divergent.start_offset, divergent.end_offset) == (0, 199)
    w.truncate_to(150)  # unclean election: the new leader's epoch 1 ends at 149
    w.become_leader(2)
    with tiering_env.context() as ctx:
        view = load_tier_view(ctx.partitions("orders", 0)[0], ctx.metadata)
        assert view.highest_copied_offset == 149  # remote holds more of epoch 1 than the lineage
    w.append_records(60)
    w.roll()
    w.append_records(5)
    w.set_high_watermark()
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp)
        in_lineage = next(s for s in ctx.metadata.list_segments(tip_of(w)) if s.segment_id != divergent.segment_id)
        assert (in_lineage.start_offset, in_lineage.end_offset) == (0, 209)
        view = load_tier_view(ctx.partitions("orders", 0)[0], ctx.metadata)
        assert view.highest_copied_offset == 209
        (row,) = collect_status(ctx, "orders", 0)
        assert (row.remote_segments, row.remote_bytes) == (1, in_lineage.size_bytes)
        local_active = sorted(w.path.glob("*.log"))[-1].stat().st_size
        assert retention_size_total(view, ctx.metadata) == in_lineage.size_bytes + local_active
        reader = open_reader(ctx, w.tp)
        for offset in range(200):
            assert reader.segment_for(offset) == in_lineage
            epoch = view.lineage.epoch_for_offset(offset)
            assert epoch is not None
            assert ctx.metadata.segment_for(tip_of(w), epoch, offset) == in_lineage
        records = reader.read(150, 50)
        assert [(r.offset, r.leader_epoch) for r in records] == [(o, 2) for o in range(150, 200)]
    if delete_records is not None:
        with tiering_env.context() as ctx:
            apply_delete_records(ctx, w.tp, delete_records)
        w.delete_records(delete_records)
    with tiering_env.context() as ctx:
        result = run_retention(ctx, w.tp)
        remaining = {s.segment_id for s in ctx.metadata.list_segments(tip_of(w))}
    assert (divergent.segment_id in remaining) is kept
    assert in_lineage.segment_id in remaining
    assert result.segments_deleted == (0 if kept else 1)


def test_time_retention_past_the_old_leaders_segments_moves_the_log_start_past_their_end(
    tiering_env: TieringEnv,
) -> None:
    """The new leader's segment 7-14, copied whole, begins below the end of the old leader's 5-9:
    deleting 5-9 moves the remote log start to 10 (Kafka: one past the deleted segment's end),
    not back to 7, and reads begin there."""
    from tiering_core.read.reader import OffsetOutOfRangeError, open_reader

    old = old_leader_copies(tiering_env, epoch_0_ms=1_000_000)
    new = new_leader_copies(tiering_env, old, epoch_0_ms=1_000_000, epoch_1_ms=1_010_000)
    tiering_env.write_config(orders={"retention.ms": 5000})
    with tiering_env.context() as ctx:
        result = run_retention(ctx, new.tp, now_ms=1_010_000)  # limit 1_005_000: epoch 0's segments alone
    assert result.segments_deleted == 2 and result.new_remote_log_start_offset == 10
    assert remote_ranges(tiering_env, new) == [(7, 14)]
    with tiering_env.context() as ctx:
        reader = open_reader(ctx, new.tp)
        assert reader.log_start_offset == 10
        assert [(r.offset, r.value) for r in reader.read(10, 100)] == [(o, f"v{o}".encode()) for o in range(10, 15)]
        with pytest.raises(OffsetOutOfRangeError, match="below the log start offset 10"):
            reader.read(9, 1)


# --- runs killed at each step -----------------------------------------------------------------

RETENTION_CRASH = textwrap.dedent(
    """
    import os, signal, sys
    import tiering_core.engine.segment_ops as rs
    import tiering_core.runs.retention as retention
    from tiering_core.config import load_config
    from tiering_core.context import TieringContext
    from tiering_core.kafka.topic import TopicPartition
    from tiering_core.metadata.states import RemoteLogSegmentState

    step, where = int(sys.argv[2]), sys.argv[3]
    calls = {"n": 0}
    original = rs.delete_remote_segment

    def crashing(store, storage, segment, lease):
        calls["n"] += 1
        if calls["n"] == step:
            if where in ("after-started", "after-objects"):
                store.update_segment_state(segment.segment_id, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, lease)
            if where == "after-objects":
                storage.delete_segment(rs.segment_ref(segment))
            os.kill(os.getpid(), signal.SIGKILL)
        original(store, storage, segment, lease)
        if calls["n"] == step and where == "after-finished":
            os.kill(os.getpid(), signal.SIGKILL)

    retention.delete_remote_segment = crashing
    with TieringContext.open(load_config(sys.argv[1])) as ctx:
        retention.run_retention(ctx, TopicPartition("orders", 0))
    """
)


@pytest.mark.parametrize(
    ("step", "where"),
    [
        (1, "before-started"),
        (1, "after-started"),
        (2, "after-objects"),
        (2, "after-finished"),
        (3, "after-started"),
        (3, "after-finished"),
    ],
)
def test_retention_killed_at_each_step_resumes_to_the_same_end(fs_env: TieringEnv, step: int, where: str) -> None:
    w = fs_env.writer()
    write_segments(w, 5)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        sizes = [s.size_bytes for s in ctx.metadata.list_segments(tip_of(w))]
    fs_env.write_config(orders={"retention.bytes": sum(sizes[3:])})  # the first three go
    twin = twin_of(fs_env)
    run_killed(RETENTION_CRASH, fs_env, str(step), where)
    with fs_env.context() as ctx:
        assert ctx.metadata.get_remote_log_start_offset(tip_of(w)) == 15  # recorded before any deletion
        expire_lease(ctx.metadata, tip_of(w))  # the killed run's lease lapses
    with fs_env.context() as ctx:
        run_retention(ctx, w.tp)
    with twin.context() as ctx:
        assert run_retention(ctx, w.tp).segments_deleted == 3
    assert end_state(fs_env, [tip_of(w)]) == end_state(twin, [tip_of(w)])
    assert remote_ranges(fs_env, w) == [(15, 19), (20, 24)]
    assert_objects_match_metadata(fs_env, tip_of(w))


def test_a_partition_dir_carrying_another_topics_id_is_refused(fs_env: TieringEnv) -> None:
    """orders-0's partition.metadata carries payments' topic id: retention and copy for orders
    refuse, naming both topics and the id, and nothing of payments changes."""
    fs_env.write_config(orders={"retention.ms": 1, "retention.bytes": 0}, payments={"retention.ms": -1})
    payments = fs_env.writer("payments", 0)
    write_segments(payments, 3)
    payments.set_high_watermark()
    with fs_env.context() as ctx:
        assert run_copy(ctx, payments.tp).segments_copied == 3
    before = snapshot_state(fs_env, tip_of(payments))
    orders = fs_env.writer("orders", 0, topic_id=payments.topic_id)
    write_segments(orders, 2)
    orders.set_high_watermark()
    with fs_env.context() as ctx:
        for run in (run_retention, run_copy):
            with pytest.raises(TopicIdConflictError) as err:
                run(ctx, orders.tp)
            assert all(word in str(err.value) for word in ("'orders'", "'payments'", payments.topic_id))
    assert snapshot_state(fs_env, tip_of(payments)) == before
