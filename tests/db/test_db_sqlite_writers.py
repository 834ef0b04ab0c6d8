"""SQLite write transactions of one process queue on a lock in the engine, not inside SQLite.

SQLite's own busy handler lets a waiting writer sleep up to 100 ms between tries; the engine's
lock hands the database to the next writer as soon as the previous connection is back in the
pool. With SQLite's busy timeout turned off, a second writer would fail at once with "database
is locked" if only SQLite kept them apart: these tests show it waits and then succeeds.
"""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import DBAPIError

from jhub_gpubooking.db.session import make_engine, write_transaction


@pytest.fixture
def engine(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'writers.sqlite'}")

    @event.listens_for(engine, "connect")
    def no_busy_wait(dbapi_connection, connection_record):
        # runs after make_engine's own settings: SQLite now refuses a busy database at once
        dbapi_connection.execute("PRAGMA busy_timeout=0")

    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE writes (writer TEXT)")
    yield engine
    engine.dispose()


def write_in_thread(engine, writer: str, errors: dict) -> threading.Thread:
    def write():
        try:
            with write_transaction(engine) as connection:
                connection.execute(text("INSERT INTO writes VALUES (:w)"), {"w": writer})
        except (DBAPIError, TimeoutError) as error:  # reported by the test, not lost in the thread
            errors[writer] = error

    thread = threading.Thread(target=write)
    thread.start()
    return thread


def writers(engine) -> list[str]:
    with engine.connect() as connection:
        return sorted(connection.execute(text("SELECT writer FROM writes")).scalars())


def test_second_writer_waits_for_the_first_instead_of_failing(engine):
    errors: dict[str, Exception] = {}

    with write_transaction(engine) as first:
        first.execute(text("INSERT INTO writes VALUES ('first')"))
        second = write_in_thread(engine, "second", errors)
        second.join(timeout=0.5)
        # still waiting for the first transaction rather than refused by SQLite
        assert second.is_alive() and errors == {}
    second.join(timeout=30)

    assert errors == {} and writers(engine) == ["first", "second"]


def test_failed_write_transaction_gives_the_lock_back(engine):
    with pytest.raises(RuntimeError), write_transaction(engine) as connection:
        connection.execute(text("INSERT INTO writes VALUES ('rolled back')"))
        raise RuntimeError("the booking was refused")
    errors: dict[str, Exception] = {}
    write_in_thread(engine, "next", errors).join(timeout=30)

    assert errors == {} and writers(engine) == ["next"]


def test_many_concurrent_writers_all_commit(engine):
    errors: dict[str, Exception] = {}

    threads = [write_in_thread(engine, f"w{n:02d}", errors) for n in range(12)]
    for thread in threads:
        thread.join(timeout=30)

    assert errors == {} and writers(engine) == [f"w{n:02d}" for n in range(12)]
