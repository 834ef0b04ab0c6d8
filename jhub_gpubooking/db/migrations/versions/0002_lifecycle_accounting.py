"""Booking lifecycle and accounting: release/stop/warning columns, usage intervals.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29

All new booking columns are nullable, so existing rows stay valid without defaults
(NULL = "not released", "never stopped", "not warned", "not opportunistic").
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NEW_BOOKING_COLUMNS = (
    ("groups", sa.JSON()),
    ("released_end", sa.DateTime()),
    ("release_reason", sa.String(length=32)),
    ("stopped_at", sa.DateTime()),
    ("warned_end", sa.DateTime()),
    ("stop_requested_at", sa.DateTime()),
    ("opportunistic", sa.Boolean()),
)


def upgrade() -> None:
    with op.batch_alter_table("bookings") as batch:
        for name, column_type in NEW_BOOKING_COLUMNS:
            batch.add_column(sa.Column(name, column_type, nullable=True))
    op.create_table(
        "usage_intervals",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("booking_id", sa.Integer(), nullable=False),
        sa.Column("server", sa.String(length=255), nullable=False),
        sa.Column("start", sa.DateTime(), nullable=False),
        sa.Column("end", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ["booking_id"], ["bookings.id"], name=op.f("fk_usage_intervals_booking_id_bookings")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage_intervals")),
    )
    op.create_index(op.f("ix_usage_intervals_booking_id"), "usage_intervals", ["booking_id"])


def downgrade() -> None:
    op.drop_table("usage_intervals")
    with op.batch_alter_table("bookings") as batch:
        for name, _ in reversed(NEW_BOOKING_COLUMNS):
            batch.drop_column(name)
