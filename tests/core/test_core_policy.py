"""Policy: config parsing, group overrides, every rule's refusal sentence, budgets, cancelling."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from jhub_gpubooking.core.errors import Conflict, PolicyViolation
from jhub_gpubooking.core.model import Booking, BookingState
from jhub_gpubooking.core.policy import (
    Policy,
    budget_used,
    cancel_outcome,
    check_booking,
    check_end_change,
    effective_policy,
    period_bounds,
)

#: "now" in the rule tests, also usable in parametrize lists (fixtures are not)
DAY_9 = datetime(2026, 11, 22, 9, tzinfo=timezone.utc)


def _booking(pool, amount, start, end, **changes) -> Booking:
    return Booking("alice", pool, Fraction(amount), start, end, **changes)


def refusal(policy, request, others, now) -> PolicyViolation:
    with pytest.raises(PolicyViolation) as refused:
        check_booking(policy, request, others, now)
    return refused.value


# ---------------------------------------------------------------- config


def test_from_config_builds_exact_values():
    policy = Policy.from_config(
        {"max_gpus": 0.5, "budget_gpu_hours": 10.1, "allowed_pools": ["a100", "t4"],
         "max_minutes": 240, "budget_period": "month"}
    )
    assert policy == Policy(
        max_gpus=Fraction(1, 2), budget_gpu_hours=Fraction(101, 10),
        allowed_pools=("a100", "t4"), max_minutes=240, budget_period="month",
    )


def test_from_config_refuses_unknown_keys():
    with pytest.raises(ValueError) as refused:
        Policy.from_config({"max_hours": 4})
    assert str(refused.value).startswith("Unknown policy keys: max_hours; known keys: ")


@pytest.mark.parametrize(
    "config, message",
    [
        ({"max_minutes": -1}, "Policy max_minutes must be a whole number >= 0 or None, not -1."),
        ({"max_bookings": True},
         "Policy max_bookings must be a whole number >= 0 or None, not True."),
        ({"max_gpus": 0}, "Policy max_gpus must be a number > 0 or None, not 0."),
        ({"budget_gpu_hours": "10"},
         "Policy budget_gpu_hours must be a number >= 0 or None, not '10'."),
        ({"max_days_ahead": float("inf")},
         "Policy max_days_ahead must be a number >= 0 or None, not inf."),
        ({"budget_period": "day"}, "Policy budget_period must be one of week, month, not 'day'."),
        ({"allowed_pools": "a100"}, "Policy allowed_pools must be a list of pool names or None."),
        ({"min_minutes": 60, "max_minutes": 30},
         "Policy min_minutes (60) exceeds max_minutes (30)."),
    ],
)
def test_from_config_refuses_bad_values(config, message):
    with pytest.raises(ValueError) as refused:
        Policy.from_config(config)
    assert str(refused.value) == message


# ---------------------------------------------------------------- group overrides


DEFAULT = {"max_minutes": 240, "max_gpus": 1, "allowed_pools": ["t4"], "cooldown_minutes": 30,
           "budget_gpu_hours": 10}
GROUPS = {
    "students": {"max_minutes": 120},
    "phd": {"max_minutes": 480, "allowed_pools": ["a100"], "cooldown_minutes": 15},
    "staff": {"max_gpus": None, "max_days_ahead": 30, "budget_gpu_hours": 100,
              "budget_period": "month"},
    "heavy": {"budget_gpu_hours": 40},
}


def test_users_outside_configured_groups_get_the_default():
    assert effective_policy(DEFAULT, GROUPS, ["nobody", "else"]) == Policy.from_config(DEFAULT)


def test_a_group_overrides_only_its_keys_even_to_be_stricter():
    assert effective_policy(DEFAULT, GROUPS, ["students"]) == Policy.from_config(
        {**DEFAULT, "max_minutes": 120}
    )


def test_several_groups_give_the_most_generous_value_per_key():
    assert effective_policy(Policy.from_config(DEFAULT), GROUPS, ["students", "phd", "staff"]) == (
        Policy(
            max_minutes=480, max_gpus=None, allowed_pools=("a100", "t4"), cooldown_minutes=15,
            max_days_ahead=None, budget_gpu_hours=Fraction(100), budget_period="month",
        )
    )


def test_budget_and_its_period_are_compared_as_a_rate():
    # 40 GPU-hours a week beats 100 a month
    merged = effective_policy(DEFAULT, GROUPS, ["staff", "heavy"])
    assert (merged.budget_gpu_hours, merged.budget_period) == (Fraction(40), "week")


def test_group_entries_with_unknown_keys_are_refused():
    with pytest.raises(ValueError, match="Unknown policy keys: gpus"):
        effective_policy(DEFAULT, {"oops": {"gpus": 2}}, ["oops"])


@st.composite
def group_entries(draw):
    keys = st.fixed_dictionaries({}, optional={
        "min_minutes": st.sampled_from([None, 15, 60]),
        "max_minutes": st.sampled_from([None, 60, 240]),
        "max_days_ahead": st.sampled_from([None, 1, 7]),
        "max_bookings": st.sampled_from([None, 0, 1, 3]),
        "cooldown_minutes": st.sampled_from([None, 0, 30, 120]),
        "max_gpus": st.sampled_from([None, 0.5, 1, 2]),
        "allowed_pools": st.sampled_from([None, [], ["a100"], ["t4"], ["a100", "t4"]]),
    })
    return draw(keys)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(group_entries(), min_size=1, max_size=3),
    st.sampled_from(["a100", "t4"]),
    st.sampled_from([Fraction(1, 2), Fraction(1), Fraction(2)]),
    st.integers(0, 9 * 24 * 4),  # start, in quarter hours from now
    st.integers(1, 5 * 4),  # length, in quarter hours
    st.lists(st.tuples(st.integers(-8, 40), st.integers(1, 8)), max_size=3),
)
def test_the_merged_policy_allows_whatever_one_group_allows(
    entries, pool, amount, start, length, existing
):
    """Per-key generosity: any request one of the user's groups accepts, the merge accepts."""
    default = Policy.from_config({"max_minutes": 240, "max_bookings": 1, "allowed_pools": []})
    groups = {f"g{k}": entry for k, entry in enumerate(entries)}
    now = datetime(2026, 11, 22, 9, tzinfo=timezone.utc)
    quarter = timedelta(minutes=15)
    request = _booking(pool, amount, now + start * quarter, now + (start + length) * quarter)
    others = [
        _booking("a100", Fraction(1), now + s * quarter, now + (s + n) * quarter)
        for s, n in existing
    ]

    def accepts(policy):
        try:
            check_booking(policy, request, others, now)
        except PolicyViolation:
            return False
        return True

    singles = [effective_policy(default, groups, [name]) for name in groups]
    if any(accepts(policy) for policy in singles):
        event("a single group accepts the request")
        assert accepts(effective_policy(default, groups, list(groups)))


