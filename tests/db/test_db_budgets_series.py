"""Group budgets, the "used" charge mode and recurring series, against a real store.

Each test runs on SQLite, PostgreSQL and MariaDB (see conftest); the clock is a ManualClock
starting Monday 2030-01-07 10:05 UTC, so the budget week refills on Monday 2030-01-14.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from db_test_times import at

from jhub_gpubooking.core.budgets import Budget
from jhub_gpubooking.core.errors import PolicyViolation
from jhub_gpubooking.core.recurrence import occurrences
from jhub_gpubooking.db.budgets import BudgetBook, budgets_of_user
from jhub_gpubooking.db.series import SeriesRefused, cancel_series, create_series, get_series

COURSE = ("course-x",)


def budget_store(make_store, mode="booked", **policy):
    book = BudgetBook({"course-x": Budget(gpu_hours=4, period="week")}, charge_mode=mode)
    return make_store(budgets=book, default_policy=policy)


def test_members_of_a_group_share_its_budget_and_others_do_not(make_store):
    store = budget_store(make_store)
    store.create("alice", "a100", 2, at(11), at(12), groups=COURSE)
    store.create("bob", "a100", 1, at(13), at(15), groups=COURSE)
    with pytest.raises(PolicyViolation) as refused:
        store.create("carol", "a100", 1, at(16), at(17), groups=COURSE)
    assert (refused.value.status, refused.value.rule) == (403, "group_budgets")
    assert refused.value.message == (
        "The group course-x has 0 of 4 GPU-hours left this week; this booking needs 1. "
        "It refills on Monday 2030-01-14 00:00 UTC."
    )
    assert store.create("dave", "a100", 1, at(16), at(17)).user == "dave"
    assert store.create("carol", "a100", 1, at(16), at(17), groups=COURSE, is_admin=True)


def test_cancelling_refunds_booked_hours_and_next_week_has_a_fresh_budget(make_store):
    store = budget_store(make_store)
    first = store.create("alice", "a100", 2, at(11), at(13), groups=COURSE)
    next_week = store.create("alice", "a100", 2, at(11, days=7), at(13, days=7), groups=COURSE)
    with pytest.raises(PolicyViolation, match="in the week starting Monday 2030-01-14 00:00 UTC"):
        store.create("bob", "a100", 1, at(14, days=8), at(15, days=8), groups=COURSE)
    store.cancel(first.id, actor="alice")
    assert store.create("bob", "a100", 1, at(14), at(15), groups=COURSE).id > next_week.id


def test_extending_a_booking_is_charged_to_the_group(make_store):
    store = budget_store(make_store)
    booking = store.create("alice", "a100", 1, at(11), at(14), groups=COURSE)
    with pytest.raises(PolicyViolation, match="has 4 of 4 GPU-hours left this week; this booking needs 5"):
        store.change_end(booking.id, at(16), actor="alice", groups=COURSE)
    assert store.change_end(booking.id, at(15), actor="alice", groups=COURSE).end == at(15)


def test_used_mode_refunds_booked_time_no_server_used(make_store, clock):
    store = budget_store(make_store, mode="used", budget_gpu_hours=3)
    booking = store.create("alice", "a100", 1, at(11), at(13))
    # booked hours still ahead count, so the same hours cannot be promised twice
    with pytest.raises(PolicyViolation) as refused:
        store.create("alice", "a100", 1, at(14), at(16))
    assert refused.value.message == (
        "You have 1 of 3 GPU-hours left this week; this booking needs 2. "
        "It refills on Monday 2030-01-14 00:00 UTC."
    )
    clock.set(at(11))
    store.claim(booking.id, "")
    clock.set(at(11, 30))
    store.release(booking.id, "")
    clock.set(at(13))
    # only the half hour a server ran is charged once the booking has passed
    store.create("alice", "a100", 1, at(14), at(16))
    with pytest.raises(PolicyViolation, match="You have 0.5 of 3 GPU-hours left this week"):
        store.create("alice", "a100", 1, at(17), at(18))


def test_budget_status_lists_user_and_group_budgets(make_store):
    store = budget_store(make_store, budget_gpu_hours=10)
    store.create("alice", "a100", 2, at(11), at(12), groups=COURSE)
    assert [status.to_json() for status in budgets_of_user(store, "alice", COURSE)] == [
        {
            "scope": "user", "name": "alice", "period": "week", "gpu_hours": 10.0,
            "charged_gpu_hours": 2.0, "remaining_gpu_hours": 8.0,
            "period_start": "2030-01-07T00:00:00Z", "refill": "2030-01-14T00:00:00Z",
        },
        {
            "scope": "group", "name": "course-x", "period": "week", "gpu_hours": 4.0,
            "charged_gpu_hours": 2.0, "remaining_gpu_hours": 2.0,
            "period_start": "2030-01-07T00:00:00Z", "refill": "2030-01-14T00:00:00Z",
        },
    ]


def weekly(count, start=None, hours=2):
    start = at(14) if start is None else start
    return occurrences(start, start + timedelta(hours=hours), "weekly", count=count,
                       max_occurrences=10)


def test_a_series_books_every_occurrence_in_one_go(store):
    series = create_series(store, "alice", "a100", 1, weekly(3), "weekly", note="lab")
    assert [b.start for b in series.bookings] == [at(14), at(14, days=7), at(14, days=14)]
    assert {b.series_id for b in series.bookings} == {series.id}
    assert [b.id for b in store.list(user="alice")] == [b.id for b in series.bookings]
    assert get_series(store, series.id).bookings == series.bookings


def test_a_series_that_does_not_fit_books_nothing_and_lists_why(store):
    store.create("bob", "a100", 4, at(14, days=7), at(15, days=7))
    store.create("bob", "a100", 2, at(14, days=7), at(15, days=7))
    with pytest.raises(SeriesRefused) as refused:
        create_series(store, "alice", "a100", 1, weekly(3), "weekly")
    assert refused.value.status == 409
    assert [r.to_json()["start"] for r in refused.value.refusals] == ["2030-01-14T14:00:00Z"]
    assert refused.value.message.startswith(
        "1 of 3 occurrences cannot be booked, so none was booked. 2030-01-14 14:00 to 16:00 UTC: "
    )
    assert store.list(user="alice") == []


def test_policies_apply_per_occurrence_and_admins_are_exempt(make_store):
    store = make_store(default_policy={"max_bookings": 2})
    with pytest.raises(SeriesRefused) as refused:
        create_series(store, "alice", "a100", 1, weekly(3), "weekly")
    assert [(r.to_json()["start"], r.status) for r in refused.value.refusals] == [
        ("2030-01-21T14:00:00Z", 403)
    ]
    assert len(create_series(store, "alice", "a100", 1, weekly(3), "weekly", is_admin=True)
               .bookings) == 3


def test_group_budget_counts_earlier_occurrences_of_the_same_series(make_store):
    store = budget_store(make_store)
    daily = occurrences(at(14), at(16), "daily", count=3, max_occurrences=10)
    with pytest.raises(SeriesRefused, match="has 0 of 4 GPU-hours left this week; this booking needs 2"):
        create_series(store, "alice", "a100", 1, daily, "daily", groups=COURSE)
    assert store.list() == []


def test_cancelling_a_series_ends_the_running_occurrence_and_cancels_the_rest(store, clock):
    series = create_series(store, "alice", "a100", 1, weekly(3), "weekly")
    clock.set(at(14, 20))
    single = store.cancel(series.bookings[2].id, actor="alice")
    assert single.status == "cancelled"
    cancelled = cancel_series(store, series.id, actor="alice")
    assert [(b.status, b.end) for b in cancelled.bookings] == [
        ("booked", at(14, 20)),  # the running one ends now
        ("cancelled", at(16, days=7)),
        ("cancelled", at(16, days=14)),
    ]
