"""The ``tiering.source`` mark: what a replayed record says of its source, and what is not one;
the cluster a replay writes to, and that a cluster's credentials go only to its own servers (a
listener on another address, named by ``--bootstrap-server``, is refused before anything
connects; a named target gets none of the ``kafka:`` section's credentials)."""

from __future__ import annotations

import selectors
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.config.support import base_doc
from tests.engine_support import TieringEnv, write_segments
from tiering_core.cli import main
from tiering_core.config import PlatformConfig, parse_config
from tiering_core.errors import TieringError
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.replay import SOURCE_HEADER, RangeRequest, SourceMark
from tiering_core.replay.target import replay_cluster, transactional_id
from tiering_core.runs.copy import run_copy


def test_a_mark_reads_back_as_written_and_the_last_one_counts() -> None:
    mark = SourceMark("2zfzmLCpRaOSKOe6dXGZPw", 3, 12345)
    assert SourceMark.decode(mark.encode()) == mark
    earlier = SourceMark("AAAAAAAAAAAAAAAAAAAAAA", 0, 7).encode()
    headers = [(SOURCE_HEADER, earlier), ("other", b"x"), (SOURCE_HEADER, mark.encode())]
    assert SourceMark.of(headers) == mark
    assert SourceMark.of([("other", b"x")]) is None


@pytest.mark.parametrize(
    "value", [None, b"", b"a:b:c", b"id:1", b"id:-1:2", b"id:1:2:3", b"\xff\xfe:1:2", b"id:1:" + b"9" * 200]
)
def test_another_writers_header_is_no_mark(value: bytes | None) -> None:
    assert SourceMark.decode(value) is None


def test_a_transactional_id_per_source_partition_and_target() -> None:
    a = TopicIdPartition("id-a", TopicPartition("orders", 0))
    b = TopicIdPartition("id-a", TopicPartition("orders", 1))
    assert len({transactional_id("t1", a), transactional_id("t1", b), transactional_id("t2", a)}) == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of a first offset and a first timestamp"),
        ({"from_offset": 1, "from_timestamp": 2}, "exactly one of a first offset and a first timestamp"),
        ({"from_offset": 1, "to_offset": 2, "to_timestamp": 3}, "not both"),
        ({"from_offset": -1}, "from offset must not be negative"),
        ({"from_offset": 5, "to_offset": 4}, "the last offset 4 is below the first offset 5"),
        ({"from_timestamp": 5, "to_timestamp": 4}, "the last timestamp 4 is before the first one 5"),
    ],
)
def test_a_bad_range_is_refused_by_name(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(TieringError, match=message):
        RangeRequest(**kwargs)


# --- which cluster, with whose credentials ---------------------------------------------------

PASSWORD_ENV = "TIERING_TEST_REPLAY_KAFKA_PASSWORD"
PASSWORD = "kafka-section-pw-5Rq8"
USERNAME = "kafka-section-user"


def sasl_section(servers: str) -> dict[str, Any]:
    """A ``kafka:`` section with SASL PLAIN credentials, its password named by a variable."""
    return {
        "bootstrap_servers": servers,
        "request_timeout_ms": 1000,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": USERNAME,
        "sasl_password_env": PASSWORD_ENV,
    }


def config_with(tmp_path: Path, **sections: Any) -> PlatformConfig:
    return parse_config({**base_doc(tmp_path), **sections})


def test_no_target_is_the_kafka_section_and_a_target_is_its_own_cluster(tmp_path: Path) -> None:
    config = config_with(
        tmp_path,
        kafka=sasl_section("a:9092,b:9092"),
        replay={"targets": {"dr": {"bootstrap_servers": "dr:9092"}}},
    )
    assert replay_cluster(config) is config.kafka
    dr = replay_cluster(config, "dr")
    assert (dr.bootstrap_servers, dr.security_protocol, dr.sasl_plain_username, dr.sasl_password_env) == (
        ("dr:9092",),
        "PLAINTEXT",
        None,
        None,
    )
    # --bootstrap-server means the configured cluster of exactly those servers, with its own settings.
    assert replay_cluster(config, bootstrap_servers="a:9092, b:9092") is config.kafka
    assert replay_cluster(config, bootstrap_servers="dr:9092") is dr


@pytest.mark.parametrize(
    ("sections", "target", "servers", "message"),
    [
        ({}, None, None, "a replay needs a cluster to write to"),
        ({"kafka": {"bootstrap_servers": "a:9092"}}, "dr", None, "replay target 'dr': not a name of the config's"),
        ({"replay": {"targets": {"dr": {"bootstrap_servers": "dr:9092"}}}}, "dr:9092", None, "(configured: dr)"),
        (
            {"kafka": {"bootstrap_servers": "a:9092"}},
            None,
            "elsewhere:9092",
            "--bootstrap-server: elsewhere:9092 are not the servers of the kafka: section or of a replay target",
        ),
        ({"kafka": {"bootstrap_servers": "a:9092,b:9092"}}, None, "a:9092", "name that cluster in replay.targets"),
        ({}, None, "a:9092", "pick it with --target"),
        (
            {"kafka": {"bootstrap_servers": "a:9092"}},
            None,
            "no-port",
            "--bootstrap-server: 'no-port' is not host:port",
        ),
        (
            {"kafka": {"bootstrap_servers": "a:9092"}, "replay": {"targets": {"rw": {"bootstrap_servers": "a:9092"}}}},
            None,
            "a:9092",
            "are the servers of kafka and replay.targets.rw: pick the target with --target",
        ),
        ({"kafka": {"bootstrap_servers": "a:9092"}}, "dr", "a:9092", "--target and --bootstrap-server: give one"),
    ],
)
def test_a_cluster_not_configured_is_refused_by_name(
    tmp_path: Path, sections: dict[str, Any], target: str | None, servers: str | None, message: str
) -> None:
    config = config_with(tmp_path, **sections)
    with pytest.raises(TieringError) as err:
        replay_cluster(config, target, servers)
    assert message in str(err.value) and "\n" not in str(err.value)


class Listener:
    """A TCP server on 127.0.0.1 standing in for a listener on another address: it accepts every
    connection and records every byte it is sent, answering nothing."""

    def __init__(self) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.server.setblocking(False)
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        self.connections = 0
        self.received = bytearray()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="listener", daemon=True)

    def __enter__(self) -> Listener:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.server.close()

    def _serve(self) -> None:
        accepted: list[socket.socket] = []
        with selectors.DefaultSelector() as sel:
            sel.register(self.server, selectors.EVENT_READ)
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=0.05):
                    if key.fileobj is self.server:
                        try:
                            conn, _ = self.server.accept()
                        except BlockingIOError:
                            continue
                        self.connections += 1
                        accepted.append(conn)
                        sel.register(conn, selectors.EVENT_READ)
                        continue
                    conn = key.fileobj
                    assert isinstance(conn, socket.socket)
                    if not self._record(conn):
                        sel.unregister(conn)
        for conn in accepted:  # what is still buffered when the test is done
            conn.setblocking(False)
            while self._record(conn):
                pass
            conn.close()

    def _record(self, conn: socket.socket) -> bool:
        """Whether ``conn`` had bytes to read (now recorded)."""
        try:
            data = conn.recv(65536)
        except OSError:  # nothing buffered, or the client reset the connection
            return False
        self.received += data
        return bool(data)


