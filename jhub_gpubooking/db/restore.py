"""Restore a backup into the booking database (``jhub-gpubooking db restore FILE``).

A restore takes the database back to the moment of the backup, so what was booked, changed or
cancelled since is undone. Nothing is lost for good, and nobody is left to guess:

- the database as it is now is first backed up itself (:func:`backup_database`) into a new
  file, so a restore of the wrong file is undone by restoring that one;
- the bookings the restore takes away (made since the backup) and takes back (changed since
  it) are listed with their users, so the lab knows whom to tell;
- the rows are replaced in place, in one transaction: every table emptied and filled from the
  backup, read back and compared by checksum (:func:`copy_rows`), else rolled back. That
  transaction holds off every writer (:func:`_hold_off_writers`) from before the database is
  backed up until the restore commits, so a booking service left running by mistake waits
  rather than write a booking that neither the kept file nor the restored database holds.
  Replacing rows rather than the file keeps the database's id counters, which never go back:
  a new booking after the restore gets an id past every one given before (PostgreSQL's
  sequences are moved forward only; MariaDB's AUTO_INCREMENT and SQLite's AUTOINCREMENT
  tables keep their largest id through a DELETE), so a server started on a booking the restore
  took away cannot meet another user's booking under the same id.

The backup file itself is never written to: it is checked and, when an older release wrote it,
migrated in a temporary copy.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

from sqlalchemy import Connection, delete, select

from ..core.backups import SQLITE_SIDE_FILES
from .backup import BackupReport, backup_contents, backup_database, check_single_file
from .copy import CopyRefused, checksum, copy_rows, snapshot
from .models import Base, BookingRow, PoolRow
from .session import (
    check_schema,
    display_url,
    head_revision,
    make_engine,
    upgrade,
    write_transaction,
)
from .undone import Undone, read_rows, to_the_second, undone_since_backup


@dataclass(frozen=True)
class BookingLine:
    """A booking as the restore report shows it."""

    id: int
    user: str
    pool: str
    start: datetime
    end: datetime
    status: str
    server: str | None  # its holder: a Hub server ("" the default one) or pod:NS/NAME; None: unused


@dataclass(frozen=True)
class BookingChange:
    """A booking the restore took back to an earlier state: as restored, and as it was."""

    restored: BookingLine
    replaced: BookingLine


@dataclass(frozen=True)
class RestoreReport:
    backup_revision: str  # the schema revision the backup was written at
    replaced: Path  # the backup of the database as it was before the restore
    counts_before: dict[str, int]  # table -> rows before the restore
    counts_after: dict[str, int]  # table -> rows restored
    taken_away: list[BookingLine]  # bookings made since the backup: gone now
    taken_back: list[BookingChange]  # bookings changed since the backup: as they were then
    checksum: str
    undone: Undone = field(default_factory=Undone)  # waits, maintenance windows, calendar links

    def servers_on_undone_bookings(self) -> list[BookingLine]:
        """The bookings a Hub server or an admitted pod was using when the restore ran that the
        restore took away or gave back unused: with ``cleanup_servers`` off (z2jh), servers'
        pods survive the Hub's stop, and pods made outside the Hub do not stop with it, using
        bookings the restored database lacks or counts as unused, until the service's check of
        the Hub's servers (c.HubServers) or of the admitted pods stops them or claims again."""
        changed = [change.replaced for change in self.taken_back
                   if change.replaced.server is not None
                   and change.restored.server != change.replaced.server]
        return [line for line in self.taken_away if line.server is not None] + changed

    def taken_away_in_use(self) -> list[int]:
        """The bookings the restore took away that a server or pod was using: a Hub server
        whose start was still pending when the hub stopped is one the Hub forgets, and the
        service leaves alone a pod whose booking it does not have (c.OrphanPods), so these
        pods are the admin's to delete."""
        return sorted({line.id for line in self.taken_away if line.server is not None})

    def users_to_tell(self) -> list[str]:
        return sorted({line.user for line in self.taken_away}
                      | {change.restored.user for change in self.taken_back}
                      | self.undone.users_to_tell())


def restore_database(backup: str | Path, url: str, replaced: str | Path) -> RestoreReport:
    """Replace every row of the database at ``url`` (at this release's schema) with the rows
    of the SQLite backup ``backup``, after backing the database up into the new file
    ``replaced``."""
    source_file = Path(backup).expanduser().resolve()
    if not source_file.is_file():
        raise CopyRefused(f"There is no backup file {source_file}.")
    with tempfile.TemporaryDirectory(prefix="gpubooking-restore-") as folder:
        work_copy = Path(folder) / "backup.sqlite"
        revision = _checked_work_copy(source_file, work_copy)
        target = make_engine(url)
        try:
            check_schema(target)
            with write_transaction(target) as into:
                _hold_off_writers(into)
                kept = backup_database(url, replaced)
                try:
                    taken_away, taken_back = _differences(f"sqlite:///{kept.path}",
                                                          f"sqlite:///{work_copy}")
                    undone = undone_since_backup(f"sqlite:///{kept.path}",
                                                 f"sqlite:///{work_copy}",
                                                 datetime.now(timezone.utc))
                    _refuse_changes_since(into, kept, display_url(url))
                    counts, restored = _replace_rows(f"sqlite:///{work_copy}", into,
                                                     display_url(url), kept.counts)
                except BaseException:
                    # nothing was changed: the copy of the database as it is would only mislead
                    kept.path.unlink()
                    raise
        finally:
            target.dispose()
    return RestoreReport(revision, kept.path, kept.counts, counts, taken_away, taken_back,
                         restored, undone)


