"""Engines, the session factory, and the schema-version gate.

SQLite (the default, a file), PostgreSQL (``postgresql+psycopg://``) and MySQL/MariaDB
(``mysql+pymysql://``) are supported. Write transactions are serialised per pool by the store:
on PostgreSQL/MySQL with ``SELECT ... FOR UPDATE`` on the pool row, on SQLite with
``BEGIN IMMEDIATE`` (SQLite has no row locks), following SQLAlchemy's pysqlite recipe.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, event, inspect
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from .locks import DatabaseLock
from .models import Base

DB_URL_ENV = "GPUBOOKING_DB_URL"
DEFAULT_DB_URL = "sqlite:///gpubooking.sqlite"
MIGRATIONS_DIR = Path(__file__).parent / "migrations"

#: How long the admin CLI waits for another writer before giving up ("database is locked").
SQLITE_BUSY_TIMEOUT_SECONDS = 30

#: How long a migration waits for another process's migration of the same database.
MIGRATION_LOCK_WAIT_SECONDS = 600

#: Server connections older than this are replaced (firewalls and proxies drop idle ones).
SERVER_POOL_RECYCLE_SECONDS = 1800

#: Execution option asking for a write transaction (``BEGIN IMMEDIATE`` on SQLite).
WRITE_TRANSACTION_OPTION = "gpubooking_write"


class StaleSchema(RuntimeError):
    """The database schema is not the one this version of the package needs."""


class MigrationError(RuntimeError):
    """A migration would have left the database inconsistent; it was rolled back."""


class DatabaseBusy(TimeoutError):
    """Another change of this process held SQLite's write lock for the whole timeout."""


READ_ONLY_MESSAGE = (
    "The booking database is read-only, so no change can be saved; "
    "an administrator must fix its storage."
)
DISK_FULL_MESSAGE = (
    "The booking database's disk is full, so no change can be saved; "
    "an administrator must free space."
)
BUSY_MESSAGE = "The booking database is busy with other changes; try again in a few seconds."
#: Words of SQLite's and the servers' errors, and what a user is told for them.
_STORAGE_TROUBLE = (
    (("readonly", "read-only"), READ_ONLY_MESSAGE),
    (("disk is full", "no space left"), DISK_FULL_MESSAGE),
    (("database is locked", "lock wait timeout", "lock timeout", "deadlock"), BUSY_MESSAGE),
)
DATABASE_UNAVAILABLE_MESSAGE = (
    "The booking database is unavailable right now; try again in a few seconds."
)


def unavailable_reason(error: BaseException) -> str | None:
    """The sentence for a user when ``error`` means the database cannot serve us right now
    (down, unreachable, locked, read-only, full); None for any other error (a bug stays a 500)."""
    if isinstance(error, DatabaseBusy):
        return BUSY_MESSAGE
    if isinstance(error, sa_exc.TimeoutError):  # no free pooled connection in time
        return DATABASE_UNAVAILABLE_MESSAGE
    if not isinstance(error, (sa_exc.OperationalError, sa_exc.InterfaceError)) and not (
        isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated
    ):
        return None
    original = getattr(error, "orig", None)
    text = str(original or error).lower()
    for words, sentence in _STORAGE_TROUBLE:
        if any(word in text for word in words):
            return sentence
    if isinstance(original, sqlite3.Error):
        # SQLite reports its own bugs ("no such table") as OperationalError too; only trouble
        # with the file itself means "unavailable"
        if any(word in text for word in ("disk i/o error", "unable to open database")):
            return DATABASE_UNAVAILABLE_MESSAGE
        return None
    # a server: refused or lost connection, a server shutting down, a cancelled statement
    return DATABASE_UNAVAILABLE_MESSAGE


def normalize_url(url: str) -> str:
    """Accept a plain file path as shorthand for a SQLite database."""
    if "://" in url:
        return url
    return f"sqlite:///{Path(url).expanduser().resolve()}"


def display_url(url: str) -> str:
    """The URL with any password masked, for messages and logs."""
    return make_url(normalize_url(url)).render_as_string(hide_password=True)