@pytest.fixture()
def tiered(fs_env: TieringEnv) -> TieringEnv:
    """orders-0 with two segments copied to the tier (a replay of it reaches its target)."""
    w = fs_env.writer()
    write_segments(w, 2)
    w.set_high_watermark()
    with fs_env.context() as ctx:
        assert run_copy(ctx, w.tp).segments_copied == 2
    return fs_env


def replay_argv(env: TieringEnv, *extra: str) -> list[str]:
    source = ("--topic", "orders", "--from-offset", "0", "--target-topic", "orders-replayed")
    return ["replay", "--config", str(env.config_path), *source, *extra]


def test_bootstrap_servers_of_another_listener_are_refused_before_any_connection(
    tiered: TieringEnv, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    with Listener() as configured, Listener() as other:
        tiered.sections = {"kafka": sasl_section(configured.address)}
        tiered.write_config()
        code = main(replay_argv(tiered, "--bootstrap-server", other.address))
    _out, err = capsys.readouterr()
    assert (other.connections, bytes(other.received)) == (0, b"")
    assert (configured.connections, bytes(configured.received)) == (0, b"")
    assert code == 1
    (line,) = err.strip().splitlines()
    assert line.startswith(f"tiering: --bootstrap-server: {other.address} are not the servers"), line
    assert "name that cluster in replay.targets" in line and PASSWORD not in line


@pytest.mark.parametrize("pick", ["--target", "--bootstrap-server", "--bootstrap-servers"])
def test_a_replay_to_a_named_target_sends_nothing_of_the_kafka_sections_credentials(
    tiered: TieringEnv, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], pick: str
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    with Listener() as configured, Listener() as other:
        tiered.sections = {
            "kafka": sasl_section(configured.address),
            "replay": {"targets": {"elsewhere": {"bootstrap_servers": other.address, "request_timeout_ms": 1000}}},
        }
        tiered.write_config()
        code = main(replay_argv(tiered, pick, "elsewhere" if pick == "--target" else other.address))
        _out, err = capsys.readouterr()
    assert code == 1  # a raw socket speaks no Kafka
    assert f"the cluster at {other.address}" in err, err
    assert other.connections > 0 and other.received  # the client spoke to the target ...
    assert PASSWORD.encode() not in other.received  # ... without the kafka: section's credentials
    assert USERNAME.encode() not in other.received
    assert configured.connections == 0
