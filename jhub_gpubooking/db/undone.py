"""What a restore of the booking database (:mod:`.restore`) undoes besides bookings: waits,
maintenance windows and calendar links made, changed or removed since the backup.

Each is something people rely on without looking again, so the restore names it:

- a wait made since the backup is gone: its user waits for a booking that never comes; a wait
  booked, withdrawn or expired since is back as it was (a wait waiting again is served again);
- a maintenance window added since is gone, so bookings can be placed on a node that will be
  down; one removed since is back, and refuses bookings on a node that may be up again;
- a calendar link made or reset since is gone: the link as it was at the backup works again,
  and the user's calendar app, subscribed to the newer one, shows nothing new.

Rows are the same row when their id and what they were made as (user, creation) are: the id
counters never go back, but a database set up anew may give an id twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction

from sqlalchemy import select

from ..core.model import format_amount
from .models import FeedTokenRow, MaintenanceWindowRow, WaitRow
from .session import make_engine


@dataclass(frozen=True)
class WaitLine:
    """A wait as the restore report shows it."""

    id: int
    user: str
    pool: str
    gpus: str
    start: datetime
    latest_start: datetime
    minutes: int
    state: str
    created: datetime

    @property
    def made(self) -> tuple:
        return self.user, self.created


@dataclass(frozen=True)
class WindowLine:
    """A maintenance window as the restore report shows it (``node`` None: the whole pool)."""

    id: int
    pool: str
    node: str | None
    start: datetime
    end: datetime
    reason: str
    created: datetime

    @property
    def made(self) -> tuple:
        return self.pool, self.created


@dataclass(frozen=True)
class Undone:
    """What the restore undid besides bookings, from the database it replaced and the backup."""

    waits_gone: list[WaitLine] = field(default_factory=list)  # waiting, made since the backup
    #: (as restored, as it was): booked, withdrawn or expired since the backup
    waits_back: list[tuple[WaitLine, WaitLine]] = field(default_factory=list)
    windows_gone: list[WindowLine] = field(default_factory=list)  # added since, not over
    windows_back: list[WindowLine] = field(default_factory=list)  # removed since, not over
    calendar_links: list[str] = field(default_factory=list)  # users whose link changed

    def users_to_tell(self) -> set[str]:
        return ({line.user for line in self.waits_gone}
                | {restored.user for restored, _ in self.waits_back}
                | set(self.calendar_links))


def undone_since_backup(replaced_url: str, backup_url: str, now: datetime) -> Undone:
    """What the database at ``replaced_url`` (as it was before the restore) has that the
    backup at ``backup_url`` does not, and the other way round; windows over at ``now`` are
    left out (nothing can be booked under them any more)."""
    waits_now, waits_then = _waits(replaced_url), _waits(backup_url)
    windows_now, windows_then = _windows(replaced_url), _windows(backup_url)
    links_now, links_then = _calendar_links(replaced_url), _calendar_links(backup_url)
    waits_gone, waits_back = [], []
    for wait_id, wait in sorted(waits_now.items()):
        earlier = waits_then.get(wait_id)
        if not _same(earlier, wait):
            if wait.state == "waiting":  # one that ended since left nobody waiting
                waits_gone.append(wait)
        elif (earlier.state, earlier.start, earlier.latest_start) != (
                wait.state, wait.start, wait.latest_start):
            waits_back.append((earlier, wait))
    return Undone(
        waits_gone=waits_gone,
        waits_back=waits_back,
        windows_gone=_not_over_and_not_in(windows_now, windows_then, now),
        windows_back=_not_over_and_not_in(windows_then, windows_now, now),
        calendar_links=sorted(user for user in links_now.keys() | links_then.keys()
                              if links_now.get(user) != links_then.get(user)),
    )


def _not_over_and_not_in(windows: dict[int, WindowLine], others: dict[int, WindowLine],
                         now: datetime) -> list[WindowLine]:
    return [window for window_id, window in sorted(windows.items())
            if window.end > now and not _same(others.get(window_id), window)]


def _same(earlier: WaitLine | WindowLine | None, line: WaitLine | WindowLine) -> bool:
    return earlier is not None and earlier.made == line.made


def read_rows(url: str, statement) -> list:
    """The rows ``statement`` selects from the database at ``url`` (a backup file here and in
    :mod:`.restore`), on a connection of its own."""
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return connection.execute(statement).all()
    finally:
        engine.dispose()


def to_the_second(value):
    """``value`` without its fraction of a second (other values as they are): MariaDB keeps
    none, and a backup may come from another backend."""
    return value.replace(microsecond=0) if isinstance(value, datetime) else value


def _waits(url: str) -> dict[int, WaitLine]:
    rows = read_rows(url, select(
        WaitRow.id, WaitRow.user, WaitRow.pool, WaitRow.amount_num, WaitRow.amount_den,
        WaitRow.start, WaitRow.latest_start, WaitRow.minutes, WaitRow.state, WaitRow.created))
    return {row.id: WaitLine(
        row.id, row.user, row.pool, format_amount(Fraction(row.amount_num, row.amount_den)),
        to_the_second(row.start), to_the_second(row.latest_start), row.minutes, row.state,
        to_the_second(row.created)) for row in rows}


def _windows(url: str) -> dict[int, WindowLine]:
    rows = read_rows(url, select(
        MaintenanceWindowRow.id, MaintenanceWindowRow.pool, MaintenanceWindowRow.node,
        MaintenanceWindowRow.start, MaintenanceWindowRow.end, MaintenanceWindowRow.reason,
        MaintenanceWindowRow.created))
    return {row.id: WindowLine(row.id, row.pool, row.node, to_the_second(row.start),
                               to_the_second(row.end), row.reason, to_the_second(row.created))
            for row in rows}


def _calendar_links(url: str) -> dict[str, str]:
    return dict(read_rows(url, select(FeedTokenRow.user, FeedTokenRow.token_hash)))
