"""The manual rewrite DAG: a run re-encodes a topic's remote segments (moto's S3 server, SQLite) in
the format the config now asks for, one partition or all, and a second run finds nothing to do."""

from __future__ import annotations

import pytest

from tests.airflow_support import ROOT, task_runs
from tests.engine_support import TieringEnv, serving_no_broker, tip_of, write_segments
from tiering_core.kafka.log_writer import PartitionWriter
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.runs.copy import run_copy
from tiering_core.storage.manifest import CHUNKED_FORMAT, CopyRecord

DAG_FILE = ROOT / "dags" / "tiering_rewrite.py"


@pytest.fixture()
def rewrite_dag(tiering: TieringEnv):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAG_FILE))
    assert bag.import_errors == {}
    return bag.dags["tiering_rewrite"]


def copied_then_chunked(tiering: TieringEnv) -> list[PartitionWriter]:
    """orders-0 and orders-1, two segments each copied in the default format, then a config asking
    for zstd in 8 KiB chunks."""
    from tiering_airflow.hooks.tiering import TieringHook

    writers = [tiering.writer("orders", p) for p in (0, 1)]
    for w in writers:
        write_segments(w, 2)
        w.set_high_watermark()
    with TieringHook().get_conn() as ctx:
        for w in writers:
            assert run_copy(ctx, w.tp).segments_copied == 2
    tiering.remote.update(compression="zstd", chunk_size=8192)
    return writers


def assert_the_topic_rewritten_chunked(rewrite_dag, tiering: TieringEnv, writers: list[PartitionWriter]) -> None:  # type: ignore[no-untyped-def]
    """A run for the whole topic rewrites both partitions' two segments into the chunked format."""
    run = rewrite_dag.test(run_conf={"topic": "orders"})
    assert run.state == "success"
    (task,) = task_runs(rewrite_dag.dag_id, run.run_id, "rewrite").values()
    assert [(r["partition"], r["segments_rewritten"]) for r in task.result] == [(0, 2), (1, 2)]
    with tiering.context() as ctx:
        for w in writers:
            finished = [
                s
                for s in ctx.metadata.list_segments(tip_of(w))
                if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
            ]
            assert [CopyRecord.of_segment(s).format_version for s in finished] == [CHUNKED_FORMAT] * 2


def test_a_run_rewrites_every_partition_of_the_topic_then_nothing(rewrite_dag, tiering: TieringEnv) -> None:
    writers = copied_then_chunked(tiering)
    tiering.write_config()

    assert_the_topic_rewritten_chunked(rewrite_dag, tiering, writers)

    run = rewrite_dag.test(run_conf={"topic": "orders", "partition": 1})
    (task,) = task_runs(rewrite_dag.dag_id, run.run_id, "rewrite").values()
    assert run.state == "success"
    assert [(r["partition"], r["segments_rewritten"], r["segments_current"]) for r in task.result] == [(1, 0, 2)]


def test_on_a_worker_serving_no_broker_a_run_rewrites_what_the_metadata_store_holds(
    rewrite_dag,
    tiering: TieringEnv,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The default-queue worker of a cluster, without the broker's disk: the task rewrites every
    partition of the topic the store holds, and fails naming a partition it holds nothing of."""
    import shutil

    writers = copied_then_chunked(tiering)
    tiering.write_config(orders={})
    monkeypatch.delenv("TIERING_BROKER_ID", raising=False)
    monkeypatch.setenv("TIERING_CONFIG", str(serving_no_broker(tiering.config_path, tiering.root)))
    shutil.rmtree(tiering.log_dir)  # no broker disk on this host

    assert_the_topic_rewritten_chunked(rewrite_dag, tiering, writers)

    capfd.readouterr()
    run = rewrite_dag.test(run_conf={"topic": "orders", "partition": 7})
    assert run.state == "failed"  # at once: no retry would find it
    assert "partition orders-7 has no remote data" in "".join(capfd.readouterr()) + caplog.text
