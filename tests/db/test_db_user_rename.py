"""A user renamed in the Hub: ``rename_user`` and ``jhub-gpubooking users rename`` move their
bookings, series, waits and calendar link to the new name on every backend, all or nothing."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from db_test_times import at
from server_databases import SERVERS, lock_waits
from sqlalchemy import text

from jhub_gpubooking.cli import main
from jhub_gpubooking.core.errors import InvalidRequest
from jhub_gpubooking.core.recurrence import occurrences
from jhub_gpubooking.db.feed_tokens import new_feed_token, user_for_feed_token
from jhub_gpubooking.db.series import create_series, get_series
from jhub_gpubooking.db.user_rename import RENAME_ACTOR, Renamed, rename_user
from jhub_gpubooking.db.waitlist import WaitStore


def test_everything_of_the_old_name_moves_and_nothing_else(store, clock):
    waits = WaitStore(store)
    past = store.create("jdoe", "a100", 1, at(10), at(11))
    clock.advance(timedelta(days=1))
    upcoming = store.create("jdoe", "a100", 2, at(14, days=1), at(16, days=1))
    other = store.create("ada", "a100", 1, at(14, days=1), at(16, days=1))
    wait = waits.join("jdoe", "t4", 1, at(14, days=1), at(15, days=1))
    token = new_feed_token(store, "jdoe")

    assert rename_user(store, "jdoe", "john.doe") == Renamed(2, 0, 1, "moved")
    assert [b.user for b in map(store.get, (past.id, upcoming.id, other.id))] == [
        "john.doe", "john.doe", "ada"]
    assert store.list(user="jdoe") == []
    assert waits.get(wait.id).user == "john.doe"
    assert user_for_feed_token(store, token) == "john.doe"  # the same link keeps working
    [*_, event] = store.history(upcoming.id)
    assert (event.actor, event.kind, event.detail) == (
        RENAME_ACTOR, "user_renamed", {"from": "jdoe", "to": "john.doe"})


@pytest.mark.parametrize("db_url", SERVERS, indirect=True)
def test_a_rename_waits_for_a_change_of_the_pool_instead_of_deadlocking(store, engine):
    """The rename changed the old name's booking rows, lowest id first, and wrote their events
    without their pools' locks. A change of the pool holding the pool and the higher booking,
    and then wanting the lower one (a move, an end), deadlocked with it. Now the rename locks
    the pools first, as every change of bookings does: it waits for that change, then renames."""
    lower = store.create("jdoe", "a100", 1, at(11), at(12))
    higher = store.create("jdoe", "a100", 1, at(13), at(14))
    lock = "SELECT {column} FROM {table} WHERE {column} = :key FOR UPDATE"
    with engine.connect() as change, engine.connect() as watcher, ThreadPoolExecutor(1) as pool:
        change.execute(text(lock.format(table="pools", column="name")), {"key": "a100"})
        change.execute(text(lock.format(table="bookings", column="id")), {"key": higher.id})
        renamed = pool.submit(rename_user, store, "jdoe", "john.doe")
        while not renamed.done() and not lock_waits(watcher):
            watcher.rollback()  # a fresh snapshot of the lock tables each time
        change.execute(text(lock.format(table="bookings", column="id")), {"key": lower.id})
        change.commit()
        assert renamed.result() == Renamed(2, 0, 0, "none")
    assert [store.get(b.id).user for b in (lower, higher)] == ["john.doe", "john.doe"]


@pytest.mark.parametrize("db_url", SERVERS, indirect=True)
def test_a_rename_waits_for_a_withdraw_instead_of_deadlocking(store, engine):
    """A withdraw locks its wait's row, then changes its state (and so the wait's entry in the
    (user, state) index). The rename's UPDATE of the old name's waits went by that index: on
    MariaDB it locked the entry first, then waited for the row, and the withdraw's change of
    the entry then waited for the rename (a deadlock, found by the concurrent walk). The rename
    changes the waits by id now, as the withdraw goes: the row first."""
    wait = WaitStore(store).join("jdoe", "a100", 1, at(11), at(12))
    with engine.connect() as withdraw, engine.connect() as watcher, ThreadPoolExecutor(1) as pool:
        withdraw.execute(text("SELECT id FROM waits WHERE id = :id FOR UPDATE"), {"id": wait.id})
        renamed = pool.submit(rename_user, store, "jdoe", "john.doe")
        while not renamed.done() and not lock_waits(watcher):
            watcher.rollback()  # a fresh snapshot of the lock tables each time
        withdraw.execute(text("UPDATE waits SET state = 'withdrawn' WHERE id = :id"),
                         {"id": wait.id})
        withdraw.commit()
        assert renamed.result() == Renamed(0, 0, 1, "none")
    assert WaitStore(store).get(wait.id).user == "john.doe"


def test_a_new_name_that_booked_already_is_merged_and_keeps_its_own_link(store):
    store.create("jdoe", "a100", 1, at(14), at(15))
    store.create("john.doe", "a100", 1, at(15), at(16))
    old_link, new_link = new_feed_token(store, "jdoe"), new_feed_token(store, "john.doe")
    assert rename_user(store, "jdoe", "john.doe") == Renamed(1, 0, 0, "kept")
    assert [b.user for b in store.list()] == ["john.doe", "john.doe"]
    assert (user_for_feed_token(store, old_link), user_for_feed_token(store, new_link)) == (
        None, "john.doe")


def test_bookings_made_with_the_same_idempotency_key_under_both_names_are_merged(store):
    # keys are unique per user; a client that numbers its creates repeats them across users
    store.create("jdoe", "a100", 1, at(14), at(15), request_key="1")
    kept = store.create("john.doe", "a100", 1, at(15), at(16), request_key="1")
    for user in ("jdoe", "john.doe"):
        WaitStore(store).join(user, "t4", 1, at(14), at(15), request_key="2")
        daily = occurrences(at(16), at(17), "daily", count=2, max_occurrences=10)
        create_series(store, user, "t4", "0.25", daily, "daily", request_key="3")
    assert rename_user(store, "jdoe", "john.doe") == Renamed(3, 1, 1, "none")
    assert len(store.list(user="john.doe")) == 6
    # the new name's own key still answers its create sent again
    assert store.create("john.doe", "a100", 1, at(15), at(16), request_key="1") == kept


def test_a_series_moves_with_its_occurrences(store):
    daily = occurrences(at(14), at(15), "daily", count=3, max_occurrences=10)
    series = create_series(store, "jdoe", "a100", 1, daily, "daily")
    assert rename_user(store, "jdoe", "john.doe") == Renamed(3, 1, 0, "none")
    assert get_series(store, series.id).user == "john.doe"


@pytest.mark.parametrize(("old", "new", "message"), [
    ("nobody", "someone", "There is nothing of user 'nobody' here (no booking, series, wait or "
                          "calendar link); check the name."),
    ("jdoe", "jdoe", "'jdoe' and the new name are the same."),
    ("jdoe", " ", "The new name must be 1 to 255 characters."),
])
def test_refusals_change_nothing(store, old, new, message):
    kept = store.create("jdoe", "a100", 1, at(14), at(15))
    with pytest.raises(InvalidRequest) as refused:
        rename_user(store, old, new)
    assert refused.value.message == message
    assert store.get(kept.id) == kept


def test_the_command_says_what_moved(capsys, store, migrated_url):
    store.create("jdoe", "a100", 1, at(14), at(15))
    assert main(["users", "rename", "jdoe", "john.doe", "--db-url", migrated_url]) == 0
    assert capsys.readouterr().out == (
        "Renamed jdoe to john.doe: 1 booking(s), 0 series and 0 wait(s) moved; no calendar "
        "link.\n")
    assert main(["users", "rename", "jdoe", "john.doe", "--db-url", migrated_url]) == 1
    assert "There is nothing of user 'jdoe' here" in capsys.readouterr().err
