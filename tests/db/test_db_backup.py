"""``jhub-gpubooking db backup FILE``: a consistent copy of a booking database full of history,
taken while the service writes, into a new SQLite file that restores anywhere with
``db copy``; refusals leave nothing behind."""

from __future__ import annotations

import shutil
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
from db_test_store import fill
from db_test_times import NOW
from migration_data import REVISION_IDS, rows_of
from server_databases import SERVERS

from jhub_gpubooking.cli import main
from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.db import copy
from jhub_gpubooking.db.backup import backup_database
from jhub_gpubooking.db.copy import CopyRefused, copy_database
from jhub_gpubooking.db.session import make_engine, make_session_factory, upgrade
from jhub_gpubooking.db.store import BookingStore

HEAD = REVISION_IDS[-1]


def store_on(engine, pools) -> BookingStore:
    store = BookingStore(make_session_factory(engine), pools, {}, {}, clock=ManualClock(NOW))
    store.sync_pools()
    return store


def book(store: BookingStore, hours_ahead: int):
    start = NOW.replace(minute=0) + timedelta(hours=hours_ahead)
    return store.create("ada", "t4", "1/2", start, start + timedelta(hours=1), note="ünïcode")


def booking_ids(path: Path) -> list[int]:
    connection = sqlite3.connect(path)
    try:
        return [row[0] for row in connection.execute("SELECT id FROM bookings ORDER BY id")]
    finally:
        connection.close()


def beside(path: Path) -> list[str]:
    return sorted(item.name for item in path.parent.iterdir())


def test_a_backup_holds_every_row_and_restores_anywhere(
    db_url, tmp_path, open_database, capsys
):
    fill(db_url)
    folder = tmp_path / "backups"
    folder.mkdir()
    file = folder / "gpubooking-2026-11-28.sqlite"

    code = main(["db", "backup", str(file), "--db-url", db_url])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    # one self-contained file, ready to be copied off the hub's volume (looked at before the
    # service's engine opens it in WAL mode)
    assert beside(file) == [file.name]
    connection = sqlite3.connect(file)
    assert connection.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    connection.close()
    source = rows_of(db_url)
    assert rows_of(f"sqlite:///{file}") == source
    assert f"(schema revision {HEAD})" in out
    assert any(line.split() == ["bookings", str(len(source["bookings"]))] for line in out.splitlines())
    assert ("Checksum sha256:" in out) == (not db_url.startswith("sqlite"))
    assert f"jhub-gpubooking db restore {file}" in out

    # restored into an empty database of the same kind, every row is back
    restored = open_database()
    upgrade(restored)
    assert main(["db", "copy", "--from", f"sqlite:///{file}", "--to", restored]) == 0
    assert rows_of(restored) == source


def test_a_sqlite_backup_holds_what_only_the_wal_file_holds(tmp_path, pools):
    database = tmp_path / "gpubooking.sqlite"
    url = f"sqlite:///{database}"
    fill(url)
    engine = make_engine(url)  # open, like the running service: nothing is checkpointed
    store = store_on(engine, pools)
    latest = book(store, 3)
    assert Path(f"{database}-wal").stat().st_size > 0
    by_hand = tmp_path / "copied-by-hand.sqlite"
    shutil.copy(database, by_hand)
    assert latest.id not in booking_ids(by_hand)  # what `kubectl cp` of the file alone loses

    report = backup_database(url, tmp_path / "backup.sqlite")
    assert latest.id in booking_ids(report.path)
    assert rows_of(f"sqlite:///{report.path}") == rows_of(url)
    assert report.checksum is None
    assert store.get(latest.id).id == latest.id  # the service goes on
    engine.dispose()


