"""Scheduled backups of the booking database: their file names, when the next one is due, and
which old ones go.

The time of a backup is in its file name (``gpubooking-20261128T0300Z.sqlite``, UTC), so the
folder itself says when the last one was taken: a restarted service does not take one at once,
and nothing else has to be stored. Only names of this form are ever considered, so other files
in the folder are never deleted. Pure rules, no I/O: :mod:`jhub_gpubooking.service.backups`
lists the folder and writes the files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone

PREFIX = "gpubooking-"
SUFFIX = ".sqlite"
#: what :func:`backup_name` writes: the UTC minute of the backup
_NAME = re.compile(rf"^{re.escape(PREFIX)}(\d{{8}}T\d{{4}})Z{re.escape(SUFFIX)}$")
_STAMP = "%Y%m%dT%H%M"
#: a backup is written under its name plus this and renamed once complete and checked
#: (:func:`jhub_gpubooking.db.backup.backup_database`), so a file of the final name is whole
PARTIAL = ".partial"
#: the files SQLite may keep beside a database file, by suffix of its name
SQLITE_SIDE_FILES = ("", "-journal", "-wal", "-shm")


def backup_name(at: datetime) -> str:
    """The file name of a backup taken at ``at``."""
    return f"{PREFIX}{at.astimezone(timezone.utc):{_STAMP}}Z{SUFFIX}"


def backup_time(name: str) -> datetime | None:
    """When the backup named ``name`` was taken; None for any other file."""
    match = _NAME.match(name)
    if match is None:
        return None
    try:
        return datetime.strptime(match.group(1), _STAMP).replace(tzinfo=timezone.utc)
    except ValueError:  # the right shape, but no such time (month 13)
        return None


def backups(names: Iterable[str]) -> dict[str, datetime]:
    """The backups among the file names of a folder, with their times."""
    found = {name: backup_time(name) for name in names}
    return {name: at for name, at in found.items() if at is not None}


def backup_due(names: Iterable[str], now: datetime, interval: timedelta) -> bool:
    """A backup is due when the folder holds none taken within ``interval`` before ``now``
    (one from the future, a clock set back, counts as recent: no backup a minute then)."""
    times = backups(names).values()
    return not times or now - max(times) >= interval


def backups_to_delete(names: Iterable[str], keep: int) -> list[str]:
    """The backups beyond the newest ``keep``, oldest first."""
    by_time = sorted(backups(names).items(), key=lambda item: (item[1], item[0]))
    return [name for name, _ in by_time[: max(len(by_time) - keep, 0)]]


def unfinished(names: Iterable[str]) -> list[str]:
    """What a backup cut short (the service stopped while writing) left: ``<backup>.partial``
    files and SQLite's files beside them, safe to delete before the next one starts."""
    return sorted(
        name for name in names
        for tail in (PARTIAL + side for side in SQLITE_SIDE_FILES)
        if name.endswith(tail) and backup_time(name[: -len(tail)]) is not None
    )
