"""``jhub-gpubooking db copy``: a SQLite database full of history moves to an empty, migrated
PostgreSQL or MariaDB (or SQLite) database, row for row, and the service can go on there."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from db_test_store import fill
from db_test_times import NOW
from migration_data import REVISION_IDS, rows_of
from sqlalchemy import text

from jhub_gpubooking.cli import main
from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.db.copy import CopyRefused, copy_database
from jhub_gpubooking.db.session import make_engine, make_session_factory
from jhub_gpubooking.db.store import BookingStore

HEAD = REVISION_IDS[-1]


@pytest.fixture
def source(tmp_path, pools):
    """A SQLite database with rows in every table (written at each revision on the way up)
    and bookings the store made (times with fractions of a second, as the service writes)."""
    url = f"sqlite:///{tmp_path / 'source.sqlite'}"
    fill(url)
    engine = make_engine(url)
    store = BookingStore(
        make_session_factory(engine),
        pools,
        {},
        {},
        clock=ManualClock(NOW + timedelta(microseconds=654321)),
    )
    store.sync_pools()
    start = NOW.replace(minute=0) + timedelta(hours=3)
    booking = store.create("ada", "t4", "1/2", start, start + timedelta(hours=1), note="ünïcode")
    store.cancel(booking.id, actor="ada")
    engine.dispose()
    return url


def whole_seconds(rows: dict[str, list[dict]]) -> dict[str, list[dict]]:
    return {
        table: [
            {
                key: value.replace(microsecond=0) if hasattr(value, "microsecond") else value
                for key, value in row.items()
            }
            for row in table_rows
        ]
        for table, table_rows in rows.items()
    }


def test_copy_moves_every_row_and_the_service_goes_on(source, migrated_url, pools, capsys):
    code = main(["db", "copy", "--from", source, "--to", migrated_url])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    expected = rows_of(source)
    copied = rows_of(migrated_url)
    if make_engine(migrated_url).dialect.name == "mysql":
        assert "Times were stored to the whole second" in out
        expected = whole_seconds(expected)
    assert copied == expected
    for table, rows in expected.items():
        assert f"\n{table} " in out or f"\n{table}\n" in out
        assert any(line.split() == [table, str(len(rows))] for line in out.splitlines())
    assert "is the same in both databases" in out

    # the service can book on the new database: ids continue after the copied ones
    engine = make_engine(migrated_url)
    store = BookingStore(make_session_factory(engine), pools, {}, {}, clock=ManualClock(NOW))
    store.sync_pools()
    start = NOW.replace(minute=0) + timedelta(hours=5)
    new = store.create("bob", "a100", 1, start, start + timedelta(hours=1))
    assert new.id == max(row["id"] for row in expected["bookings"]) + 1
    assert [event.kind for event in store.history(new.id)] == ["created"]
    engine.dispose()


def test_copy_refuses_a_target_with_data_and_changes_nothing(source, migrated_url, capsys):
    copy_database(source, migrated_url)
    before = rows_of(migrated_url)
    code = main(["db", "copy", "--from", source, "--to", migrated_url])
    _, err = capsys.readouterr()
    assert code == 1
    assert re.search(r"already holds data \((feed_tokens|pools): [12] rows?\)", err), err
    assert "copy only into an empty database" in err
    assert rows_of(migrated_url) == before


def test_copy_refuses_a_target_without_schema(source, db_url, capsys):
    code = main(["db", "copy", "--from", source, "--to", db_url])
    _, err = capsys.readouterr()
    assert code == 1
    assert "has no schema yet" in err and "jhub-gpubooking db upgrade --db-url" in err


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_row_the_target_refuses_rolls_the_whole_copy_back(source, migrated_url, monkeypatch):
    """Nothing half-done: a failure after some tables were copied leaves the target empty."""
    from jhub_gpubooking.db import copy

    real_hexdigest = copy._Digest.hexdigest
    seen = []

    def read_back_differs(digest):
        # the target's rows are summed first: pretend one of them came back changed
        seen.append(digest)
        return "changed" if len(seen) == 1 else real_hexdigest(digest)

    monkeypatch.setattr(copy._Digest, "hexdigest", read_back_differs)
    with pytest.raises(CopyRefused, match="checksum mismatch"):
        copy.copy_database(source, migrated_url)
    engine = make_engine(migrated_url)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM bookings")).scalar() == 0
        assert connection.execute(text("SELECT count(*) FROM pools")).scalar() == 0
    engine.dispose()
