"""Copy every row of one booking database into another: how a lab moves from SQLite to
PostgreSQL or MariaDB (``jhub-gpubooking db copy --from URL --to URL``).

Both databases must be at this release's schema revision and the target must be empty. All
rows go into the target in one transaction, parents before children, with their ids; then the
target's id sequences are moved past the copied ids (PostgreSQL), and a SHA-256 over every row
of every table, read back from the target inside the same transaction, must equal the one of
the source, or nothing is committed.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, Engine, Table, func, insert, select, text

from .models import Base
from .session import check_schema, display_url, make_engine

#: Rows read and written at a time, so a large history never sits in memory at once.
COPY_CHUNK_ROWS = 1000


class CopyRefused(RuntimeError):
    """The copy was not done (or was rolled back); the message says why."""


class CopyStopped(CopyRefused):
    """The copy was asked to stop before it finished (its process is stopping); rolled back."""


@dataclass(frozen=True)
class CopyReport:
    counts: dict[str, int]  # table -> rows copied, in copy order
    checksum: str  # SHA-256 of every row, equal on both sides
    whole_seconds: bool  # times were cut to whole seconds (MySQL/MariaDB DATETIME)


def _fit(value, whole_seconds: bool):
    """A value as the target stores it (MySQL/MariaDB DATETIME keeps no fraction of a second)."""
    if whole_seconds and isinstance(value, datetime):
        return value.replace(microsecond=0)
    return value


def _canonical(value) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    return value


class _Digest:
    """SHA-256 over tables and rows in copy order, values in a canonical JSON form."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()

    def table(self, name: str) -> None:
        self._hash.update(f"\0table {name}\n".encode())

    def rows(self, rows: Iterable[dict], columns: list[str]) -> None:
        for row in rows:
            values = [_canonical(row[column]) for column in columns]
            self._hash.update(json.dumps(values, sort_keys=True, default=str).encode() + b"\n")

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def _ordered(table: Table):
    return select(table).order_by(*table.primary_key.columns)


def _chunks(connection: Connection, table: Table):
    result = connection.execution_options(yield_per=COPY_CHUNK_ROWS).execute(_ordered(table))
    for partition in result.mappings().partitions():
        yield [dict(row) for row in partition]


def _refuse_data(connection: Connection, url: str) -> None:
    for table in Base.metadata.sorted_tables:
        count = connection.execute(select(func.count()).select_from(table)).scalar()
        if count:
            raise CopyRefused(
                f"The target database {url} already holds data ({table.name}: {count} "
                f"row{'s' if count != 1 else ''}); "
                "copy only into an empty database that `jhub-gpubooking db upgrade` created."
            )


def _move_sequences_past_ids(connection: Connection, tables: Iterable[Table]) -> None:
    """Explicit ids leave PostgreSQL's sequences where they were: the next booking would collide
    with a copied one. A sequence is moved forward only, never back: past ids a restore took
    away are not handed out again either."""
    for table in tables:
        if "id" not in table.c or not table.c.id.autoincrement:
            continue
        sequence = connection.execute(
            text("SELECT pg_get_serial_sequence(:table, 'id')").bindparams(table=table.name)
        ).scalar_one()
        last, called = connection.execute(
            text(f"SELECT last_value, is_called FROM {sequence}")
        ).one()
        largest = connection.execute(select(func.max(table.c.id))).scalar() or 0
        given = last if called else 0
        if max(largest, given) > 0:
            connection.execute(
                text("SELECT setval(:sequence, :value, true)").bindparams(
                    sequence=sequence, value=max(largest, given)
                )
            )


def copy_rows(out_of: Connection, into: Connection, *, stop: threading.Event | None = None,
              stopped: str = "The copy was stopped; nothing was copied.",
              mismatch: str) -> tuple[dict, str]:
    """Insert every row ``out_of`` holds into ``into`` (whose tables are empty), parents before
    children, with their ids; move PostgreSQL's sequences past them; read every row back and
    compare checksums. Returns the rows per table and the checksum. Raises
    :class:`CopyStopped` (``stopped``) at the next chunk once ``stop`` is set, and
    :class:`CopyRefused` (``mismatch``) when what was read back differs: the caller's
    transaction then rolls back."""
    whole_seconds = _stores_whole_seconds(into.engine)
    counts: dict[str, int] = {}
    copied = _Digest()
    for table in Base.metadata.sorted_tables:
        columns = list(table.c.keys())
        copied.table(table.name)
        counts[table.name] = 0
        for chunk in _chunks(out_of, table):
            if stop is not None and stop.is_set():
                raise CopyStopped(stopped)
            chunk = [
                {column: _fit(value, whole_seconds) for column, value in row.items()}
                for row in chunk
            ]
            into.execute(insert(table), chunk)
            copied.rows(chunk, columns)
            counts[table.name] += len(chunk)
    if into.dialect.name == "postgresql":
        _move_sequences_past_ids(into, Base.metadata.sorted_tables)
    if checksum(into) != copied.hexdigest():
        raise CopyRefused(mismatch)
    return counts, copied.hexdigest()


def checksum(connection: Connection) -> str:
    """The SHA-256 of every row of every table, as :func:`copy_rows` computes it."""
    stored = _Digest()
    for table in Base.metadata.sorted_tables:
        stored.table(table.name)
        columns = list(table.c.keys())
        for chunk in _chunks(connection, table):
            stored.rows(chunk, columns)
    return stored.hexdigest()


def _stores_whole_seconds(engine: Engine) -> bool:
    """MySQL/MariaDB DATETIME keeps no fraction of a second."""
    return engine.dialect.name in ("mysql", "mariadb")


def snapshot(engine: Engine) -> Connection:
    """A connection whose reads all see one moment of the database, so a copy taken while the
    service writes is consistent (no event of a booking the copy missed). SQLite's read
    transaction is one already; PostgreSQL and MariaDB need REPEATABLE READ, where the engine's
    READ COMMITTED would let every table's read see a later state."""
    connection = engine.connect()
    if engine.dialect.name != "sqlite":
        connection.execution_options(isolation_level="REPEATABLE READ")
    return connection


def copy_database(source_url: str, target_url: str,
                  stop: threading.Event | None = None) -> CopyReport:
    """Copy every row from ``source_url`` to the empty, migrated ``target_url``.

    Once ``stop`` is set the copy ends at its next chunk of rows, raising :class:`CopyStopped`
    with nothing committed: a service that is stopping need not wait for a long copy."""
    source_name, target_name = display_url(source_url), display_url(target_url)
    source, target = make_engine(source_url), make_engine(target_url)
    try:
        for engine in (source, target):
            check_schema(engine)
        with target.begin() as into, snapshot(source) as out_of:
            _refuse_data(into, target_name)
            counts, sent = copy_rows(
                out_of, into, stop=stop,
                stopped=f"The copy from {source_name} was stopped; nothing was copied.",
                mismatch=f"The rows read back from {target_name} differ from those of "
                f"{source_name} (checksum mismatch); nothing was copied.",
            )
        return CopyReport(counts, sent, _stores_whole_seconds(target))
    finally:
        source.dispose()
        target.dispose()
