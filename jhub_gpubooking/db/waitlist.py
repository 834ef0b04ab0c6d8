"""The waitlist in the database: joining, withdrawing, expiring, and serving waits.

Serving books each waiting request, in the fair order of :mod:`..core.waitlist`, through the
store's unit of work exactly as a booking the user made at that moment (policy, budgets,
limits, placement): one transaction per wait holding the pool locks a booking would take, in
which the wait's row is locked, its interval searched under those locks, the booking placed and
the wait marked booked, all committed together. A refusal rolls that transaction back and the
wait keeps waiting. Waits always book as their user (admins' exemption does not apply).

A wait kept out only because the exact re-placement ran out of its time under the lock gets
the longer search a refused create gets (:func:`.creates.propose_longer`) when the caller asks
for it (the service's lifecycle tick does, not the cancel a user waits on): at most one such
wait per serve, and each wait at most once per :data:`SEARCH_AGAIN_AFTER`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from ..core import policy as booking_policy
from ..core.errors import BookingError, Conflict, InvalidRequest, NoCapacity, NotFound
from ..core.model import Booking, Replacement, checked_text, parse_amount
from ..core.timegrid import as_utc, floor_to_grid, format_time
from ..core.waitlist import Wait, WaitState, booked_note, fair_order, interval_to_try
from . import creates
from .models import WaitRow
from .next_free import NEXT_FREE_SEARCH_DAYS
from .queries import page
from .request_keys import (
    checked_request_key,
    refusal_unless_made,
    tried_again_if_raced,
    wait_with_key,
)
from .store import BookingStore
from .unit_of_work import UnitOfWork

#: How long a wait whose longer search found nothing goes without another: each search keeps a
#: core busy for up to ``exact_move_retry_seconds``, and every lifecycle tick serves the list.
SEARCH_AGAIN_AFTER = timedelta(minutes=10)

#: Whether any request waits at all (the state's index answers it).
ANY_WAITING = select(WaitRow.id).where(WaitRow.state == WaitState.WAITING.value).limit(1)


def wait_from_row(row: WaitRow) -> Wait:
    return Wait(
        user=row.user,
        pool=row.pool,
        amount=Fraction(row.amount_num, row.amount_den),
        start=row.start,
        length=timedelta(minutes=row.minutes),
        latest_start=row.latest_start,
        priority=row.priority,
        created=row.created,
        id=row.id,
        state=WaitState(row.state),
        booking_id=row.booking_id,
        groups=tuple(row.groups or ()),
        note=row.note,
        updated=row.updated,
    )


def booked_wait(wait: Wait, booking: Booking) -> Wait:
    """``wait`` as it is once ``booking`` was made for it."""
    return wait.with_changes(state=WaitState.BOOKED, booking_id=booking.id)


class WaitStore:
    """The waits of a :class:`~.store.BookingStore` (its clock, pools, grid and policies)."""

    def __init__(self, store: BookingStore):
        self.store = store
        #: when each wait last had a longer search (by this process), for SEARCH_AGAIN_AFTER
        self._searched_longer: dict[int, datetime] = {}

    # -- joining and leaving -------------------------------------------------------------------

    def join(
        self,
        user: str,
        pool: str,
        gpus: Any,
        start: datetime,
        end: datetime,
        window_end: datetime | None = None,
        note: str = "",
        groups: Any = (),
        priority: int = 0,
        actor: str | None = None,
        max_waiting: int | None = None,
        request_key: str | None = None,
    ) -> Wait:
        """Put a request on the waitlist: ``gpus`` of ``pool`` for ``end - start``, starting
        at ``start`` or, with ``window_end``, anywhere from ``start`` on that ends by
        ``window_end``. Refused (400/403) like the booking would be for anything but capacity;
        ``max_waiting`` caps the user's waiting requests (409 beyond). With ``request_key``
        (the join's Idempotency-Key), the wait this user added with it, if any, as it is now
        (:mod:`.request_keys`)."""
        store = self.store
        pool_spec = store.pool(pool)
        amount = gpus if isinstance(gpus, Fraction) else parse_amount(gpus)
        pool_spec.amount_to_slices(amount)
        start, end, now = as_utc(start), as_utc(end), store.now()
        window_end = end if window_end is None else as_utc(window_end)
        request_key = checked_request_key(request_key)

        def check_times() -> None:
            store.check_interval(start, end, now)
            store.check_interval(start, window_end, now)  # the window's end on the grid, too

        started = refusal_unless_made(request_key, check_times)
        if window_end < end:
            raise InvalidRequest("'window_end' must not be before 'end'.")
        if window_end - start > timedelta(days=NEXT_FREE_SEARCH_DAYS):
            raise InvalidRequest(
                f"A waiting window may span at most {NEXT_FREE_SEARCH_DAYS} days."
            )
        checked_text(note, "note")
        groups = tuple(sorted(groups))
        request = Booking(user=user, pool=pool, amount=amount, start=start, end=end,
                          note=note, groups=groups)
        latest_start, minutes = window_end - (end - start), (end - start) // timedelta(minutes=1)

        def write() -> Wait:
            # with a key, two copies sent at once are written one after the other
            with store.unit_of_work([pool] if request_key else []) as work:
                if request_key is not None:
                    made = wait_with_key(work.session, user, request_key,
                                         (pool, amount, start, latest_start, minutes))
                    if made is not None:
                        return wait_from_row(made)
                    if started is not None:
                        raise started
                # what the policy refuses now (length, how far ahead, pools) it would refuse
                # later
                work.check_rules(request, groups, now, booking_policy.check_booking)
                if max_waiting is not None and self._waiting_count(work, user) >= max_waiting:
                    raise Conflict(
                        f"You already have {max_waiting} requests on the waitlist; withdraw "
                        "one before adding another."
                    )
                stamp = store.stamp()
                row = WaitRow(
                    user=user, pool=pool, amount_num=amount.numerator,
                    amount_den=amount.denominator, start=start, latest_start=latest_start,
                    minutes=minutes, priority=priority, groups=list(groups), note=note,
                    state=WaitState.WAITING.value, created=stamp, updated=stamp,
                    created_by=actor, request_key=request_key,
                )
                work.session.add(row)
                work.session.flush()
                return wait_from_row(row)

        return tried_again_if_raced(request_key, write)

    def _waiting_count(self, work: UnitOfWork, user: str) -> int:
        return len(work.session.scalars(
            select(WaitRow.id).where(WaitRow.user == user,
                                     WaitRow.state == WaitState.WAITING.value)
        ).all())

    def get(self, wait_id: int) -> Wait:
        with self.store.read_transaction() as session:
            row = session.get(WaitRow, wait_id)
            if row is None:
                raise NotFound(f"There is no wait with id {wait_id}.")
            return wait_from_row(row)

    def withdraw(self, wait_id: int) -> Wait:
        """Take a waiting request off the list (409 once it was booked or expired)."""
        with self.store.unit_of_work() as work:
            row = self._lock(work, wait_id)
            if row is None:
                raise NotFound(f"There is no wait with id {wait_id}.")
            if row.state != WaitState.WAITING.value:
                raise Conflict(f"This wait is {row.state} and can no longer be withdrawn.")
            row.state = WaitState.WITHDRAWN.value
            row.updated = self.store.stamp()
            return wait_from_row(row)

    def list(
        self,
        user: str | None = None,
        state: WaitState | str | None = None,
        changed_since: datetime | None = None,
        limit: int | None = None,
        after: tuple[datetime, int] | None = None,
    ) -> list[Wait]:
        """Waits by (start, id), optionally of one user, in one state, or still waiting or
        changed since ``changed_since``; paged like ``BookingStore.list``."""
        statement = page(select(WaitRow).order_by(WaitRow.start, WaitRow.id), WaitRow, limit,
                         after)
        if user is not None:
            statement = statement.where(WaitRow.user == user)
        if state is not None:
            statement = statement.where(WaitRow.state == WaitState(state).value)
        if changed_since is not None:
            statement = statement.where(or_(WaitRow.state == WaitState.WAITING.value,
                                            WaitRow.updated >= as_utc(changed_since)))
        with self.store.read_transaction() as session:
            return [wait_from_row(row) for row in session.scalars(statement)]

    # -- serving -------------------------------------------------------------------------------

    def expire(self, now: datetime | None = None) -> int:
        """Mark the waits whose latest start is past expired; returns how many."""
        with self.store.unit_of_work() as work:
            return self._expire(work.session, now)

    def _expire(self, session: Session, now: datetime | None) -> int:
        store = self.store
        now = as_utc(now) if now is not None else store.now()
        # the slot starting at latest_start has ended (core.waitlist.expires_at)
        cutoff = floor_to_grid(now, store.slot_minutes) - timedelta(minutes=store.slot_minutes)
        # Read first, then write by primary key. An UPDATE that finds its rows through the
        # (state, pool) index locks an index entry before the row, while booking a wait locks
        # the row (by id) and then, changing its state, the entry: on InnoDB the two deadlocked
        # when serves ran side by side (CI, MariaDB). The read takes no lock; mostly nothing is
        # due and nothing is written.
        due = session.scalars(
            select(WaitRow.id)
            .where(WaitRow.state == WaitState.WAITING.value, WaitRow.latest_start <= cutoff)
        ).all()
        if not due:
            return 0
        result = session.execute(
            update(WaitRow)
            .where(WaitRow.id.in_(due), WaitRow.state == WaitState.WAITING.value)
            .values(state=WaitState.EXPIRED.value, updated=store.stamp())
        )
        return result.rowcount or 0

    def waiting(self, pools: Iterable[str] | None = None) -> list[Wait]:
        """The waiting requests (of ``pools``; all when None), in the order they are served."""
        with self.store.read_transaction() as session:
            return self._waiting(session, pools)

    @staticmethod
    def _waiting(session: Session, pools: Iterable[str] | None) -> list[Wait]:
        statement = select(WaitRow).where(WaitRow.state == WaitState.WAITING.value)
        if pools is not None:
            statement = statement.where(WaitRow.pool.in_(sorted(set(pools))))
        return fair_order(wait_from_row(row) for row in session.scalars(statement))

    def serve(self, pools: Iterable[str] | None = None, now: datetime | None = None,
              search_longer: bool = False) -> list[tuple[Wait, Booking]]:
        """Expire what is past, then try to book every waiting request of ``pools`` (all when
        None) in fair order; returns the waits booked and their bookings. With
        ``search_longer``, the first wait (in that order) refused because the exact
        re-placement ran out of time then gets the longer search, unless it had one within
        :data:`SEARCH_AGAIN_AFTER`."""
        store = self.store
        # every cancel and shortened booking serves the waitlist, mostly to find nothing
        # waiting: then a read says so, without a write transaction (on SQLite the database's
        # write lock and a commit to disk). A wait joined after this read serves itself.
        with store.read_transaction() as session:
            if session.execute(ANY_WAITING).first() is None:
                return []
        with store.unit_of_work() as work:
            self._expire(work.session, now)
            waiting = self._waiting(work.session, pools)
        now = as_utc(now) if now is not None else store.now()
        waiting = [w for w in waiting if w.pool in store.pools]  # others expire
        snapshots = self._snapshots(waiting, now)
        booked, ran_out = [], []
        for wait in waiting:
            bookings, windows = snapshots[wait.pool]
            if interval_to_try(wait, store.pools[wait.pool], bookings, windows, now,
                               store.slot_minutes) is None:
                # not even in an unlocked read: skip the locked try (capacity freed since
                # is served by the next trigger)
                continue
            booking, refused = self._book(wait, now, None)
            if refused is not None:
                ran_out.append((wait, refused))
            if booking is not None:
                bookings.append(booking)  # the snapshot stays a good guess for the waits behind
                booked.append((booked_wait(wait, booking), booking))
        if search_longer and ran_out:
            booked.extend(self._search_longer(ran_out, now))
        return booked

    def _search_longer(self, ran_out: list[tuple[Wait, Booking]],
                       now: datetime) -> list[tuple[Wait, Booking]]:
        """The first of ``ran_out`` (waits and the requests refused for them) not searched for
        within SEARCH_AGAIN_AFTER, booked if a longer search finds a re-placement that still
        holds under the lock."""
        store = self.store
        searched_at = store.now()
        self._searched_longer = {wait_id: at for wait_id, at in self._searched_longer.items()
                                 if searched_at - at < SEARCH_AGAIN_AFTER}
        wait, request = next(((w, r) for w, r in ran_out if w.id not in self._searched_longer),
                             (None, None))
        if wait is None or store.exact_move_retry_seconds <= 0:
            return []
        searched = creates.propose_longer(store, request)
        if searched is None:
            return []  # another longer search runs: this wait's comes at a later serve
        self._searched_longer[wait.id] = searched_at
        proposal, seconds = searched
        if proposal is None:
            return []
        booking, _ = self._book(wait, now, proposal)
        store.observe_longer_search(
            creates.LONGER_ADMITTED if booking is not None else creates.LONGER_REFUSED, seconds)
        return [] if booking is None else [(booked_wait(wait, booking), booking)]

    def _snapshots(self, waits: list[Wait], now: datetime) -> dict[str, tuple[list, list]]:
        """Per pool, what holds capacity across every waiting window: one unlocked read each."""
        current_slot = floor_to_grid(now, self.store.slot_minutes)
        spans: dict[str, tuple[datetime, datetime]] = {}
        for wait in waits:
            low, high = spans.get(wait.pool, (as_utc(wait.start), as_utc(wait.window_end)))
            spans[wait.pool] = (min(low, as_utc(wait.start)), max(high, as_utc(wait.window_end)))
        return {pool: self.store.overlapping(pool, max(low, current_slot), high)
                for pool, (low, high) in spans.items()}

    def try_to_book(self, wait: Wait, now: datetime | None = None) -> Booking | None:
        """Book ``wait`` in one transaction if it fits now and its user's rules allow it; None
        (and nothing changed) otherwise."""
        store = self.store
        return self._book(wait, as_utc(now) if now is not None else store.now(), None)[0]

    def _book(self, wait: Wait, now: datetime,
              proposal: Replacement | None) -> tuple[Booking | None, Booking | None]:
        """:meth:`try_to_book` at ``now``, writing ``proposal`` (a re-placement found without
        the lock) if it still holds; returns the booking, or the request tried when it was
        refused because the exact re-placement ran out of time (else None) as second item."""
        store = self.store
        pool = store.pools[wait.pool]
        tried = None
        try:
            with store.unit_of_work(store.pools_for_rules(wait.pool, wait.groups, False)) as work:
                row = self._lock(work, wait.id)
                if row is None or row.state != WaitState.WAITING.value:
                    return None, None  # served, withdrawn or expired meanwhile
                current_slot = floor_to_grid(now, store.slot_minutes)
                bookings, windows = work.overlapping(wait.pool, max(wait.start, current_slot),
                                                     wait.window_end)
                found = interval_to_try(wait, pool, bookings, windows, now, store.slot_minutes)
                if found is None:
                    return None, None
                start, end = found
                store.check_interval(start, end, now)
                request = Booking(user=wait.user, pool=wait.pool, amount=wait.amount,
                                  start=start, end=end, note=booked_note(wait),
                                  groups=wait.groups)
                tried = request
                booking = work.place(request, wait.groups, False, now, None, proposal)
                work.record(booking, None, "waitlist_booked", wait=wait.id,
                            joined=format_time(wait.created) if wait.created else None)
                row.state = WaitState.BOOKED.value
                row.booking_id = booking.id
                row.updated = store.stamp()
                return booking, None
        except NoCapacity as refused:
            return None, tried if refused.search_ran_out else None
        except BookingError:
            # the user's limits refuse it now (or capacity went meanwhile): it keeps waiting
            return None, None

    def _lock(self, work: UnitOfWork, wait_id: int | None) -> WaitRow | None:
        statement = select(WaitRow).where(WaitRow.id == wait_id).with_for_update()
        return work.session.execute(
            statement, execution_options={"populate_existing": True}
        ).scalar_one_or_none()