# ---------------------------------------------------------------- each rule
# ``at(9)`` (Sunday 2026-11-22 09:00 UTC) is "now" in these tests.


@pytest.mark.parametrize(
    "config, start, end, amount, pool, rule, message",
    [
        ({"allowed_pools": ["t4", "v100"]}, 10, 11, 1, "a100", "allowed_pools",
         "You may not book pool a100; your groups may book: t4, v100."),
        ({"allowed_pools": []}, 10, 11, 1, "a100", "allowed_pools",
         "You may not book pool a100; your groups may not book any pool."),
        ({"max_gpus": 2}, 10, 11, 4, "a100", "max_gpus",
         "Bookings can be at most 2 GPUs; this one is 4 GPUs."),
        ({"max_gpus": 0.5}, 10, 11, 1, "a100", "max_gpus",
         "Bookings can be at most 0.5 GPU; this one is 1 GPU."),
        ({"min_minutes": 30}, 10, 10.25, 1, "a100", "min_minutes",
         "Bookings must be at least 30 minutes long; this one is 15 minutes."),
        ({"max_minutes": 240}, 10, 16, 1, "a100", "max_minutes",
         "Bookings can be at most 4 hours long; this one is 6 hours."),
        ({"max_minutes": 90}, 10, 35.75, 1, "a100", "max_minutes",
         "Bookings can be at most 1 hour 30 minutes long; this one is 1 day 1 hour 45 minutes."),
        ({"max_days_ahead": 14}, 24 * 20 + 14, 24 * 20 + 15, 1, "a100", "max_days_ahead",
         ("Bookings can start at most 14 days ahead (until 2026-12-06 09:00 UTC); "
         "this one starts 2026-12-12 14:00 UTC.")),
    ],
)
def test_each_limit_refuses_with_its_own_sentence(
    at, config, start, end, amount, pool, rule, message
):
    request = _booking(pool, amount, at(start), at(end))
    violation = refusal(Policy.from_config(config), request, [], at(9))
    assert (violation.rule, violation.message, violation.status) == (rule, message, 403)


def test_requests_exactly_at_the_limits_pass(at):
    policy = Policy.from_config({
        "min_minutes": 60, "max_minutes": 240, "max_days_ahead": 14, "max_gpus": 2,
        "allowed_pools": ["a100"], "max_bookings": 1, "cooldown_minutes": 30,
        "budget_gpu_hours": 11.5,
    })
    # ended 30 minutes before 9:00, and charged 3.5 GPU-hours: 3.5 + 8 is the whole budget
    previous = _booking("a100", 1, at(5), at(8, 30))
    check_booking(policy, _booking("a100", 2, at(9), at(13)), [previous], at(9))
    check_booking(policy, _booking("a100", 2, at(24 * 14 + 9), at(24 * 14 + 10)), [], at(9))


