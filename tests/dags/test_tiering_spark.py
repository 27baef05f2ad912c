"""The Spark DAGs run spark-submit through SparkSubmitOperator (dag.test(), spark_default = local[2]);
without spark_default the master is local[*], and S3 credentials reach the apps from aws_default."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.airflow_support import ROOT
from tests.engine_support import TieringEnv, tip_of, write_segments
from tests.runs.test_rebuild import broker_file, build_partition
from tiering_core.engine.segment_ops import segment_ref
from tiering_core.metadata.states import RemoteLogSegmentState
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
    assert set(spark_dags) == {
        "tiering_spark_bulk_upload",
        "tiering_spark_rebuild_indexes",
        "tiering_spark_verify",
        "tiering_export",
    }
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    for dag in spark_dags.values():
        (task,) = dag.tasks
        assert isinstance(task, SparkSubmitOperator) and task._conn_id == "spark_default"
        assert task.aws_conn_id == "aws_default" and "AWS_SECRET_ACCESS_KEY" not in task.env_vars
        assert Path(task.application).is_file() and Path(task.application).parent == ROOT / "spark_apps"
        assert {"topic", "partitions"} <= set(dag.params) and "config" not in dag.params
    assert spark_dags["tiering_spark_rebuild_indexes"].params["repair"] is True
    heavy = (
        "pyspark",
        "py4j",
        "boto3",
        "spark_apps",
        "tiering_core.metadata",
        "tiering_core.runs",
        "tiering_core.context",
    )
    probe = (
        "import runpy, sys; runpy.run_path(sys.argv[1]); "
        f"print(sorted({{m for m in sys.modules if m.startswith({heavy!r})}}))"
    )
    out = subprocess.run([sys.executable, "-c", probe, str(SPARK_FILE)], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"  # parse-time light: the config's parser at most


def test_the_config_is_the_deployments_and_no_param_or_run_conf_chooses_another(spark_dags, fs_env: TieringEnv) -> None:
    """Whoever may trigger a DAG must not point the job at any file on the worker (its parse errors
    would show the file's lines in the task log)."""
    import json

    from airflow.sdk.definitions.param import ParamValidationError

    for dag in spark_dags.values():
        (task,) = dag.tasks
        args = task.application_args
        assert args[args.index("--config") + 1] == str(fs_env.config_path)
        assert task.env_vars["TIERING_CONFIG"] == str(fs_env.config_path)
        assert "params" not in json.dumps(args[args.index("--config") + 1]) and "config" not in dag.params
        with pytest.raises(ParamValidationError):
            dag.params.get_param("topic").resolve("--config=/etc/passwd")
        assert dag.params.get_param("topic").resolve("orders") == "orders"


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
    from tiering_core.runs.copy import run_copy

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
    from tiering_core.runs.copy import run_copy

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


def test_bulk_upload_to_s3_without_spark_default_runs_local_with_the_aws_connections_keys(
    tmp_path: Path, s3_endpoint, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """No spark_default: the master is local[*], not the provider's yarn. The config names no S3
    endpoint and the environment holds no AWS keys: the apps can only reach moto's S3 server with the
    endpoint and keys of aws_default, passed at run time and never stored with the task's fields."""
    import json
    import os

    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.utils.session import create_session
    from sqlalchemy import select

    secret = "spark-secret-Hq83"
    log_dir = tmp_path / "kafka-logs"
    log_dir.mkdir()
    remote = {"backend": "s3", "bucket": s3_endpoint.new_bucket(), "prefix": "t/", "region": "us-east-1"}
    env = TieringEnv(tmp_path, log_dir, tmp_path / "tiering.yaml", remote, f"sqlite:///{tmp_path / 'm.db'}")
    env.write_config()
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AIRFLOW_CONN_SPARK_DEFAULT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TIERING_CONFIG", str(env.config_path))
    monkeypatch.setenv(
        "AIRFLOW_CONN_AWS_DEFAULT",
        json.dumps(
            {
                "conn_type": "aws",
                "login": "AKIDSPARK",
                "password": secret,
                "extra": {"endpoint_url": s3_endpoint.url, "region_name": "us-east-1"},
            }
        ),
    )
    monkeypatch.chdir(tmp_path)
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(SPARK_FILE)).dags["tiering_spark_bulk_upload"]
    writers = []
    for p in range(2):
        w = env.writer("orders", p)
        write_segments(w, 2)
        w.set_high_watermark()
        writers.append(w)
    run = dag.test(run_conf={"topic": "orders"})
    logs = "".join(capfd.readouterr())
    assert run.state == "success", logs[-5000:]
    assert "--master local[*]" in logs and "--master yarn" not in logs
    assert "AIRFLOW_CONN_SPARK_DEFAULT" not in os.environ  # set only while the hook resolved it
    with env.context() as ctx:
        states = [[s.state for s in ctx.metadata.list_segments(tip_of(w))] for w in writers]
    assert states == [[FINISHED] * 2] * 2
    listing = s3_endpoint.client().list_objects_v2(Bucket=remote["bucket"])
    assert sum(o["Key"].endswith(".log") for o in listing.get("Contents", [])) == 4
    assert secret not in logs
    with create_session() as session:
        stored = session.scalars(
            select(RenderedTaskInstanceFields.rendered_fields).where(
                RenderedTaskInstanceFields.dag_id == dag.dag_id, RenderedTaskInstanceFields.run_id == run.run_id
            )
        ).all()
    assert stored and all(
        secret not in json.dumps(fields) and "AKIDSPARK" not in json.dumps(fields) for fields in stored
    )


def test_export_dag_is_daily_and_triggerable_with_topic_partition_and_isolation(spark_dags) -> None:
    from airflow.sdk.definitions.param import ParamValidationError

    dag = spark_dags["tiering_export"]
    (task,) = dag.tasks
    assert Path(task.application) == ROOT / "spark_apps" / "export_table.py"
    assert dag.timetable.expression == "0 0 * * *"  # @daily
    assert {"topic", "partition", "isolation"} <= set(dag.params)
    assert dag.params["isolation"] == "read_committed"
    assert dag.params.get_param("isolation").resolve("read_uncommitted") == "read_uncommitted"
    assert dag.params.get_param("partition").resolve("3") == "3"
    for bad in ("dirty", "--config=/etc/passwd"):
        with pytest.raises(ParamValidationError):
            dag.params.get_param("isolation").resolve(bad)
    with pytest.raises(ParamValidationError):
        dag.params.get_param("partition").resolve("-1 --topic x")


def test_export_dags_spark_submit_command_line_holds_the_selection_and_no_secret(
    spark_dags, fs_env: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rendered command line names the app, the deployment's config and the params; the aws
    connection's keys reach spark-submit's environment (and, for a cluster, a 0600 properties
    file), never its argv."""
    import json

    secret, token = "export-secret-8Kd", "export-token-2Pq"
    monkeypatch.setenv(
        "AIRFLOW_CONN_AWS_DEFAULT",
        json.dumps(
            {
                "conn_type": "aws",
                "login": "AKIDEXPORT",
                "password": secret,
                "extra": {"aws_session_token": token, "region_name": "eu-west-1"},
            }
        ),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1:7077"})
    )
    (task,) = spark_dags["tiering_export"].tasks
    params = {"topic": "orders", "partitions": "", "partition": "2", "isolation": "read_uncommitted"}
    task.render_template_fields({"params": params, "var": {"value": {}}})  # type: ignore[arg-type]
    with task.submission() as submission:
        command = submission.hook._build_spark_submit_command(task.application)
        properties = Path(command[command.index("--properties-file") + 1])
        assert properties.stat().st_mode & 0o777 == 0o600 and secret in properties.read_text()
        env = submission.env
    argv = " ".join(command)
    assert secret not in argv and token not in argv and "AKIDEXPORT" not in argv
    assert command[command.index("--master") + 1] == "spark://127.0.0.1:7077"
    app_args = command[command.index(task.application) + 1 :]
    assert app_args[app_args.index("--config") + 1] == str(fs_env.config_path)
    assert app_args[app_args.index("--topic") + 1] == "orders"
    assert app_args[app_args.index("--partition") + 1] == "2"
    assert app_args[app_args.index("--isolation") + 1] == "read_uncommitted"
    assert (env["AWS_SECRET_ACCESS_KEY"], env["AWS_SESSION_TOKEN"]) == (secret, token)
    assert not properties.exists()


def test_the_export_task_hands_its_try_to_the_app(
    spark_dags, fs_env: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The try reaches the app's environment (and a cluster driver's, through the 0600 properties
    file), so the app names the table's export lease after the task instance: a retry takes over
    its killed try's lease at once."""
    import json

    from spark_apps.runtime import TASK_ATTEMPT_ENV
    from tiering_core.metadata.store import TaskAttempt

    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1:7077"})
    )
    (task,) = spark_dags["tiering_export"].tasks
    params = {"topic": "orders", "partitions": "", "partition": "", "isolation": "read_committed"}
    task.render_template_fields({"params": params, "var": {"value": {}}})  # type: ignore[arg-type]
    attempt = TaskAttempt("tiering_export", "scheduled__2026-11-25T00:00:00+00:00", "export_table", -1, 2)
    with task.submission(attempt) as submission:
        command = submission.hook._build_spark_submit_command(task.application)
        properties = Path(command[command.index("--properties-file") + 1]).read_text()
        assert TaskAttempt.from_json(submission.env[TASK_ATTEMPT_ENV]) == attempt
    assert f"spark.yarn.appMasterEnv.{TASK_ATTEMPT_ENV}=" in properties
    assert f"spark.kubernetes.driverEnv.{TASK_ATTEMPT_ENV}=" in properties
    with task.submission() as submission:  # outside a task run: no try
        assert TASK_ATTEMPT_ENV not in submission.env


def test_export_dag_exports_the_topic_into_its_iceberg_table(
    spark_dags, fs_env: TieringEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.spark_apps.test_export_table import read_back, tiered, with_export

    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # spark-submit's driver runs this checkout's code
    with_export(fs_env, tmp_path)
    expected = tiered(fs_env, "orders", 2, 2)
    dag = spark_dags["tiering_export"]
    assert dag.test(run_conf={"topic": "orders", "partition": "1"}).state == "success"
    _table, found = read_back(fs_env.config_path, "orders")
    assert {p: sorted(o) for p, o in found.items()} == {1: sorted(expected[1])}
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(SPARK_FILE)).dags["tiering_export"]  # dag.test() rendered the first one's fields
    assert dag.test(run_conf={"topic": "orders"}).state == "success"
    _table, found = read_back(fs_env.config_path, "orders")
    assert {p: sorted(o) for p, o in found.items()} == {p: sorted(o) for p, o in expected.items()}
