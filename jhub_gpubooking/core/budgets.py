"""GPU-hour budgets of users and groups, charged on booked or on used time (pure).

A budget is ``gpu_hours`` per ``period`` (week from Monday 00:00 UTC, month from the 1st).
Like the per-user budget of :mod:`.policy`, a booking is charged to the period it *starts* in.
A group budget is shared by every member: it is charged each booking whose booker was in the
group when booking.

Charge modes:

- ``"booked"``: a booking costs ``GPUs x booked hours`` (to its current end, so time released
  early or cancelled is refunded).
- ``"used"``: a booking costs the GPU-hours a server actually held it so far, plus the part of
  it still to come (which may yet be used). A new booking therefore needs
  ``used so far + still booked ahead + its own booked hours <= budget``: nobody can book the
  same hours twice in advance, and booked time nobody used is refunded as soon as it passes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any

from .accounting import Interval, booking_totals
from .errors import PolicyViolation
from .model import Booking
from .policy import PERIODS, gpu_hours, period_bounds
from .timegrid import as_utc, clock_text, format_time

CHARGE_MODES = ("booked", "used")
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


@dataclass(frozen=True)
class Budget:
    """A limit of ``gpu_hours`` per ``period`` for one user or one group."""

    gpu_hours: Fraction
    period: str = "week"

    @classmethod
    def from_config(cls, owner: str, config: Mapping[str, Any]) -> Budget:
        """``{"gpu_hours": 100, "period": "week"}``; refuses unknown keys and bad values."""
        unknown = set(config) - {"gpu_hours", "period"}
        if unknown:
            raise ValueError(
                f"Unknown budget keys for {owner}: {', '.join(sorted(unknown))}; "
                "known keys: gpu_hours, period."
            )
        hours = config.get("gpu_hours")
        if isinstance(hours, bool) or not isinstance(hours, (int, float, Fraction)) or hours < 0:
            raise ValueError(f"The budget of {owner} needs gpu_hours >= 0, not {hours!r}.")
        period = config.get("period", "week")
        if period not in PERIODS:
            raise ValueError(
                f"The budget period of {owner} must be one of {', '.join(PERIODS)}, "
                f"not {period!r}."
            )
        exact = Fraction(str(hours)) if isinstance(hours, float) else Fraction(hours)
        return cls(gpu_hours=exact, period=period)


def parse_group_budgets(config: Mapping[str, Mapping[str, Any]]) -> dict[str, Budget]:
    """``{"course-x": {"gpu_hours": 100, "period": "week"}}`` → ``{"course-x": Budget}``."""
    return {group: Budget.from_config(f"group {group}", entry) for group, entry in config.items()}


def charge(
    booking: Booking, usage: Iterable[Interval], mode: str, now: datetime
) -> Fraction:
    """What ``booking`` costs its budgets as of ``now`` in charge ``mode``."""
    if not booking.holds_capacity:
        return Fraction(0)
    if mode == "booked":
        return gpu_hours(booking)
    if mode == "used":
        totals = booking_totals(booking, usage, booking.start, booking.end, now)
        return totals.used + totals.scheduled
    raise ValueError(f"Unknown budget charge mode {mode!r}; use one of {', '.join(CHARGE_MODES)}.")


@dataclass(frozen=True)
class BudgetStatus:
    """One budget in one period: who owns it, how much is charged, when it refills."""

    scope: str  # "user" or "group"
    owner: str
    budget: Budget
    charged: Fraction
    period_start: datetime
    refill: datetime

    @property
    def remaining(self) -> Fraction:
        return max(self.budget.gpu_hours - self.charged, Fraction(0))

    def to_json(self) -> dict:
        return {
            "scope": self.scope,
            "name": self.owner,
            "period": self.budget.period,
            "gpu_hours": float(self.budget.gpu_hours),
            "charged_gpu_hours": round(float(self.charged), 4),
            "remaining_gpu_hours": round(float(self.remaining), 4),
            "period_start": format_time(self.period_start),
            "refill": format_time(self.refill),
        }


def budget_status(
    scope: str,
    owner: str,
    budget: Budget,
    charged_bookings: Iterable[tuple[Booking, list[Interval]]],
    mode: str,
    when: datetime,
    now: datetime,
) -> BudgetStatus:
    """The status of ``budget`` for the period containing ``when``.

    ``charged_bookings`` are the owner's bookings with their usage intervals; those starting
    outside the period are skipped here, so callers may pass a wider set.
    """
    start, refill = period_bounds(budget.period, when)
    charged = sum(
        (
            charge(booking, usage, mode, now)
            for booking, usage in charged_bookings
            if start <= as_utc(booking.start) < refill
        ),
        Fraction(0),
    )
    return BudgetStatus(scope, owner, budget, charged, start, refill)


def check_budget(status: BudgetStatus, needed: Fraction, now: datetime) -> None:
    """Raise :class:`PolicyViolation` (403) when ``needed`` GPU-hours do not fit ``status``."""
    if status.charged + needed <= status.budget.gpu_hours:
        return
    who = "You have" if status.scope == "user" else f"The group {status.owner} has"
    if status.period_start <= as_utc(now) < status.refill:
        which = f"this {status.budget.period}"
    else:
        which = f"in the {status.budget.period} starting {_day(status.period_start)}"
    raise PolicyViolation(
        "group_budgets" if status.scope == "group" else "budget_gpu_hours",
        f"{who} {_hours(status.remaining)} of {_hours(status.budget.gpu_hours)} GPU-hours left "
        f"{which}; this booking needs {_hours(needed)}. It refills on {_day(status.refill)}.",
    )


def _hours(value: Fraction) -> str:
    """'100', '2.5', '0.25': at most two decimals, no trailing zeros."""
    return f"{float(value):.2f}".rstrip("0").rstrip(".")


def _day(moment: datetime) -> str:
    moment = as_utc(moment)
    return f"{_WEEKDAYS[moment.weekday()]} {clock_text(moment)}"

