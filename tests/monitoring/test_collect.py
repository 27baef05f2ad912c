"""The metrics snapshot and the counters runs record, against real runs on SQLite and PostgreSQL
with S3 through moto's server: the snapshot's figures are ``tiering status --json``'s and the
cluster view's; a copy, a retention and a fetch leave counters equal to what they did (bytes as
the objects' sizes in the bucket), which survive reopening the store; a failed copy counts an
error; a topic's chart sums its partitions' points; every act is also reported to the sink."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_commands import run
from tests.conftest import S3Endpoint
from tests.engine_support import TieringEnv, select_count, tip_of, traced_statements, write_segments
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.metadata.store import RemoteLogMetadataStore, TaskAttempt
from tiering_core.metadata.values import NO_BROKER, PartitionCounters
from tiering_core.metrics import names
from tiering_core.metrics.names import MetricSpec
from tiering_core.metrics.sink import Tags, emitting
from tiering_core.monitoring.collect import collect_metrics, topic_names, topic_series
from tiering_core.monitoring.snapshot import PartitionMetrics
from tiering_core.read.reader import open_reader
from tiering_core.runs.copy import run_copy
from tiering_core.runs.retention import run_retention
from tiering_core.tier.cluster import cluster_status

COPY = TaskAttempt("tiering_copy", "manual__1", "copy", 0, 1)
RETENTION = TaskAttempt("tiering_retention", "manual__1", "retention", 0, 1)


class RecordingSink:
    """A sink that keeps what it is sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, float, dict[str, str]]] = []

    def incr(self, spec: MetricSpec, count: int, tags: Tags) -> None:
        self.sent.append((spec.name, count, dict(tags)))

    def gauge(self, spec: MetricSpec, value: float, tags: Tags) -> None:
        self.sent.append((spec.name, value, dict(tags)))

    def total(self, spec: MetricSpec) -> float:
        return sum(value for name, value, _ in self.sent if name == spec.name)


def bucket_sizes(env: TieringEnv, endpoint: S3Endpoint) -> dict[str, int]:
    """Every object in the tier's bucket, by key, with its size."""
    listed = endpoint.client().list_objects_v2(Bucket=env.remote["bucket"])
    return {o["Key"]: o["Size"] for o in listed.get("Contents", [])}


def segment_bytes(sizes: dict[str, int]) -> int:
    """Bytes of segments and their indexes: every object but the manifests (and the partitions'
    state objects, and the prefix's identity object)."""
    others = (".manifest.json", "/partition-state.json", "/tiering-store.json")
    return sum(size for key, size in sizes.items() if not key.endswith(others))


def partition_of(env: TieringEnv, w: PartitionWriter) -> PartitionMetrics:
    with env.context() as ctx:
        (found,) = [p for p in collect_metrics(ctx).partitions if p.topic_id == w.topic_id and p.partition == 0]
    return found


def test_a_snapshot_of_a_copied_partition_is_what_status_and_the_cluster_view_say(
    tiering_env: TieringEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    w = tiering_env.writer()
    write_segments(w, 4)  # bases 0, 5, 10, 15; active 20
    w.set_high_watermark(12)  # copies [0..4] and [5..9]; [10..14] waits below the LSO
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp, broker_id=1, attempt=COPY)
    code, out, err = run(capsys, "--config", str(tiering_env.config_path), "--broker", "1", "--json", "status")
    assert code == 0, err
    (status,) = json.loads(out)
    with tiering_env.context() as ctx:
        snapshot = collect_metrics(ctx)
        (cluster,) = cluster_status(ctx)
        assert topic_names(ctx) == ["orders"]
    (m,) = snapshot.partitions
    assert (m.topic, m.partition, m.topic_id) == (status["topic"], status["partition"], status["topic_id"])
    assert (
        (m.remote_segments, m.remote_bytes)
        == (status["remote_segments"], status["remote_bytes"])
        == (
            cluster.remote_segments,
            cluster.remote_bytes,
        )
    )
    assert m.remote_segments == 2 and m.metadata_count == 2
    assert (m.copy_lag_segments, m.copy_lag_bytes) == (status["copy_lag_segments"], status["copy_lag_bytes"])
    assert m.copy_lag_segments == 2 and m.copy_lag_bytes is not None and m.copy_lag_bytes > 0  # [10..14], [15..19]
    assert (m.delete_lag_segments, m.delete_lag_bytes) == (status["delete_lag_segments"], status["delete_lag_bytes"])
    assert m.gap_count == len(status["gaps"]) == len(cluster.gaps) == 0
    assert m.best_broker == cluster.best_broker == 1 and snapshot.silent_brokers == []
    assert m.delete_state is None and m.at_risk == cluster.at_risk
    assert [(r.broker_id, r.stale, r.last_stable_offset) for r in m.replicas] == [
        (s.broker_id, s.stale, s.last_stable_offset) for s in cluster.replicas
    ]
    assert m.last_task == COPY and m.last_copy_ms is not None and m.last_copy_ms <= snapshot.db_now_ms
    assert list(m.counters_by_broker) == [1] and m.counters.copy_requests == 2
    with tiering_env.context() as ctx:
        assert collect_metrics(ctx, "payments").partitions == []
        assert collect_metrics(ctx, "orders").partitions == snapshot.partitions