def make_engine(url: str, timeout: float = SQLITE_BUSY_TIMEOUT_SECONDS) -> Engine:
    """An engine configured for safe concurrent booking on the URL's backend.

    ``timeout`` bounds every wait for the database: SQLite's write lock, a new server
    connection, a free pooled connection and (PostgreSQL, MariaDB) a row lock. The service
    passes its ``db_timeout_seconds``, so a request meets an outage as a quick 503, never a hang;
    the admin CLI waits longer. Pooled server connections are pinged before use (a restarted
    server leaves only dead ones) and recycled after half an hour.
    """
    parsed = make_url(normalize_url(url))
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        engine = create_engine(parsed, connect_args={"timeout": timeout})
        _configure_sqlite(
            engine, in_memory=parsed.database in (None, "", ":memory:"), timeout=timeout
        )
        return engine
    pool = {
        "pool_pre_ping": True,
        "pool_recycle": SERVER_POOL_RECYCLE_SECONDS,
        "pool_timeout": timeout,
    }
    seconds = max(1, math.ceil(timeout))
    if backend in ("mysql", "mariadb"):
        # each statement must see rows committed by the previous holder of the pool lock;
        # InnoDB's default REPEATABLE READ could hand us an older snapshot
        return create_engine(
            parsed,
            isolation_level="READ COMMITTED",
            connect_args={
                "connect_timeout": seconds,
                "init_command": f"SET SESSION innodb_lock_wait_timeout = {seconds}",
            },
            **pool,
        )
    # libpq's own minimum connect timeout is 2 s; keepalives notice a server that vanished
    # without closing its connections (a network partition)
    options = " ".join(
        filter(None, [parsed.query.get("options", ""), f"-c lock_timeout={seconds * 1000}"])
    )
    connect_args = {"connect_timeout": max(2, seconds), "options": options}
    if backend == "postgresql":
        connect_args.update(
            keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3
        )
    return create_engine(parsed, connect_args=connect_args, **pool)


def _configure_sqlite(engine: Engine, in_memory: bool, timeout: float) -> None:
    # Writers of one process queue on this lock, held from BEGIN IMMEDIATE until the connection
    # is back in the pool. Without it they meet inside SQLite, whose busy handler polls with
    # sleeps of up to 100 ms: under concurrent requests most of a write's latency was that sleep.
    # Other processes (the CLI) still wait through the busy timeout.
    write_lock = threading.Lock()

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, connection_record):
        # let SQLAlchemy, not pysqlite, decide when transactions begin (see "begin" below)
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if not in_memory:
            # readers do not block the writer and vice versa
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={round(timeout * 1000)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection):
        # IMMEDIATE takes the write lock up front, so two bookings never read the same
        # free capacity; a deferred transaction could only fail late with SQLITE_BUSY
        if connection.get_execution_options().get(WRITE_TRANSACTION_OPTION):
            if not in_memory:
                _hold_write_lock(write_lock, connection.connection.record_info, timeout)
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            connection.exec_driver_sql("BEGIN")

    @event.listens_for(engine, "checkin")
    def _on_checkin(dbapi_connection, connection_record):
        # also reached when the transaction failed or the connection was invalidated
        if connection_record.record_info.pop(_HOLDS_WRITE_LOCK, False):
            write_lock.release()


#: Marks the pooled connection that holds the process's SQLite write lock.
_HOLDS_WRITE_LOCK = "gpubooking_holds_write_lock"


def _hold_write_lock(write_lock: threading.Lock, record_info: dict, timeout: float) -> None:
    if record_info.get(_HOLDS_WRITE_LOCK):
        return  # this connection has it already (a second write before going back to the pool)
    if not write_lock.acquire(timeout=timeout):
        raise DatabaseBusy(f"Another booking change held the database for {timeout:g} s.")
    record_info[_HOLDS_WRITE_LOCK] = True


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """The one session factory; objects stay readable after commit."""
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A connection in a write transaction (``BEGIN IMMEDIATE`` on SQLite): committed when the
    block ends, rolled back when it raises.

    A plain connection, not a session: the service's most frequent write (a create) sends only
    Core statements, and an ORM session around them was a seventh of its Python calls (its
    transaction bookkeeping, a flush before each statement, its commit and close)."""
    with engine.connect() as connection:
        connection.execution_options(**{WRITE_TRANSACTION_OPTION: True})
        with connection.begin():
            yield connection


def alembic_config() -> Config:
    return Config(str(MIGRATIONS_DIR / "alembic.ini"))


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "the package ships at least one migration"
    return head


def _revision_of(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def check_schema(engine: Engine) -> None:
    """Refuse to run against a database whose schema is not at this version's head."""
    current = _revision_of(engine)
    head = head_revision()
    if current == head:
        return
    url = engine.url.render_as_string(hide_password=True)
    fix = f"run `jhub-gpubooking db upgrade --db-url {url}` before starting the service."
    if current is None:
        raise StaleSchema(f"The GPU booking database {url} has no schema yet; {fix}")
    raise StaleSchema(
        f"The GPU booking database {url} is at schema revision {current} but this version "
        f"needs {head}; {fix}"
    )


