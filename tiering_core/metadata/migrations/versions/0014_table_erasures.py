"""Table erasures: ``tiering_table_erasures``, each export table's part of an erasure by record
key (``tiering erase``): the table's name and Iceberg UUID, the rows deleted, the data files
holding the keys deleted, the snapshots expired, the files still to delete and the outcome.
Never a key (the erasure's partitions' rows hold the keys' SHA-256).

No data moves: the table starts empty; each erasure of a topic with an export table adds its rows.

Revision ID: 0014_table_erasures
Revises: 0013_erasures
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_table_erasures"
down_revision = "0013_erasures"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tiering_table_erasures",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("erasure_id", sa.String(36), nullable=False),
        sa.Column("topic", sa.String(249), nullable=False),
        sa.Column("table_name", sa.String(1024), nullable=False),
        sa.Column("table_uuid", sa.String(36), nullable=False),
        sa.Column("rows_deleted", sa.BigInteger(), nullable=False),
        sa.Column("data_files_deleted", sa.Integer(), nullable=False),
        sa.Column("snapshots_expired", sa.Integer(), nullable=False),
        sa.Column("pending", sa.Text(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("started_ms", sa.BigInteger(), nullable=False),
        sa.Column("finished_ms", sa.BigInteger(), nullable=True),
        sa.UniqueConstraint("erasure_id", "table_uuid", name="uq_table_erasures_table"),
    )
    op.create_index("ix_table_erasures_finished", "tiering_table_erasures", ["finished_ms"])


def downgrade() -> None:
    op.drop_index("ix_table_erasures_finished", table_name="tiering_table_erasures")
    op.drop_table("tiering_table_erasures")
