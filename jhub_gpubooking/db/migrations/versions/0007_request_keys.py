"""A create's Idempotency-Key: the bookings.request_key and waits.request_key columns.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-29

A create whose answer was lost (the network dropped it, the page was reloaded) and that is sent
again must not book a second time. A create may carry an ``Idempotency-Key`` header; the key is
kept with the booking, unique per user, so the same create sent again answers the booking it
made; a join of the waitlist likewise keeps its key with the wait. Existing rows were made
without one: the column is NULL for them, which the unique index allows any number of times
on every backend.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


TABLES = ("bookings", "waits")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch_op:
            batch_op.add_column(sa.Column("request_key", sa.String(length=64), nullable=True))
            batch_op.create_index(
                f"ix_{table}_user_request_key", ["user", "request_key"], unique=True
            )


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch_op:
            batch_op.drop_index(f"ix_{table}_user_request_key")
            batch_op.drop_column("request_key")
