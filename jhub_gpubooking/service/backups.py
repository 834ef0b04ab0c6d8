"""The ``c.ScheduledBackups`` component: the service backs its own database up on a schedule.

Each backup is what ``jhub-gpubooking db backup`` writes (:func:`..db.backup.backup_database`:
a consistent copy, taken while the service runs, as a new SQLite file), into a folder the admin
names, keeping the newest few. The rules of names, due times and pruning are in
:mod:`..core.backups`. Off unless ``directory`` is set.
"""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path

from traitlets import Any, Float, Integer, Unicode
from traitlets.config import LoggingConfigurable

from ..core.backups import (
    backup_due,
    backup_name,
    backup_time,
    backups,
    backups_to_delete,
    unfinished,
)
from ..db.backup import BackupReport, backup_database
from ..db.copy import CopyStopped
from ..db.locks import DatabaseLock
from ..executor import in_executor


class ScheduledBackups(LoggingConfigurable):
    """Writes a backup of the booking database every ``interval_hours`` into ``directory``."""

    directory = Unicode(
        "",
        help="Folder the service writes a backup of its database into, every interval_hours: "
        "a new SQLite file named gpubooking-<UTC time>.sqlite, as `jhub-gpubooking db backup` "
        "writes it (restore it as that command's how-to says). Created if missing. Empty (the "
        "default): no scheduled backups. A folder on a volume of its own (z2jh "
        "hub.extraVolumes and hub.extraVolumeMounts) outlives the loss of the hub volume; one on "
        "the hub volume (/srv/jupyterhub/gpubooking-backups) guards against mistakes and bad "
        "upgrades only.",
    ).tag(config=True)
    interval_hours = Float(
        24.0, min=1 / 60,
        help="Hours between two backups. The time of the newest backup is read from the "
        "folder, so a restart of the service takes one only when one is due.",
    ).tag(config=True)
    keep = Integer(
        7, min=1,
        help="Backups kept: after each new backup the oldest beyond this many are deleted. "
        "Only files this component names (gpubooking-<UTC time>.sqlite) are ever deleted.",
    ).tag(config=True)
    retry_minutes = Float(
        30.0, min=0,
        help="Minutes before a failed backup (folder not writable, disk full, database "
        "unavailable) is tried again. Each failure is logged as an error and counted in "
        "gpubooking_backup_failures_total.",
    ).tag(config=True)
    check_seconds = Float(
        60.0, min=0.1,
        help="Seconds between two looks at whether a backup is due.",
    ).tag(config=True)

    db_url = Unicode(help="The service's database URL (what is backed up).")
    db_engine = Any(help="The service's engine: a database lock lets one process back up.")
    executor = Any(help="Executor for listing the folder and taking the database lock (the "
                   "backup itself runs in a thread of its own).")
    clock = Any(help="Source of the current time.")
    metrics = Any(None, help="The service's ServiceMetrics (last backup, failures).")

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        # several service processes may share a PostgreSQL/MariaDB database: one backs it up
        self.lock = DatabaseLock(self.db_engine, "jhub_gpubooking.backups")
        self._not_before: datetime | None = None
        self._task: asyncio.Task | None = None
        # a thread of its own: a long backup never holds up the database work of requests
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="gpubooking-backup")
        # set by stop(): a backup being written ends at its next chunk of rows
        self._stopping = threading.Event()

    @property
    def folder(self) -> Path:
        return Path(self.directory).expanduser()

    def _names(self) -> list[str]:
        self.folder.mkdir(parents=True, exist_ok=True)
        return os.listdir(self.folder)

    def _back_up(self, now: datetime) -> BackupReport | None:
        """The backup, if one is still due once this process holds the lock."""
        names = self._names()
        if not backup_due(names, now, timedelta(hours=self.interval_hours)):
            return None  # another process took it meanwhile
        for name in unfinished(names):
            (self.folder / name).unlink(missing_ok=True)
        try:
            report = backup_database(self.db_url, self.folder / backup_name(now), self._stopping)
        except CopyStopped:
            self.log.info("Backup into %s stopped with the service; the next start takes it",
                          self.folder)
            return None
        for name in backups_to_delete(self._names(), self.keep):
            try:
                (self.folder / name).unlink(missing_ok=True)
            except OSError as error:  # the new backup is there all the same
                self.log.warning("Could not delete the old backup %s: %s", name, error)
        return report

    async def run_once(self, now: datetime) -> BackupReport | None:
        """Back the database up when a backup is due at ``now`` (None: none was taken)."""
        if not self.directory or (self._not_before is not None and now < self._not_before):
            return None
        try:
            names = await in_executor(self.executor, self._names)
            if not backup_due(names, now, timedelta(hours=self.interval_hours)):
                return None
            if not await in_executor(self.executor, self.lock.acquire):
                return None  # another service process is backing up
            try:
                report = await in_executor(self._writer, self._back_up, now)
            finally:
                await in_executor(self.executor, self.lock.release)
        except Exception as error:
            self._not_before = now + timedelta(minutes=self.retry_minutes)
            if self.metrics is not None:
                self.metrics.backup_failures.inc()
            self.log.error("Backup of the booking database into %s failed (tried again from "
                           "%s): %s", self.folder, self._not_before.isoformat(timespec="minutes"),
                           str(error).splitlines()[0] if str(error) else repr(error))
            return None
        self._not_before = None
        if report is not None:
            self._observe(backup_time(report.path.name))  # the minute its name says
            rows = sum(report.counts.values())
            self.log.info("Backed up the booking database to %s (schema %s, %d rows)",
                          report.path, report.revision, rows)
        return report

    def _observe(self, at: datetime | None) -> None:
        if self.metrics is not None and at is not None:
            self.metrics.last_backup.set(at.timestamp())

    async def _loop(self) -> None:
        try:  # the newest backup there is, for the metric, until this process takes one
            names = await in_executor(self.executor, self._names)
            self._observe(max(backups(names).values(), default=None))
        except OSError:
            pass  # the first attempt says what is wrong with the folder
        while True:
            await self.run_once(self.clock.now())
            await asyncio.sleep(self.check_seconds)

    def start(self) -> None:
        if not self.directory:
            return
        self.log.info("Backing up the booking database into %s every %g hours, keeping %d",
                      self.folder, self.interval_hours, self.keep)
        self._task = asyncio.ensure_future(self._loop())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        # a backup being written stops at its next chunk of rows and removes its partial file
        # (the process exits when that thread has ended); killed, it leaves a .partial file
        # the next backup clears
        self._stopping.set()
        self._writer.shutdown(wait=False)
