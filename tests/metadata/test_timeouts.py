"""The metadata store's PostgreSQL timeouts (``metadata:`` connect, statement and keepalive
limits), against the real PostgreSQL the tests start and against a black hole: a listening socket
that accepts and never answers, as a database host that stopped answering does."""

from __future__ import annotations

import os
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
from sqlalchemy import create_engine, text

from tests.metadata.support import tip
from tiering_core.config import DatabaseTimeouts
from tiering_core.metadata.engine import make_engine, postgresql_connect_args
from tiering_core.metadata.errors import MetadataStoreError
from tiering_core.metadata.store import RemoteLogMetadataStore


@contextmanager
def black_hole() -> Iterator[int]:
    """A port that accepts connections and never answers; closed (with every accepted connection)
    at the end, which also releases anything still waiting on it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    server.setblocking(False)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(server, selectors.EVENT_READ)
            while not stop.is_set():
                for _ in sel.select(timeout=0.1):
                    try:
                        accepted.append(server.accept()[0])
                    except BlockingIOError:
                        pass

    thread = threading.Thread(target=accept, name="black-hole", daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        stop.set()
        thread.join(timeout=10)
        for conn in accepted:
            conn.close()
        server.close()


def black_hole_url(port: int) -> str:
    return f"postgresql+psycopg://tiering@127.0.0.1:{port}/meta"


def test_opening_a_store_on_a_black_hole_fails_within_the_connect_timeout() -> None:
    with black_hole() as port, ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        opening = pool.submit(RemoteLogMetadataStore, black_hole_url(port), timeouts=DatabaseTimeouts(2))
        with pytest.raises(MetadataStoreError) as err:
            opening.result(timeout=60)  # without a connect timeout: until the socket closes
        elapsed = time.monotonic() - started
    assert 1.5 < elapsed < 30, elapsed
    message = str(err.value)
    assert "cannot open metadata store" in message and "connection timeout expired" in message
    assert "metadata.connect_timeout_seconds is 2" in message and "\n" not in message


def test_every_connection_carries_the_timeouts_and_keeps_the_url_s_own_options(pg_url: str) -> None:
    """On a connection of the store's engine: the statement timeout the server applies (merged with
    ``options`` the URL gives), and the keepalive and user timeouts on the client's socket."""
    timeouts = DatabaseTimeouts(statement_timeout_ms=1234, keepalives_idle_seconds=7, keepalives_interval_seconds=3)
    engine = make_engine(pg_url + "?options=-c%20application_name%3Dtiering-test", timeouts=timeouts)
    try:
        with engine.connect() as conn:
            shown = conn.execute(
                text("SELECT current_setting('statement_timeout'), current_setting('application_name')")
            )
            assert tuple(shown.one()) == ("1234ms", "tiering-test")
            fd = conn.connection.dbapi_connection.pgconn.socket  # type: ignore[union-attr]
            with socket.socket(fileno=os.dup(fd)) as sock:
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
                tcp = {
                    name: sock.getsockopt(socket.IPPROTO_TCP, getattr(socket, name))
                    for name in ("TCP_KEEPIDLE", "TCP_KEEPINTVL", "TCP_KEEPCNT", "TCP_USER_TIMEOUT")
                }
    finally:
        engine.dispose()
    assert tcp == {"TCP_KEEPIDLE": 7, "TCP_KEEPINTVL": 3, "TCP_KEEPCNT": 3, "TCP_USER_TIMEOUT": 16_000}
    assert postgresql_connect_args(pg_url, timeouts)["connect_timeout"] == 10


def test_a_statement_past_the_timeout_fails_clearly_and_the_store_stays_usable(pg_url: str) -> None:
    """A transaction elsewhere holds the partition's row: the store's lease request waits for the
    lock until the statement timeout cancels it, a clear error naming the key; once the row is
    free, the same store (same engine, same pool) takes the lease."""
    p = tip()
    store = RemoteLogMetadataStore(pg_url, timeouts=DatabaseTimeouts(statement_timeout_ms=500))
    blocker = create_engine(pg_url)
    try:
        store.register_partition(p)
        with blocker.connect() as other:
            with other.begin():
                other.execute(text("SELECT id FROM tiering_partitions FOR UPDATE")).all()  # held until rollback
                started = time.monotonic()
                with pytest.raises(MetadataStoreError) as err:
                    store.acquire_lease(p, "copy:blocked")
                assert time.monotonic() - started < 30
                other.rollback()
        message = str(err.value)
        assert "canceling statement due to statement timeout" in message, message
        assert "metadata.statement_timeout_ms is 500" in message and "\n" not in message
        lease = store.acquire_lease(p, "copy:after")
        assert store.current_lease(p) == lease
        with store.engine.connect() as conn:  # and a plain statement under the limit runs
            assert conn.execute(text("SELECT pg_sleep(0.1), 1")).all()[0][1] == 1
    finally:
        store.close()
        blocker.dispose()


def test_migrations_have_no_statement_limit(pg_url: str) -> None:
    """A migration may rightly outlast any request: here it waits on another process's migration
    lock for longer than the store's statement timeout, and still completes once the lock is free."""
    from tiering_core.metadata.migrations import MIGRATION_LOCK_KEY, current_revision, head_revision, upgrade

    limit = DatabaseTimeouts(statement_timeout_ms=200)
    other = create_engine(pg_url)
    try:
        with (
            other.connect() as holder,
            other.connect().execution_options(isolation_level="AUTOCOMMIT") as watcher,
            ThreadPoolExecutor(1) as pool,
        ):
            holder.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            migrating = pool.submit(upgrade, pg_url, timeouts=limit)
            deadline = time.monotonic() + 60
            waited = text(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE '%pg_advisory_xact_lock%' AND clock_timestamp() - query_start > interval '1 second'"
            )
            while watcher.execute(waited).scalar_one() == 0:  # until it waited 5x the limit on the lock
                assert not migrating.done(), migrating.exception()
                assert time.monotonic() < deadline, "the migration never waited on the lock"
            holder.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY})
            migrating.result(timeout=60)
    finally:
        other.dispose()
    assert current_revision(pg_url, limit) == head_revision()
