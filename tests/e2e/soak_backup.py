"""The lifecycle soak's backups (see soak.py): at seeded steps an admin runs ``jhub-gpubooking db
backup`` (the installed command, in a process of its own, as ``kubectl exec`` does) on the
booking service's database while the service runs its lifecycle ticks and serves the walk.

The backup must hold one moment of the database: every booking and wait listed before the
command started, none that was not listed once it finished, and each booking with its history
(a torn copy, the tables read at different moments, breaks one of these). The walk keeps its
backups: one of them is restored later (soak_restore.py).

The service also backs itself up, once a minute (``c.ScheduledBackups`` in
gpubooking_config.py), through the walk's restarts and outages: at each step above, each of
its backups must hold only bookings listed (or held before a restore), each with its history,
and no more of them may be kept than ``keep`` (one more while the newest is written and the
oldest not yet gone).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from soak_invariants import SoakFailure

from jhub_gpubooking.core.backups import backups

if TYPE_CHECKING:
    from soak import Walk

#: a safety net for a command that never ends (no timing is asserted)
BACKUP_SECONDS = 300
#: c.ScheduledBackups.directory (under the demo's state folder) and keep, as configured
SCHEDULED_FOLDER, SCHEDULED_KEEP = "scheduled-backups", 3
SCHEDULED_CHECK = "scheduled backups hold known, whole bookings"


@dataclass(frozen=True)
class Kept:
    """A backup the walk took at ``step``: its bookings and waits as listed then (before the
    command began, else once it ended)."""

    step: int
    file: Path
    bookings: dict[int, dict]
    waits: dict[int, dict]


class Backups:
    """Backs the walk's booking database up and checks what the backup holds."""

    def __init__(self, walk: Walk) -> None:
        self.walk = walk
        demo = walk.demo
        self.url = (demo.extra_env.get("E2E_DB_URL")
                    or f"sqlite:///{demo.state_dir / 'gpubooking.sqlite'}")
        self.folder = demo.state_dir / "backups"
        self.folder.mkdir(exist_ok=True)
        self.command = str(Path(sys.executable).with_name("jhub-gpubooking"))
        self.kept: list[Kept] = []
        self.scheduled = demo.state_dir / SCHEDULED_FOLDER

    def backup(self) -> str:
        file = self.folder / f"backup-{len(self.kept)}.sqlite"
        before = self.listing()
        done = subprocess.run([self.command, "db", "backup", str(file), "--db-url", self.url],
                              capture_output=True, text=True, timeout=BACKUP_SECONDS, check=False)
        after = self.listing()
        if done.returncode != 0:
            raise SoakFailure(f"db backup failed ({done.returncode}): {done.stderr.strip()}")
        held, without_history = self.read(file)
        problems, kept = [], []
        for kind, ids, listed_before, listed_after in zip(
                ("bookings", "waits"), (held, self.read_waits(file)), before, after):
            if listed_before.keys() - ids:
                problems.append(f"{kind} listed before it began are missing: "
                                f"{sorted(listed_before.keys() - ids)}")
            if ids - listed_after.keys():
                problems.append(f"it holds {kind} never listed: "
                                f"{sorted(ids - listed_after.keys())}")
            kept.append({item_id: listed_before.get(item_id) or listed_after.get(item_id)
                         for item_id in ids})
        if without_history:
            problems.append(f"bookings without their history: {without_history}")
        if problems:
            raise SoakFailure(f"the backup {file} is not one moment: " + "; ".join(problems))
        self.kept.append(Kept(self.walk.result.steps, file, *kept))
        self.check_scheduled()
        return "one moment"

    def listing(self) -> tuple[dict[int, dict], dict[int, dict]]:
        """The service's bookings and waits, by id."""
        return self.walk.all_bookings(), self.walk.all_pages("waits", "waits")

    def check_scheduled(self) -> None:
        """What the service's own backups hold (read before the bookings are listed, so each
        was taken before the list)."""
        names = os.listdir(self.scheduled) if self.scheduled.is_dir() else []
        files = sorted(self.scheduled / name for name in backups(names))
        if len(files) > SCHEDULED_KEEP + 1:
            raise SoakFailure(f"{len(files)} scheduled backups kept, keep is {SCHEDULED_KEEP}")
        contents = {}
        for file in files:
            try:
                contents[file] = self.read(file)
            except sqlite3.OperationalError:
                if file.exists():
                    raise
                # deleted as the oldest meanwhile
        listed = set(self.walk.all_bookings()) | self.walk.checker.given_ids()
        for file, (held, without_history) in contents.items():
            if held - listed or without_history:
                raise SoakFailure(f"the scheduled backup {file.name} holds bookings never listed "
                                  f"{sorted(held - listed)} or without their history "
                                  f"{without_history}")
            self.walk.checker.checks[SCHEDULED_CHECK] += 1

    @staticmethod
    def read_waits(file: Path) -> set[int]:
        return {row[0] for row in backup_rows(file, "SELECT id FROM waits")}

    @staticmethod
    def read(file: Path) -> tuple[set[int], list[int]]:
        held = {row[0] for row in backup_rows(file, "SELECT id FROM bookings")}
        without_history = [row[0] for row in backup_rows(
            file, "SELECT id FROM bookings WHERE NOT EXISTS (SELECT 1 FROM booking_events "
            "WHERE booking_events.booking_id = bookings.id AND kind = 'created') ORDER BY id")]
        return held, without_history


def backup_rows(file: Path, query: str) -> list[tuple]:
    """The rows ``query`` selects from the SQLite backup ``file``, opened read-only: a file
    deleted meanwhile is an error, not a new empty database."""
    connection = sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return connection.execute(query).fetchall()
    finally:
        connection.close()
