"""Replaying a lab trace against the booking core: placement policies, releases, the waitlist.

One replay takes the requests of a :class:`~.tracegen.Trace` in the order they are made and
books each with a *placer*; no-shows are released ``no_show_minutes`` after their start, or
after they were booked for a "book now" in the running slot
(``core.lifecycle.no_show_deadline``), and early stoppers cancel the rest
(``policy.cancel_outcome``), both the service's own rules, each at its moment. With the
waitlist on, a request still refused after the user's retries waits (if its user joins, see
:mod:`.tracegen`) and, whenever capacity frees (a release), the waiting requests are booked in
FIFO order at the first interval of their length and amount that starts in their window
(``core.next_free.earliest_fit``, the service's own next-free search). With
``start_early_hours`` set, every release then offers the freed capacity to the pool's upcoming
bookings that start within that many hours, soonest first, with the service's own rule
(``core.start_early.start_early_interval``); a booking whose user accepts (see
:mod:`.tracegen`) moves to start now, keeping its length, and the span it leaves is served to
the waitlist like any other freed capacity.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fractions import Fraction

from jhub_gpubooking.core import exact_moves
from jhub_gpubooking.core import placement as placing
from jhub_gpubooking.core.errors import NoCapacity
from jhub_gpubooking.core.lifecycle import no_show_deadline
from jhub_gpubooking.core.model import Booking, BookingState, Placement, Pool
from jhub_gpubooking.core.next_free import earliest_fit
from jhub_gpubooking.core.policy import cancel_outcome
from jhub_gpubooking.core.replacement import place_or_move
from jhub_gpubooking.core.start_early import start_early_candidates, start_early_interval
from jhub_gpubooking.core.timegrid import ceil_to_grid, floor_to_grid

from .tracegen import SLOT_MINUTES, Request, Trace

#: Moves a placer made: (booking id, its new placement).
Moves = tuple[tuple[int, Placement], ...]
#: (pool, live bookings near the request, start, end, amount, now) -> (placement, moves)
Placer = Callable[[Pool, list[Booking], datetime, datetime, Fraction, datetime],
                  tuple[Placement, Moves]]

MAX_ATTEMPTS = 3
PATIENCE = timedelta(hours=24)
#: A request is "under contention" when, as it is made, this share of the pool is booked at
#: some moment of its interval.
CONTENDED_BOOKED_SHARE = Fraction(3, 4)
#: Bookings last at most 72 h: a booking that could move for a request lies within this of it.
LONGEST_BOOKING = timedelta(hours=72)


def best_fit(pool, existing, start, end, amount, now) -> tuple[Placement, Moves]:
    """The product's placement, nothing moves: :func:`jhub_gpubooking.core.placement.place`."""
    return placing.place(pool, existing, start, end, amount), ()


def re_placing(pool, existing, start, end, amount, now, *,
               solver: str = "auto") -> tuple[Placement, Moves]:
    """:func:`jhub_gpubooking.core.replacement.place_or_move`: best fit, else move upcoming
    bookings, with the service's default time for its exact last resort (and its default
    solver unless ``solver`` names one, see :mod:`jhub_gpubooking.core.ilp_solvers`).
    ``existing`` holds every live booking within :data:`LONGEST_BOOKING` of the request, so
    it is complete for every booking that may move (``known``). When the exact last resort
    runs out of its time, the service searches again without the pool's lock for
    ``exact_moves.DEFAULT_RETRY_SECONDS`` (:mod:`jhub_gpubooking.core.proposed_moves`); in a
    replay nothing changes meanwhile, so that is the same search with the longer limit."""
    place = functools.partial(place_or_move, pool, existing, start, end, amount, now,
                              known=(start - LONGEST_BOOKING, end + LONGEST_BOOKING),
                              exact_solver=solver)
    try:
        found = place(exact_seconds=exact_moves.DEFAULT_SECONDS)
    except NoCapacity as refused:
        if not refused.search_ran_out or exact_moves.DEFAULT_RETRY_SECONDS <= 0:
            raise
        found = place(exact_seconds=exact_moves.DEFAULT_RETRY_SECONDS)
    return found.placement, tuple((move.booking.id, move.placement) for move in found.moves)


