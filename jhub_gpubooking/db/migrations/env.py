"""Alembic environment for the GPU booking schema.

``jhub_gpubooking.db.session.upgrade`` passes an open connection in
``config.attributes["connection"]``; the plain ``alembic`` CLI falls back to
``GPUBOOKING_DB_URL``. Logging is left to the caller (no fileConfig), so running migrations
inside the service does not reset the Hub's log setup.
"""

import os

from alembic import context

from jhub_gpubooking.db.models import Base
from jhub_gpubooking.db.session import (
    DB_URL_ENV,
    DEFAULT_DB_URL,
    make_engine,
    migration_transaction,
)


def run_on(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        compare_type=True,
        # SQLite cannot ALTER most things; batch mode rebuilds tables instead
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        run_on(connection)
        return
    engine = make_engine(os.environ.get(DB_URL_ENV, DEFAULT_DB_URL))
    try:
        with migration_transaction(engine) as connection:
            run_on(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("Offline (--sql) migrations are not supported; give a database URL.")
run_migrations()
