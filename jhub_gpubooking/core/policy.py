"""Booking rules per user, overridable per Hub group, and the pure outcome of a cancellation.

A :class:`Policy` holds limits (``None`` = no limit). The caller skips :func:`check_booking` for
admins. Every refusal is a :class:`PolicyViolation` whose ``rule`` is the config key it enforces
and whose message names the limit and the offending value.

The GPU-hour budget charges a booking ``amount x hours`` to the period (week from Monday
00:00 UTC, or month from the 1st 00:00 UTC) in which it *starts*; cancelled bookings cost
nothing and a booking cut short costs only up to its new end.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

from .errors import Conflict, PolicyViolation
from .model import Booking, BookingState, format_amount
from .timegrid import as_utc, clock_text, span_text

PERIODS = ("week", "month")
_PERIOD_DAYS = {"week": Fraction(7), "month": Fraction(36525, 1200)}  # a month on average
# spelled out rather than strftime('%A'/'%B'), which follow the process locale
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")
_MINUTE_KEYS = ("min_minutes", "max_minutes", "cooldown_minutes")

#: The service's ``default_policy`` unless the admin sets one: a booking lasts at most a week
#: and starts at most 90 days ahead, so nobody can take every GPU until the year 2199 by
#: accident (admins are exempt, as from every policy).
SAFE_DEFAULT_POLICY = {"max_minutes": 7 * 24 * 60, "max_days_ahead": 90}


@dataclass(frozen=True)
class Policy:
    """Limits on what a user may book; ``None`` means "no limit"."""

    min_minutes: int | None = None
    max_minutes: int | None = None
    max_days_ahead: int | float | None = None
    max_bookings: int | None = None
    cooldown_minutes: int | None = None
    max_gpus: Fraction | None = None
    allowed_pools: tuple[str, ...] | None = None
    budget_gpu_hours: Fraction | None = None
    budget_period: str = "week"

    def __post_init__(self) -> None:
        for key in (*_MINUTE_KEYS, "max_bookings"):
            value = getattr(self, key)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0
            ):
                raise ValueError(
                    f"Policy {key} must be a whole number >= 0 or None, not {value!r}."
                )
        if self.max_days_ahead is not None and (
            isinstance(self.max_days_ahead, Fraction) or not _is_number(self.max_days_ahead)
        ):
            raise ValueError(
                f"Policy max_days_ahead must be a number >= 0 or None, not {self.max_days_ahead!r}."
            )
        if self.max_gpus is not None:
            if not _is_number(self.max_gpus) or self.max_gpus == 0:
                raise ValueError(
                    f"Policy max_gpus must be a number > 0 or None, not {self.max_gpus!r}."
                )
            object.__setattr__(self, "max_gpus", _exact(self.max_gpus))
        if self.budget_gpu_hours is not None:
            if not _is_number(self.budget_gpu_hours):
                raise ValueError(
                    "Policy budget_gpu_hours must be a number >= 0 or None, "
                    f"not {self.budget_gpu_hours!r}."
                )
            object.__setattr__(self, "budget_gpu_hours", _exact(self.budget_gpu_hours))
        if self.budget_period not in PERIODS:
            raise ValueError(
                f"Policy budget_period must be one of {', '.join(PERIODS)}, "
                f"not {self.budget_period!r}."
            )
        if self.allowed_pools is not None:
            if isinstance(self.allowed_pools, str) or not all(
                isinstance(pool, str) for pool in self.allowed_pools
            ):
                raise ValueError("Policy allowed_pools must be a list of pool names or None.")
            object.__setattr__(self, "allowed_pools", tuple(self.allowed_pools))
        if None not in (self.min_minutes, self.max_minutes) and self.min_minutes > self.max_minutes:
            raise ValueError(
                f"Policy min_minutes ({self.min_minutes}) exceeds max_minutes ({self.max_minutes})."
            )

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Policy:
        """Build a policy from a config dict, refusing keys it does not know."""
        _refuse_unknown_keys(config)
        return cls(**dict(config))


def _is_number(value: Any) -> bool:
    """A finite number >= 0 (bools are not numbers here, though Python says so)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)):
        return False
    return math.isfinite(value) and value >= 0


