"""The rules of scheduled backups: names that carry their time, when one is due, which go."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from jhub_gpubooking.core.backups import (
    backup_due,
    backup_name,
    backup_time,
    backups,
    backups_to_delete,
    unfinished,
)

T = datetime(2026, 11, 28, 3, 0, 42, tzinfo=timezone.utc)
DAY = timedelta(days=1)


def test_a_name_carries_the_utc_minute_of_its_backup():
    berlin = timezone(timedelta(hours=1))
    assert backup_name(T) == backup_name(T.astimezone(berlin)) == "gpubooking-20261128T0300Z.sqlite"
    assert backup_time("gpubooking-20261128T0300Z.sqlite") == T.replace(second=0)


def test_only_names_of_that_form_are_backups():
    names = ["gpubooking-20261128T0300Z.sqlite", "gpubooking-20261328T0300Z.sqlite",
             "gpubooking.sqlite", "gpubooking-20261128T0300Z.sqlite.partial", "notes.txt",
             "my-gpubooking-20261128T0300Z.sqlite", "gpubooking-20261128T0300.sqlite"]
    assert backups(names) == {"gpubooking-20261128T0300Z.sqlite": T.replace(second=0)}


def test_a_backup_is_due_when_none_is_as_recent_as_the_interval():
    assert backup_due([], T, DAY)
    assert backup_due(["notes.txt"], T, DAY)
    newest = [backup_name(T - 2 * DAY), backup_name(T - DAY + timedelta(minutes=1))]
    assert not backup_due(newest, T, DAY)
    assert backup_due(newest, T + timedelta(minutes=1), DAY)
    # one from the future (the clock was set back) is recent: no backup every minute meanwhile
    assert not backup_due([backup_name(T + DAY)], T, DAY)


def test_the_oldest_beyond_keep_go_and_nothing_else():
    names = [backup_name(T - n * DAY) for n in range(5)] + ["notes.txt", "gpubooking.sqlite"]
    assert backups_to_delete(names, keep=3) == [backup_name(T - 4 * DAY), backup_name(T - 3 * DAY)]
    assert backups_to_delete(names, keep=5) == []
    assert backups_to_delete(names, keep=9) == []


def test_what_a_backup_cut_short_left_is_found():
    name = backup_name(T)
    names = [name, f"{name}.partial", f"{name}.partial-journal", f"{name}.partial-wal",
             "gpubooking.sqlite-wal", "other.sqlite.partial"]
    assert unfinished(names) == sorted([f"{name}.partial", f"{name}.partial-journal",
                                        f"{name}.partial-wal"])
