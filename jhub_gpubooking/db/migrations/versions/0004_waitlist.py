"""The waitlist: the waits table.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23

A new table only; no existing row changes.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "waits",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user", sa.String(length=255), nullable=False),
        sa.Column("pool", sa.String(length=63), nullable=False),
        sa.Column("amount_num", sa.Integer(), nullable=False),
        sa.Column("amount_den", sa.Integer(), nullable=False),
        sa.Column("start", sa.DateTime(), nullable=False),
        sa.Column("latest_start", sa.DateTime(), nullable=False),
        sa.Column("minutes", sa.Integer(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("groups", sa.JSON(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("booking_id", sa.Integer(), nullable=True),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.Column("updated", sa.DateTime(), nullable=False),
        sa.Column("created_by", sa.String(length=255), nullable=True),
        sa.CheckConstraint(
            "state IN ('waiting', 'booked', 'expired', 'withdrawn')", name=op.f("ck_waits_state")
        ),
        sa.ForeignKeyConstraint(
            ["booking_id"], ["bookings.id"], name=op.f("fk_waits_booking_id_bookings")
        ),
        sa.ForeignKeyConstraint(["pool"], ["pools.name"], name=op.f("fk_waits_pool_pools")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_waits")),
    )
    op.create_index("ix_waits_state_pool", "waits", ["state", "pool"])
    op.create_index("ix_waits_user_state", "waits", ["user", "state"])


def downgrade() -> None:
    op.drop_index("ix_waits_user_state", table_name="waits")
    op.drop_index("ix_waits_state_pool", table_name="waits")
    op.drop_table("waits")
