"""The lifecycle soak's restore (see soak.py): at a seeded step an admin restores the booking
database from one of the walk's backups (soak_backup.py), as docs/howto/backup.md says: the hub
stopped, users' servers and the pods made outside the Hub left running (``cleanup_servers:
false``), ``jhub-gpubooking db restore`` (the installed command, in a process of its own), the
hub started again, and the pods deleted that the restore's output names (a start pending at the
hub's stop leaves a pod the Hub forgets, on a booking the restore may take away; the service
leaves pods of bookings it does not have alone).

What it undid is read from the database itself, not from the walk's listings: the rows of the
backup against those of the file the restore keeps of the database as it was before
(``--replaced``), so a booking the service made between the walk's last listing and the hub's
stop counts too. The checker (soak_invariants.Restore) then expects the backup's bookings and
waits as they were, no booking id given twice, no server or GPU pod left on a booking the
restore took away, moved back before its start or to other GPUs, and no server stopped whose
booking the restore gave back still covering it.
"""

from __future__ import annotations

import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from e2e_harness import Driver
from soak_backup import BACKUP_SECONDS, backup_rows
from soak_invariants import Restore, SoakFailure
from soak_json import pod_booking_id

if TYPE_CHECKING:
    from soak import Walk

#: the backup restored is the latest one at least this many steps old, so the walk has made,
#: changed and started bookings since it
RESTORE_AFTER_STEPS = 30
#: the line of the restore's output that names pods for the admin to delete (cli.py)
KUBECTL_LINE = re.compile(r"kubectl delete pods --all-namespaces -l '[^ ]+ in \(([\d,]+)\)'")


def now() -> datetime:
    return datetime.now(timezone.utc)


def booking_rows(file: Path) -> dict[int, tuple]:
    """Every row of the bookings table of a SQLite backup, by id."""
    return {row[0]: row for row in backup_rows(file, "SELECT * FROM bookings")}


class Restores:
    """Restores the walk's booking database from one of its backups."""

    def __init__(self, walk: Walk) -> None:
        self.walk = walk
        self.done = 0
        self.deleted = 0  # pods deleted as the restore said

    def restore(self) -> str:
        walk = self.walk
        backups = walk.backups
        old_enough = [kept for kept in backups.kept
                      if walk.result.steps - kept.step >= RESTORE_AFTER_STEPS]
        if not (old_enough or backups.kept):
            raise SoakFailure("a restore was planned before any backup")
        backup = (old_enough or backups.kept)[-1]
        replaced = backups.folder / f"replaced-{self.done}.sqlite"
        walk.log(f"restoring the backup of step {backup.step} at step {walk.result.steps}")
        down = now()
        walk.facts.outages.append((down, None))
        walk.demo.stop_hub()
        try:
            done = subprocess.run(
                [backups.command, "db", "restore", str(backup.file), "--db-url", backups.url,
                 "--replaced", str(replaced)],
                capture_output=True, text=True, timeout=BACKUP_SECONDS, check=False)
        finally:
            walk.demo.start_hub()
            up = now()
            walk.facts.outages[-1] = (down, up)
            # the old connections went to the Hub's old proxy
            walk.driver.close()
            walk.driver = Driver(walk.demo)
        if done.returncode != 0:
            raise SoakFailure(f"db restore failed ({done.returncode}): {done.stderr.strip()}")
        self.delete_what_it_names(done.stdout)
        then, before = booking_rows(backup.file), booking_rows(replaced)
        undone = frozenset(booking_id for booking_id, row in before.items()
                           if then.get(booking_id) != row)
        restore = Restore(down=down, up=up, bookings=backup.bookings, waits=backup.waits,
                          undone=undone, last_id=max(walk.checker.given_ids() | set(before)))
        walk.facts.restores.append(restore)
        walk.checker.restored(restore, given=set(before))
        self.done += 1
        taken_away = len(set(before) - set(then))
        return (f"restored step {backup.step}'s backup: {taken_away} taken away, "
                f"{len(undone) - taken_away} changed back, {self.deleted} pods deleted as it said")

    def delete_what_it_names(self, said: str) -> None:
        """What the admin does with the restore's ``kubectl delete pods`` line: deletes the pods
        of the bookings it took away that a server or pod was using (a start pending at the
        hub's stop leaves a pod the Hub forgets, which the service leaves alone)."""
        named = KUBECTL_LINE.search(said)
        if named is None:
            return
        ids = {int(booking_id) for booking_id in named.group(1).split(",")}
        for pod in self.walk.driver.cluster_pods():
            metadata = pod["metadata"]
            if pod_booking_id(pod) in ids and not metadata.get("deletionTimestamp"):
                response = self.walk.driver.cluster.delete(
                    f"/api/v1/namespaces/{metadata['namespace']}/pods/{metadata['name']}")
                self.walk.answered(response, {200: "deleted", 404: "gone meanwhile"})
                self.deleted += response.status_code == 200
                self.walk.outside.deleted.add(f"{metadata['namespace']}/{metadata['name']}")
