"""What a user deleted from the Hub left, found and taken off, on every backend: upcoming
bookings cancelled, the running one ended now, waits withdrawn, the calendar link revoked; the
history kept, and everyone else's belongings untouched. And since when users are missing, as
the rounds store it."""

from __future__ import annotations

from datetime import timedelta

from db_test_times import NOW, at

from jhub_gpubooking.core.model import BookingState
from jhub_gpubooking.core.waitlist import WaitState
from jhub_gpubooking.db.feed_tokens import has_feed_token, new_feed_token, user_for_feed_token
from jhub_gpubooking.db.removed_users import (
    REMOVED_USERS_ACTOR,
    Belongings,
    belongings,
    forget_missing_user,
    missing_users,
    record_missing_users,
    remove_belongings,
    users_with_belongings,
)
from jhub_gpubooking.db.user_rename import rename_user
from jhub_gpubooking.db.waitlist import WaitStore


def test_a_removed_users_belongings_are_taken_off_and_nobody_elses(store, clock):
    waits = WaitStore(store)
    past = store.create("bob", "t4", 1, at(10), at(11))  # over by the next day: history only
    clock.advance(timedelta(days=1))
    now = NOW + timedelta(days=1)
    running = store.create("bob", "t4", "0.25", at(10, days=1), at(12, days=1))
    upcoming = store.create("bob", "a100", 2, at(14, days=1), at(16, days=1))
    ada = store.create("ada", "a100", 4, at(14, days=1), at(16, days=1))
    wait = waits.join("bob", "a100", 1, at(14, days=1), at(15, days=1))  # a100 is full then
    ada_wait = waits.join("ada", "a100", 1, at(14, days=1), at(15, days=1))
    token = new_feed_token(store, "bob")
    new_feed_token(store, "cy")  # a calendar link alone counts too
    assert users_with_belongings(store, waits, now) == {"ada", "bob", "cy"}

    removed = remove_belongings(store, waits, "bob", now)
    assert removed == Belongings(bookings=(running.id, upcoming.id), waits=(wait.id,),
                              feed_link=True)
    assert store.get(upcoming.id).state(now) is BookingState.CANCELLED
    ended = store.get(running.id)
    assert ended.start < ended.end <= at(10, 15, days=1)  # the time used is kept
    assert store.get(past.id) == past
    assert store.get(ada.id) == ada
    assert waits.get(wait.id).state is WaitState.WITHDRAWN
    assert waits.get(ada_wait.id).state is WaitState.WAITING
    assert (has_feed_token(store, "bob"), user_for_feed_token(store, token)) == (False, None)
    [*_, event] = store.history(upcoming.id)
    assert (event.actor, event.kind, event.detail) == (
        REMOVED_USERS_ACTOR, "force_cancelled", {"reason": "The Hub no longer has user bob."})
    assert users_with_belongings(store, waits, now) == {"ada", "cy"}
    # a second removal finds nothing left
    assert remove_belongings(store, waits, "bob", now) == Belongings()


def test_missing_users_are_stored_as_a_round_leaves_them(store):
    assert missing_users(store) == {}
    record_missing_users(store, {"bob": NOW + timedelta(microseconds=700), "zoë": at(8)})
    # whole seconds, as every backend stores them
    assert missing_users(store) == {"bob": NOW, "zoë": at(8)}
    # the next round: zoë is back, cy went missing, bob's time is kept as it was
    record_missing_users(store, {"bob": NOW, "cy": at(9)})
    assert missing_users(store) == {"bob": NOW, "cy": at(9)}
    forget_missing_user(store, "bob")  # removed
    forget_missing_user(store, "bob")  # a second time changes nothing
    assert missing_users(store) == {"cy": at(9)}
    record_missing_users(store, {})
    assert missing_users(store) == {}


def test_belongings_are_what_a_removal_would_take_off(store, clock):
    waits = WaitStore(store)
    store.create("bob", "t4", 1, at(10), at(11))  # over by the next day: history only
    clock.advance(timedelta(days=1))
    now = NOW + timedelta(days=1)
    upcoming = store.create("bob", "a100", 4, at(14, days=1), at(16, days=1))
    wait = waits.join("bob", "a100", 1, at(14, days=1), at(15, days=1))
    assert belongings(store, waits, "bob", now) == Belongings((upcoming.id,), (wait.id,), False)
    new_feed_token(store, "bob")
    held = belongings(store, waits, "bob", now)
    assert remove_belongings(store, waits, "bob", now) == held
    assert belongings(store, waits, "bob", now) == Belongings()


def test_a_rename_forgets_that_the_old_name_was_missing(store):
    store.create("bob", "a100", 1, at(14), at(15))
    record_missing_users(store, {"bob": at(9), "cy": at(9)})
    rename_user(store, "bob", "robert")
    assert missing_users(store) == {"cy": at(9)}
