"""Quota holders: ``tiering_quota_holders``, one row per process drawing on a broker's upload or
fetch quota (broker, ``copy`` or ``fetch``, holder), with the expiry its heartbeat pushes on and
its throttle figures, so the processes of one broker split its cap.

No data moves: the table starts empty; a process makes its row the first time it takes from a cap.

Revision ID: 0008_quota_holders
Revises: 0007_export_commits
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_quota_holders"
down_revision = "0007_export_commits"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tiering_quota_holders",
        sa.Column("broker_id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("kind", sa.String(8), primary_key=True),
        sa.Column("holder", sa.String(255), primary_key=True),
        sa.Column("expires_ms", sa.BigInteger(), nullable=False),
        sa.Column("heartbeat_ms", sa.BigInteger(), nullable=False),
        sa.Column("throttle_ms", sa.Float(), nullable=False),
        sa.Column("throttles", sa.BigInteger(), nullable=False),
        sa.Column("throttle_ms_max", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("tiering_quota_holders")
