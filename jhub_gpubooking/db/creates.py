"""Creating bookings: one, or several that arrived together, in one write transaction.

A create is checked first without the database (:func:`prepare`: the grid, the amount, the
note, the locks its rules need), then placed in a unit of work (:func:`create_all`). Creates
that queued while others were in the database are placed together (the service's
``CreateQueue``): one transaction, so one ``BEGIN IMMEDIATE``, one commit and one executor
hop for all of them, each create under a savepoint of its own, so a refused one undoes only its
own changes and the others still commit. Measured with ``benchmarks.create_cost`` (eight per
transaction against one each): about a third of a create's database CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from ..core.errors import BookingError, NoCapacity
from ..core.model import Booking, checked_text, parse_amount
from ..core.next_free import naming_next_free
from ..core.timegrid import as_utc
from .next_free import earliest_free

if TYPE_CHECKING:
    from .store import BookingStore
    from .unit_of_work import UnitOfWork

#: ``make_room(work, request, now)``: frees capacity for ``request`` in ``work`` when its pool
#: is full (True when it freed some); see :meth:`.store.BookingStore.create`.
MakeRoom = Callable[["UnitOfWork", Booking, datetime], bool]


@dataclass(frozen=True)
class NewBooking:
    """A create that passed the checks made without the database (:func:`prepare`)."""

    request: Booking
    #: the pools its unit of work must lock (``BookingStore.pools_for_rules``)
    locks: tuple[str, ...]
    is_admin: bool
    actor: str
    now: datetime
    make_room: MakeRoom | None = None


def prepare(store: BookingStore, user: str, pool: str, gpus: Any, start: datetime,
            end: datetime, note: str = "", groups: Any = (), is_admin: bool = False,
            actor: str | None = None, make_room: MakeRoom | None = None) -> NewBooking:
    """The create of ``gpus`` of ``pool`` for [start, end), or the refusal (400, 404) that
    needs no database: an unknown pool, an amount the pool cannot hold, times off the grid or
    in the past, a note too long."""
    pool_spec = store.pool(pool)
    amount = gpus if isinstance(gpus, Fraction) else parse_amount(gpus)
    start, end, now = as_utc(start), as_utc(end), store.now()
    store.check_interval(start, end, now)
    pool_spec.amount_to_slices(amount)
    checked_text(note, "note")
    request = Booking(user=user, pool=pool, amount=amount, start=start, end=end, note=note,
                      groups=tuple(sorted(groups)))
    return NewBooking(request, tuple(store.pools_for_rules(pool, groups, is_admin)), is_admin,
                      actor or user, now, make_room)


def create_all(store: BookingStore, creates: Sequence[NewBooking]) -> list[Booking | Exception]:
    """Place ``creates`` in one unit of work, in order. Each outcome is the booking as stored,
    the refusal a user would see (a :class:`BookingError`; one for capacity names the next free
    slot), or the unexpected error that create met (its own changes rolled back).

    Raises when the transaction as a whole fails (the database is unavailable, the commit
    fails): then none of them was created. Several creates each get a savepoint, so one's
    refusal or error rolls back its own changes only; a single create runs as it always did,
    without one.
    """
    outcomes: list[Booking | Exception]
    locks = sorted({pool for create in creates for pool in create.locks})
    try:
        with store.unit_of_work(locks) as work:
            if len(creates) == 1:
                outcomes = [_place(work, creates[0])]
            else:
                outcomes = [_place_on_its_own(work, create) for create in creates]
    except BookingError as refused:  # the one create's refusal; its transaction rolled back
        outcomes = [refused]
    return [_with_next_free(store, create, outcome) for create, outcome in zip(creates, outcomes)]


def created(outcome: Booking | Exception) -> Booking:
    """The booking of a :func:`create_all` outcome; its refusal or error raised."""
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def _with_next_free(store: BookingStore, create: NewBooking,
                    outcome: Booking | Exception) -> Booking | Exception:
    if not isinstance(outcome, NoCapacity):
        return outcome
    # searched after the transaction, so the pool's lock is not held for the search
    request = create.request
    found = earliest_free(store, store.pool(request.pool), request.amount,
                          request.end - request.start, request.start, request.groups,
                          create.is_admin)
    return naming_next_free(outcome, found)


def _place(work: UnitOfWork, create: NewBooking) -> Booking:
    request = create.request
    groups = request.groups
    try:
        return work.place(request, groups, create.is_admin, create.now, create.actor)
    except NoCapacity:
        if create.make_room is None or not create.make_room(work, request, create.now):
            raise
        return work.place(request, groups, create.is_admin, create.now, create.actor)


def _place_on_its_own(work: UnitOfWork, create: NewBooking) -> Booking | Exception:
    savepoint = work.rows().begin_nested()
    try:
        placed = _place(work, create)
        work.rows()  # its ORM changes go out inside its savepoint
    except Exception as error:  # noqa: BLE001 (this create's outcome, the others go on)
        # the session may hold rows as the rolled-back changes left them
        work.forget_session()
        savepoint.rollback()
        return error
    savepoint.commit()
    return placed
