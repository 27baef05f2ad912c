"""Replays: ``tiering_replays``, one row per source partition's replay into a Kafka topic as it
ended (range, resume point, records and bytes committed, outcome, offsets not replayed), the
newest kept for the Tiering page.

No data moves: the table starts empty; each replay adds its rows.

Revision ID: 0010_replays
Revises: 0009_retention_percent
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_replays"
down_revision = "0009_retention_percent"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tiering_replays",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("topic", sa.String(249), nullable=False),
        sa.Column("topic_id", sa.String(22), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("target_topic", sa.String(249), nullable=False),
        sa.Column("first_offset", sa.BigInteger(), nullable=True),
        sa.Column("last_offset", sa.BigInteger(), nullable=True),
        sa.Column("resumed_after", sa.BigInteger(), nullable=True),
        sa.Column("records", sa.BigInteger(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("gaps", sa.Text(), nullable=False),
        sa.Column("run", sa.String(1024), nullable=True),
        sa.Column("started_ms", sa.BigInteger(), nullable=False),
        sa.Column("finished_ms", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_replays_finished", "tiering_replays", ["finished_ms"])


def downgrade() -> None:
    op.drop_index("ix_replays_finished", table_name="tiering_replays")
    op.drop_table("tiering_replays")