def test_a_sqlite_database_at_an_older_revision_is_backed_up_as_it_is(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    fill(url, up_to=REVISION_IDS[1])
    report = backup_database(url, tmp_path / "backup.sqlite")
    assert report.revision == REVISION_IDS[1]
    assert report.counts["bookings"] > 0
    # to restore it with this release: upgrade the backup, then copy
    assert upgrade(f"sqlite:///{report.path}") == HEAD


def test_a_copy_while_the_service_writes_is_one_moment(db_url, pools, tmp_path, monkeypatch):
    """A booking made while the copy runs (after the bookings were read, before their events)
    is left out whole: no event of a booking the copy does not have."""
    upgrade(db_url)
    engine = make_engine(db_url)
    store = store_on(engine, pools)
    before = book(store, 3)
    target = f"sqlite:///{tmp_path / 'copy.sqlite'}"
    upgrade(target)
    made = []
    read_chunks = copy._chunks

    def chunks_then_book(connection, table):
        yield from read_chunks(connection, table)
        if table.name == "bookings" and not made:
            made.append(book(store, 5))

    monkeypatch.setattr(copy, "_chunks", chunks_then_book)
    report = copy_database(db_url, target)
    assert made, "the copy read the bookings table"
    assert report.counts["bookings"] == 1
    copied = rows_of(target)
    assert [row["id"] for row in copied["bookings"]] == [before.id]
    assert {row["booking_id"] for row in copied["booking_events"]} == {before.id}
    assert [booking.id for booking in store.list()] == [before.id, made[0].id]
    engine.dispose()


def test_an_existing_file_is_never_overwritten(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'gpubooking.sqlite'}"
    fill(url)
    file = tmp_path / "backup.sqlite"
    file.write_text("last week's backup")
    assert main(["db", "backup", str(file), "--db-url", url]) == 1
    assert "exists already" in capsys.readouterr().err
    assert file.read_text() == "last week's backup"


@pytest.mark.parametrize(
    "problem, message",
    [
        ("missing", "There is no database at"),
        ("not a booking database", "not a booking database"),
        ("no folder", "There is no folder"),
    ],
)
def test_what_cannot_be_backed_up_is_refused_and_leaves_nothing(tmp_path, problem, message, capsys):
    database = tmp_path / "gpubooking.sqlite"
    if problem == "not a booking database":
        connection = sqlite3.connect(database)
        connection.execute("CREATE TABLE notes (text TEXT)")
        connection.close()
    file = tmp_path / ("nowhere" if problem == "no folder" else ".") / "backup.sqlite"
    files = beside(database)
    assert main(["db", "backup", str(file), "--db-url", f"sqlite:///{database}"]) == 1
    assert message in capsys.readouterr().err
    assert beside(database) == files  # no backup, no leftover, no database made by a typo


@pytest.mark.parametrize("db_url", SERVERS,
                         indirect=True)
def test_a_server_database_at_another_revision_is_refused(db_url, tmp_path, capsys):
    fill(db_url, up_to=REVISION_IDS[-2])
    assert main(["db", "backup", str(tmp_path / "backup.sqlite"), "--db-url", db_url]) == 1
    err = capsys.readouterr().err
    assert "take the backup with the release that uses the database" in err
    assert "pg_dump, mariadb-dump" in err
    assert beside(tmp_path / "backup.sqlite") == []


@pytest.mark.parametrize("db_url", [pytest.param("postgresql", marks=pytest.mark.postgres)],
                         indirect=True)
def test_an_interrupted_backup_leaves_no_file(db_url, tmp_path, monkeypatch):
    fill(db_url)
    from jhub_gpubooking.db import backup

    def interrupted(source, target, stop):
        raise KeyboardInterrupt

    monkeypatch.setattr(backup, "copy_database", interrupted)
    with pytest.raises(KeyboardInterrupt):
        backup_database(db_url, tmp_path / "backup.sqlite")
    assert beside(tmp_path / "backup.sqlite") == []


def test_an_in_memory_database_is_refused(tmp_path):
    with pytest.raises(CopyRefused, match="in-memory"):
        backup_database("sqlite://", tmp_path / "backup.sqlite")
    assert beside(tmp_path / "backup.sqlite") == []