def test_the_offsets_only_the_tier_holds_are_what_status_says(
    tiering_env: TieringEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    """Below the best replica's log start (its own retention) and above the global log start (a
    DeleteRecords applied through the platform): the page's figures are ``status --json``'s."""
    from tiering_core.runs.delete_records import apply_delete_records

    w = tiering_env.writer()
    write_segments(w, 4)  # [0..4], [5..9], [10..14], [15..19]
    w.set_high_watermark()
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp, broker_id=1, attempt=COPY)
    w.delete_oldest_segments(2)  # the broker's log start is 10
    expected = ((0, [0, 9]), (3, [3, 9]))
    for remote_start, remote_only in expected:
        if remote_start:
            with tiering_env.context() as ctx:
                apply_delete_records(ctx, w.tp, remote_start)
        code, out, err = run(capsys, "--config", str(tiering_env.config_path), "--broker", "1", "--json", "status")
        assert code == 0, err
        (status,) = json.loads(out)
        assert (status["remote_log_start_offset"], status["remote_only_offsets"]) == (remote_start, remote_only)
        m = partition_of(tiering_env, w)
        assert (m.remote_log_start_offset, m.remote_only_offsets) == (remote_start, remote_only)


def test_a_snapshot_read_without_tasks_differs_only_in_the_last_task(tiering_env: TieringEnv) -> None:
    """The exposition's snapshot (``tasks=False``) has every figure of the page's, but no last task."""
    w = tiering_env.writer()
    write_segments(w, 4)
    w.set_high_watermark(12)
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp, broker_id=1, attempt=COPY)
        full = collect_metrics(ctx)
        untasked = collect_metrics(ctx, tasks=False)
    (m,) = full.partitions
    assert m.last_task == COPY and [p.last_task for p in untasked.partitions] == [None]
    m.last_task = None
    assert untasked.partitions == full.partitions and untasked.silent_brokers == full.silent_brokers


def test_counters_equal_what_a_copy_a_retention_and_a_fetch_did_and_survive_reopening(
    tiering_env: TieringEnv, s3_endpoint: S3Endpoint
) -> None:
    tiering_env.write_config(orders={"retention.ms": -1, "retention.bytes": -1})
    w = tiering_env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    sink = RecordingSink()
    with tiering_env.context() as ctx, emitting(sink):
        copied = run_copy(ctx, w.tp, broker_id=2, attempt=COPY)
    assert copied.segments_copied == 3
    uploaded = segment_bytes(bucket_sizes(tiering_env, s3_endpoint))
    m = partition_of(tiering_env, w)
    assert m.counters_by_broker == {2: PartitionCounters(copy_bytes=uploaded, copy_requests=3)}
    assert sink.total(names.REMOTE_COPY_BYTES) == uploaded and sink.total(names.REMOTE_COPY_REQUESTS) == 3
    copy_tags = {tags["broker"] for name, _, tags in sink.sent if name == "remote_copy_requests"}
    assert copy_tags == {"2"}
    gauges = {name: value for name, value, _ in sink.sent if name.startswith(("remote_copy_lag", "remote_log_size"))}
    assert gauges == {
        "remote_copy_lag_bytes": 0,
        "remote_copy_lag_segments": 0,
        "remote_log_size_bytes": m.remote_bytes,
    }

    with tiering_env.context() as ctx, emitting(sink):
        fetched = open_reader(ctx, w.tp).read(0, 7)
    assert [r.offset for r in fetched] == list(range(7))  # two segments read
    m = partition_of(tiering_env, w)
    fetch = m.counters_by_broker[NO_BROKER]
    assert (fetch.fetch_requests, fetch.fetch_errors) == (1, 0)
    sizes = bucket_sizes(tiering_env, s3_endpoint)
    logs = sorted(size for key, size in sizes.items() if key.endswith(".log"))
    assert logs[0] < fetch.fetch_bytes <= sum(logs[:2])  # the first log whole, some of the second

    tiering_env.write_config(orders={"retention.ms": -1, "retention.bytes": 1})  # what retention may, expires
    with tiering_env.context() as ctx, emitting(sink):
        result = run_retention(ctx, w.tp, broker_id=2, attempt=RETENTION)
    deleted = result.segments_deleted
    assert deleted >= 2 and sink.total(names.REMOTE_DELETE_REQUESTS) == deleted
    with RemoteLogMetadataStore(tiering_env.metadata_url) as reopened:
        by_broker = {c.broker_id: c for c in reopened.partition_counters(topic="orders")}
    assert by_broker[2].counters == PartitionCounters(copy_bytes=uploaded, copy_requests=3, delete_requests=deleted)
    assert by_broker[2].last_task == RETENTION and by_broker[NO_BROKER].counters == fetch
    m = partition_of(tiering_env, w)
    kept = [size for key, size in bucket_sizes(tiering_env, s3_endpoint).items() if key.endswith(".log")]
    assert (m.remote_segments, m.remote_bytes) == (len(kept), sum(kept)) == (3 - deleted, sum(kept))
    assert (m.delete_lag_segments, m.delete_lag_bytes) == (0, 0)


