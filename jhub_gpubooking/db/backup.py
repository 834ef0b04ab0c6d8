"""Back up the booking database while the service runs (``jhub-gpubooking db backup FILE``).

The backup is a new SQLite file, whatever the database is, so one command restores it
into any database: ``jhub-gpubooking db restore FILE`` (:mod:`.restore`).

- **SQLite** is copied with SQLite's own online backup (``sqlite3.Connection.backup``) in one
  step: a consistent snapshot of every committed transaction, at any schema revision, without
  stopping writers. Copying the file by hand (``kubectl cp``) while the service writes can miss
  what is committed but still only in the ``-wal`` file beside it, or catch a page half-written.
- **PostgreSQL and MariaDB** are copied row for row by :func:`copy_database` (which reads the
  source in one snapshot and verifies a checksum) into a new SQLite file at this release's
  schema. A database at another revision is refused: back it up with the release that uses it,
  or with the server's own tools.

The file is written beside its final name and renamed into place only when complete and
checked, in SQLite's single-file journal mode, so it can be copied off as it is. An existing
file is never overwritten.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from ..core.backups import PARTIAL, SQLITE_SIDE_FILES
from .copy import CopyRefused, CopyStopped, copy_database
from .session import StaleSchema, display_url, normalize_url, upgrade


@dataclass(frozen=True)
class BackupReport:
    path: Path
    revision: str  # the schema revision the backup holds
    counts: dict[str, int]  # table -> rows in the backup
    checksum: str | None  # the row checksum verified on both sides (server databases)


def backup_database(url: str, path: str | os.PathLike,
                    stop: threading.Event | None = None) -> BackupReport:
    """Write a consistent copy of the database at ``url`` to the new SQLite file ``path``.

    Once ``stop`` is set a server database's copy ends at its next chunk of rows (SQLite's
    one-step copy is short and runs to its end), raising :class:`CopyStopped` with the partial
    file removed."""
    target = Path(path).expanduser().resolve()
    if target.exists():
        raise CopyRefused(f"{target} exists already; name a new file (a backup never overwrites).")
    if not target.parent.is_dir():
        raise CopyRefused(f"There is no folder {target.parent} to write the backup into.")
    partial = target.with_name(target.name + PARTIAL)
    parsed = make_url(normalize_url(url))
    try:
        _remove_sqlite_files(partial)  # a leftover of an interrupted backup
        checksum = None
        if parsed.get_backend_name() == "sqlite":
            _sqlite_online_backup(parsed.database, partial, display_url(url))
        else:
            checksum = _server_backup(url, partial, stop)
        if stop is not None and stop.is_set():
            raise CopyStopped(f"The backup of {display_url(url)} was stopped; no file was written.")
        check_single_file(partial)
        revision, counts = backup_contents(partial)
        os.replace(partial, target)
    except BaseException:
        _remove_sqlite_files(partial)
        raise
    return BackupReport(target, revision, counts, checksum)


def _sqlite_online_backup(database: str | None, partial: Path, name: str) -> None:
    if database in (None, "", ":memory:"):
        raise CopyRefused("An in-memory SQLite database lives in its service only; nothing to back up.")
    if not Path(database).is_file():
        raise CopyRefused(f"There is no database at {name}.")
    # read-only: a typo in the path must not create an empty database; the busy timeout covers
    # a writer that holds the file at the moment of the copy
    source = sqlite3.connect(f"{Path(database).resolve().as_uri()}?mode=ro", uri=True, timeout=30)
    into = sqlite3.connect(partial)
    try:
        source.backup(into)  # all pages in one step: one snapshot, even while others write
    finally:
        into.close()
        source.close()


def _server_backup(url: str, partial: Path, stop: threading.Event | None) -> str:
    partial_url = f"sqlite:///{partial}"
    upgrade(partial_url)
    try:
        return copy_database(url, partial_url, stop).checksum
    except StaleSchema as error:
        raise CopyRefused(
            f"{error}\nA PostgreSQL or MariaDB database is backed up at this release's schema "
            "revision only: take the backup with the release that uses the database (before "
            "installing a new one), or with the server's own tools (pg_dump, mariadb-dump)."
        ) from error


def check_single_file(partial: Path) -> None:
    connection = sqlite3.connect(partial)
    try:
        # the service's databases run in WAL mode; a backup must not need a -wal file beside it
        connection.execute("PRAGMA journal_mode=DELETE")
        problems = [row[0] for row in connection.execute("PRAGMA integrity_check")]
    finally:
        connection.close()
    if problems != ["ok"]:
        raise CopyRefused(f"The backup failed SQLite's integrity check: {'; '.join(problems)}")


def backup_contents(partial: Path) -> tuple[str, dict[str, int]]:
    connection = sqlite3.connect(partial)
    try:
        tables = [
            name
            for (name,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' AND name != 'alembic_version' ORDER BY name"
            )
        ]
        if not tables:
            raise CopyRefused("The database holds no booking tables; nothing to back up.")
        revision = connection.execute("SELECT version_num FROM alembic_version").fetchone()
        counts = {
            table: connection.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
            for table in tables
        }
    except sqlite3.OperationalError as error:
        raise CopyRefused(f"The database is not a booking database ({error}).") from error
    finally:
        connection.close()
    if revision is None:
        raise CopyRefused("The database has no schema revision; it is not a booking database.")
    return revision[0], counts


def _remove_sqlite_files(database: Path) -> None:
    for suffix in SQLITE_SIDE_FILES:
        Path(f"{database}{suffix}").unlink(missing_ok=True)