def first_fit(
    pool: Pool, existing: list[Booking], start: datetime, end: datetime, amount: Fraction
) -> Placement:
    """The first GPU (fraction) or node (whole GPUs) in pool order with room for ``amount``."""
    slices = pool.amount_to_slices(amount)
    table = placing.UsageTable(pool, existing, start, end)
    peaks = table.peaks(0, table.pieces)
    capacity = pool.slices_per_gpu
    if amount < 1:
        for (node, index), peak in zip(table.gpus, peaks):
            if peak + slices <= capacity:
                return Placement(node, (index,), slices)
    else:
        untouched: dict[str, list[int]] = defaultdict(list)
        for (node, index), peak in zip(table.gpus, peaks):
            if peak == 0:
                untouched[node].append(index)
        for node in pool.nodes:
            if len(untouched[node]) >= amount:
                return Placement(node, tuple(untouched[node][: int(amount)]), capacity)
    # both policies see the same peaks, so the core refuses too, naming the full interval
    placing.place(pool, existing, start, end, amount)
    raise AssertionError("first fit found no room where the core placement did")


def first_fit_placer(pool, existing, start, end, amount, now) -> tuple[Placement, Moves]:
    return first_fit(pool, existing, start, end, amount), ()


@dataclass(frozen=True)
class Replay:
    name: str
    placer: Placer = best_fit
    whole_gpus: bool = False
    #: minutes after its start a no-show is released (None: never)
    no_show_minutes: int | None = 15
    waitlist: bool = True
    early_stops: bool = True
    attempts: int = MAX_ATTEMPTS
    #: keep what each possibly avoidable fragmentation refusal saw (for an exact check)
    keep_refusals: bool = False
    #: offer freed capacity to upcoming bookings starting within this many hours (None: off)
    start_early_hours: int | None = None


@dataclass
class Outcome:
    """What one replay of the trace produced."""

    replay: str
    booked: dict[int, Booking] = field(default_factory=dict)  # request id -> as first booked
    admitted: dict[int, Booking] = field(default_factory=dict)  # request id -> after releases
    refused_requests: int = 0
    refusals: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    #: fragmentation refusals that no move of upcoming bookings can avoid
    blocked_by_started: int = 0
    contended: set[int] = field(default_factory=set)
    released: list[tuple[Booking, datetime]] = field(default_factory=list)  # no-show, freed from
    moves: int = 0
    #: (live bookings within LONGEST_BOOKING, start, end, amount, now) of each fragmentation
    #: refusal not blocked by started bookings, when the replay keeps them
    avoidable: list[tuple[list[Booking], datetime, datetime, Fraction, datetime]] = field(
        default_factory=list)
    waited: int = 0  # requests that joined the waitlist
    from_waitlist: int = 0  # ... and were booked from it
    start_early_offers: int = 0  # bookings offered to start early (each counted once)
    started_early: int = 0  # ... whose users accepted


def classify_refusal(
    pool: Pool, live: list[Booking], start: datetime, end: datetime, amount: Fraction
) -> str:
    """'capacity', 'fragmentation (spatial)' or 'fragmentation (temporal)'."""
    intervals = placing.availability(pool, live, start, end)
    if min(i.free_gpus for i in intervals) < amount:
        return "capacity"
    if any(i.largest_bookable < amount for i in intervals):
        return "fragmentation (spatial)"
    return "fragmentation (temporal)"


def blocked_by_started(
    pool: Pool, live: list[Booking], start: datetime, end: datetime, amount: Fraction,
    now: datetime,
) -> bool:
    """True when the request does not fit even with every upcoming booking gone: then no
    re-placement of upcoming bookings can let it in (only started ones are in the way)."""
    started = [b for b in live if b.state(now) is not BookingState.UPCOMING]
    try:
        placing.place(pool, started, start, end, amount)
    except NoCapacity:
        return True
    return False


def _overlapping(live: dict[int, Booking], start: datetime, end: datetime) -> list[Booking]:
    return [b for b in live.values() if b.start < end and start < b.end]


def _is_contended(pool: Pool, others: list[Booking], start: datetime, end: datetime) -> bool:
    intervals = placing.availability(pool, others, start, end)
    least_free = min(i.free_gpus for i in intervals)
    return least_free <= (1 - CONTENDED_BOOKED_SHARE) * pool.total_gpus


@dataclass
class _Wait:
    request: Request
    amount: Fraction
    latest: datetime  # the latest start the user accepts


