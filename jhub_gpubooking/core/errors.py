"""Refusals the booking core can give, each a sentence a person understands.

Every error carries the HTTP status the service answers with, so handlers never guess.
"""

from __future__ import annotations

from datetime import datetime
from fractions import Fraction


class BookingError(Exception):
    """Base class: ``message`` is shown to users as-is."""

    status = 400

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidRequest(BookingError):
    """The request itself is malformed (bad time, off-grid, amount not bookable...)."""

    status = 400


class PolicyViolation(BookingError):
    """A policy or budget rule refuses the request; ``rule`` names it (e.g. ``max_minutes``)."""

    status = 403

    def __init__(self, rule: str, message: str):
        super().__init__(message)
        self.rule = rule


class NotFound(BookingError):
    status = 404


class Conflict(BookingError):
    """The request clashes with current state (e.g. a booking already used by another server)."""

    status = 409


class KeyReused(BookingError):
    """A create sent with the Idempotency-Key of an earlier, different one (a client's bug:
    a key names one create, sent again only as it was)."""

    status = 422


class NoCapacity(Conflict):
    """Nothing can be placed: names the first full interval and what is still bookable there,
    and, when known, ``next_free``: the earliest (start, end) of the same length that fits.

    ``search_ran_out`` is True when the exact re-placement of upcoming bookings ran out of its
    time without an answer (:func:`..core.replacement.place_or_move`): a longer search, away
    from the pool's lock, may still let the request in."""

    def __init__(
        self,
        message: str,
        full_start: datetime,
        full_end: datetime,
        largest_bookable: Fraction,
        next_free: tuple[datetime, datetime] | None = None,
        search_ran_out: bool = False,
    ):
        super().__init__(message)
        self.full_start = full_start
        self.full_end = full_end
        self.largest_bookable = largest_bookable
        self.next_free = next_free
        self.search_ran_out = search_ran_out
