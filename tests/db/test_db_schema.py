"""The migrations build exactly the models' schema, and a stale schema refuses to start."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from jhub_gpubooking.db.models import Base
from jhub_gpubooking.db.session import (
    StaleSchema,
    alembic_config,
    check_schema,
    current_revision,
    head_revision,
    make_engine,
    upgrade,
)


def test_empty_database_refuses_with_upgrade_command(db_url):
    engine = make_engine(db_url)
    try:
        with pytest.raises(StaleSchema) as refused:
            check_schema(engine)
    finally:
        engine.dispose()
    message = str(refused.value)
    assert "has no schema yet" in message
    assert f"jhub-gpubooking db upgrade --db-url {engine.url.render_as_string()}" in message


def test_upgrade_from_empty_reaches_head_and_passes_the_check(db_url):
    assert current_revision(db_url) is None
    assert upgrade(db_url) == head_revision()
    assert current_revision(db_url) == head_revision()
    engine = make_engine(db_url)
    try:
        check_schema(engine)
        tables = set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
    assert tables == {
        "alembic_version",
        "pools",
        "bookings",
        "booking_events",
        "maintenance_windows",
        "feed_tokens",
        "usage_intervals",
        "booking_series",
        "waits",
        "missing_users",
    }


def test_migrated_schema_equals_the_models(engine):
    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection, opts={"compare_type": True, "compare_server_default": True}
        )
        assert compare_metadata(context, Base.metadata) == []


def test_schema_behind_head_refuses_naming_the_revisions(engine):
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.stamp(config, "base")
        # pretend an older release left the database at a revision before ours
        connection.exec_driver_sql("INSERT INTO alembic_version (version_num) VALUES ('0000')")
    with pytest.raises(StaleSchema) as refused:
        check_schema(engine)
    message = str(refused.value)
    assert f"is at schema revision 0000 but this version needs {head_revision()}" in message
    assert "jhub-gpubooking db upgrade --db-url" in message


def test_downgrade_removes_every_table(engine):
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "base")
    assert set(inspect(engine).get_table_names()) == {"alembic_version"}


def test_sqlite_uses_wal_and_a_busy_timeout(tmp_path):
    engine = make_engine(str(tmp_path / "plain-path.sqlite"))
    try:
        assert engine.url.get_backend_name() == "sqlite"
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    finally:
        engine.dispose()
