"""Recurring bookings: the booking_series table and bookings.series_id.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

``series_id`` is nullable: single bookings (and every row written before) have none.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "booking_series",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user", sa.String(length=255), nullable=False),
        sa.Column("pool", sa.String(length=63), nullable=False),
        sa.Column("repeat", sa.String(length=16), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.Column("created_by", sa.String(length=255), nullable=True),
        sa.ForeignKeyConstraint(["pool"], ["pools.name"], name=op.f("fk_booking_series_pool_pools")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_booking_series")),
    )
    with op.batch_alter_table("bookings") as batch:
        batch.add_column(sa.Column("series_id", sa.Integer(), nullable=True))
        batch.create_index(batch.f("ix_bookings_series_id"), ["series_id"])
        batch.create_foreign_key(
            batch.f("fk_bookings_series_id_booking_series"), "booking_series", ["series_id"], ["id"]
        )


def downgrade() -> None:
    with op.batch_alter_table("bookings") as batch:
        batch.drop_constraint(batch.f("fk_bookings_series_id_booking_series"), type_="foreignkey")
        batch.drop_index(batch.f("ix_bookings_series_id"))
        batch.drop_column("series_id")
    op.drop_table("booking_series")
