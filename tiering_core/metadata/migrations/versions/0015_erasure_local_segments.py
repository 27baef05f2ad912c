"""The broker's local segments in an erasure's audit trail: ``tiering_erasures`` gains
``local_segments``, per partition erased what the broker's local log on the erasing host still
held of the keys (JSON: the log dir, or why it was not checked; each segment holding them by
base offset and file name, its count of the keys' records and when local retention removes it).
The platform cannot change the broker's files, so the trail names them. Never a key.

No data moves: the new column starts NULL (erasures recorded before did not look).

Revision ID: 0015_erasure_local_segments
Revises: 0014_table_erasures
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_erasure_local_segments"
down_revision = "0014_table_erasures"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tiering_erasures") as batch:
        batch.add_column(sa.Column("local_segments", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tiering_erasures") as batch:
        batch.drop_column("local_segments")
