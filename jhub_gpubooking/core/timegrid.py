"""UTC times and the booking slot grid.

Bookings start and end on a grid (default 15 minutes) so the timeline stays readable and
packing does not fragment into slivers. All times are timezone-aware UTC inside the package;
the browser shows them in its own zone.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from .errors import InvalidRequest

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: Times the service accepts: [EARLIEST_TIME, LATEST_TIME). Outside, grid and duration arithmetic
#: (a day after 9999-12-31, a pod deadline in seconds) would overflow, and no lab books there.
EARLIEST_TIME = datetime(2000, 1, 1, tzinfo=timezone.utc)
LATEST_TIME = datetime(2200, 1, 1, tzinfo=timezone.utc)


def as_utc(when: datetime) -> datetime:
    """Return ``when`` in UTC; naive datetimes are refused (their zone is unknown)."""
    if when.tzinfo is None or when.tzinfo.utcoffset(when) is None:
        raise InvalidRequest("Times must carry a time zone, e.g. 2026-11-22T14:00:00Z.")
    return when.astimezone(timezone.utc)


def parse_time(text: str, field: str = "time") -> datetime:
    """Parse an ISO 8601 time with a zone (``Z`` or an offset) into UTC."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest(f"'{field}' must be an ISO 8601 time such as 2026-11-22T14:00:00Z.")
    raw = text.strip()
    if raw.endswith(("z", "Z")):
        raw = raw[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidRequest(
            f"'{field}' is not a valid ISO 8601 time: {text!r} "
            "(expected e.g. 2026-11-22T14:00:00Z)."
        ) from None
    if parsed.tzinfo is None:
        raise InvalidRequest(
            f"'{field}' must include a time zone (Z or an offset such as +01:00): {text!r}."
        )
    try:
        parsed = parsed.astimezone(timezone.utc)
    except OverflowError:  # e.g. 0001-01-01T00:00+01:00 is before year 1 in UTC
        parsed = None
    if parsed is None or not EARLIEST_TIME <= parsed < LATEST_TIME:
        raise InvalidRequest(
            f"'{field}' must be a time in the years {EARLIEST_TIME.year} to "
            f"{LATEST_TIME.year - 1} (UTC), not {text!r}."
        )
    return parsed


def clock_text(when: datetime) -> str:
    """A time as refusals and notices write it: ``2030-01-07 10:00 UTC`` (the reservation page
    shows such times in the browser's zone)."""
    return f"{as_utc(when):%Y-%m-%d %H:%M} UTC"


def span_text(start: datetime, end: datetime) -> str:
    """An interval as refusals write it: ``2030-01-07 10:00 to 11:00 UTC``, the end's date
    repeated only when it differs."""
    start, end = as_utc(start), as_utc(end)
    end_text = f"{end:%H:%M}" if end.date() == start.date() else f"{end:%Y-%m-%d %H:%M}"
    return f"{start:%Y-%m-%d %H:%M} to {end_text} UTC"


def format_time(when: datetime | None) -> str | None:
    """ISO 8601 in UTC with a trailing ``Z`` (seconds precision)."""
    if when is None:
        return None
    return as_utc(when).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def _slot(slot_minutes: int) -> timedelta:
    if slot_minutes <= 0:
        raise ValueError("slot_minutes must be positive")
    return timedelta(minutes=slot_minutes)


def floor_to_grid(when: datetime, slot_minutes: int) -> datetime:
    """The grid point at or before ``when``."""
    slot = _slot(slot_minutes)
    when = as_utc(when)
    return EPOCH + ((when - EPOCH) // slot) * slot


def ceil_to_grid(when: datetime, slot_minutes: int) -> datetime:
    """The grid point at or after ``when``."""
    floor = floor_to_grid(when, slot_minutes)
    return floor if floor == as_utc(when) else floor + _slot(slot_minutes)


def is_on_grid(when: datetime, slot_minutes: int) -> bool:
    return floor_to_grid(when, slot_minutes) == as_utc(when)
