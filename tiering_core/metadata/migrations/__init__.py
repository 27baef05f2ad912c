"""Alembic migrations of the metadata schema, run programmatically (no alembic.ini needed).

A store's schema changes only when asked: ``upgrade`` and ``downgrade`` (``tiering db``) are the
only migrations of an existing store. Opening a store (``create_or_check_schema``) creates the
schema at head in a new, empty database and otherwise only checks it: a schema behind or ahead of
this code is refused, naming both revisions.

Concurrent first users are safe: on PostgreSQL the migration transaction holds an advisory
lock, on SQLite it is a ``BEGIN IMMEDIATE`` transaction (the file's write lock, waited for up
to the busy timeout); either way the revision is read again under the lock, so the second
creator finds the schema current and does nothing. DDL is transactional on both, so a
migration killed halfway leaves the previous revision.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Connection, Engine, inspect, text
from sqlalchemy.exc import DBAPIError

from tiering_core.config.metadata import DatabaseTimeouts, safe_url
from tiering_core.metadata.engine import describe_driver_error, make_engine, writer
from tiering_core.metadata.errors import MetadataStoreError, SchemaAheadError, SchemaBehindError

HERE = Path(__file__).resolve().parent
MIGRATION_LOCK_KEY = 4059281  # pg_advisory_xact_lock key of schema migrations


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(HERE))
    return config


@functools.cache
def head_revision() -> str:
    """The head of this code's migration scripts (read once: the scripts are part of the install)."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


@functools.cache
def known_revisions() -> frozenset[str]:
    return frozenset({script.revision for script in ScriptDirectory.from_config(_config()).walk_revisions()})


def _for_migrations(timeouts: DatabaseTimeouts | None) -> DatabaseTimeouts:
    """The store's timeouts without a statement limit: a migration's ALTER on a big table, or its
    wait for another process's migration lock, may rightly take longer than any request."""
    return replace(timeouts or DatabaseTimeouts(), statement_timeout_ms=0)


#: What a migration does on its connection, under the migration lock: Alembic's config is bound to it.
Migration = Callable[[Config, Connection], None]


def _run(url: str, migration: Migration, timeouts: DatabaseTimeouts | None = None) -> None:
    engine = make_engine(url, foreign_keys=False, timeouts=_for_migrations(timeouts))
    config = _config()
    try:
        with writer(engine).begin() as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            config.attributes["connection"] = connection
            migration(config, connection)
    except DBAPIError as exc:
        reason = describe_driver_error(exc.orig, _for_migrations(timeouts))
        raise MetadataStoreError(f"migrating metadata store {safe_url(url)} failed: {reason}") from exc
    except CommandError as exc:
        raise MetadataStoreError(f"migrating metadata store {safe_url(url)}: {exc}") from exc
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = "head", timeouts: DatabaseTimeouts | None = None) -> None:
    """Migrate the database at ``url`` up to ``revision`` (``tiering db upgrade``)."""
    _run(url, lambda config, _connection: command.upgrade(config, revision), timeouts)


def downgrade(url: str, revision: str, timeouts: DatabaseTimeouts | None = None) -> None:
    """Migrate down to ``revision`` (``"base"`` drops every table)."""
    _run(url, lambda config, _connection: command.downgrade(config, revision), timeouts)


def revision_of(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def current_revision(url: str, timeouts: DatabaseTimeouts | None = None) -> str | None:
    timeouts = timeouts or DatabaseTimeouts()
    engine = make_engine(url, timeouts=timeouts)
    try:
        with engine.connect() as connection:
            return revision_of(connection)
    except DBAPIError as exc:
        reason = describe_driver_error(exc.orig, timeouts)
        raise MetadataStoreError(f"cannot read metadata store {safe_url(url)}: {reason}") from exc
    finally:
        engine.dispose()


def check_revision(url: str, current: str | None) -> None:
    """Refuse a store whose schema is not this code's head, naming both revisions and what to
    run; ``None`` (no schema yet) passes: a new database is created at head."""
    head = head_revision()
    if current is None or current == head:
        return
    if current not in known_revisions():
        raise SchemaAheadError(
            f"metadata store {safe_url(url)} is at schema revision {current}, newer than this "
            f"version of the platform knows (head {head}): upgrade the platform here to the version "
            'that upgraded the store (docs/upgrading.md "Upgrading")'
        )
    raise SchemaBehindError(
        f"metadata store {safe_url(url)} is at schema revision {current}, behind this version of the "
        f"platform (head {head}); nothing was changed: back it up, then run `tiering db upgrade` "
        '(docs/upgrading.md "Upgrading")'
    )


def _create_at_head(url: str) -> Migration:
    def create(config: Config, connection: Connection) -> None:
        current = revision_of(connection)  # again, under the lock: another process may have won
        check_revision(url, current)
        if current is not None:
            return
        found = sorted(name for name in inspect(connection).get_table_names() if name.startswith("tiering_"))
        if found:  # not a new database: a store whose revision was lost is no store to build over
            raise MetadataStoreError(
                f"metadata store {safe_url(url)} holds the platform's tables ({', '.join(found[:3])}"
                f"{', ...' if len(found) > 3 else ''}) but no schema revision: not creating a store over them"
            )
        command.upgrade(config, "head")

    return create


def create_or_check_schema(engine: Engine, url: str, timeouts: DatabaseTimeouts | None = None) -> None:
    """What opening a store does to its schema: create it at head in a new, empty database, and
    otherwise only check it is at head. An existing store is never migrated here: an upgrade is
    the operator's step, taken after a backup and before the workers run the new code."""
    with engine.connect() as connection:
        current = revision_of(connection)
    check_revision(url, current)
    if current is None:
        _run(url, _create_at_head(url), timeouts)
