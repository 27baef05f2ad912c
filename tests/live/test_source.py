"""What the cluster source needs only when it connects (tiering_core/live/source.py): the SASL
password from the environment and kafka-python itself. Processes that parse the config and never
ask the cluster need neither; a run that asks without them stops with one line naming what is
missing. (A real SASL/PLAIN broker: tests/real_kafka/test_live_source.py.)"""

from __future__ import annotations

import sys

import pytest
import yaml

from tests.cli.test_commands import run
from tests.engine_support import TieringEnv, write_segments
from tiering_core.config import load_config
from tiering_core.errors import ClusterUnreachableError
from tiering_core.kafka.topic import TopicPartition
from tiering_core.live.source import ClusterSource

PASSWORD_ENV = "TIERING_TEST_UNSET_SASL_PASSWORD"


def with_kafka(env: TieringEnv, *, sasl: bool = True) -> None:
    """The env's config with a ``kafka:`` section (SASL_PLAINTEXT with PLAIN, or PLAINTEXT) on a
    port nothing listens on."""
    from tests.services import free_port

    doc = yaml.safe_load(env.config_path.read_text())
    doc["kafka"] = {"bootstrap_servers": f"127.0.0.1:{free_port()}", "request_timeout_ms": 1000}
    if sasl:
        doc["kafka"].update(
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username="tiering",
            sasl_password_env=PASSWORD_ENV,
        )
    env.config_path.write_text(yaml.safe_dump(doc))


def test_the_password_is_read_when_the_client_connects_not_when_the_config_is_parsed(
    fs_env: TieringEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    with_kafka(fs_env)
    config = load_config(fs_env.config_path)
    assert config.kafka is not None and config.kafka.sasl_password_env == PASSWORD_ENV
    source = ClusterSource(config.kafka)
    with pytest.raises(ClusterUnreachableError) as err:
        source.partition(TopicPartition("orders", 0))
    message = str(err.value)
    assert f"kafka.sasl_password_env: the environment variable {PASSWORD_ENV} is not set" in message
    assert "\n" not in message and "did not answer" not in message  # nothing was asked
    with pytest.raises(ClusterUnreachableError) as again:  # kept for the context's life
        source.topic_config("orders")
    assert again.value is err.value
    source.close()


def test_runs_that_ask_the_cluster_stop_with_one_line_naming_the_variable(
    fs_env: TieringEnv, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    for partition in (0, 1):
        w = fs_env.writer("orders", partition)
        write_segments(w, 2)
        w.set_high_watermark()
    with_kafka(fs_env)
    cfg = str(fs_env.config_path)
    for command in ("status", "copy", "retention"):
        code, out, err = run(capsys, "--config", cfg, command)
        assert code == 1 and out == "", (command, out)
        assert err.count("\n") == 1, (command, err)  # once for the run, not once per partition
        assert f"the environment variable {PASSWORD_ENV} is not set" in err, (command, err)
    # Commands that never ask the cluster are unaffected.
    code, out, err = run(capsys, "--config", cfg, "--json", "segments", "--topic", "orders", "--partition", "0")
    assert code == 0 and out.strip() == "[]", err


def test_a_missing_kafka_python_is_the_run_s_one_line_error(
    fs_env: TieringEnv, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """kafka-python absent from the install (injected: its module cannot be imported)."""
    w = fs_env.writer("orders", 0)
    write_segments(w, 2)
    w.set_high_watermark()
    with_kafka(fs_env, sasl=False)
    monkeypatch.setitem(sys.modules, "kafka.admin", None)  # `from kafka.admin import ...` fails
    config = load_config(fs_env.config_path)
    assert config.kafka is not None
    with pytest.raises(ClusterUnreachableError) as err:
        ClusterSource(config.kafka).partition(w.tp)
    assert "kafka-python is not installed" in str(err.value) and "kafka-tiering[kafka]" in str(err.value)
    code, out, err_text = run(capsys, "--config", str(fs_env.config_path), "copy")
    assert code == 1 and out == "" and err_text.count("\n") == 1, err_text
    assert "kafka-python is not installed" in err_text and "Traceback" not in err_text
