"""Recurring bookings: the occurrences of a daily or weekly series (pure, via dateutil.rrule).

Series repeat in a time zone (UTC unless the request names one, as the page does with the
browser's zone): a lab "every Tuesday 14:00-16:00" in Europe/Berlin stays at 14:00 Berlin time
across daylight-saving changes. Occurrences are returned in UTC, like every stored time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from itertools import islice
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dateutil.rrule import DAILY, WEEKLY, rrule

from .errors import InvalidRequest
from .timegrid import as_utc

REPEATS = {"daily": (DAILY, timedelta(days=1)), "weekly": (WEEKLY, timedelta(weeks=1))}


@dataclass(frozen=True)
class Occurrence:
    start: datetime
    end: datetime


def occurrences(
    start: datetime,
    end: datetime,
    repeat: str,
    *,
    until: datetime | None = None,
    count: int | None = None,
    max_occurrences: int,
    time_zone: str = "UTC",
) -> list[Occurrence]:
    """The occurrences of ``[start, end)`` repeated ``daily``/``weekly``, first one included.

    Exactly one of ``until`` (last start, inclusive) and ``count`` bounds the series; more
    than ``max_occurrences`` is refused rather than cut short, so nobody gets half a term.
    """
    start, end = as_utc(start), as_utc(end)
    zone = _zone(time_zone)
    if repeat not in REPEATS:
        raise InvalidRequest(f"'repeat' must be one of: {', '.join(REPEATS)}.")
    frequency, step = REPEATS[repeat]
    if (until is None) == (count is None):
        raise InvalidRequest("A series needs exactly one of 'until' or 'count'.")
    if end - start > step:
        raise InvalidRequest(
            f"A {repeat} series cannot have occurrences longer than {_step_name(repeat)}; "
            "they would overlap each other."
        )
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise InvalidRequest("'count' must be a whole number of occurrences, at least 1.")
    if until is not None and as_utc(until) < start:
        raise InvalidRequest("'until' must not be before the first occurrence's start.")
    # rrule steps naive wall-clock times: repeat in the series' zone, then convert to UTC
    local_start = start.astimezone(zone).replace(tzinfo=None)
    if count is not None:
        rule = rrule(frequency, dtstart=local_start, count=count)
    else:
        rule = rrule(frequency, dtstart=local_start,
                     until=as_utc(until).astimezone(zone).replace(tzinfo=None))
    # one more than allowed is enough to refuse, however far away 'until' is
    starts = [
        m.replace(tzinfo=zone).astimezone(timezone.utc)
        for m in islice(rule, max_occurrences + 1)
    ]
    if len(starts) > max_occurrences or (count is not None and count > max_occurrences):
        raise InvalidRequest(
            f"A series can have at most {max_occurrences} occurrences; shorten it with "
            "'until' or 'count'."
        )
    length = end - start
    return [Occurrence(moment, moment + length) for moment in starts]


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise InvalidRequest(
            f"'time_zone' must be a time zone name such as Europe/Berlin, not {name!r}."
        ) from None


def _step_name(repeat: str) -> str:
    return "a day" if repeat == "daily" else "a week"
