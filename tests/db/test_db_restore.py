"""``jhub-gpubooking db restore FILE``: the database goes back to a backup in one transaction,
is backed up itself first, lists whom the restore concerns, and never gives an id twice."""

from __future__ import annotations

import hashlib
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from db_test_store import fill
from db_test_times import NOW
from migration_data import REVISION_IDS, rows_of
from sqlalchemy import make_url, text
from sqlalchemy.exc import OperationalError

from jhub_gpubooking.cli import main
from jhub_gpubooking.db import copy, restore
from jhub_gpubooking.db.backup import backup_database
from jhub_gpubooking.db.copy import CopyRefused
from jhub_gpubooking.db.feed_tokens import new_feed_token
from jhub_gpubooking.db.restore import restore_database
from jhub_gpubooking.db.session import StaleSchema, make_engine, make_session_factory, upgrade
from jhub_gpubooking.db.waitlist import WaitStore


def book(store, user: str, hours_ahead: int):
    start = NOW.replace(minute=0) + timedelta(hours=hours_ahead)
    return store.create(user, "a100", 1, start, start + timedelta(hours=2))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def lines_after(out: str, heading: str) -> list[list[str]]:
    """The rows of the table printed under ``heading`` (a line of its own, up to the next blank
    line)."""
    block = out.split(heading, 1)[1].split("\n\n", 1)[0]
    return [line.split() for line in block.splitlines()[2:]]


def test_a_restore_takes_the_database_back_and_can_itself_be_undone(
    migrated_url, store, tmp_path, capsys
):
    kept = book(store, "ada", 2)
    changed = book(store, "bob", 4)
    backup = backup_database(migrated_url, tmp_path / "gpubooking-20261201T0300Z.sqlite").path
    at_backup, backup_bytes = rows_of(f"sqlite:///{backup}"), sha256(backup)
    store.cancel(changed.id, actor="bob")
    made_since = book(store, "carol", 0)  # the slot running now, and a server started on it
    store.claim(made_since.id, "gpu")
    # and a pod the admission webhook admitted on another one
    pod_since = book(store, "carol", 0)
    store.claim(pod_since.id, "pod:carol-jobs/train")
    before = rows_of(migrated_url)

    code = main(["db", "restore", str(backup), "--db-url", migrated_url])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert rows_of(migrated_url) == at_backup
    assert sha256(backup) == backup_bytes  # the backup itself is only read
    assert "is the same in the backup and the database" in out
    assert any(line.split() == ["bookings", "4", "2"] for line in out.splitlines())
    gone = lines_after(out, "Bookings made since the backup, gone now (2):")
    assert [row[:3] for row in gone] == [[str(made_since.id), "carol", "a100"],
                                         [str(pod_since.id), "carol", "a100"]]
    back = lines_after(out, "Bookings changed since the backup, as they were then (1):")
    assert [row[:3] + row[-2:] for row in back] == [
        [str(changed.id), "bob", "a100", "booked", "cancelled"]]
    running = lines_after(out, "Servers and pods that were running on bookings the restore took "
                               "away or back (2)")
    assert running == [[str(made_since.id), "carol", "gpu"],
                       [str(pod_since.id), "carol", "pod:carol-jobs/train"]]
    # a pod the Hub forgot (its start pending when the hub stopped) is the admin's to delete
    assert ("  kubectl delete pods --all-namespaces -l 'gpubooking.jupyter.org/booking-id in "
            f"({made_since.id},{pod_since.id})'\n") in out
    assert "Tell 2 user(s): bob, carol." in out
    assert store.get(kept.id).status == "booked" and store.get(changed.id).status == "booked"

    # the database as it was is kept beside the backup, under a name the rotation leaves alone
    [replaced] = [path for path in tmp_path.iterdir() if path.name.startswith("replaced-")]
    assert replaced.name.startswith("replaced-gpubooking-") and f"in {replaced}" in out
    assert rows_of(f"sqlite:///{replaced}") == before

    # no id is given twice: the next booking's id is past the one the restore took away
    after = book(store, "dan", 8)
    assert after.id > pod_since.id

    # restoring the kept file undoes the restore; the booking made meanwhile is listed
    undo = tmp_path / "undo.sqlite"
    assert main(["db", "restore", str(replaced), "--db-url", migrated_url,
                 "--replaced", str(undo)]) == 0
    out = capsys.readouterr().out
    assert rows_of(migrated_url) == before
    gone = lines_after(out, "Bookings made since the backup, gone now (1):")
    assert [row[:2] for row in gone] == [[str(after.id), "dan"]]
    assert "Tell 2 user(s): bob, dan." in out
    assert book(store, "eve", 10).id > after.id


