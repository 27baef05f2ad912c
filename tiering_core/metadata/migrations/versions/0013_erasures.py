"""Erasures: ``tiering_erasures``, the audit trail of erasures by record key (``tiering erase``):
per erasure and partition, the SHA-256 of each erased key (never a key), who asked, when, the
segments copied again without the keys and the records removed.

No data moves: the table starts empty; each erasure adds its rows.

Revision ID: 0013_erasures
Revises: 0012_store_identity
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_erasures"
down_revision = "0012_store_identity"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tiering_erasures",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("erasure_id", sa.String(36), nullable=False),
        sa.Column("topic", sa.String(249), nullable=False),
        sa.Column("topic_id", sa.String(22), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("key_sha256", sa.Text(), nullable=False),
        sa.Column("requested_by", sa.String(1024), nullable=False),
        sa.Column("segments", sa.Text(), nullable=False),
        sa.Column("records_removed", sa.BigInteger(), nullable=False),
        sa.Column("segments_read", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("started_ms", sa.BigInteger(), nullable=False),
        sa.Column("finished_ms", sa.BigInteger(), nullable=True),
        sa.UniqueConstraint("erasure_id", "topic_id", "partition", name="uq_erasures_partition"),
    )
    op.create_index("ix_erasures_finished", "tiering_erasures", ["finished_ms"])


def downgrade() -> None:
    op.drop_index("ix_erasures_finished", table_name="tiering_erasures")
    op.drop_table("tiering_erasures")
