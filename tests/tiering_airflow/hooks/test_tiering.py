"""TieringHook: where the config comes from, credentials from the aws connection (never logged)."""

from __future__ import annotations

import json
import logging

import pytest

from tests.engine_support import TieringEnv, write_segments
from tiering_airflow.hooks.tiering import TieringHook, load_topics, resolve_config_path
from tiering_core.errors import ConfigError

SECRET = "hook-secret-5Kd9"


def connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, extra: dict) -> None:
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}",
        json.dumps({"conn_type": "aws", "login": "AKIDHOOK", "password": SECRET, "extra": extra}),
    )


def test_config_path_argument_then_environment_then_variable(
    tiering: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert resolve_config_path("/explicit.yaml") == "/explicit.yaml"
    assert resolve_config_path() == str(tiering.config_path)
    monkeypatch.delenv("TIERING_CONFIG")
    monkeypatch.setenv("AIRFLOW_VAR_TIERING_CONFIG", "/from/variable.yaml")
    assert resolve_config_path() == "/from/variable.yaml"
    monkeypatch.delenv("AIRFLOW_VAR_TIERING_CONFIG")
    with pytest.raises(ConfigError, match="TIERING_CONFIG or the Airflow Variable tiering_config"):
        resolve_config_path()


def test_topics_are_the_named_ones_without_the_default(tiering: TieringEnv) -> None:
    tiering.write_config(payments={}, **{"clicks.v2": {}})
    assert load_topics() == ["clicks.v2", "payments"]


def test_credentials_and_endpoint_come_from_the_connection_and_are_never_logged(
    tiering: TieringEnv,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    connection(
        monkeypatch,
        "tiering_s3",
        {"endpoint_url": "http://127.0.0.1:9", "region_name": "eu-west-1", "aws_session_token": "tok-" + SECRET},
    )
    caplog.set_level(logging.DEBUG)
    hook = TieringHook(aws_conn_id="tiering_s3")
    creds = hook.get_credentials()
    assert creds is not None
    assert (creds.access_key_id, creds.secret_access_key, creds.session_token) == ("AKIDHOOK", SECRET, "tok-" + SECRET)
    assert (creds.endpoint_url, creds.region) == ("http://127.0.0.1:9", "eu-west-1")
    with hook.get_conn() as ctx:  # the filesystem tier ignores the S3 settings but the path is the same
        assert ctx.config.remote.backend == "filesystem"
    logs = caplog.text + "".join(capfd.readouterr())
    assert "Connection 'tiering_s3': endpoint http://127.0.0.1:9, region eu-west-1" in logs
    assert SECRET not in logs and SECRET not in repr(creds) and SECRET not in repr(hook.__dict__)


def test_endpoint_from_the_amazon_providers_service_config(tiering: TieringEnv, monkeypatch) -> None:
    connection(monkeypatch, "aws_default", {"service_config": {"s3": {"endpoint_url": "http://minio:9000"}}})
    creds = TieringHook().get_credentials()
    assert creds is not None and creds.endpoint_url == "http://minio:9000" and creds.region is None


def test_without_aws_default_the_aws_chain_is_used_but_a_named_connection_must_exist(
    tiering: TieringEnv, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    from airflow.sdk.exceptions import AirflowNotFoundException

    caplog.set_level(logging.INFO)
    assert TieringHook().get_credentials() is None
    assert "No connection 'aws_default'" in caplog.text + "".join(capfd.readouterr())
    assert TieringHook(aws_conn_id=None).get_credentials() is None
    with pytest.raises(AirflowNotFoundException):
        TieringHook(aws_conn_id="no_such_connection").get_credentials()


def test_partitions_and_eligible_partitions(tiering: TieringEnv) -> None:
    closed = tiering.writer("orders", 0)
    write_segments(closed, 1)
    closed.set_high_watermark()
    active_only = tiering.writer("orders", 1)
    active_only.append_records(4)
    active_only.set_high_watermark()
    tiering.writer("payments", 0).append_records(1)
    hook = TieringHook()
    assert hook.partitions("orders") == [0, 1]
    assert hook.partitions("absent") == []
    assert hook.eligible("orders") == [0]
    assert hook.eligible("payments") == []


def test_default_partitions_are_those_of_topics_the_config_does_not_name(tiering: TieringEnv) -> None:
    tiering.write_config(orders={})
    named = tiering.writer("orders", 0)
    write_segments(named, 1)
    named.set_high_watermark()
    for partition, closed in ((0, True), (1, False)):
        w = tiering.writer("audit", partition)
        if closed:
            write_segments(w, 1)
        w.append_records(2)
        w.set_high_watermark()
    hook = TieringHook()
    assert [str(tp) for tp in hook.default_partitions()] == ["audit-0", "audit-1"]
    assert hook.eligible("*") == ["audit-0"]
    assert hook.eligible("orders") == [0]
    tiering.write_config(audit={})  # named now: DAGs of its own, no longer a default topic
    assert hook.default_partitions() == [] and hook.eligible("*") == []


@pytest.fixture()
def s3_tiering(tmp_path, s3_endpoint, monkeypatch: pytest.MonkeyPatch) -> TieringEnv:
    """An S3 tier whose config names no endpoint: it comes from the connection, as in production."""
    log_dir = tmp_path / "kafka-logs"
    log_dir.mkdir()
    remote = {"backend": "s3", "bucket": s3_endpoint.new_bucket(), "prefix": "t/"}
    env = TieringEnv(tmp_path, log_dir, tmp_path / "tiering.yaml", remote, f"sqlite:///{tmp_path / 'm.db'}")
    env.write_config()
    monkeypatch.setenv("TIERING_CONFIG", str(env.config_path))
    return env


def signing_keys(ctx) -> tuple[str, str, str | None]:
    frozen = ctx.storage.client._get_credentials().get_frozen_credentials()
    return frozen.access_key, frozen.secret_key, frozen.token


def test_the_s3_client_signs_with_the_connections_keys(
    s3_tiering: TieringEnv, s3_endpoint, monkeypatch, caplog, capfd
) -> None:
    import os

    assert os.environ["AWS_ACCESS_KEY_ID"] != "AKIDHOOK"  # the environment holds other keys
    connection(monkeypatch, "aws_default", {"endpoint_url": s3_endpoint.url, "region_name": "us-east-1"})
    caplog.set_level(logging.DEBUG)
    with TieringHook().get_conn() as ctx:
        assert signing_keys(ctx) == ("AKIDHOOK", SECRET, None)
        assert ctx.storage.client.meta.endpoint_url == s3_endpoint.url
        assert ctx.storage.client.meta.region_name == "us-east-1"
        ctx.storage.client.head_bucket(Bucket=s3_tiering.remote["bucket"])  # a real signed request
    logs = caplog.text + "".join(capfd.readouterr())
    assert "credentials from access keys" in logs and SECRET not in logs


def test_a_role_arn_connection_signs_with_the_assumed_roles_keys(
    s3_tiering: TieringEnv, s3_endpoint, monkeypatch, caplog, capfd
) -> None:
    role = "arn:aws:iam::123456789012:role/kafka-tiering"
    connection(
        monkeypatch,
        "aws_default",
        {
            "endpoint_url": s3_endpoint.url,
            "region_name": "us-east-1",
            "role_arn": role,
            "service_config": {"sts": {"endpoint_url": s3_endpoint.url}},  # moto's STS answers AssumeRole
        },
    )
    caplog.set_level(logging.INFO)  # a task's level (botocore's own DEBUG log prints STS answers whole)
    with TieringHook().get_conn() as ctx:
        access_key, secret_key, token = signing_keys(ctx)
        assert access_key != "AKIDHOOK" and secret_key != SECRET and token  # temporary keys of the role
        ctx.storage.client.head_bucket(Bucket=s3_tiering.remote["bucket"])
    logs = caplog.text + "".join(capfd.readouterr())
    assert f"credentials from role {role}" in logs
    assert secret_key not in logs and token not in logs and SECRET not in logs


def test_the_metadata_password_can_come_from_the_tiering_metadata_connection(
    tiering: TieringEnv, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from sqlalchemy.engine import make_url

    tiering.metadata_url = "postgresql+psycopg://tiering@db:5432/meta"
    tiering.write_config()
    assert TieringHook().get_config().metadata.url == tiering.metadata_url  # no such connection: as written
    password = "meta-secret-8Pz1"
    monkeypatch.setenv("AIRFLOW_CONN_TIERING_METADATA", json.dumps({"conn_type": "generic", "password": password}))
    caplog.set_level(logging.DEBUG)
    assert make_url(TieringHook().get_config().metadata.url).password == password
    assert password not in caplog.text