def test_a_restore_names_the_waits_windows_and_calendar_links_it_undid(
    migrated_url, store, clock, tmp_path, capsys
):
    waitlist = WaitStore(store)
    start = NOW.replace(minute=0) + timedelta(hours=2)
    hour = timedelta(hours=1)
    withdrawn = waitlist.join("ada", "a100", 1, start, start + hour)
    old_window, _ = store.add_maintenance("a100", start, start + hour, "node-a", reason="old fan")
    # over by now (the restore's clock is the real one)
    over = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(days=2)
    clock.set(over)  # added while it was still to come: a window already over is refused
    past_window, _ = store.add_maintenance("a100", over, over + hour, "node-a")
    clock.set(NOW)
    new_feed_token(store, "bob")
    backup = backup_database(migrated_url, tmp_path / "backup.sqlite").path
    # since the backup: ada withdraws her wait, carol joins, the old window is removed (and
    # the past one), a new one is added, bob resets his calendar link and dan makes one
    waitlist.withdraw(withdrawn.id)
    joined = waitlist.join("carol", "t4", "1/2", start, start + hour, window_end=start + 3 * hour)
    store.delete_maintenance(old_window.id)
    store.delete_maintenance(past_window.id)
    new_window, _ = store.add_maintenance("a100", start, start + hour, None, reason="power")
    new_feed_token(store, "bob", reset=True)
    new_feed_token(store, "dan")

    assert main(["db", "restore", str(backup), "--db-url", migrated_url]) == 0
    out = capsys.readouterr().out
    gone = lines_after(out, "Waits made since the backup, gone now: their users wait for "
                            "nothing (1):")
    assert [row[:4] + row[-2:] for row in gone] == [
        [str(joined.id), "carol", "t4", "0.5", "60", "waiting"]]
    back = lines_after(out, "Waits changed since the backup, as they were then: a wait "
                            "waiting again is served again (1):")
    assert [row[:3] + row[-2:] for row in back] == [
        [str(withdrawn.id), "ada", "a100", "waiting", "withdrawn"]]
    added = lines_after(out, "Maintenance windows added since the backup, gone now: add them "
                             "again if the work is still planned (1):")
    assert [row[:3] + row[-1:] for row in added] == [
        [str(new_window.id), "a100", "(every", "power"]]
    removed = lines_after(out, "Maintenance windows removed since the backup, back now: remove "
                               "them again if the work is off (1):")  # not the past one
    assert [row[:3] + row[-2:] for row in removed] == [
        [str(old_window.id), "a100", "node-a", "old", "fan"]]
    assert "under Calendar feed on the booking page (2): bob, dan." in out
    assert "Tell 4 user(s): ada, bob, carol, dan." in out


