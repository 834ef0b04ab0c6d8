"""Throw-away databases on this machine's PostgreSQL and MariaDB servers, for any test.

Each gets its own uniquely named database (``gpub_test_<random>``), dropped afterwards, so tests
can run next to other test runs on the same servers. A server that cannot be reached is named
with the reason (the caller skips, which ``CI=true`` turns into a failure, see ci_skips.py). The
URLs can be changed through the environment.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError

SERVER_URLS = {
    "postgresql": os.environ.get(
        "GPUBOOKING_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    ),
    "mysql": os.environ.get(
        "GPUBOOKING_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306/test"
    ),
}

#: The database servers, as ``pytest.mark.parametrize`` values of a test's backend (marked, so
#: ``-m postgres`` / ``-m mysql`` picks them): for what SQLite, one writer at a time, never meets
#: (row locks, lock waits, deadlocks)
SERVERS = [
    pytest.param("postgresql", marks=pytest.mark.postgres),
    pytest.param("mysql", marks=pytest.mark.mysql),
]

_unreachable: dict[str, str | None] = {}


def server_unreachable(backend: str) -> str | None:
    """Why the backend's server cannot be used (None if it can), checked once per run."""
    if backend not in _unreachable:
        engine = create_engine(SERVER_URLS[backend], connect_args={"connect_timeout": 3})
        try:
            with engine.connect():
                _unreachable[backend] = None
        except DBAPIError as error:
            _unreachable[backend] = (
                f"{backend} server at {SERVER_URLS[backend]} unreachable: {error}"
            )
        finally:
            engine.dispose()
    return _unreachable[backend]


def skip_unless_reachable(backend: str) -> None:
    """Skip the calling test, printing why, when the backend's server cannot be used."""
    reason = server_unreachable(backend)
    if reason:
        print(f"SKIP: {reason}")
        pytest.skip(reason)


def unique_name() -> str:
    return f"gpub_test_{uuid.uuid4().hex[:12]}"


class ServerDatabase:
    """A throw-away database on a server, created on entry and dropped on exit."""

    def __init__(self, backend: str):
        self.backend = backend
        self.name = unique_name()
        server_url = make_url(SERVER_URLS[backend])
        self.url = server_url.set(database=self.name)
        self._admin = create_engine(server_url, isolation_level="AUTOCOMMIT")

    def __enter__(self) -> URL:
        with self._admin.connect() as connection:
            charset = " CHARACTER SET utf8mb4" if self.backend == "mysql" else ""
            connection.execute(text(f"CREATE DATABASE {self.name}{charset}"))
        return self.url

    def __exit__(self, *exc_info) -> None:
        force = " WITH (FORCE)" if self.backend == "postgresql" else ""
        with self._admin.connect() as connection:
            connection.execute(text(f"DROP DATABASE IF EXISTS {self.name}{force}"))
        self._admin.dispose()


@contextmanager
def new_database(backend: str) -> Iterator[str]:
    """A :class:`ServerDatabase` as the URL string a process is configured with."""
    with ServerDatabase(backend) as url:
        yield url.render_as_string(hide_password=False)


def lock_waits(connection) -> int:
    """How many statements of other connections to this connection's database wait for a lock.

    On PostgreSQL the connections waiting for a lock (a row lock is a wait for the holder's
    transaction, a lock of no database in ``pg_locks``). On MariaDB a statement that locks one
    row by its key waits while it is being planned, before InnoDB lists its transaction as
    waiting (``innodb_trx`` had none while a pool's ``FOR UPDATE`` waited): there, a statement
    of another connection that has run for 100 ms, which only a wait makes a statement here do.
    Roll the connection back between calls for a fresh look."""
    if connection.dialect.name == "postgresql":
        query = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                 "AND wait_event_type = 'Lock'")
    else:
        query = ("SELECT count(*) FROM information_schema.processlist WHERE db = DATABASE() "
                 "AND id <> CONNECTION_ID() AND info IS NOT NULL AND time_ms >= 100")
    return connection.execute(text(query)).scalar()
