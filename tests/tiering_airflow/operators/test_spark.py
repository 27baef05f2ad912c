"""The Spark submit operator (``tiering_airflow/operators/spark.py``): S3 credentials reach
spark-submit and the executors, never its command line nor a file another user reads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SPARK_SECRET = "spark-op-secret-3Rm"


@pytest.fixture()
def aws_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    monkeypatch.setenv(
        "AIRFLOW_CONN_AWS_DEFAULT",
        json.dumps(
            {
                "conn_type": "aws",
                "login": "AKIDSPARKOP",
                "password": SPARK_SECRET,
                "extra": {"endpoint_url": "http://127.0.0.1:9", "region_name": "eu-west-1"},
            }
        ),
    )


def spark_operator():
    from tiering_airflow.operators.spark import TieringSparkSubmitOperator

    return TieringSparkSubmitOperator(
        task_id="submit", application="app.py", spark_binary="spark-submit", env_vars={"TIERING_CONFIG": "/t.yaml"}
    )


def test_spark_submit_on_a_cluster_gives_the_executors_the_s3_credentials_without_keeping_them(
    aws_connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not on the command line (any user of the host reads it): in a properties file only the task's
    user can read, gone when spark-submit ends, and in the environment of spark-submit itself."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", "spark://127.0.0.1:7077")
    op = spark_operator()
    with op.submission() as submission:
        command = submission.hook._build_spark_submit_command("app.py")
        assert command[command.index("--master") + 1] == "spark://127.0.0.1:7077"
        assert SPARK_SECRET not in " ".join(command)
        properties = Path(command[command.index("--properties-file") + 1])
        assert properties.stat().st_mode & 0o777 == 0o600
        lines = properties.read_text().splitlines()
        assert f"spark.executorEnv.AWS_SECRET_ACCESS_KEY={SPARK_SECRET}" in lines
        assert "spark.executorEnv.AWS_ENDPOINT_URL_S3=http://127.0.0.1:9" in lines
        assert submission.env["AWS_SECRET_ACCESS_KEY"] == SPARK_SECRET
    assert not properties.exists()
    assert (op.env_vars, op.conf) == ({"TIERING_CONFIG": "/t.yaml"}, None)  # the task's own fields: no secret


def test_spark_submit_in_local_mode_passes_the_credentials_by_environment_only(
    aws_connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    op = spark_operator()
    with op.submission() as submission:
        command = submission.hook._build_spark_submit_command("app.py")
        env = submission.env
    assert command[command.index("--master") + 1] == "local[*]"  # no spark_default: the embedded default
    assert SPARK_SECRET not in " ".join(command)
    assert env["AWS_ACCESS_KEY_ID"] == "AKIDSPARKOP" and env["AWS_SECRET_ACCESS_KEY"] == SPARK_SECRET
    assert env["AWS_DEFAULT_REGION"] == "eu-west-1" and env["TIERING_CONFIG"] == "/t.yaml"
    assert "AIRFLOW_CONN_SPARK_DEFAULT" not in os.environ
    assert op.env_vars == {"TIERING_CONFIG": "/t.yaml"}


@pytest.mark.parametrize("master", ["yarn", "spark://127.0.0.1:7077", "local[2]"])
def test_no_s3_secret_or_session_token_is_ever_on_the_spark_submit_command_line(
    master: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every master: the secret key and the session token of the aws connection are in the
    environment (and the 0600 properties file for a cluster), never in spark-submit's argv."""
    import json

    token = "spark-op-session-token-9Vw"
    monkeypatch.setenv(
        "AIRFLOW_CONN_AWS_DEFAULT",
        json.dumps(
            {
                "conn_type": "aws",
                "login": "AKIDSPARKOP",
                "password": SPARK_SECRET,
                "extra": {"aws_session_token": token, "region_name": "eu-west-1"},
            }
        ),
    )
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": master}))
    with spark_operator().submission() as submission:
        command = submission.hook._build_spark_submit_command("app.py")
        env = submission.env
        properties = command[command.index("--properties-file") + 1] if "--properties-file" in command else None
        if properties is not None:
            assert Path(properties).stat().st_mode & 0o777 == 0o600
    argv = " ".join(command)
    assert SPARK_SECRET not in argv and token not in argv
    assert (env["AWS_SECRET_ACCESS_KEY"], env["AWS_SESSION_TOKEN"]) == (SPARK_SECRET, token)
    assert (properties is None) == master.startswith("local")


def test_properties_lines_read_back_exactly() -> None:
    from tiering_airflow.operators.spark import properties_line

    assert properties_line("spark.executorEnv.K", "a:b=c#d") == "spark.executorEnv.K=a:b=c#d\n"
    assert properties_line("k", "x\\y\nz") == "k=x\\\\y\\nz\n"


def test_an_existing_spark_default_is_honoured(aws_connection, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
    with spark_operator().submission() as submission:
        command = submission.hook._build_spark_submit_command("app.py")
    assert command[command.index("--master") + 1] == "local[2]"