class _Run:
    """The state of one replay while it runs."""

    def __init__(self, trace: Trace, how: Replay):
        self.pool, self.how = trace.pool, how
        self.wait_window = timedelta(hours=trace.shape.wait_window_hours)
        self.outcome = Outcome(how.name)
        self.live: dict[int, Booking] = {}
        self.requests = {r.id: r for r in trace.requests}
        # (when, 0 = release before 1 = request at the same moment, request id)
        self.events: list[tuple[datetime, int, int]] = [
            (r.made_at, 1, r.id) for r in trace.requests
        ]
        heapq.heapify(self.events)
        self.waiting: list[_Wait] = []
        #: request id -> when its booking is released (a booking started early moves it)
        self.release_at: dict[int, datetime] = {}
        #: bookings already offered to start early (a user answers an offer once)
        self.offered: set[int] = set()

    def run(self) -> Outcome:
        while self.events:
            now, kind, request_id = heapq.heappop(self.events)
            if kind == 0:
                if self.release_at.get(request_id) != now:
                    continue  # the booking started early: its release moved with it
                freed = self._release(self.requests[request_id], now)
                if freed is not None:
                    self._capacity_freed(now, *freed)
                    self._offer_start_early(now)
                continue
            # bookings that ended before the current slot can touch no new request
            horizon = floor_to_grid(now, SLOT_MINUTES)
            for finished in [i for i, b in self.live.items() if b.end <= horizon]:
                del self.live[finished]
            self._request(self.requests[request_id], now)
        return self.outcome

    def _amount(self, request: Request) -> Fraction:
        return Fraction(math.ceil(request.amount)) if self.how.whole_gpus else request.amount

    def _request(self, request: Request, now: datetime) -> None:
        outcome, amount = self.outcome, self._amount(request)
        start, end = request.start, request.end
        if _is_contended(self.pool, _overlapping(self.live, start, end), start, end):
            outcome.contended.add(request.id)
        for _ in range(self.how.attempts):
            try:
                self._book(request, amount, start, end, now)
                return
            except NoCapacity as refusal:
                self._count_refusal(amount, start, end, now)
                start = max(ceil_to_grid(refusal.full_end, SLOT_MINUTES),
                            start + timedelta(minutes=SLOT_MINUTES))
                end = start + request.length
                if start - request.start > PATIENCE:
                    break
        if not (self.how.waitlist and request.joins_waitlist):
            outcome.refused_requests += 1
            return
        outcome.waited += 1
        wait = _Wait(request, amount, request.start + self.wait_window)
        # the waitlist books at once what is already free in the window; the rest waits
        if not self._book_wait(wait, max(request.start, floor_to_grid(now, SLOT_MINUTES)),
                               wait.latest, now):
            self.waiting.append(wait)

    def _count_refusal(self, amount: Fraction, start: datetime, end: datetime,
                       now: datetime) -> None:
        others = _overlapping(self.live, start, end)
        kind = classify_refusal(self.pool, others, start, end, amount)
        self.outcome.refusals[kind] += 1
        if kind == "capacity":
            return
        if blocked_by_started(self.pool, others, start, end, amount, now):
            self.outcome.blocked_by_started += 1
        elif self.how.keep_refusals:
            self.outcome.avoidable.append((self._near(start, end), start, end, amount, now))

    def _near(self, start: datetime, end: datetime) -> list[Booking]:
        """Every live booking that could move for [start, end), and all that could be in the
        way of those."""
        return [b for b in self.live.values()
                if b.start < end + LONGEST_BOOKING and start - LONGEST_BOOKING < b.end]

    def _book(self, request: Request, amount: Fraction, start: datetime, end: datetime,
              now: datetime) -> None:
        """Book the request at [start, end) or raise NoCapacity."""
        placed, moves = self.how.placer(self.pool, self._near(start, end), start, end, amount, now)
        for booking_id, placement in moves:
            moved = self.live[booking_id].with_changes(placement=placement)
            self.live[booking_id] = self.outcome.admitted[booking_id] = moved
        self.outcome.moves += len(moves)
        booking = Booking(user=request.user, pool=self.pool.name, amount=amount, start=start,
                          end=end, placement=placed, id=request.id, created=now, updated=now)
        outcome = self.outcome
        self.live[request.id] = outcome.admitted[request.id] = outcome.booked[request.id] = booking
        self._schedule_release(request, booking, now)

    def _schedule_release(self, request: Request, booking: Booking, now: datetime) -> None:
        release_at = None
        if request.no_show and self.how.no_show_minutes is not None:
            # the service's rule: counted from the start, or from booking "now" in its slot
            release_at = no_show_deadline(booking, timedelta(minutes=self.how.no_show_minutes))
        elif request.used_share is not None and self.how.early_stops:
            release_at = booking.start + request.used_share * request.length
        if release_at is not None:
            self.release_at[request.id] = max(release_at, now)
            heapq.heappush(self.events, (max(release_at, now), 0, request.id))

    def _capacity_freed(self, now: datetime, freed_from: datetime, freed_until: datetime) -> None:
        if self.how.waitlist:
            self._serve_waitlist(now, freed_from, freed_until)

    def _offer_start_early(self, now: datetime) -> None:
        """The service offers capacity free now to upcoming bookings (soonest first); each
        booking's user answers once, and one who accepts starts now (same length)."""
        hours = self.how.start_early_hours
        if hours is None:
            return
        slot = floor_to_grid(now, SLOT_MINUTES)
        for booking in start_early_candidates(self.live.values(), self.pool.name, now,
                                              timedelta(hours=hours)):
            if booking.id in self.offered:
                continue
            others = [b for b in _overlapping(self.live, slot, booking.end) if b.id != booking.id]
            found = start_early_interval(self.pool, booking, others, now, SLOT_MINUTES)
            if found is None:
                continue
            self.offered.add(booking.id)
            self.outcome.start_early_offers += 1
            request = self.requests[booking.id]
            if not request.starts_early:
                continue
            start, end, placement = found
            moved = booking.with_changes(start=start, end=end, placement=placement, updated=now)
            self.live[booking.id] = self.outcome.admitted[booking.id] = moved
            self.outcome.started_early += 1
            self._schedule_release(request, moved, now)
            # what it leaves behind is free for the waitlist (not offered again: it is later)
            self._capacity_freed(now, max(booking.start, end), booking.end)

    def _release(self, request: Request, now: datetime) -> tuple[datetime, datetime] | None:
        """Release the rest of the request's booking; the span freed, if any."""
        outcome = self.outcome
        booking = outcome.admitted[request.id]
        if booking.state(now) is not BookingState.ACTIVE:
            return None
        released = cancel_outcome(booking, now)
        freed_from = released.end if released.holds_capacity else booking.start
        if request.no_show:
            outcome.released.append((booking, freed_from))
        outcome.admitted[request.id] = released
        if request.id in self.live:
            self.live[request.id] = released
        return freed_from, booking.end

    def _book_wait(self, wait: _Wait, earliest: datetime, latest: datetime,
                   now: datetime) -> bool:
        """Book ``wait`` at the first free interval starting in [earliest, latest], if any."""
        request = wait.request
        if latest < earliest:
            return False
        near = _overlapping(self.live, earliest, latest + request.length)
        found = earliest_fit(self.pool, near, wait.amount, request.length, earliest, latest,
                             SLOT_MINUTES)
        if found is None:
            return False
        self._book(request, wait.amount, *found, now)
        self.outcome.from_waitlist += 1
        return True

    def _serve_waitlist(self, now: datetime, freed_from: datetime, freed_until: datetime) -> None:
        """Capacity freed in [freed_from, freed_until): book the waiting requests that now fit,
        first come first served. A wait did not fit anywhere in its window before, so only an
        interval overlapping the freed span can fit now: only those starts are searched."""
        slot = floor_to_grid(now, SLOT_MINUTES)
        expired = [wait for wait in self.waiting if wait.latest < slot]
        self.outcome.refused_requests += len(expired)
        still = []
        for wait in self.waiting:
            if wait.latest < slot:
                continue
            length = wait.request.length
            earliest = max(wait.request.start, slot,
                           floor_to_grid(freed_from - length, SLOT_MINUTES))
            if not self._book_wait(wait, earliest, min(wait.latest, freed_until), now):
                still.append(wait)
        self.waiting = still

    def finish(self) -> Outcome:
        """Waits still unserved at the end count as refused."""
        self.outcome.refused_requests += len(self.waiting)
        self.waiting = []
        return self.outcome


def replay(trace: Trace, how: Replay) -> Outcome:
    """Replay every request in the order they are made; releases happen at their moment."""
    run = _Run(trace, how)
    run.run()
    return run.finish()