def test_a_backup_of_an_older_release_is_migrated_in_a_copy(migrated_url, tmp_path, capsys):
    backup = tmp_path / "old.sqlite"
    old_url = f"sqlite:///{backup}"
    fill(old_url, up_to=REVISION_IDS[2])
    old_bytes = sha256(backup)

    assert main(["db", "restore", str(backup), "--db-url", migrated_url,
                 "--replaced", str(tmp_path / "replaced.sqlite")]) == 0
    out = capsys.readouterr().out
    assert f"(written at schema revision {REVISION_IDS[2]})" in out
    # the fresh database has nothing the backup lacks; the backup's calendar link is back
    assert "Bookings made since" not in out and "Waits made since" not in out
    assert out.endswith("on the booking page (1): zoë.\n\nTell 1 user(s): zoë.\n")
    assert sha256(backup) == old_bytes
    upgrade(old_url)  # what the restore did in its copy
    assert rows_of(migrated_url) == rows_of(old_url)


def test_a_failed_restore_changes_nothing(migrated_url, store, tmp_path, monkeypatch):
    book(store, "ada", 2)
    backup = backup_database(migrated_url, tmp_path / "backup.sqlite").path
    book(store, "bob", 4)
    before = rows_of(migrated_url)
    monkeypatch.setattr(copy, "checksum", lambda connection: "not the backup's")
    with pytest.raises(CopyRefused, match="checksum mismatch"):
        restore_database(backup, migrated_url, tmp_path / "replaced.sqlite")
    assert rows_of(migrated_url) == before
    assert not (tmp_path / "replaced.sqlite").exists()  # no copy of a database left as it was


def service_writing_during(step: str, migrated_url, make_store, monkeypatch, write):
    """Make ``write(store)`` run, on the service's own connections (waiting 1 s for a lock),
    right after the restore's ``step`` (a function of db/restore.py); returns the engine, the
    store and what the write raised."""
    engine = make_engine(migrated_url, timeout=1)
    service = make_store(session_factory=make_session_factory(engine))
    raised: list[Exception] = []
    done = getattr(restore, step)

    def step_while_the_service_writes(*args):
        result = done(*args)
        try:
            write(service)
        except Exception as error:  # noqa: BLE001 - what the service would have met
            raised.append(error)
        return result

    monkeypatch.setattr(restore, step, step_while_the_service_writes)
    return engine, service, raised


def test_a_booking_change_waits_for_the_restore_and_is_not_lost(
    migrated_url, store, make_store, tmp_path, monkeypatch
):
    kept = book(store, "ada", 2)
    backup = backup_database(migrated_url, tmp_path / "backup.sqlite").path
    since = book(store, "bob", 4)
    engine, service, raised = service_writing_during(
        "backup_database", migrated_url, make_store, monkeypatch,
        lambda service: service.cancel(kept.id, "ada"))
    try:
        report = restore_database(backup, migrated_url, tmp_path / "replaced.sqlite")
        # the cancel could not commit between the backup and the restore (it would be in
        # neither): the service answers "busy, try again" instead
        [error] = raised
        assert isinstance(error, OperationalError), error
        assert [line.id for line in report.taken_away] == [since.id]
        assert store.get(kept.id).status == "booked"
        # tried again once the restore committed, it goes through on the restored database
        assert service.cancel(kept.id, "ada").status == "cancelled"
    finally:
        engine.dispose()


@pytest.mark.parametrize(("step", "refusal"), [
    ("backup_database", "changed while the restore backed it up: is the booking service"),
    # after the rows were compared: the DELETE's count tells
    ("_refuse_changes_since", r"changed while the restore backed it up \(feed_tokens had 1 "
                              r"rows, the kept copy 0\)"),
])
def test_what_else_the_service_writes_meanwhile_is_held_off_or_refuses_the_restore(
    migrated_url, store, make_store, tmp_path, monkeypatch, step, refusal
):
    book(store, "ada", 2)
    backup = backup_database(migrated_url, tmp_path / "backup.sqlite").path
    engine, _service, raised = service_writing_during(
        step, migrated_url, make_store, monkeypatch,
        lambda service: new_feed_token(service, "ada"))
    try:
        if make_url(migrated_url).get_backend_name() not in ("mysql", "mariadb"):
            # SQLite's write transaction and PostgreSQL's table locks hold off every writer
            restore_database(backup, migrated_url, tmp_path / "replaced.sqlite")
            [error] = raised
            assert isinstance(error, OperationalError), error
            return
        # MariaDB's row locks cannot hold off a new row: a calendar link made while the
        # database was being backed up is in neither, so the restore refuses
        before_restore = rows_of(migrated_url)
        with pytest.raises(CopyRefused, match=refusal):
            restore_database(backup, migrated_url, tmp_path / "replaced.sqlite")
        assert raised == []
        assert rows_of(migrated_url) != before_restore  # the link, and nothing else, is new
        assert len(rows_of(migrated_url)["feed_tokens"]) == 1
        assert not (tmp_path / "replaced.sqlite").exists()
    finally:
        engine.dispose()


