"""SQLAlchemy engines for the metadata store, tuned per backend.

SQLite: WAL (readers never block the writer), a 30 s busy timeout, and ``BEGIN IMMEDIATE``
for write transactions so concurrent writers queue for the lock instead of failing halfway
(a deferred transaction that upgrades from reading to writing can get SQLITE_BUSY at once).
Reads use a plain deferred ``BEGIN``, which in WAL mode is a consistent snapshot.
PostgreSQL: psycopg 3; fencing relies on ``SELECT ... FOR UPDATE`` of the partition row. Every
connection is bounded by the config's ``DatabaseTimeouts``: a connect timeout, a statement timeout
and TCP keepalives with a user timeout, so a database that stops answering (a black-holed host)
fails the request instead of holding its thread for minutes.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

from tiering_core.config.metadata import DatabaseTimeouts

log = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_MS = 30_000
SQLITE_CACHE_KIB = 32 * 1024
# Commits never checkpoint below this WAL size (pages); the background checkpointer keeps the WAL
# well under it, so a commit does not pay for a checkpoint's fsync. It still bounds the WAL if
# no checkpointer runs.
SQLITE_WAL_AUTOCHECKPOINT_PAGES = 16_384
CHECKPOINT_INTERVAL_S = 0.5
WRITE_OPTION = "tiering_write"


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


#: PostgreSQL's SQLSTATE of a statement the server canceled (statement_timeout among others).
QUERY_CANCELED = "57014"


def postgresql_connect_args(url: str, timeouts: DatabaseTimeouts) -> dict[str, Any]:
    """libpq's parameters for ``timeouts`` (psycopg and psycopg2 pass them through), the URL's own
    ``options`` kept; none for other drivers, which take other names."""
    parsed = make_url(url)
    if parsed.get_driver_name() not in ("psycopg", "psycopg2"):
        return {}
    args: dict[str, Any] = {
        "connect_timeout": timeouts.connect_timeout_seconds,
        "keepalives": 1,
        "keepalives_idle": timeouts.keepalives_idle_seconds,
        "keepalives_interval": timeouts.keepalives_interval_seconds,
        "keepalives_count": timeouts.keepalives_count,
        "tcp_user_timeout": timeouts.dead_peer_ms,
    }
    if timeouts.statement_timeout_ms:
        own = parsed.query.get("options")
        own = " ".join(own) if isinstance(own, tuple) else own
        args["options"] = " ".join(filter(None, [own, f"-c statement_timeout={timeouts.statement_timeout_ms}"]))
    return args


def describe_driver_error(error: BaseException | None, timeouts: DatabaseTimeouts) -> str:
    """The driver's error on one line, naming the ``metadata:`` key whose limit it hit, if one."""
    text = " ".join(str(error).split()) or type(error).__name__
    if getattr(error, "sqlstate", None) == QUERY_CANCELED and timeouts.statement_timeout_ms:
        return f"{text} (metadata.statement_timeout_ms is {timeouts.statement_timeout_ms})"
    if type(error).__name__ == "ConnectionTimeout":  # psycopg's, raised by its own connect wait
        return f"{text} (metadata.connect_timeout_seconds is {timeouts.connect_timeout_seconds})"
    return text


def make_engine(
    url: str, *, echo: bool = False, foreign_keys: bool = True, timeouts: DatabaseTimeouts | None = None
) -> Engine:
    """An engine whose write transactions (``execution_options(tiering_write=True)``) serialize.

    ``foreign_keys=False`` is for migrations: SQLite's batch ALTER rebuilds referenced tables.
    ``timeouts`` bound a PostgreSQL server's answers (default: the config's defaults).
    """
    if not is_sqlite(url):
        connect_args = postgresql_connect_args(url, timeouts or DatabaseTimeouts())
        return create_engine(url, echo=echo, pool_pre_ping=True, connect_args=connect_args)
    engine = create_engine(url, echo=echo, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # the "begin" hook below issues BEGIN itself
        cursor = dbapi_connection.cursor()
        try:
            # busy_timeout first: switching a fresh file to WAL needs the lock another opener may hold.
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a killed process loses nothing it committed; only a power loss
            # can drop the last transactions (never corrupt the file).
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")
            cursor.execute(f"PRAGMA wal_autocheckpoint={SQLITE_WAL_AUTOCHECKPOINT_PAGES}")
            cursor.execute(f"PRAGMA foreign_keys={'ON' if foreign_keys else 'OFF'}")
        finally:
            cursor.close()

    def on_begin(connection: Any) -> None:
        write = connection.get_execution_options().get(WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    event.listen(engine, "connect", on_connect)
    event.listen(engine, "begin", on_begin)
    return engine


def writer(engine: Engine) -> Engine:
    """The same engine (same pool) whose transactions take SQLite's write lock at BEGIN."""
    return engine.execution_options(**{WRITE_OPTION: True})


def is_sqlite_in_memory(url: str) -> bool:
    """``sqlite://``, ``sqlite:///:memory:`` and ``file::memory:`` / ``mode=memory`` URIs: a database
    private to one connection, which vanishes with it."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return False
    database = parsed.database or ""
    return (
        database in ("", ":memory:")
        or database.startswith("file::memory:")
        or "mode=memory" in database
        or parsed.query.get("mode") == "memory"
    )


def sqlite_file(url: str) -> str | None:
    """The database file of a SQLite URL (None for in-memory databases and other backends)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return parsed.database


class WalCheckpointer:
    """Checkpoints a SQLite WAL from a background thread, off the request path.

    A checkpoint copies the WAL into the database file and fsyncs; left to SQLite's automatic
    checkpoints, some unlucky commit pays for it. PASSIVE checkpoints never block readers or
    writers and give way to another process's checkpoint; the thread holds its own connection.
    """

    def __init__(self, path: str, interval_s: float = CHECKPOINT_INTERVAL_S) -> None:
        self.path = path
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"wal-checkpoint:{path}", daemon=True)
        self._thread.start()

    def checkpoint(self, connection: sqlite3.Connection) -> tuple[int, int, int]:
        """(busy, WAL frames, frames checkpointed) of one PASSIVE checkpoint."""
        busy, frames, done = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return int(busy), int(frames), int(done)

    def _run(self) -> None:
        try:
            connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=0)
        except sqlite3.Error as exc:
            log.warning("WAL checkpointer for %s not started: %s", self.path, exc)
            return
        try:
            while not self._stop.wait(self.interval_s):
                with contextlib.suppress(sqlite3.Error):  # busy or locked: the next round retries
                    self.checkpoint(connection)
            with contextlib.suppress(sqlite3.Error):
                self.checkpoint(connection)
        finally:
            connection.close()

    def stop(self) -> None:
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