def _hold_off_writers(into: Connection) -> None:
    """Make every other writer wait for the restore's transaction ``into``, which goes on to
    back the database up (through other connections: reads are not held off) and replace it.

    SQLite's write transaction (``BEGIN IMMEDIATE``) does so already. PostgreSQL locks every
    table against writes. MariaDB has no such lock inside a transaction (``LOCK TABLES`` ends
    it), so it takes every pool's row first, the lock each change of a booking takes first, in
    the name order of :meth:`.unit_of_work.UnitOfWork.lock_pools`, then every other row, so
    nothing the restore replaces can change or go meanwhile (a calendar link reset in place
    went unnoticed before); a row added meanwhile, which no lock holds off, is caught by
    :func:`_refuse_changes_since` or by the count of the rows deleted."""
    if into.dialect.name == "postgresql":
        quote = into.dialect.identifier_preparer.quote
        tables = ", ".join(quote(table.name) for table in Base.metadata.sorted_tables)
        into.exec_driver_sql(f"LOCK TABLE {tables} IN SHARE ROW EXCLUSIVE MODE")
    elif into.dialect.name in ("mysql", "mariadb"):
        into.execute(select(PoolRow.name).order_by(PoolRow.name).with_for_update()).all()
        for table in Base.metadata.sorted_tables:
            if table is not PoolRow.__table__:
                into.execute(select(*table.primary_key.columns).with_for_update()).all()


def _refuse_changes_since(into: Connection, kept: BackupReport, name: str) -> None:
    """On MariaDB, where :func:`_hold_off_writers` cannot hold off new rows: refuse when the
    rows about to be replaced differ from the kept backup's."""
    if into.dialect.name not in ("mysql", "mariadb"):
        return
    if checksum(into) != kept.checksum:
        raise CopyRefused(_changed_meanwhile(name))


def _changed_meanwhile(name: str, what: str = "") -> str:
    """The refusal when the database changed between its backup and the replace."""
    return (f"{name} changed while the restore backed it up{what}: is the booking service "
            "still running? Stop the hub first (see the backup how-to); nothing was changed.")


def _checked_work_copy(source_file: Path, work_copy: Path) -> str:
    """Copy the backup (and any side file SQLite left beside it) into ``work_copy``, check it
    and migrate it to this release's schema; returns the revision the backup was at."""
    for suffix in SQLITE_SIDE_FILES:
        side = Path(f"{source_file}{suffix}")
        if side.is_file():
            shutil.copyfile(side, f"{work_copy}{suffix}")
    try:
        check_single_file(work_copy)
        revision, _ = backup_contents(work_copy)
    except CopyRefused as error:
        raise CopyRefused(f"{source_file}: {error}") from error
    except sqlite3.DatabaseError as error:  # "file is not a database"
        raise CopyRefused(f"{source_file} is not a SQLite database ({error}).") from error
    if revision != head_revision():
        try:
            upgrade(f"sqlite:///{work_copy}")
        except Exception as error:
            raise CopyRefused(
                f"The backup {source_file} is at schema revision {revision}, which this release "
                f"(at {head_revision()}) cannot migrate ({error}). A backup from a newer release "
                "is restored with that release."
            ) from error
    return revision


class _Stored(NamedTuple):
    """What the restore compares of a booking row."""

    line: BookingLine
    created: datetime
    updated: datetime


def _bookings(url: str) -> dict[int, _Stored]:
    rows = read_rows(url, select(
        BookingRow.id, BookingRow.user, BookingRow.pool, BookingRow.start,
        BookingRow.end, BookingRow.status, BookingRow.server, BookingRow.created,
        BookingRow.updated,
    ))
    stored = {}
    for row in rows:
        *shown, created, updated = (to_the_second(value) for value in row)
        stored[row.id] = _Stored(BookingLine(*shown), created, updated)
    return stored


def _differences(replaced_url: str, backup_url: str) -> tuple[list[BookingLine],
                                                              list[BookingChange]]:
    """The bookings of the replaced database that the backup does not hold (another booking
    under the same id counts as not held), and those it holds in an earlier state."""
    now, then = _bookings(replaced_url), _bookings(backup_url)
    taken_away, taken_back = [], []
    for booking_id, row in sorted(now.items()):
        earlier = then.get(booking_id)
        # the same booking: the same user, made at the same moment
        if earlier is None or (earlier.line.user, earlier.created) != (row.line.user, row.created):
            taken_away.append(row.line)
        elif earlier != row:  # changed since: times, state, server or its last update
            taken_back.append(BookingChange(earlier.line, row.line))
    return taken_away, taken_back


def _replace_rows(backup_url: str, into: Connection, target_name: str,
                  kept_counts: dict[str, int]) -> tuple[dict, str]:
    """Empty every table and fill it from the backup at ``backup_url``; refused when a table
    held other rows than the kept copy (``kept_counts``): on MariaDB a row written after
    :func:`_refuse_changes_since` looked, which the DELETE would take with it."""
    source = make_engine(backup_url)
    try:
        with snapshot(source) as out_of:
            for table in reversed(Base.metadata.sorted_tables):  # children before parents
                deleted = into.execute(delete(table)).rowcount
                kept = kept_counts.get(table.name, 0)
                if deleted != kept:
                    raise CopyRefused(_changed_meanwhile(
                        target_name, f" ({table.name} had {deleted} rows, the kept copy {kept})"))
            return copy_rows(out_of, into, mismatch=(
                f"The rows read back from {target_name} differ from the backup's (checksum "
                "mismatch); nothing was changed."))
    finally:
        source.dispose()
