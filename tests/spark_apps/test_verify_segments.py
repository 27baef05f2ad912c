"""The verify job in local[2]: every finished segment on S3 checked; damage found and named, nothing changed."""

from __future__ import annotations

from pathlib import Path

from tests.engine_support import TieringEnv, serving_no_broker, tip_of, write_segments
from tests.services import S3Endpoint
from tests.spark_apps.test_rebuild_indexes import s3_env
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.runs.copy import run_copy
from tiering_core.storage.layout import ObjectKind

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def tiered_orders(tmp_path: Path, s3_endpoint: S3Endpoint) -> tuple[TieringEnv, list[PartitionWriter]]:
    """orders-0 and orders-1, three closed segments each, copied to S3."""
    env = s3_env(tmp_path, s3_endpoint)
    writers = []
    for p in range(2):
        w = env.writer("orders", p)
        write_segments(w, 3)
        w.set_high_watermark()
        writers.append(w)
    with env.context() as ctx:
        for w in writers:
            run_copy(ctx, w.tp)
    return env, writers


def test_verify_job_finds_damage_and_changes_nothing(tmp_path: Path, spark, s3_endpoint, capsys) -> None:
    from spark_apps.runtime import SparkExecutor
    from spark_apps.verify_segments import main
    from tiering_core.read.verify import run_verify

    env, writers = tiered_orders(tmp_path, s3_endpoint)
    with env.context() as ctx:
        intact = run_verify(ctx, [w.tp for w in writers], SparkExecutor(spark.sparkContext, ctx.config.remote))
        assert (len(intact.results), intact.damaged) == (6, [])

        victim = [s for s in ctx.metadata.list_segments(tip_of(writers[1])) if s.state == FINISHED][2]
        ctx.storage.delete_keys([segment_ref(victim).key(ObjectKind.LOG, ctx.storage.prefix)])
        before = sorted(o.key for w in writers for o in ctx.storage.list_objects(tip_of(w)))
        states = [s.state for w in writers for s in ctx.metadata.list_segments(tip_of(w))]

    code = main(["--config", str(env.config_path), "--topic", "orders"], spark=spark)
    out, err = capsys.readouterr()
    assert code == 1
    assert f"orders-1: segment {victim.start_offset}..{victim.end_offset} ({victim.segment_id}): log: object" in out
    assert "6 finished segment(s)" in out and "1 with problems" in out
    assert "verify_segments: failed: 1 segment(s) with problems" in err
    with env.context() as ctx:
        assert sorted(o.key for w in writers for o in ctx.storage.list_objects(tip_of(w))) == before
        assert [s.state for w in writers for s in ctx.metadata.list_segments(tip_of(w))] == states
    assert main(["--config", str(env.config_path), "--partitions", "orders-0"], spark=spark) == 0


def test_a_worker_serving_no_broker_verifies_what_the_metadata_store_holds(tmp_path: Path, spark, s3_endpoint) -> None:
    """A cluster's default-queue worker has no broker disk and no broker id: the app verifies the
    selected partitions the metadata store holds remote data of, as ``tiering verify`` does there,
    instead of refusing for want of ``--broker``."""
    from spark_apps.verify_segments import main

    env, _ = tiered_orders(tmp_path, s3_endpoint)
    cluster = serving_no_broker(env.config_path, tmp_path)
    assert main(["--config", str(cluster), "--topic", "orders"], spark=spark) == 0
    assert main(["--config", str(cluster), "--partitions", "orders-1"], spark=spark) == 0
    assert main(["--config", str(cluster), "--topic", "payments"], spark=spark) == 1  # nothing tiered: named