def _exact(value: float | Fraction) -> Fraction:
    # floats from YAML/JSON become the decimal people wrote: 0.1 stays one tenth
    return Fraction(str(value)) if isinstance(value, float) else Fraction(value)


def _refuse_unknown_keys(config: Mapping[str, Any]) -> None:
    known = {f.name for f in dataclasses.fields(Policy)}
    unknown = set(config) - known
    if unknown:
        raise ValueError(
            f"Unknown policy keys: {', '.join(sorted(unknown))}; known keys: "
            f"{', '.join(sorted(known))}."
        )


# ---------------------------------------------------------------- group overrides


def effective_policy(
    default: Policy | Mapping[str, Any],
    group_policies: Mapping[str, Mapping[str, Any]],
    groups: Iterable[str],
) -> Policy:
    """The policy of a user in ``groups``.

    Each configured group's entry overrides keys of ``default``; a user in several such groups
    gets, per key, the most generous of those groups' values (no limit beats any limit).
    """
    base = default if isinstance(default, Policy) else Policy.from_config(default)
    candidates = []
    for group in sorted(set(groups)):
        overrides = group_policies.get(group)
        if overrides is not None:
            _refuse_unknown_keys(overrides)
            candidates.append(dataclasses.replace(base, **dict(overrides)))
    if not candidates:
        return base
    budget = max(candidates, key=_budget_per_day)
    pools = [p.allowed_pools for p in candidates]
    return Policy(
        min_minutes=_least([p.min_minutes for p in candidates]),
        max_minutes=_most([p.max_minutes for p in candidates]),
        max_days_ahead=_most([p.max_days_ahead for p in candidates]),
        max_bookings=_most([p.max_bookings for p in candidates]),
        cooldown_minutes=_least([p.cooldown_minutes for p in candidates]),
        max_gpus=_most([p.max_gpus for p in candidates]),
        allowed_pools=None if None in pools else tuple(sorted(set().union(*pools))),
        budget_gpu_hours=budget.budget_gpu_hours,
        budget_period=budget.budget_period,
    )


def _most(values: list[Any]) -> Any:
    return None if None in values else max(values)


def _least(values: list[Any]) -> Any:
    return None if None in values else min(values)


def _budget_per_day(policy: Policy) -> Fraction | float:
    """Budget and period go together: 10 h a week is more than 30 h a month."""
    if policy.budget_gpu_hours is None:
        return float("inf")
    return policy.budget_gpu_hours / _PERIOD_DAYS[policy.budget_period]


# ---------------------------------------------------------------- budget periods


def period_bounds(period: str, now: datetime) -> tuple[datetime, datetime]:
    """(start, refill) of the budget period containing ``now``, in UTC."""
    now = as_utc(now)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "week":
        start = midnight - timedelta(days=now.weekday())
        return start, start + timedelta(days=7)
    if period == "month":
        start = midnight.replace(day=1)
        if start.month == 12:
            return start, start.replace(year=start.year + 1, month=1)
        return start, start.replace(month=start.month + 1)
    raise ValueError(f"Unknown budget period {period!r}; use one of {', '.join(PERIODS)}.")


