"""Shared fixtures of the core tests: a fixed UTC day and a booking factory.

Session-scoped so hypothesis tests can use them too (they hold no state).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction

import pytest

from jhub_gpubooking.core.model import Booking, Placement

#: Sunday 2026-11-22 00:00 UTC: the day the examples of the project issue use.
DAY = datetime(2026, 11, 22, tzinfo=timezone.utc)


@pytest.fixture(scope="session")
def at():
    """``at(14)`` is 2026-11-22 14:00 UTC; ``at(14, 30)`` is 14:30; hours may exceed 24."""

    def moment(hours: float, minutes: int = 0) -> datetime:
        return DAY + timedelta(hours=hours, minutes=minutes)

    return moment


@pytest.fixture(scope="session")
def booking(at):
    """Build a placed booking from hours on the fixed day: ``booking(14, 15, "0.5", "a", 0)``."""

    def make(
        start: float,
        end: float,
        amount: str | int = 1,
        node: str | None = None,
        gpus: int | tuple[int, ...] = 0,
        slices: int | None = None,
        pool: str = "a100",
        user: str = "alice",
        **changes,
    ) -> Booking:
        gpus = (gpus,) if isinstance(gpus, int) else tuple(gpus)
        placement = None
        if node is not None:
            placement = Placement(node, gpus, slices if slices is not None else 1)
        return Booking(
            user=user,
            pool=pool,
            amount=Fraction(amount),
            start=at(start),
            end=at(end),
            placement=placement,
            **changes,
        )

    return make
