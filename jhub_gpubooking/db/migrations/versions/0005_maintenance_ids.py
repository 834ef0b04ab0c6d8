"""Maintenance window ids are never given twice (SQLite: AUTOINCREMENT).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-28

Maintenance windows are deleted, not kept. SQLite gave the highest id again after its window
was deleted, so a DELETE retried after its answer was lost could remove a newer window. The
table is rebuilt with AUTOINCREMENT, every row kept as it is; PostgreSQL's and MariaDB's
sequences never reuse an id, so nothing changes there.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _rebuild(autoincrement: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    with op.batch_alter_table(
        "maintenance_windows", recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}
    ):
        pass


def upgrade() -> None:
    _rebuild(autoincrement=True)


def downgrade() -> None:
    _rebuild(autoincrement=False)
