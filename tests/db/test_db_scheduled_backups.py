"""``c.ScheduledBackups`` on every backend: a backup when one is due (read from the folder, so
a restart takes none early), the newest ``keep`` kept and nothing else deleted, a failure
logged, counted and tried again later, one process at a time backing a shared database up, a
backup cut short by the service stopping."""

from __future__ import annotations

import logging
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from db_test_times import NOW, at

from jhub_gpubooking.core.backups import backup_name
from jhub_gpubooking.db import backup, copy
from jhub_gpubooking.service.backups import ScheduledBackups
from jhub_gpubooking.service.metrics import ServiceMetrics

DAY = timedelta(days=1)


@pytest.fixture
def executor():
    executor = ThreadPoolExecutor(2)
    yield executor
    executor.shutdown(wait=True)


@pytest.fixture
def make_backups(migrated_url, engine, executor, tmp_path):
    def build(**options) -> ScheduledBackups:
        options.setdefault("directory", str(tmp_path / "backups"))
        return ScheduledBackups(db_url=migrated_url, db_engine=engine, executor=executor,
                                metrics=ServiceMetrics(), **options)
    return build


def booking_ids(path) -> list[int]:
    with sqlite3.connect(path) as connection:
        return [row[0] for row in connection.execute("SELECT id FROM bookings ORDER BY id")]


def sample(backups: ScheduledBackups, name: str) -> float | None:
    return backups.metrics.registry.get_sample_value(name)


def listing(folder) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


async def test_a_backup_when_due_the_newest_kept_and_nothing_else_deleted(
    store, make_backups, tmp_path
):
    folder = tmp_path / "backups"
    backups = make_backups(keep=2)
    first = store.create("ada", "a100", 1, at(10), at(11))
    report = await backups.run_once(NOW)  # no backup yet: one at once, the folder made
    assert report.path == folder / backup_name(NOW)
    assert booking_ids(report.path) == [first.id]
    assert sample(backups, "gpubooking_last_backup_timestamp_seconds") == NOW.timestamp()

    second = store.create("bob", "a100", 1, at(12), at(13))
    assert await backups.run_once(NOW + DAY - timedelta(minutes=1)) is None  # not due yet
    (folder / "notes.txt").write_text("the admin's own file")
    (folder / "gpubooking-before-upgrade.sqlite").write_text("a backup taken by hand")
    for n in (1, 2):
        assert (await backups.run_once(NOW + n * DAY)).path.name == backup_name(NOW + n * DAY)
    assert listing(folder) == sorted([backup_name(NOW + DAY), backup_name(NOW + 2 * DAY),
                                      "notes.txt", "gpubooking-before-upgrade.sqlite"])
    assert booking_ids(folder / backup_name(NOW + 2 * DAY)) == [first.id, second.id]

    # a restart reads when the last one was taken from the folder, and leftovers of a backup
    # cut short are cleared before the next one
    restarted = make_backups(keep=2)
    assert await restarted.run_once(NOW + 2 * DAY + timedelta(hours=1)) is None
    (folder / f"{backup_name(NOW + 2 * DAY)}.partial").write_text("cut short")
    assert await restarted.run_once(NOW + 3 * DAY) is not None
    assert listing(folder) == sorted([backup_name(NOW + 2 * DAY), backup_name(NOW + 3 * DAY),
                                      "notes.txt", "gpubooking-before-upgrade.sqlite"])


async def test_off_without_a_folder(make_backups):
    assert await make_backups(directory="").run_once(NOW) is None


async def test_a_failure_is_logged_counted_and_tried_again_later(make_backups, tmp_path, caplog):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the folder should be")
    backups = make_backups(directory=str(blocked), retry_minutes=30)
    with caplog.at_level(logging.ERROR):
        assert await backups.run_once(NOW) is None
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.getMessage().startswith(
        f"Backup of the booking database into {blocked} failed (tried again from "
        f"{(NOW + timedelta(minutes=30)).isoformat(timespec='minutes')}): ")
    assert sample(backups, "gpubooking_backup_failures_total") == 1
    blocked.unlink()  # the admin makes room
    assert await backups.run_once(NOW + timedelta(minutes=29)) is None  # not tried yet
    assert sample(backups, "gpubooking_backup_failures_total") == 1
    report = await backups.run_once(NOW + timedelta(minutes=30))
    assert report.path == blocked / backup_name(NOW + timedelta(minutes=30))


async def test_one_process_at_a_time_backs_a_shared_database_up(make_backups, tmp_path, engine):
    """PostgreSQL and MariaDB may be shared by several service processes: the database lock
    lets one back up. SQLite has one service process per file, and no such lock."""
    shared = engine.dialect.name != "sqlite"
    first, second = make_backups(), make_backups()
    assert first.lock.acquire()  # the first process is backing up
    try:
        taken = await second.run_once(NOW)
        assert (taken is None) == shared
        assert (tmp_path / "backups" / backup_name(NOW)).exists() == (not shared)
    finally:
        first.lock.release()
    assert (await second.run_once(NOW) is not None) == shared


async def test_a_backup_under_way_ends_when_the_service_stops_and_leaves_nothing(
    store, make_backups, tmp_path, monkeypatch, caplog
):
    """The service stops (SIGTERM) while its backup is being written: the copy of a server
    database ends at its next chunk of rows, SQLite's one-step copy is not checked and kept,
    and no file or partial file is left; the process need not wait for a long copy to end."""
    for hour in range(3):
        store.create("ada", "a100", 1, at(10 + hour), at(11 + hour))
    folder = tmp_path / "backups"
    backups = make_backups()
    read_chunks, online_backup, chunks_read = copy._chunks, backup._sqlite_online_backup, []
    monkeypatch.setattr(copy, "COPY_CHUNK_ROWS", 1)

    def chunks_stopping(connection, table):
        for chunk in read_chunks(connection, table):
            chunks_read.append(table.name)
            backups.stop()  # SIGTERM arrives while the first chunk is read
            yield chunk

    def online_backup_stopping(*args):
        online_backup(*args)
        backups.stop()

    monkeypatch.setattr(copy, "_chunks", chunks_stopping)
    monkeypatch.setattr(backup, "_sqlite_online_backup", online_backup_stopping)
    with caplog.at_level(logging.INFO):
        assert await backups.run_once(NOW) is None
    assert listing(folder) == []
    assert len(chunks_read) <= 1  # none on SQLite; a server database's copy ended at once
    assert f"Backup into {folder} stopped with the service" in caplog.text
    assert not sample(backups, "gpubooking_backup_failures_total")
