"""Every migration step on a database full of history, on SQLite, PostgreSQL and MariaDB.

The data per revision lives in ``migration_data.py``. Walking up, before each step the database
holds the rows of every earlier revision; after it, every row is still there with the same
content, and the schema is exactly the one a fresh database gets at that revision (at head: the
models). Walking down, each step keeps the rows of the tables and columns that remain.
"""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from migration_data import REVISION_IDS, expected_rows, rows_of, table_at, write_rows
from sqlalchemy import inspect

from jhub_gpubooking.db.models import Base
from jhub_gpubooking.db.session import (
    check_schema,
    current_revision,
    downgrade,
    head_revision,
    make_engine,
    upgrade,
)


def test_the_data_covers_every_revision():
    # a new migration without rows of its own would go untested
    assert REVISION_IDS[-1] == head_revision()


def schema_of(url: str) -> dict:
    """Tables, columns, keys, indexes and constraints as the database reports them."""
    engine = make_engine(url)
    try:
        inspector = inspect(engine)
        schema = {}
        for table in sorted(inspector.get_table_names()):
            if table == "alembic_version":
                continue
            schema[table] = {
                "columns": [
                    (column["name"], str(column["type"]), column["nullable"])
                    for column in inspector.get_columns(table)
                ],
                "primary key": inspector.get_pk_constraint(table)["constrained_columns"],
                "foreign keys": sorted(
                    (
                        fk["name"],
                        tuple(fk["constrained_columns"]),
                        fk["referred_table"],
                        tuple(fk["referred_columns"]),
                    )
                    for fk in inspector.get_foreign_keys(table)
                ),
                "indexes": sorted(
                    (index["name"], tuple(index["column_names"]), bool(index["unique"]))
                    for index in inspector.get_indexes(table)
                ),
                "unique": sorted(
                    (unique["name"], tuple(unique["column_names"]))
                    for unique in inspector.get_unique_constraints(table)
                ),
                "checks": sorted(
                    (check["name"], check["sqltext"])
                    for check in inspector.get_check_constraints(table)
                ),
            }
        return schema
    finally:
        engine.dispose()


def write(url: str, revision: str) -> None:
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            write_rows(connection, revision)
    finally:
        engine.dispose()


def assert_equals_the_models(url: str) -> None:
    engine = make_engine(url)
    try:
        check_schema(engine)
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection, opts={"compare_type": True, "compare_server_default": True}
            )
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


def walk_up(url: str, fresh_url: str) -> dict[str, dict]:
    """Upgrade ``url`` one revision at a time, writing each revision's rows; returns the fresh
    database's schema at each revision."""
    fresh_schemas = {}
    for position, revision in enumerate(REVISION_IDS):
        assert upgrade(url, revision) == revision
        assert upgrade(fresh_url, revision) == revision
        fresh_schemas[revision] = schema_of(fresh_url)
        if position:
            # the step from the previous revision kept every row written so far
            previous = REVISION_IDS[position - 1]
            assert rows_of(url, revision) == expected_rows(previous, revision), revision
            assert schema_of(url) == fresh_schemas[revision], revision
        write(url, revision)
        assert rows_of(url, revision) == expected_rows(revision, revision)
    return fresh_schemas


def test_every_upgrade_step_keeps_the_history(db_url, open_database):
    walk_up(db_url, open_database())
    assert current_revision(db_url) == head_revision()
    assert_equals_the_models(db_url)


def test_upgrade_from_the_first_revision_to_head_in_one_go(db_url):
    # what `jhub-gpubooking db upgrade` does after skipping releases
    for revision in REVISION_IDS[:-1]:
        upgrade(db_url, revision)
        write(db_url, revision)
    assert upgrade(db_url) == head_revision()
    assert rows_of(db_url, head_revision()) == expected_rows(REVISION_IDS[-2], head_revision())
    assert_equals_the_models(db_url)


def test_every_downgrade_step_keeps_the_remaining_history(db_url, open_database):
    fresh_schemas = walk_up(db_url, open_database())
    written = REVISION_IDS[-1]
    for revision in reversed(REVISION_IDS[:-1]):
        assert downgrade(db_url, "-1") == revision
        assert rows_of(db_url, revision) == expected_rows(written, revision), revision
        assert schema_of(db_url) == fresh_schemas[revision], revision
    # and back up again: the rows survive a round trip (columns dropped on the way are NULL)
    assert upgrade(db_url) == head_revision()
    assert len(rows_of(db_url, head_revision())["bookings"]) == len(
        expected_rows(written, head_revision())["bookings"]
    )
    assert_equals_the_models(db_url)


def autoincrement_tables(url: str) -> set[str]:
    """SQLite's tables whose ids are never given twice (0010); the servers' counters never go back."""
    engine = make_engine(url)
    try:
        if engine.dialect.name != "sqlite":
            return set()
        with engine.connect() as connection:
            return set(connection.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%AUTOINCREMENT%'"
            ).scalars())
    finally:
        engine.dispose()


