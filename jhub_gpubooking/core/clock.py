"""The one place booking logic gets the current time from.

Production code uses :class:`SystemClock`; tests and simulations pass a :class:`ManualClock`
so hours of bookings can be replayed in seconds.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone


class Clock:
    """Source of the current time (always timezone-aware UTC)."""

    def now(self) -> datetime:
        raise NotImplementedError


class SystemClock(Clock):
    """The real wall clock."""

    def now(self) -> datetime:
        return datetime.now(timezone.utc)


class ManualClock(Clock):
    """A clock that only moves when told to (tests, simulations)."""

    def __init__(self, start: datetime):
        if start.tzinfo is None:
            raise ValueError("ManualClock needs a timezone-aware start time")
        self._now = start.astimezone(timezone.utc)

    def now(self) -> datetime:
        return self._now

    def advance(self, delta: timedelta) -> datetime:
        self._now += delta
        return self._now

    def set(self, when: datetime) -> datetime:
        if when.tzinfo is None:
            raise ValueError("ManualClock needs timezone-aware times")
        self._now = when.astimezone(timezone.utc)
        return self._now