@contextmanager
def migration_transaction(engine: Engine) -> Iterator[Connection]:
    """A connection in one transaction for Alembic; on SQLite with foreign keys checked at the end.

    SQLite cannot ALTER most things, so batch migrations copy a table into a new one, drop the
    old one and rename. With ``PRAGMA foreign_keys=ON`` dropping a table that other rows point
    to fails (``FOREIGN KEY constraint failed [DROP TABLE bookings]``), so, as SQLite's own
    procedure for schema changes says, the checks are off while migrating (the pragma only
    takes effect outside a transaction) and ``PRAGMA foreign_key_check`` must find nothing
    before the transaction commits; otherwise the whole migration is rolled back.
    """
    with engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            _set_sqlite_foreign_keys(connection, False)
        try:
            with connection.begin():
                yield connection
                if sqlite:
                    _refuse_broken_references(connection)
        finally:
            if sqlite:
                _set_sqlite_foreign_keys(connection, True)


def _set_sqlite_foreign_keys(connection: Connection, on: bool) -> None:
    # straight on the driver's connection: through SQLAlchemy the statement would begin a
    # transaction first, inside which SQLite ignores this pragma
    connection.connection.driver_connection.execute(f"PRAGMA foreign_keys={'ON' if on else 'OFF'}")


def _refuse_broken_references(connection: Connection) -> None:
    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if broken:
        table, rowid, parent, _ = broken[0]
        raise MigrationError(
            f"The migration left {len(broken)} row(s) pointing to missing rows (first: "
            f"{table} row {rowid} → {parent}); nothing was changed."
        )


def _migrate(url: str, run) -> str | None:
    engine = make_engine(url)
    # several service processes starting with upgrade_db: one migrates, the others then find
    # the schema at head and have nothing to do
    lock = DatabaseLock(engine, "jhub_gpubooking.migrations")
    try:
        locked = lock.wait(MIGRATION_LOCK_WAIT_SECONDS)
    except BaseException:  # the database cannot be reached
        engine.dispose()
        raise
    if not locked:
        engine.dispose()
        raise MigrationError(
            f"Another process has been migrating {display_url(url)} for "
            f"{MIGRATION_LOCK_WAIT_SECONDS} s; try again when it is done."
        )
    try:
        with migration_transaction(engine) as connection:
            config = alembic_config()
            # env.py runs on this connection, so the engine settings above apply
            config.attributes["connection"] = connection
            run(config)
        return _revision_of(engine)
    finally:
        lock.release()
        engine.dispose()


def upgrade(url: str, revision: str = "head") -> str | None:
    """Migrate the database at ``url`` to ``revision``; returns the revision reached.

    A database without any of our tables, brought to head, gets the models' tables and is
    stamped at head, as JupyterHub does for its own new database: replaying every migration
    (one rebuilds five tables on SQLite) made each new database take four to six times as long, and
    the two give the same schema (``tests/db/test_db_migrations.py``)."""
    return _migrate(url, lambda config: _upgrade(config, revision))


def _upgrade(config: Config, revision: str) -> None:
    connection: Connection = config.attributes["connection"]
    if revision == "head" and not _holds_our_tables(connection):
        Base.metadata.create_all(connection)
        command.stamp(config, "head")
    else:
        command.upgrade(config, revision)


def _holds_our_tables(connection: Connection) -> bool:
    # other applications' tables in the same database do not count
    ours = set(Base.metadata.tables) | {"alembic_version"}
    return bool(ours & set(inspect(connection).get_table_names()))


def downgrade(url: str, revision: str) -> str | None:
    """Migrate the database at ``url`` back to ``revision`` (e.g. ``-1``); returns it."""
    return _migrate(url, lambda config: command.downgrade(config, revision))


def current_revision(url: str) -> str | None:
    """The schema revision of the database at ``url`` (None if never upgraded)."""
    engine = make_engine(url)
    try:
        return _revision_of(engine)
    finally:
        engine.dispose()
