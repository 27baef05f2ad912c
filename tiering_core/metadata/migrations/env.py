"""Alembic environment: the connection is handed in by ``tiering_core.metadata.migrations``."""

from __future__ import annotations

from alembic import context

from tiering_core.metadata.models import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through tiering_core.metadata.migrations.upgrade()")
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
