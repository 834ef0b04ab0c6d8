"""Creating bookings: one, or several that arrived together, in one write transaction.

A create is checked first without the database (:func:`prepare`: the grid, the amount, the
note, the locks its rules need), then placed in a unit of work (:func:`create_all`). Creates
that queued while others were in the database are placed together (the service's
``CreateQueue``): one transaction, so one ``BEGIN IMMEDIATE`` or one set of pool locks, one
commit and one executor hop for all of them, each refused or failing on its own. A create needs
no savepoint for that: ``UnitOfWork.place`` refuses before it writes anything. Only freeing
room (preempting grants) writes before the booking may still be refused, so that part runs
under a savepoint; and an unexpected error rolls the whole transaction back and the creates are
written again, each under a savepoint, so the error stays with the create that met it.
Measured with ``benchmarks.create_cost``: eight per transaction cost a third less database CPU
per create than one each; a savepoint per create costs PostgreSQL two round trips.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from ..core import replacement
from ..core.errors import BookingError, InvalidRequest, NoCapacity
from ..core.model import Booking, Replacement, checked_text, parse_amount
from ..core.next_free import naming_next_free
from ..core.timegrid import as_utc
from .next_free import earliest_free
from .request_keys import (
    checked_request_key,
    made_with_key,
    refusal_unless_made,
    tried_again_if_raced,
)
from .unit_of_work import move_reach

if TYPE_CHECKING:
    from .store import BookingStore
    from .unit_of_work import UnitOfWork

log = logging.getLogger(__name__)

#: ``make_room(work, request, now)``: frees capacity for ``request`` in ``work`` when its pool
#: is full and returns the bookings it changed to do so (none: nothing freed); see
#: :meth:`.store.BookingStore.create`.
MakeRoom = Callable[["UnitOfWork", Booking, datetime], list[Booking]]


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
    #: what ``make_room`` freed for the booking as created (empty until then, or when refused)
    freed: list[Booking] = field(default_factory=list)
    #: a re-placement found without the pool's lock (:func:`search_longer`), written if it
    #: still holds
    proposal: Replacement | None = None
    #: the create's Idempotency-Key: sent again, it answers the booking it made (see
    #: :mod:`.request_keys`)
    request_key: str | None = None
    #: the refusal of a create with a key whose start has passed, unless it made a booking
    refused_unless_made: InvalidRequest | None = None


def prepare(store: BookingStore, user: str, pool: str, gpus: Any, start: datetime,
            end: datetime, note: str = "", groups: Any = (), is_admin: bool = False,
            actor: str | None = None, make_room: MakeRoom | None = None,
            request_key: str | None = None) -> NewBooking:
    """The create of ``gpus`` of ``pool`` for [start, end), or the refusal (400, 404) that
    needs no database: an unknown pool, an amount the pool cannot hold, times off the grid or
    in the past, a note too long, a malformed Idempotency-Key."""
    pool_spec = store.pool(pool)
    amount = gpus if isinstance(gpus, Fraction) else parse_amount(gpus)
    start, end, now = as_utc(start), as_utc(end), store.now()
    request_key = checked_request_key(request_key)
    started = refusal_unless_made(request_key, lambda: store.check_interval(start, end, now))
    pool_spec.amount_to_slices(amount)
    checked_text(note, "note")
    request = Booking(user=user, pool=pool, amount=amount, start=start, end=end, note=note,
                      groups=tuple(sorted(groups)))
    return NewBooking(request, tuple(store.pools_for_rules(pool, groups, is_admin)), is_admin,
                      actor or user, now, make_room, request_key=request_key,
                      refused_unless_made=started)


def create_all(store: BookingStore, creates: Sequence[NewBooking],
               seconds: float | None = None) -> list[Booking | Exception]:
    """Place ``creates`` in one unit of work, in order. Each outcome is the booking as stored,
    the refusal a user would see (a :class:`BookingError`; one for capacity names the next free
    slot), or the unexpected error that create met (its own changes rolled back).

    With ``seconds``, the transaction takes no further create once it has run that long (a
    create that has to move bookings may take up to a second): the outcomes are then those of
    the first creates only, at least one, and the rest were not tried.

    Raises when the transaction as a whole fails (the database is unavailable, the commit
    fails): then none of them was created. A single create runs as it always did.
    """
    locks = sorted({pool for create in creates for pool in create.locks})
    if len(creates) == 1:
        try:
            outcomes = tried_again_if_raced(
                creates[0].request_key, lambda: _write(store, locks, creates, _place, seconds))
        except BookingError as refused:  # its transaction rolled back
            outcomes = [refused]
    else:
        try:
            outcomes = _write(store, locks, creates, _place_or_refuse, seconds)
        except _MetAnError:
            # rolled back, nothing was created: again, each under a savepoint of its own (a
            # keyed copy that raced one in another pool then finds it, as tried_again_if_raced)
            outcomes = _write(store, locks, creates, _place_on_its_own, seconds)
    return [_with_next_free(store, create, outcome) for create, outcome in zip(creates, outcomes)]


class _MetAnError(Exception):
    """A create of several met an unexpected error outside a savepoint."""


def _write(store: BookingStore, locks: list[str], creates: Sequence[NewBooking],
           place: Callable[[UnitOfWork, NewBooking], Booking | Exception],
           seconds: float | None) -> list:
    began = time.monotonic()
    outcomes = []
    with store.unit_of_work(locks) as work:
        for create in creates:
            if outcomes and seconds is not None and time.monotonic() - began > seconds:
                break
            outcomes.append(place(work, create))
    return outcomes


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
    """The create placed, or its refusal raised; ``make_room`` tried when the pool is full."""
    create.freed.clear()
    try:
        return _place_once(work, create)
    except NoCapacity as refused:
        if create.make_room is None:
            raise
        return _make_room_and_place(work, create, refused)


def _place_once(work: UnitOfWork, create: NewBooking) -> Booking:
    key = create.request_key
    if key is not None:
        # sent again after its answer was lost: the booking it made, before any rule (the
        # user's own first booking would refuse it)
        made = made_with_key(work, create.request, key)
        if made is not None:
            return made
        if create.refused_unless_made is not None:
            raise create.refused_unless_made
    return work.place(create.request, create.request.groups, create.is_admin, create.now,
                      create.actor, create.proposal, key)


def _make_room_and_place(work: UnitOfWork, create: NewBooking, refused: NoCapacity) -> Booking:
    freed = create.make_room(work, create.request, create.now)
    if not freed:
        raise refused
    placed = _place_once(work, create)
    create.freed[:] = freed
    return placed


def _place_or_refuse(work: UnitOfWork, create: NewBooking) -> Booking | Exception:
    """One of several creates: its refusal is its outcome. No savepoint: ``place`` refuses
    before it writes; freeing room writes first, so that part runs under one."""
    create.freed.clear()
    try:
        return _place_once(work, create)
    except NoCapacity as refused:
        if create.make_room is None:
            return refused
        full = refused
    except BookingError as refused:
        return refused
    except Exception as error:
        raise _MetAnError from error
    return _on_a_savepoint(work, create, lambda: _make_room_and_place(work, create, full))


def _place_on_its_own(work: UnitOfWork, create: NewBooking) -> Booking | Exception:
    """One of several creates, all of it under a savepoint."""
    return _on_a_savepoint(work, create, lambda: _place(work, create))


def _on_a_savepoint(work: UnitOfWork, create: NewBooking,
                    place: Callable[[], Booking]) -> Booking | Exception:
    """``place()`` under a savepoint: its refusal or error rolls back only what it wrote, and is
    the create's outcome."""
    savepoint = work.rows().begin_nested()
    try:
        placed = place()
        work.rows()  # its ORM changes go out inside its savepoint
    except Exception as error:  # noqa: BLE001 (this create's outcome, the others go on)
        # the session may hold rows as the rolled-back changes left them
        work.forget_session()
        savepoint.rollback()
        create.freed.clear()
        return error
    savepoint.commit()
    return placed