def test_a_failed_copy_counts_an_error_and_a_failed_fetch_too(
    tiering_env: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tiering_core.runs.errors import CopyFailedError
    from tiering_core.storage.errors import RemoteStorageError

    w = tiering_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()

    def failing_upload(storage: Any, upload: Any) -> Any:
        raise RemoteStorageError("injected: upload refused (503)")

    sink = RecordingSink()
    with tiering_env.context() as ctx, emitting(sink), pytest.raises(CopyFailedError, match="upload refused"):
        run_copy(ctx, w.tp, uploader=failing_upload, broker_id=0, attempt=COPY)
    m = partition_of(tiering_env, w)
    assert m.counters_by_broker == {0: PartitionCounters(copy_requests=1, copy_errors=1)}
    assert m.last_copy_ms is None and m.last_task == COPY
    assert sink.total(names.REMOTE_COPY_ERRORS) == 1

    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp, broker_id=0)
        reader = open_reader(ctx, w.tp)

        def failing_stream(*args: Any, **kwargs: Any) -> Any:
            raise RemoteStorageError("injected: read refused (503)")

        monkeypatch.setattr(type(ctx.storage), "open_stream", failing_stream)
        with pytest.raises(RemoteStorageError, match="read refused"):
            reader.read(0, 1)
    m = partition_of(tiering_env, w)
    assert m.counters_by_broker[0] == PartitionCounters(
        copy_requests=3, copy_errors=1, copy_bytes=m.counters_by_broker[0].copy_bytes
    )
    assert m.counters_by_broker[NO_BROKER] == PartitionCounters(fetch_requests=1, fetch_errors=1)
    assert m.last_copy_ms is not None


