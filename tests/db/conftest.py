"""Fixtures of the database tests: one fresh database per test on SQLite, PostgreSQL and MariaDB.

Server tests get their own database (``server_databases.ServerDatabase``); on PostgreSQL,
where CREATE DATABASE costs a checkpoint, one database per run holds a fresh schema per test
instead. A server that cannot be reached skips its tests with the reason printed.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager

import pytest
from db_test_times import NOW
from server_databases import (
    SERVERS,
    ServerDatabase,
    server_unreachable,
    skip_unless_reachable,
    unique_name,
)
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.core.model import Pool


@pytest.fixture(scope="session")
def postgres_database():
    """One PostgreSQL database for the whole run (None when the server is unreachable)."""
    if server_unreachable("postgresql"):
        yield None
        return
    with ServerDatabase("postgresql") as url:
        yield url


@contextmanager
def postgres_schema(database_url: URL):
    """A fresh schema in the run's database; the URL makes it the connection's search_path."""
    name = unique_name()
    engine = create_engine(database_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(text(f"CREATE SCHEMA {name}"))
        yield database_url.update_query_dict({"options": f"-csearch_path={name}"})
        with engine.connect() as connection:
            connection.execute(text(f"DROP SCHEMA {name} CASCADE"))
    finally:
        engine.dispose()


BACKENDS = ["sqlite", *SERVERS]


@contextmanager
def empty_database(request, backend: str, folder):
    """The URL of a new empty database on ``backend`` (skips when its server is unreachable)."""
    if backend == "sqlite":
        yield f"sqlite:///{folder / f'{unique_name()}.sqlite'}"
        return
    skip_unless_reachable(backend)
    if backend == "postgresql":
        fresh = postgres_schema(request.getfixturevalue("postgres_database"))
    else:
        fresh = ServerDatabase(backend)
    with fresh as url:
        yield url.render_as_string(hide_password=False)


@pytest.fixture
def open_database(request, tmp_path):
    """``open_database()`` → the URL of another empty database on the test's backend."""
    with ExitStack() as stack:
        yield lambda: stack.enter_context(
            empty_database(request, request.node.callspec.params["db_url"], tmp_path)
        )


@pytest.fixture(params=BACKENDS)
def db_url(request, tmp_path):
    """The URL of an empty database (never upgraded) on each backend."""
    with empty_database(request, request.param, tmp_path) as url:
        yield url


@pytest.fixture
def migrated_url(db_url):
    from jhub_gpubooking.db.session import upgrade

    upgrade(db_url)
    return db_url


@pytest.fixture
def engine(migrated_url):
    from jhub_gpubooking.db.session import make_engine

    engine = make_engine(migrated_url)
    yield engine
    engine.dispose()


@pytest.fixture
def clock():
    return ManualClock(NOW)


@pytest.fixture
def pools():
    """A whole-GPU pool on two nodes and a quarter-sliced pool on one node."""
    return {
        "a100": Pool(name="a100", nodes={"node-a": 2, "node-b": 4}),
        "t4": Pool(name="t4", nodes={"node-c": 2}, slices_per_gpu=4, backend="hami"),
    }


@pytest.fixture
def make_store(engine, pools, clock):
    """Build a synced BookingStore on the test database (keyword overrides allowed)."""
    from jhub_gpubooking.db.session import make_session_factory
    from jhub_gpubooking.db.store import BookingStore

    def build(**overrides):
        options = {
            "session_factory": make_session_factory(engine),
            "pools": pools,
            "default_policy": {},
            "group_policies": {},
            "clock": clock,
        }
        options.update(overrides)
        store = BookingStore(**options)
        store.sync_pools()
        return store

    return build


@pytest.fixture
def store(make_store):
    return make_store()