def test_a_new_database_gets_the_schema_the_migrations_give(db_url, open_database):
    """A new database is made from the models and stamped at head; every migration replayed
    on another must give exactly that schema, and the new one migrates down and up again."""
    replayed = open_database()
    for revision in REVISION_IDS:
        upgrade(replayed, revision)
    assert upgrade(db_url) == head_revision()
    assert schema_of(db_url) == schema_of(replayed)
    assert autoincrement_tables(db_url) == autoincrement_tables(replayed)
    if make_engine(db_url).dialect.name == "sqlite":
        assert autoincrement_tables(db_url) == {
            "booking_series", "bookings", "usage_intervals", "booking_events", "waits",
            "maintenance_windows"}
    assert downgrade(db_url, "-1") == REVISION_IDS[-2]
    previous = open_database()
    upgrade(previous, REVISION_IDS[-2])
    assert schema_of(db_url) == schema_of(previous)
    assert upgrade(db_url) == head_revision()
    assert_equals_the_models(db_url)


def test_another_applications_tables_do_not_stop_a_new_schema(db_url, open_database):
    """A database shared with another application (its tables only) gets ours beside them."""
    engine = make_engine(db_url)
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql("CREATE TABLE other_app (id INTEGER PRIMARY KEY)")
            connection.exec_driver_sql("INSERT INTO other_app (id) VALUES (7)")
    finally:
        engine.dispose()
    assert upgrade(db_url) == head_revision()
    alone = open_database()
    upgrade(alone)
    schema = schema_of(db_url)
    assert schema.pop("other_app")["columns"][0][0] == "id"
    assert schema == schema_of(alone)
    engine = make_engine(db_url)
    try:
        check_schema(engine)
        with engine.connect() as connection:
            assert connection.exec_driver_sql("SELECT id FROM other_app").scalars().all() == [7]
    finally:
        engine.dispose()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_after_the_upgrade_a_deleted_windows_id_is_not_given_again(db_url):
    """0005 on a SQLite database with windows: the highest id, once deleted, stays used. (The
    servers' sequences never reuse an id; their rows here were written with explicit ids,
    which a sequence does not see, so the same insert would collide there.)"""
    from sqlalchemy import delete, insert, select

    for revision in REVISION_IDS[:-1]:
        upgrade(db_url, revision)
        write(db_url, revision)
    upgrade(db_url)
    engine = make_engine(db_url)
    try:
        windows = table_at(head_revision(), "maintenance_windows")
        with engine.begin() as connection:
            highest = connection.execute(select(windows.c.id).order_by(windows.c.id.desc())).first()[0]
            connection.execute(delete(windows).where(windows.c.id == highest))
            row = {**rows_of(db_url, REVISION_IDS[-2])["maintenance_windows"][0]}
            del row["id"]
            connection.execute(insert(windows).values(**row))
            ids = connection.execute(select(windows.c.id)).scalars().all()
        assert highest not in ids and max(ids) > highest
    finally:
        engine.dispose()


def test_the_reported_case_upgrades_with_the_cli(db_url, capsys):
    """Issue 14: a database at 0002 with a pool, a booking and an event, then `db upgrade`."""
    from jhub_gpubooking.cli import main

    for revision in ("0001", "0002"):
        upgrade(db_url, revision)
        write(db_url, revision)
    assert main(["db", "upgrade", "--db-url", db_url]) == 0
    assert capsys.readouterr().out.endswith(f"is at schema revision {head_revision()} (head).\n")
    assert rows_of(db_url, head_revision()) == expected_rows("0002", head_revision())


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_migration_leaving_broken_references_is_rolled_back(db_url):
    """SQLite checks references only at the end of a migration: a dangling one undoes it all."""
    from jhub_gpubooking.db.session import MigrationError

    for revision in REVISION_IDS[:-1]:
        upgrade(db_url, revision)
        write(db_url, revision)
    engine = make_engine(db_url)
    try:
        with engine.connect() as connection:
            # an event of a booking that does not exist (possible in a file edited by hand)
            connection.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")
            connection.exec_driver_sql(
                "INSERT INTO booking_events (booking_id, at, kind, detail) "
                "VALUES (999, '2030-01-01 00:00:00', 'created', '{}')"
            )
            connection.commit()
    finally:
        engine.dispose()
    with pytest.raises(MigrationError, match="booking_events row .* → bookings"):
        upgrade(db_url)
    assert current_revision(db_url) == REVISION_IDS[-2]
    assert (
        rows_of(db_url, REVISION_IDS[-2])["bookings"]
        == expected_rows(REVISION_IDS[-2], REVISION_IDS[-2])["bookings"]
    )
