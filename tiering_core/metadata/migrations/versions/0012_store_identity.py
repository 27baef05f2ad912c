"""The store's identity: ``tiering_store``, one row with the id the store is known by under the
prefix it writes to (the prefix's identity object names it), when it was created, and whether a
``tiering recover`` into it is unfinished.

A store created at head gets its id here too, so every store has one from its first revision on.
A store upgraded here gets a new id; the first write of a platform at this version under its
prefix binds the prefix to it. The way back drops the table: the identity object stays in the
bucket, and a store upgraded again gets another id, which that object refuses until it is removed
(docs/upgrading.md, "Upgrading").

Revision ID: 0012_store_identity
Revises: 0011_gaps_below_log_start
"""

from __future__ import annotations

import time
import uuid

import sqlalchemy as sa
from alembic import op

revision = "0012_store_identity"
down_revision = "0011_gaps_below_log_start"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "tiering_store",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("store_id", sa.String(36), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.Column("recovery_started_ms", sa.BigInteger(), nullable=True),
    )
    op.bulk_insert(
        table,
        [{"id": 1, "store_id": str(uuid.uuid4()), "created_ms": int(time.time() * 1000), "recovery_started_ms": None}],
    )


def downgrade() -> None:
    op.drop_table("tiering_store")