#: What a longer search came to (``BookingStore.observe_longer_search``): the create was
#: admitted, it stayed refused, or no search ran because another one was running.
LONGER_ADMITTED, LONGER_REFUSED, LONGER_BUSY = "admitted", "refused", "busy"

#: One longer search at a time per process: each keeps a database thread (and a core) busy for
#: up to ``exact_move_retry_seconds``, and the service has only a few such threads.
_LONGER_SEARCH = threading.Lock()


def search_longer(store: BookingStore, create: NewBooking,
                  outcome: Booking | Exception) -> Booking | Exception:
    """``outcome`` of ``create`` (from :func:`create_all`), or, when it is a refusal after
    which the exact re-placement ran out of its time under the pool's lock, the outcome of
    searching again with :func:`propose_longer` and writing what that finds under the lock if
    it still holds then (:mod:`..core.proposed_moves`; if not, the create searches there as any
    create does).

    Not inside :func:`create_all`: the creates written together with this one are answered
    first. The refusal stands, unchanged, when another longer search is running."""
    if (not isinstance(outcome, NoCapacity) or not outcome.search_ran_out
            or store.exact_move_retry_seconds <= 0):
        return outcome
    searched = propose_longer(store, create.request)
    if searched is None or searched[0] is None:
        return outcome
    proposal, seconds = searched
    # the same ``freed`` list: a caller reads what a create preempted from the create it made
    (written,) = create_all(store, [dataclasses.replace(create, proposal=proposal)])
    store.observe_longer_search(
        LONGER_ADMITTED if isinstance(written, Booking) else LONGER_REFUSED, seconds)
    return written


def propose_longer(store: BookingStore,
                   request: Booking) -> tuple[Replacement | None, float] | None:
    """A re-placement of upcoming bookings that lets ``request`` in (None if none was found),
    searched for up to the store's ``exact_move_retry_seconds`` *without* the pool's lock, on
    the pool as read now, and the seconds the search took; None when no search ran because
    another longer search is running. Both are reported to
    ``BookingStore.observe_longer_search``; with a re-placement, the caller writes it under
    the lock if it still holds and reports how that went."""
    if not _LONGER_SEARCH.acquire(blocking=False):
        log.info("Refusing %s's request in pool %s without a longer search: another one runs",
                 request.user, request.pool)
        store.observe_longer_search(LONGER_BUSY, None)
        return None
    began = time.monotonic()
    try:
        proposal = _propose(store, request)
    finally:
        _LONGER_SEARCH.release()
    seconds = time.monotonic() - began
    log.info("A longer search for %s's request in pool %s took %.1f s: %s", request.user,
             request.pool, seconds,
             "no re-placement" if proposal is None else f"{len(proposal.moves)} moves")
    if proposal is None:
        store.observe_longer_search(LONGER_REFUSED, seconds)
    return proposal, seconds


def _propose(store: BookingStore, request: Booking) -> Replacement | None:
    pool = store.pool(request.pool)
    low, high = move_reach(request)
    bookings, windows = store.overlapping(request.pool, low, high)
    try:
        return replacement.place_or_move(
            pool, bookings, request.start, request.end, request.amount, store.now(), windows,
            known=(low, high), exact_seconds=store.exact_move_retry_seconds,
            exact_solver=store.exact_move_solver)
    except NoCapacity:
        return None