def gpu_hours(booking: Booking) -> Fraction:
    """What a booking costs: GPUs x booked hours (to its current end)."""
    seconds = max((booking.end - booking.start) // timedelta(seconds=1), 0)
    return Fraction(booking.amount) * Fraction(seconds, 3600)


def _charged(bookings: Iterable[Booking], start: datetime, end: datetime) -> Fraction:
    return sum(
        (gpu_hours(b) for b in bookings if b.holds_capacity and start <= as_utc(b.start) < end),
        Fraction(0),
    )


def budget_used(policy: Policy, bookings: Iterable[Booking], now: datetime) -> Fraction:
    """GPU-hours charged to the budget period containing ``now``."""
    start, refill = period_bounds(policy.budget_period, now)
    return _charged(bookings, start, refill)


# ---------------------------------------------------------------- checks


def check_booking(
    policy: Policy, request: Booking, others: list[Booking], now: datetime
) -> None:
    """Raise :class:`PolicyViolation` if ``request`` breaks a rule of ``policy``.

    ``others`` are the same user's other bookings (the request itself, if listed, is skipped).
    """
    others = _without(request, others)
    _check_pool(policy, request)
    _check_amount(policy, request)
    _check_length(policy, request)
    _check_days_ahead(policy, request, now)
    _check_count(policy, others, now)
    _check_cooldown(policy, request, others)
    _check_budget(policy, request, others, now)


def check_end_change(
    policy: Policy, changed: Booking, others: list[Booking], now: datetime
) -> None:
    """Re-check a booking whose end moved: its length, the gap to the user's next booking in
    the pool, and the budget against its new shape. ``changed`` carries the new end."""
    others = _without(changed, others)
    _check_length(policy, changed)
    _check_cooldown(policy, changed, others)
    _check_budget(policy, changed, others, now)


def _without(request: Booking, others: list[Booking]) -> list[Booking]:
    if request.id is None:
        return list(others)
    return [b for b in others if b.id != request.id]


def _check_pool(policy: Policy, request: Booking) -> None:
    allowed = policy.allowed_pools
    if allowed is None or request.pool in allowed:
        return
    if not allowed:
        message = f"You may not book pool {request.pool}; your groups may not book any pool."
    else:
        message = (
            f"You may not book pool {request.pool}; your groups may book: "
            f"{', '.join(allowed)}."
        )
    raise PolicyViolation("allowed_pools", message)


def _check_amount(policy: Policy, request: Booking) -> None:
    if policy.max_gpus is not None and request.amount > policy.max_gpus:
        raise PolicyViolation(
            "max_gpus",
            f"Bookings can be at most {_gpus(policy.max_gpus)}; "
            f"this one is {_gpus(request.amount)}.",
        )


def _check_length(policy: Policy, request: Booking) -> None:
    length = request.end - request.start
    if policy.min_minutes is not None and length < timedelta(minutes=policy.min_minutes):
        raise PolicyViolation(
            "min_minutes",
            f"Bookings must be at least {_duration(timedelta(minutes=policy.min_minutes))} "
            f"long; this one is {_duration(length)}.",
        )
    if policy.max_minutes is not None and length > timedelta(minutes=policy.max_minutes):
        raise PolicyViolation(
            "max_minutes",
            f"Bookings can be at most {_duration(timedelta(minutes=policy.max_minutes))} "
            f"long; this one is {_duration(length)}.",
        )


def _check_days_ahead(policy: Policy, request: Booking, now: datetime) -> None:
    if policy.max_days_ahead is None:
        return
    latest_start = as_utc(now) + timedelta(days=policy.max_days_ahead)
    if request.start > latest_start:
        raise PolicyViolation(
            "max_days_ahead",
            f"Bookings can start at most {float(policy.max_days_ahead):g} days ahead (until "
            f"{clock_text(latest_start)}); this one starts {clock_text(request.start)}.",
        )


def _check_count(policy: Policy, others: list[Booking], now: datetime) -> None:
    if policy.max_bookings is None:
        return
    current = sum(1 for b in others if b.not_over(now))
    if current >= policy.max_bookings:
        raise PolicyViolation(
            "max_bookings",
            f"You can have at most {policy.max_bookings} active or upcoming booking(s); "
            f"you already have {current}.",
        )


def _check_cooldown(policy: Policy, request: Booking, others: list[Booking]) -> None:
    """A gap of ``cooldown_minutes`` between the user's bookings in one pool, both ways, so
    booking the later slot first does not get around it."""
    if not policy.cooldown_minutes:
        return
    cooldown = timedelta(minutes=policy.cooldown_minutes)
    rule = (
        f"Your bookings in pool {request.pool} need a break of at least "
        f"{_duration(cooldown)} between them"
    )
    for other in others:
        if other.pool != request.pool or not other.holds_capacity:
            continue
        if other.overlaps(request.start, request.end):
            raise PolicyViolation(
                "cooldown_minutes",
                f"{rule}; this one overlaps your booking from "
                f"{span_text(other.start, other.end)}.",
            )
        if other.end <= request.start and request.start - other.end < cooldown:
            raise PolicyViolation(
                "cooldown_minutes",
                f"{rule}; this one starts {_duration(request.start - other.end)} after your "
                f"booking that ends {clock_text(other.end)}.",
            )
        if request.end <= other.start and other.start - request.end < cooldown:
            raise PolicyViolation(
                "cooldown_minutes",
                f"{rule}; this one ends {_duration(other.start - request.end)} before your "
                f"booking that starts {clock_text(other.start)}.",
            )


def _check_budget(policy: Policy, request: Booking, others: list[Booking], now: datetime) -> None:
    budget = policy.budget_gpu_hours
    if budget is None:
        return
    needed = gpu_hours(request)
    period = policy.budget_period
    if needed > budget:
        raise PolicyViolation(
            "budget_gpu_hours",
            f"This booking needs {_hours(needed)} GPU-hours, more than your whole budget of "
            f"{_hours(budget, whole=True)} GPU-hours per {period}.",
        )
    start, refill = period_bounds(period, request.start)
    used = _charged(others, start, refill)
    if used + needed <= budget:
        return
    if start == period_bounds(period, now)[0]:
        which = f"this {period}"
    elif period == "week":
        which = f"the week starting {_weekday_and_time(start)}"
    else:
        which = f"{_MONTHS[start.month - 1]} {start.year}"
    state = "is used up" if used >= budget else "is too small for this booking"
    refills = f"; it refills on {_weekday_and_time(refill)}" if refill > as_utc(now) else ""
    raise PolicyViolation(
        "budget_gpu_hours",
        f"Your GPU-hour budget for {which} {state}: {_hours(used)} of "
        f"{_hours(budget, whole=True)} GPU-hours booked, {_hours(needed)} needed{refills}.",
    )


# ---------------------------------------------------------------- cancelling


#: ``release_reason`` of an active booking its owner or an administrator ended early.
ENDED_EARLY = "ended"


def cancel_outcome(booking: Booking, now: datetime) -> Booking:
    """The booking after its user cancels it (or ends it) at ``now``.

    Upcoming bookings are cancelled outright. Active ones end **now** ("End now"): the time
    already used stays booked (and charged), the rest is free at once; one that began just now
    is cancelled.
    """
    label = f"Booking {booking.id}" if booking.id is not None else "This booking"
    state = booking.state(now)
    if state is BookingState.CANCELLED:
        raise Conflict(f"{label} is already cancelled.")
    if state is BookingState.ENDED:
        raise Conflict(
            f"{label} already ended at {clock_text(booking.end)}; there is nothing to cancel."
        )
    if state is BookingState.UPCOMING or now <= booking.start:
        return booking.with_changes(status="cancelled")
    return booking.with_changes(end=now, release_reason=ENDED_EARLY)


# ---------------------------------------------------------------- wording


def _gpus(amount: Fraction) -> str:
    return f"{format_amount(amount)} GPU{'s' if amount > 1 else ''}"


def _duration(length: timedelta) -> str:
    """'6 hours', '1 hour 30 minutes', '2 days', '15 minutes'."""
    minutes = max(length // timedelta(minutes=1), 0)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    parts = [
        f"{count} {unit}{'s' if count != 1 else ''}"
        for count, unit in ((days, "day"), (hours, "hour"), (minutes, "minute"))
        if count
    ]
    return " ".join(parts) or "0 minutes"


def _hours(value: Fraction, whole: bool = False) -> str:
    """GPU-hours as people read them: '10.0', '1.5', '0.25' ('10' for limits when whole)."""
    if whole and Fraction(value).denominator == 1:
        return str(int(value))
    text = f"{float(value):.2f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def _weekday_and_time(moment: datetime) -> str:
    return f"{_WEEKDAYS[moment.weekday()]} {clock_text(moment)}"
