"""The PostgreSQL the tests run against (tests/services.py): an explicit server keeps its password,
a private server that failed to start leaves nothing behind, and where none can be started a
server on the fallback address is used, or the error says what is missing."""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.services import (
    PostgresServer,
    PostgresUnavailable,
    free_port,
    pg_bindir,
    postgres_server,
    private_postgres,
    private_postgres_blockers,
)


def test_an_explicit_server_keeps_its_user_and_password() -> None:
    environ = {"TIERING_TEST_PG_URL": "postgresql://tiering:s3cr%40t@db.example:6543/postgres"}
    with postgres_server(environ=environ) as server:
        assert (server.host, server.port, server.user, server.password) == ("db.example", 6543, "tiering", "s3cr@t")
        assert server.url("t1") == "postgresql+psycopg://tiering:s3cr%40t@db.example:6543/t1"


def test_an_explicit_server_is_used_for_test_databases(pg_server: PostgresServer) -> None:
    explicit = PostgresServer(pg_server.host, pg_server.port, pg_server.user, "unused-under-trust").url("postgres")
    with postgres_server(environ={"TIERING_TEST_PG_URL": explicit}) as server:
        assert server.port == pg_server.port and server.password == "unused-under-trust"
        with server.database() as url:
            engine = create_engine(url)
            try:
                with engine.connect() as conn:
                    assert conn.execute(text("SELECT current_database()")).scalar() == url.rsplit("/", 1)[1]
            finally:
                engine.dispose()


def processes_mentioning(word: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if word in line and "ps -eo" not in line]


def test_a_private_server_that_failed_to_start_leaves_no_server_and_no_directory() -> None:
    real = pg_bindir()
    if real is None or private_postgres_blockers(real):
        pytest.skip("a private PostgreSQL server cannot be started on this machine")
    # pg_ctl that starts the server, then reports failure: a server started halfway.
    fake = Path(tempfile.mkdtemp(prefix="tiering-fake-bin-"))
    try:
        fake.chmod(0o755)
        (fake / "initdb").write_text(f'#!/bin/sh\nexec "{real}/initdb" "$@"\n')
        (fake / "pg_ctl").write_text(
            f'#!/bin/sh\n"{real}/pg_ctl" "$@"\nstatus=$?\n'
            'case " $* " in *" start "*) echo "injected: start reported as failed" >&2; exit 1;; esac\n'
            "exit $status\n"
        )
        for script in ("initdb", "pg_ctl"):
            (fake / script).chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
        prefix = f"tiering-pg-failed-{uuid.uuid4().hex[:8]}-"
        with pytest.raises(PostgresUnavailable, match="pg_ctl start failed: injected"):
            with private_postgres(fake, prefix=prefix):
                pytest.fail("the server must not be handed out")
        assert list(Path(tempfile.gettempdir()).glob(f"{prefix}*")) == []
        assert processes_mentioning(prefix) == []
    finally:
        for script in ("initdb", "pg_ctl"):
            (fake / script).unlink(missing_ok=True)
        fake.rmdir()


def test_without_a_private_server_the_one_on_the_fallback_address_is_used(pg_server: PostgresServer) -> None:
    environ = {"PGUSER": pg_server.user}
    with postgres_server(find_bindir=lambda: None, fallback=(pg_server.host, pg_server.port), environ=environ) as s:
        assert (s.host, s.port, s.user, s.private_dir) == (pg_server.host, pg_server.port, pg_server.user, None)
        with s.database() as url:  # a uniquely named database, dropped afterwards
            name = url.rsplit("/", 1)[1]
            assert name.startswith("tiering_test_")
        engine = create_engine(pg_server.url("postgres"))
        try:
            with engine.connect() as conn:
                assert (
                    conn.execute(text("SELECT count(*) FROM pg_database WHERE datname = :n"), {"n": name}).scalar() == 0
                )
        finally:
            engine.dispose()


def test_with_neither_the_error_says_what_is_missing() -> None:
    port = free_port()
    with pytest.raises(PostgresUnavailable) as err:
        with postgres_server(find_bindir=lambda: None, fallback=("127.0.0.1", port), environ={}):
            pytest.fail("no server exists")
    message = str(err.value)
    assert "server binaries (initdb, pg_ctl) not found" in message
    assert f"no server answers on 127.0.0.1:{port}" in message and "TIERING_TEST_PG_URL" in message


@pytest.mark.skipif(os.geteuid() != 0, reason="only root needs another OS user to run PostgreSQL")
def test_as_root_a_missing_runuser_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    real = pg_bindir()
    if real is None:
        pytest.skip("no PostgreSQL server binaries on this machine")
    monkeypatch.setenv("PATH", "/nonexistent")  # runuser cannot be found
    assert any("runuser" in b for b in private_postgres_blockers(real))
