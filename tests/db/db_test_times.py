"""The fixed "now" of the database tests (a plain module: conftest modules are not importable
reliably when several test folders each have one)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

#: Monday 2030-01-07 10:05 UTC: five minutes into the 10:00 slot.
NOW = datetime(2030, 1, 7, 10, 5, tzinfo=timezone.utc)


def at(hour: int, minute: int = 0, days: int = 0) -> datetime:
    """A time on the test day (NOW is 10:05)."""
    return NOW.replace(hour=hour, minute=minute) + timedelta(days=days)
