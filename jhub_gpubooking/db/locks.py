"""A lock shared by every process using one database (several service processes).

On PostgreSQL a session-level advisory lock (``pg_try_advisory_lock``), on MySQL/MariaDB a
named lock (``GET_LOCK``): both belong to one connection, which this class holds from
:meth:`DatabaseLock.acquire` to :meth:`DatabaseLock.release`, and both vanish when that
connection dies, so a process that crashes, or loses the database, never leaves the lock taken.
SQLite has no such lock; one service process per SQLite file is the supported setup, so
``acquire`` always succeeds there.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

log = logging.getLogger(__name__)

#: MySQL limits lock names to 64 characters.
MYSQL_LOCK_NAME_LENGTH = 64


class DatabaseLock:
    """``acquire()`` takes the lock without waiting (False: another process holds it)."""

    def __init__(self, engine: Engine, name: str):
        self.engine = engine
        # GET_LOCK names are server-wide, advisory locks per database: name the database in it
        digest = hashlib.sha256(f"{name}\0{engine.url.database}".encode()).digest()
        self.mysql_name = f"{name}.{digest.hex()}"[:MYSQL_LOCK_NAME_LENGTH]
        self.postgres_key = int.from_bytes(digest[:8], "big", signed=True)
        self._connection: Connection | None = None
        # one holder per process: the lock is re-entrant on its own connection
        self._local = threading.Lock()

    @property
    def backend(self) -> str:
        return self.engine.dialect.name

    def acquire(self) -> bool:
        if not self._local.acquire(blocking=False):
            return False
        if self.backend not in ("postgresql", "mysql", "mariadb"):
            return True
        try:
            connection = self.engine.connect()
        except BaseException:
            self._local.release()
            raise
        try:
            if self.backend == "postgresql":
                statement = text("SELECT pg_try_advisory_lock(:key)").bindparams(
                    key=self.postgres_key
                )
            else:
                statement = text("SELECT GET_LOCK(:name, 0)").bindparams(name=self.mysql_name)
            held = bool(connection.execute(statement).scalar())
            # end the transaction: the lock belongs to the session, not to a transaction
            connection.commit()
        except BaseException:
            connection.close()
            self._local.release()
            raise
        if not held:
            connection.close()
            self._local.release()
            return False
        self._connection = connection
        return True

    def wait(self, timeout: float, poll_seconds: float = 0.5) -> bool:
        """Acquire, trying again until ``timeout`` seconds have passed; False if never."""
        deadline = time.monotonic() + timeout
        while not self.acquire():
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_seconds)
        return True

    def release(self) -> None:
        connection, self._connection = self._connection, None
        try:
            if connection is None:
                return
            try:
                if self.backend == "postgresql":
                    statement = text("SELECT pg_advisory_unlock(:key)").bindparams(
                        key=self.postgres_key
                    )
                else:
                    statement = text("SELECT RELEASE_LOCK(:name)").bindparams(name=self.mysql_name)
                connection.execute(statement)
                connection.commit()
            except DBAPIError as error:
                # the connection is gone (and the server dropped the lock with it), or it is in
                # a state we cannot trust: never hand a connection holding the lock to the pool
                log.warning("Could not release the database lock cleanly: %s", error)
                connection.invalidate()
            finally:
                connection.close()
        finally:
            self._local.release()
