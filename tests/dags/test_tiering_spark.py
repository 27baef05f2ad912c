"""The Spark DAGs run spark-submit through SparkSubmitOperator (dag.test(), spark_default = local[2])."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.airflow_support import ROOT
from tests.engine_support import TieringEnv, tip_of, write_segments
from tests.test_rebuild import broker_file, build_partition
from tiering_core.metadata.states import RemoteLogSegmentState
from tiering_core.remote_segments import segment_ref
from tiering_core.storage.layout import ObjectKind

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
SPARK_FILE = Path(ROOT / "dags" / "tiering_spark.py")


@pytest.fixture()
def spark_dags(fs_env: TieringEnv, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TIERING_CONFIG", str(fs_env.config_path))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
    monkeypatch.chdir(fs_env.root)  # spark-submit runs outside the checkout: executors use the shipped code
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(SPARK_FILE))
    assert bag.import_errors == {}
    return bag.dags


def test_dags_parse_light_with_params(spark_dags) -> None:
    assert set(spark_dags) == {"tiering_spark_bulk_upload", "tiering_spark_rebuild_indexes", "tiering_spark_verify"}
    for dag in spark_dags.values():
        (task,) = dag.tasks
        assert task.task_type == "SparkSubmitOperator" and task._conn_id == "spark_default"
        assert Path(task.application).is_file() and Path(task.application).parent == ROOT / "spark_apps"
        assert {"config", "topic", "partitions"} <= set(dag.params)
    assert spark_dags["tiering_spark_rebuild_indexes"].params["repair"] is True
    probe = (
        "import runpy, sys; runpy.run_path(sys.argv[1]); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pyspark', 'tiering_core', 'boto3', 'py4j'}))"
    )
    out = subprocess.run([sys.executable, "-c", probe, str(SPARK_FILE)], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"  # parse-time light


def test_bulk_upload_dag_runs_spark_submit(spark_dags, fs_env: TieringEnv) -> None:
    writers = []
    for p in range(3):
        w = fs_env.writer("orders", p)
        write_segments(w, 2)
        w.set_high_watermark()
        writers.append(w)
    run = spark_dags["tiering_spark_bulk_upload"].test(run_conf={"partitions": "orders-0,orders-2"})
    assert run.state == "success"
    with fs_env.context() as ctx:
        states = {w.tp.partition: [s.state for s in ctx.metadata.list_segments(tip_of(w))] for w in writers}
    assert states == {0: [FINISHED] * 2, 1: [], 2: [FINISHED] * 2}


def test_rebuild_dag_repairs_a_deleted_index(spark_dags, fs_env: TieringEnv) -> None:
    from tiering_core.copy import run_copy

    w = build_partition(fs_env)
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
        damaged = next(s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED)
        ctx.storage.delete_keys([segment_ref(damaged).key(ObjectKind.TIME_INDEX, ctx.storage.prefix)])
    run = spark_dags["tiering_spark_rebuild_indexes"].test(run_conf={"topic": "orders", "local": True})
    assert run.state == "success"
    with fs_env.context() as ctx:
        first = next(s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED)
        assert first.segment_id != damaged.segment_id and first.start_offset == damaged.start_offset
        rebuilt = ctx.storage.fetch(segment_ref(first), ObjectKind.TIME_INDEX)
    assert rebuilt == broker_file(w, first.start_offset, ObjectKind.TIME_INDEX)


def test_verify_dag_succeeds_on_an_intact_tier_and_fails_on_damage(spark_dags, fs_env: TieringEnv) -> None:
    from tiering_core.copy import run_copy

    w = fs_env.writer("orders", 0)
    write_segments(w, 2)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        run_copy(ctx, w.tp)
    dag = spark_dags["tiering_spark_verify"]
    assert dag.test(run_conf={"topic": "orders"}).state == "success"
    with fs_env.context() as ctx:
        damaged = next(s for s in ctx.metadata.list_segments(tip_of(w)) if s.state == FINISHED)
        ctx.storage.delete_keys([segment_ref(damaged).key(ObjectKind.OFFSET_INDEX, ctx.storage.prefix)])
    assert dag.test(run_conf={"topic": "orders"}).state == "failed"