def test_a_store_that_cannot_take_the_counts_does_not_fail_a_copy(
    tiering_env: TieringEnv, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from tiering_core.metadata.errors import MetadataStoreError

    w = tiering_env.writer()
    write_segments(w, 1)
    w.set_high_watermark()

    def refused(*args: Any, **kwargs: Any) -> int:
        raise MetadataStoreError("injected: counters table is read-only")

    monkeypatch.setattr(RemoteLogMetadataStore, "add_counts", refused)
    with tiering_env.context() as ctx:
        assert run_copy(ctx, w.tp, broker_id=0).segments_copied == 1
    warned = [r for r in caplog.records if "could not record the run's counters" in r.getMessage()]
    assert warned and "orders-0" in warned[0].getMessage() and "read-only" in warned[0].getMessage()


def test_a_topic_s_chart_sums_each_partition_s_highest_replica(tiering_env: TieringEnv) -> None:
    a, b = tiering_env.writer("orders", 0), tiering_env.writer("orders", 1)
    for w in (a, b):
        write_segments(w, 2)
        w.set_high_watermark()
    with tiering_env.context() as ctx:
        run_copy(ctx, a.tp, broker_id=1)
        run_copy(ctx, b.tp, broker_id=1)
        from tiering_core.tier.status import collect_status

        collect_status(ctx, broker_id=2)  # broker 2 sees the same partitions: highest is the same
        snapshot = collect_metrics(ctx)
        day, week = topic_series(ctx, "orders", "24h"), topic_series(ctx, "orders", "7d")
        assert topic_series(ctx, "payments", "24h") == []
        with pytest.raises(ValueError, match="unknown chart window"):
            topic_series(ctx, "orders", "1y")
    remote = sum(p.remote_bytes for p in snapshot.partitions)
    assert remote > 0 and tip_of(a) != tip_of(b)
    assert [(p.remote_bytes, p.copy_lag_bytes) for p in day] == [(remote, 0)]
    assert [(p.remote_bytes, p.copy_lag_bytes) for p in week] == [(remote, 0)]
    assert day[0].at_ms <= snapshot.db_now_ms and day[0].at_ms % 300_000 == 0 and week[0].at_ms % 3_600_000 == 0


def test_verify_rebuild_restore_and_find_offset_count_their_reads(
    tiering_env: TieringEnv, tmp_path: Path, s3_endpoint: S3Endpoint
) -> None:
    from tiering_core.engine.segment_ops import segment_ref
    from tiering_core.read.restore import restore_partition
    from tiering_core.read.verify import verify_partition
    from tiering_core.runs.rebuild.run import rebuild_partition_indexes
    from tiering_core.storage.layout import ObjectKind

    w = tiering_env.writer()
    write_segments(w, 3)
    w.set_high_watermark()
    with tiering_env.context() as ctx:
        run_copy(ctx, w.tp, broker_id=0)
        objects = segment_bytes(bucket_sizes(tiering_env, s3_endpoint))
        assert all(v.ok for v in verify_partition(ctx, w.tp))
        found = open_reader(ctx, w.tp).offset_for_timestamp(0)
        assert found is not None and found.offset == 0
        restored = restore_partition(ctx, w.tp, tmp_path / "restored")
        seg0 = ctx.metadata.list_segments(tip_of(w))[0]
        ctx.storage.delete_keys([segment_ref(seg0).key(ObjectKind.OFFSET_INDEX, ctx.storage.prefix)])
        verified = verify_partition(ctx, w.tp)
        assert [v.ok for v in verified] == [False, True, True]
        rebuilt = rebuild_partition_indexes(ctx, w.tp, repair=True)
        assert [c.repaired_as is not None for c in rebuilt.checks] == [True, False, False]
    reads = partition_of(tiering_env, w).counters_by_broker[NO_BROKER]
    # verify (twice) and restore read 3 segments each, find-offset is one request, rebuild reads 3
    assert reads.fetch_requests == 3 + 1 + 3 + 3 + 3 and reads.fetch_errors == 0
    assert reads.scrub_failures == 1 and reads.index_repairs == 1
    logs = sum(size for key, size in bucket_sizes(tiering_env, s3_endpoint).items() if key.endswith(".log"))
    assert restored.segments == 3 and restored.bytes <= objects
    others = reads.fetch_bytes - 2 * objects  # the two verifies read every recorded object
    assert others > restored.bytes + logs  # restore's downloads, rebuild's logs, and find-offset's read


def _observe(store: RemoteLogMetadataStore, partitions: range) -> None:
    """Every partition of ``payments`` in ``partitions`` seen by brokers 0-2, each with counts."""
    from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
    from tiering_core.metadata.store import ReplicaObservation

    tips = [TopicIdPartition("PPPPPPPPPPPPPPPPPPPPPP", TopicPartition("payments", p)) for p in partitions]
    store.record_observations(
        [ReplicaObservation(b, tip, 10, 10, 12, 0, 100, 1, 0, False, None) for tip in tips for b in range(3)]
    )
    for tip in tips:
        for broker in (0, 1, 2, NO_BROKER):
            store.add_counts(tip, PartitionCounters(fetch_requests=1), broker_id=broker)


def test_a_snapshot_costs_the_same_few_queries_however_many_partitions(fs_env: TieringEnv) -> None:
    """The snapshot is read set-wise: the statements it runs do not grow with the partitions."""
    w = fs_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    fs_env.write_config()
    with fs_env.context() as ctx, traced_statements(ctx.metadata.engine) as statements:
        run_copy(ctx, w.tp, broker_id=0)
        counts = []
        for partitions in (range(0, 3), range(3, 60)):
            _observe(ctx.metadata, partitions)
            statements.clear()
            snapshot = collect_metrics(ctx)
            counts.append(select_count(statements))
        assert len(snapshot.partitions) == 61 and all(len(p.replicas) == 3 for p in snapshot.partitions[1:])
    assert 0 < counts[0] == counts[1] <= 6, statements


def test_a_run_without_a_broker_id_reports_gauges_and_records_no_observation(tiering_env: TieringEnv) -> None:
    w = tiering_env.writer()
    write_segments(w, 3)
    w.set_high_watermark(12)  # two copied, one waits below the LSO
    sink = RecordingSink()
    with tiering_env.context() as ctx:
        with emitting(sink):
            run_copy(ctx, w.tp)
            run_retention(ctx, w.tp)
        assert ctx.metadata.latest_observations().replicas == {}
        _, remote = ctx.metadata.segment_totals(tip_of(w), (RemoteLogSegmentState.COPY_SEGMENT_FINISHED,))
    gauges = [
        (name, value, tags)
        for name, value, tags in sink.sent
        if name in ("remote_copy_lag_segments", "remote_log_size_bytes")
    ]
    assert gauges and all(tags == {"topic": "orders", "partition": "0"} for _, _, tags in gauges)
    assert ("remote_copy_lag_segments", 1, {"topic": "orders", "partition": "0"}) in gauges
    assert ("remote_log_size_bytes", remote, {"topic": "orders", "partition": "0"}) in gauges and remote > 0
    assert any(name == "remote_delete_lag_segments" and value == 0 for name, value, _ in sink.sent)
