"""Initial schema: pools, bookings, booking_events, maintenance_windows, feed_tokens.

Revision ID: 0001
Revises:
Create Date: 2026-11-22

Migrations spell out plain column types (not the models' classes) so they stay valid when
the models change later. Times are naive UTC ``DateTime`` columns.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "pools",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("synced_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_pools")),
    )
    op.create_table(
        "feed_tokens",
        sa.Column("user", sa.String(length=255), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("user", name=op.f("pk_feed_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_feed_tokens_token_hash")),
    )
    op.create_table(
        "bookings",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user", sa.String(length=255), nullable=False),
        sa.Column("pool", sa.String(length=63), nullable=False),
        sa.Column("slices", sa.Integer(), nullable=False),
        sa.Column("amount_num", sa.Integer(), nullable=False),
        sa.Column("amount_den", sa.Integer(), nullable=False),
        sa.Column("start", sa.DateTime(), nullable=False),
        sa.Column("end", sa.DateTime(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("node", sa.String(length=255), nullable=False),
        sa.Column("gpu_indices", sa.JSON(), nullable=False),
        sa.Column("slices_per_gpu_held", sa.Integer(), nullable=False),
        sa.Column("server", sa.String(length=255), nullable=True),
        sa.Column("claimed_at", sa.DateTime(), nullable=True),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.Column("updated", sa.DateTime(), nullable=False),
        sa.CheckConstraint("status IN ('booked', 'cancelled')", name=op.f("ck_bookings_status")),
        sa.ForeignKeyConstraint(["pool"], ["pools.name"], name=op.f("fk_bookings_pool_pools")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bookings")),
    )
    op.create_index("ix_bookings_pool_end_start", "bookings", ["pool", "end", "start"])
    op.create_index("ix_bookings_user_end", "bookings", ["user", "end"])
    op.create_table(
        "maintenance_windows",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("pool", sa.String(length=63), nullable=False),
        sa.Column("node", sa.String(length=255), nullable=True),
        sa.Column("start", sa.DateTime(), nullable=False),
        sa.Column("end", sa.DateTime(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.Column("created_by", sa.String(length=255), nullable=True),
        sa.ForeignKeyConstraint(
            ["pool"], ["pools.name"], name=op.f("fk_maintenance_windows_pool_pools")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_maintenance_windows")),
    )
    op.create_index(
        "ix_maintenance_windows_pool_end_start", "maintenance_windows", ["pool", "end", "start"]
    )
    op.create_table(
        "booking_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("booking_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("actor", sa.String(length=255), nullable=True),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["booking_id"], ["bookings.id"], name=op.f("fk_booking_events_booking_id_bookings")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_booking_events")),
    )
    op.create_index(op.f("ix_booking_events_booking_id"), "booking_events", ["booking_id"])


def downgrade() -> None:
    op.drop_table("booking_events")
    op.drop_table("maintenance_windows")
    op.drop_table("bookings")
    op.drop_table("feed_tokens")
    op.drop_table("pools")
