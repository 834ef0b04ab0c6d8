"""A database that cannot serve us: each real failure is recognised as "unavailable" (the
service's 503), no change is half-written, and work resumes as soon as the database is back.

PostgreSQL and MariaDB outages use a private server (``private_postgres.py``,
``private_mariadb.py``) that the test stops and starts; SQLite's locked, read-only and full
cases use SQLite's own errors on a real file.
"""

from __future__ import annotations

import sqlite3
from datetime import timedelta

import pytest
from db_test_times import NOW
from sqlalchemy import create_engine, event, text
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.db.session import (
    BUSY_MESSAGE,
    DATABASE_UNAVAILABLE_MESSAGE,
    DISK_FULL_MESSAGE,
    READ_ONLY_MESSAGE,
    DatabaseBusy,
    make_engine,
    make_session_factory,
    unavailable_reason,
    upgrade,
)
from jhub_gpubooking.db.store import BookingStore

START = NOW.replace(minute=0) + timedelta(hours=1)


def build_store(engine, pools) -> BookingStore:
    store = BookingStore(make_session_factory(engine), pools, {}, {}, clock=ManualClock(NOW))
    store.sync_pools()
    return store


def book(store: BookingStore, hour: int):
    start = START + timedelta(hours=hour)
    return store.create("ada", "t4", "1/4", start, start + timedelta(hours=1))


def integrity_of(path) -> str:
    with sqlite3.connect(path) as connection:
        return connection.execute("PRAGMA integrity_check").fetchone()[0]


@pytest.fixture
def sqlite_file(tmp_path):
    path = tmp_path / "bookings.sqlite"
    upgrade(f"sqlite:///{path}")
    return path


def test_a_write_lock_held_elsewhere_is_busy_after_the_timeout(sqlite_file, pools):
    engine = make_engine(f"sqlite:///{sqlite_file}", timeout=0.5)
    store = build_store(engine, pools)
    kept = book(store, 0)
    other = sqlite3.connect(sqlite_file, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # e.g. the admin CLI in the middle of a change
        with pytest.raises(OperationalError) as refused:
            book(store, 1)
        assert unavailable_reason(refused.value) == BUSY_MESSAGE
        # readers are not blocked (WAL)
        assert [booking.id for booking in store.list()] == [kept.id]
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert book(store, 1).id != kept.id
    engine.dispose()


def test_the_in_process_write_lock_times_out_as_busy(sqlite_file, pools):
    engine = make_engine(f"sqlite:///{sqlite_file}", timeout=0.2)
    store = build_store(engine, pools)
    from jhub_gpubooking.db.session import write_transaction

    # another request of this process holds the write lock
    with write_transaction(engine), pytest.raises(DatabaseBusy) as refused:
        book(store, 0)
    assert unavailable_reason(refused.value) == BUSY_MESSAGE
    assert book(store, 0).id
    engine.dispose()


@pytest.mark.parametrize(
    ("pragma", "message"),
    [
        # the file system went read-only under the service (SQLITE_READONLY)
        ("PRAGMA query_only=ON", READ_ONLY_MESSAGE),
        # the volume is full: SQLite cannot grow the file (SQLITE_FULL)
        ("PRAGMA max_page_count={pages}", DISK_FULL_MESSAGE),
    ],
    ids=["read-only", "full"],
)
def test_read_only_or_full_storage_is_one_clear_error_and_no_damage(
    sqlite_file, pools, pragma, message
):
    engine = make_engine(f"sqlite:///{sqlite_file}")
    store = build_store(engine, pools)
    kept = [book(store, hour) for hour in range(3)]
    engine.dispose()
    with sqlite3.connect(sqlite_file) as probe:
        pages = probe.execute("PRAGMA page_count").fetchone()[0]

    broken = make_engine(f"sqlite:///{sqlite_file}")

    @event.listens_for(broken, "connect")
    def _trouble(dbapi_connection, record):
        dbapi_connection.execute(pragma.format(pages=pages))

    store = BookingStore(make_session_factory(broken), pools, {}, {}, clock=ManualClock(NOW))
    errors = []
    for hour in range(3, 40):  # a full file may take a few more rows before the limit bites
        try:
            book(store, hour)
        except OperationalError as error:
            errors.append(error)
            break
    assert errors, "the storage trouble was never hit"
    assert unavailable_reason(errors[0]) == message
    # what was there is intact and readable, and the file is not damaged
    assert {booking.id for booking in store.list()} >= {booking.id for booking in kept}
    broken.dispose()
    assert integrity_of(sqlite_file) == "ok"
    # once the storage is fixed, bookings work again
    healthy = make_engine(f"sqlite:///{sqlite_file}")
    assert book(build_store(healthy, pools), 50).id
    healthy.dispose()


def test_a_bug_is_not_mistaken_for_an_outage(sqlite_file):
    engine = make_engine(f"sqlite:///{sqlite_file}")
    with pytest.raises(OperationalError) as bug, engine.connect() as connection:
        # SQLite calls this an OperationalError too; it is a bug, not an outage (stays a 500)
        connection.execute(text("SELECT 1 FROM no_such_table_here"))
    assert unavailable_reason(bug.value) is None
    with pytest.raises(IntegrityError) as duplicate, engine.begin() as connection:
        connection.execute(text("INSERT INTO feed_tokens VALUES ('a', 'x', '2030-01-01')"))
        connection.execute(text("INSERT INTO feed_tokens VALUES ('a', 'y', '2030-01-01')"))
    assert unavailable_reason(duplicate.value) is None
    assert unavailable_reason(ValueError("nope")) is None
    engine.dispose()


@pytest.mark.parametrize("server", [pytest.param("private_postgres", marks=pytest.mark.postgres),
                                    pytest.param("private_mariadb", marks=pytest.mark.mysql)])
def test_an_outage_is_unavailable_and_work_resumes_when_it_is_back(server, pools, request):
    database = request.getfixturevalue(server)
    url = database.url
    upgrade(url)
    engine = make_engine(url, timeout=2)
    store = build_store(engine, pools)
    before = book(store, 0)
    database.stop()
    try:
        for attempt in range(3):
            # a pooled connection died with the server; new ones are refused: never a hang
            with pytest.raises(DBAPIError) as refused:
                book(store, 1 + attempt)
            assert unavailable_reason(refused.value) == DATABASE_UNAVAILABLE_MESSAGE
            with pytest.raises(DBAPIError) as refused:
                store.list()
            assert unavailable_reason(refused.value) == DATABASE_UNAVAILABLE_MESSAGE
    finally:
        database.start()
    # the first request after the restart works: dead pooled connections are pinged away
    after = book(store, 1)
    assert [booking.id for booking in store.list()] == [before.id, after.id]
    engine.dispose()
    check = create_engine(url)
    with check.connect() as connection:
        # nothing half-written during the outage: one row per successful create
        assert connection.execute(text("SELECT count(*) FROM bookings")).scalar() == 2
    check.dispose()


@pytest.mark.parametrize(
    "scheme", ["postgresql+psycopg://postgres", "mysql+pymysql://root"], ids=["postgresql", "mysql"]
)
def test_a_server_nobody_answers_on_is_unavailable(scheme):
    from hub_harness import free_port

    engine = make_engine(f"{scheme}@127.0.0.1:{free_port()}/gpubooking", timeout=1)
    with pytest.raises(DBAPIError) as refused, engine.connect():
        pass
    assert unavailable_reason(refused.value) == DATABASE_UNAVAILABLE_MESSAGE
    engine.dispose()
