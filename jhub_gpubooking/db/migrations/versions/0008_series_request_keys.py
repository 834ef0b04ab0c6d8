"""A recurring series' Idempotency-Key: the booking_series.request_key column.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-29

0007 let a single booking and a join of the waitlist carry an ``Idempotency-Key``; a series
(the page's "Repeat weekly") had none, so a series whose answer was lost and that was sent
again booked every occurrence twice. Its key is kept with the series, unique per user, as
0007 keeps a booking's. Existing series were made without one: NULL, which the unique index
allows any number of times on every backend.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("booking_series") as batch_op:
        batch_op.add_column(sa.Column("request_key", sa.String(length=64), nullable=True))
        batch_op.create_index(
            "ix_booking_series_user_request_key", ["user", "request_key"], unique=True
        )


def downgrade() -> None:
    with op.batch_alter_table("booking_series") as batch_op:
        batch_op.drop_index("ix_booking_series_user_request_key")
        batch_op.drop_column("request_key")
