"""Recurring bookings: the occurrences of a daily or weekly series (pure, via dateutil.rrule).

Series repeat in UTC, like every stored time: a lab "every Tuesday 14:00-16:00 UTC" keeps
that UTC time across daylight-saving changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from datetime import datetime, timedelta

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
) -> list[Occurrence]:
    """The occurrences of ``[start, end)`` repeated ``daily``/``weekly``, first one included.

    Exactly one of ``until`` (last start, inclusive) and ``count`` bounds the series; more
    than ``max_occurrences`` is refused rather than cut short, so nobody gets half a term.
    """
    start, end = as_utc(start), as_utc(end)
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
    # rrule works on naive times; the series is in UTC, so strip and re-attach the zone
    if count is not None:
        rule = rrule(frequency, dtstart=start.replace(tzinfo=None), count=count)
    else:
        rule = rrule(frequency, dtstart=start.replace(tzinfo=None),
                     until=as_utc(until).replace(tzinfo=None))
    # one more than allowed is enough to refuse, however far away 'until' is
    starts = [m.replace(tzinfo=start.tzinfo) for m in islice(rule, max_occurrences + 1)]
    if len(starts) > max_occurrences or (count is not None and count > max_occurrences):
        raise InvalidRequest(
            f"A series can have at most {max_occurrences} occurrences; shorten it with "
            "'until' or 'count'."
        )
    length = end - start
    return [Occurrence(moment, moment + length) for moment in starts]


def _step_name(repeat: str) -> str:
    return "a day" if repeat == "daily" else "a week"