def test_max_bookings_counts_only_active_and_upcoming(at):
    policy = Policy(max_bookings=2)
    others = [
        _booking("a100", 1, at(8), at(10)),  # active
        _booking("t4", 1, at(2), at(3)),  # ended
        _booking("t4", 1, at(20), at(21), status="cancelled"),
    ]
    check_booking(policy, _booking("a100", 1, at(12), at(13)), others, at(9))
    others.append(_booking("t4", 1, at(30), at(31)))  # upcoming
    violation = refusal(policy, _booking("a100", 1, at(12), at(13)), others, at(9))
    assert (violation.rule, violation.message) == (
        "max_bookings",
        "You can have at most 2 active or upcoming booking(s); you already have 2.",
    )


@pytest.mark.parametrize(
    "other, message",
    [
        (_booking("a100", 1, DAY_9 - timedelta(hours=2), DAY_9 + timedelta(minutes=45)),
         "this one starts 15 minutes after your booking that ends 2026-11-22 09:45 UTC."),
        (_booking("a100", 1, DAY_9 + timedelta(hours=3, minutes=30), DAY_9 + timedelta(hours=5)),
         "this one ends 30 minutes before your booking that starts 2026-11-22 12:30 UTC."),
        (_booking("a100", "0.5", DAY_9 + timedelta(hours=2), DAY_9 + timedelta(hours=4)),
         "this one overlaps your booking from 2026-11-22 11:00 to 13:00 UTC."),
    ],
)
def test_cooldown_applies_before_and_after_the_request(at, other, message):
    policy = Policy(cooldown_minutes=60)
    violation = refusal(policy, _booking("a100", 1, at(10), at(12)), [other], at(9))
    assert violation.rule == "cooldown_minutes"
    assert violation.message == (
        "Your bookings in pool a100 need a break of at least 1 hour between them; " + message
    )


def test_cooldown_ignores_other_pools_and_cancelled_bookings(at):
    others = [
        _booking("t4", 1, at(8), at(10)),
        _booking("a100", 1, at(8), at(10), status="cancelled"),
    ]
    check_booking(Policy(cooldown_minutes=60), _booking("a100", 1, at(10), at(12)), others, at(9))


# ---------------------------------------------------------------- budget


@pytest.mark.parametrize(
    "period, now, bounds",
    [
        ("week", "2026-11-22 09:00", ("2026-11-16 00:00", "2026-11-23 00:00")),
        ("week", "2026-11-23 00:00", ("2026-11-23 00:00", "2026-11-30 00:00")),
        ("month", "2026-11-22 09:00", ("2026-11-01 00:00", "2026-12-01 00:00")),
        ("month", "2026-12-31 23:59", ("2026-12-01 00:00", "2027-01-01 00:00")),
    ],
)
def test_period_bounds(period, now, bounds):
    def utc(text):
        return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)

    assert period_bounds(period, utc(now)) == tuple(utc(b) for b in bounds)


def test_budget_used_charges_bookings_to_the_period_they_start_in(at):
    policy = Policy(budget_gpu_hours=10)
    bookings = [
        _booking("a100", 2, at(22), at(26)),  # Sunday 22:00 to Monday 02:00: all this week
        _booking("a100", "0.25", at(-24 * 6), at(-24 * 6 + 2)),  # Monday 00:00-02:00
        _booking("a100", 1, at(10), at(11), status="cancelled"),
        _booking("a100", 1, at(-24 * 6 - 1), at(-24 * 6)),  # last week, Sunday 23:00
        _booking("a100", 1, at(24 + 9), at(24 + 12)),  # next week
    ]
    assert budget_used(policy, bookings, at(9)) == Fraction(17, 2)
    assert budget_used(policy, bookings, at(24)) == Fraction(3)


def test_budget_used_up_names_used_needed_and_refill(at):
    policy = Policy(budget_gpu_hours=10)
    others = [_booking("a100", 2, at(1), at(6))]  # 10 GPU-hours this week
    violation = refusal(policy, _booking("a100", "0.5", at(20), at(23)), others, at(9))
    assert (violation.rule, violation.message) == (
        "budget_gpu_hours",
        ("Your GPU-hour budget for this week is used up: 10.0 of 10 GPU-hours booked, "
        "1.5 needed; it refills on Monday 2026-11-23 00:00 UTC."),
    )
    # the same booking a day later falls into next week's fresh budget
    check_booking(policy, _booking("a100", "0.5", at(24 + 20), at(24 + 23)), others, at(9))


