"""A maintenance window's Idempotency-Key: the maintenance_windows.request_key column.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01

0007 and 0008 let a booking, a join of the waitlist and a series carry an ``Idempotency-Key``;
a maintenance window had none, so a window whose answer was lost and that the admin sent again
blocked the pool twice (two rows, two entries in every listing, one to find and delete by hand).
Its key is kept with the window, unique per admin who added it (``created_by``), as a booking's
is per user. Existing windows were made without one: NULL, which the unique index allows any
number of times on every backend. Adding a column and an index needs no rebuild of the table on
SQLite, so the AUTOINCREMENT of 0005 stays.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("maintenance_windows") as batch_op:
        batch_op.add_column(sa.Column("request_key", sa.String(length=64), nullable=True))
        batch_op.create_index(
            "ix_maintenance_windows_created_by_request_key", ["created_by", "request_key"],
            unique=True,
        )


def downgrade() -> None:
    with op.batch_alter_table("maintenance_windows") as batch_op:
        batch_op.drop_index("ix_maintenance_windows_created_by_request_key")
        batch_op.drop_column("request_key")
