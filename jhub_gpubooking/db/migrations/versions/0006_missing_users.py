"""Users the Hub no longer has: the missing_users table.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-28

The service kept the time each user was first found missing from the Hub in its memory, so
every restart of the service (each ``helm upgrade`` restarts the hub pod) started their grace
again, and a second service process had times of its own. A new table only; no existing row
changes. Users missing when the database is upgraded are found missing again by the first
round after it, and their grace starts then.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "missing_users",
        sa.Column("user", sa.String(length=255), nullable=False),
        sa.Column("since", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("user", name=op.f("pk_missing_users")),
    )


def downgrade() -> None:
    op.drop_table("missing_users")