def test_budget_of_a_later_month_is_named_by_its_month(at):
    policy = Policy(budget_gpu_hours=4, budget_period="month")
    december = at(24 * 10)  # 2026-12-02 00:00
    others = [_booking("a100", 1, december, december + timedelta(hours=3))]
    request = _booking("a100", "0.5", december + timedelta(hours=5), december + timedelta(hours=8))
    violation = refusal(policy, request, others, at(9))
    assert violation.message == (
        "Your GPU-hour budget for December 2026 is too small for this booking: "
        "3.0 of 4 GPU-hours booked, 1.5 needed; it refills on Friday 2027-01-01 00:00 UTC."
    )


def test_a_booking_larger_than_the_whole_budget_says_so(at):
    violation = refusal(Policy(budget_gpu_hours=10), _booking("a100", 4, at(10), at(13)), [], at(9))
    assert violation.message == (
        "This booking needs 12.0 GPU-hours, more than your whole budget of 10 GPU-hours per week."
    )


def test_a_booking_cut_short_is_charged_to_its_new_end(at):
    policy = Policy(budget_gpu_hours=10)
    long_one = _booking("a100", 2, at(1), at(6), id=1)
    cut = cancel_outcome(long_one, at(3, 15))
    assert cut.end == at(3, 15)
    assert budget_used(policy, [cut], at(9)) == Fraction(9, 2)
    check_booking(policy, _booking("a100", 1, at(12), at(17)), [cut], at(9))


# ---------------------------------------------------------------- changing the end


def test_an_extension_is_checked_against_the_new_shape(at):
    policy = Policy(max_minutes=300, budget_gpu_hours=10, cooldown_minutes=30, max_bookings=1)
    booking = _booking("a100", 2, at(8), at(10), id=7)
    earlier = _booking("a100", 1, at(-100), at(-98), id=6)  # Tuesday, 2 GPU-hours
    later = _booking("a100", 1, at(14, 30), at(15), id=8)
    # the booking itself is skipped, whoever forgets to drop it; the count limit is not re-run
    others = [earlier, booking, later]
    check_end_change(policy, booking.with_changes(end=at(11)), others, at(9))
    with pytest.raises(PolicyViolation) as refused:
        check_end_change(policy, booking.with_changes(end=at(12)), others, at(9))
    assert refused.value.message == (
        "Your GPU-hour budget for this week is too small for this booking: 2.5 of 10 "
        "GPU-hours booked, 8.0 needed; it refills on Monday 2026-11-23 00:00 UTC."
    )
    lighter = booking.with_changes(amount=Fraction(1, 2))
    with pytest.raises(PolicyViolation) as refused:
        check_end_change(policy, lighter.with_changes(end=at(14, 15)), others, at(9))
    assert refused.value.rule == "max_minutes"
    soon_after = _booking("a100", 1, at(12, 30), at(13), id=9)
    with pytest.raises(PolicyViolation) as refused:
        check_end_change(policy, lighter.with_changes(end=at(12, 15)), [soon_after], at(9))
    assert refused.value.message == (
        "Your bookings in pool a100 need a break of at least 30 minutes between them; "
        "this one ends 15 minutes before your booking that starts 2026-11-22 12:30 UTC."
    )


# ---------------------------------------------------------------- cancelling


def test_cancelling_an_upcoming_booking_cancels_it(at):
    upcoming = _booking("a100", 1, at(10), at(12), id=3)
    assert cancel_outcome(upcoming, at(9)) == upcoming.with_changes(status="cancelled")


def test_ending_an_active_booking_ends_it_now(at):
    active = _booking("a100", 1, at(8), at(12), id=3)
    ended = cancel_outcome(active, at(9, 1))
    assert ended == active.with_changes(end=at(9, 1), release_reason="ended")
    assert ended.state(at(9, 1)) is BookingState.ENDED


def test_cancelling_at_the_first_instant_cancels_outright(at):
    starting = _booking("a100", 1, at(9), at(12), id=3)
    assert cancel_outcome(starting, at(9)) == starting.with_changes(status="cancelled")


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"id": 3}, "Booking 3 already ended at 2026-11-22 08:00 UTC; there is nothing to cancel."),
        ({"id": 3, "status": "cancelled"}, "Booking 3 is already cancelled."),
        ({}, "This booking already ended at 2026-11-22 08:00 UTC; there is nothing to cancel."),
    ],
)
def test_cancelling_twice_or_too_late_is_a_conflict(at, changes, message):
    past = _booking("a100", 1, at(7), at(8), **changes)
    with pytest.raises(Conflict) as refused:
        cancel_outcome(past, at(9))
    assert (refused.value.message, refused.value.status) == (message, 409)
