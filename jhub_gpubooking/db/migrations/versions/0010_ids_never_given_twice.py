"""Booking, series, event, usage and wait ids are never given twice (SQLite: AUTOINCREMENT).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01

``jhub-gpubooking db restore`` replaces a database's rows with a backup's in place, so that the
database's own id counters, which never go back, stay past every id given before: a server
started on a booking the restore took away must not meet another user's booking under the same
id. PostgreSQL's sequences and MariaDB's AUTO_INCREMENT are such counters already; SQLite's
``INTEGER PRIMARY KEY`` gives the largest id in the table plus one, so after a restore it would
give the ids of the bookings made since the backup again. These tables are rebuilt with
AUTOINCREMENT (as 0005 did for maintenance windows), every row kept as it is; nothing changes
on PostgreSQL and MariaDB.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: parents first, so each rebuilt child points at its rebuilt parent
TABLES = ("booking_series", "bookings", "usage_intervals", "booking_events", "waits")


def _rebuild(autoincrement: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for table in TABLES:
        with op.batch_alter_table(
            table, recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}
        ):
            pass


def upgrade() -> None:
    _rebuild(autoincrement=True)


def downgrade() -> None:
    _rebuild(autoincrement=False)