def test_a_row_changed_in_place_while_the_rows_are_replaced_is_held_off(
    migrated_url, store, make_store, tmp_path, monkeypatch
):
    """A calendar link reset after the restore compared the rows and before it deleted them
    (on MariaDB it went unnoticed): every backend makes the reset wait for the restore."""
    book(store, "ada", 2)
    new_feed_token(store, "ada")
    backup = backup_database(migrated_url, tmp_path / "backup.sqlite").path
    engine, _service, raised = service_writing_during(
        "_refuse_changes_since", migrated_url, make_store, monkeypatch,
        lambda service: new_feed_token(service, "ada", reset=True))
    try:
        restore_database(backup, migrated_url, tmp_path / "replaced.sqlite")
        [error] = raised
        assert isinstance(error, OperationalError), error
        assert rows_of(migrated_url) == rows_of(f"sqlite:///{backup}")
    finally:
        engine.dispose()


def test_what_cannot_be_restored_is_refused_with_the_reason(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'gpubooking.sqlite'}"
    upgrade(url)
    backup = backup_database(url, tmp_path / "backup.sqlite").path
    not_a_database = tmp_path / "notes.txt"
    not_a_database.write_text("not a database\n" * 100)
    newer = tmp_path / "newer.sqlite"
    newer.write_bytes(backup.read_bytes())
    with sqlite3.connect(newer) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '9999'")
    stale = f"sqlite:///{tmp_path / 'never-upgraded.sqlite'}"

    def refusal(*argv: str) -> str:
        assert main(["db", "restore", *argv]) == 1
        out, err = capsys.readouterr()
        assert out == ""
        return err

    assert "There is no backup file" in refusal(str(tmp_path / "missing.sqlite"), "--db-url", url)
    assert "is not a SQLite database" in refusal(str(not_a_database), "--db-url", url)
    assert "is at schema revision 9999, which this release" in refusal(
        str(newer), "--db-url", url)
    assert "has no schema yet" in refusal(str(backup), "--db-url", stale)
    taken = tmp_path / "taken.sqlite"
    taken.write_text("")
    assert "exists already" in refusal(str(backup), "--db-url", url, "--replaced", str(taken))
    # nothing of the refused restores is left: no replaced file, no temporary copy
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "backup.sqlite", "gpubooking.sqlite", "never-upgraded.sqlite", "newer.sqlite",
        "notes.txt", "taken.sqlite"]
    with pytest.raises(StaleSchema):
        restore_database(backup, stale, tmp_path / "unused.sqlite")


def test_sqlite_keeps_the_largest_id_of_each_table_through_the_restore(tmp_path):
    """What makes ids never given twice on SQLite: AUTOINCREMENT (0010) on every table whose
    rows a restore can take away."""
    url = f"sqlite:///{tmp_path / 'gpubooking.sqlite'}"
    upgrade(url)
    engine = make_engine(url)
    with engine.connect() as connection:
        autoincrement = set(connection.execute(text(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%AUTOINCREMENT%'"
        )).scalars())
    engine.dispose()
    assert autoincrement == {"bookings", "booking_series", "booking_events", "usage_intervals",
                             "waits", "maintenance_windows"}
