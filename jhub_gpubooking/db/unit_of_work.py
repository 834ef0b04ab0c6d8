"""The unit of work: one write transaction that holds its pools' locks, places bookings and
records their events, all committed together or not at all.

Every module that changes bookings (the store, series, opportunistic grants, the lifecycle)
works through it, so how pools are locked and what a placement checks live in one place.
Placements in a pool are serialised by locking the pool's row (``SELECT ... FOR UPDATE`` on
PostgreSQL/MySQL; on SQLite the whole transaction is one ``BEGIN IMMEDIATE`` write), and
capacity is computed inside that lock, so two concurrent requests can never both take the
last free slice.

A create is the service's most frequent write, so its statements are Core statements built
once (see :mod:`.queries`): the pool locks, the reads, the booking's and its event's inserts,
then the one commit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from functools import cache
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, bindparam, insert, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from ..core import extension_room, proposed_moves, replacement
from ..core import placement as placing
from ..core import policy as booking_policy
from ..core.errors import Conflict, InvalidRequest, NotFound
from ..core.model import Booking, BookingState, MaintenanceWindow, Move, Placement, Replacement
from ..core.timegrid import ceil_to_grid, clock_text, floor_to_grid, format_time
from .convert import booking_from_new_row, booking_from_row, booking_row
from .events import NewEvent, check_locked, insert_booking_and_event, insert_events
from .models import BookingRow, PoolRow
from .queries import (
    overlapping,
    overlapping_besides,
    policy_context,
    policy_context_and_overlapping,
    rows_connection,
)
from .usage import open_usage

if TYPE_CHECKING:
    from .store import BookingStore

_pools = PoolRow.__table__


@cache
def lock_pools_statement(count: int):
    """The pool rows of ``count`` names (parameters ``name_0`` ...) locked, in name order (the
    row locks are taken as the sorted rows are read: one statement, one round trip, the same
    order as one lock after another). One statement per count, built once: an expanding
    ``IN`` parameter would have SQLAlchemy rewrite the SQL on every execution."""
    return (
        select(_pools.c.name)
        .where(_pools.c.name.in_([bindparam(f"name_{n}") for n in range(count)]))
        .order_by(_pools.c.name)
        .with_for_update()
    )


INSERT_BOOKING = insert(BookingRow.__table__)
#: One booking put on other GPUs; executed once for all of a create's moves (executemany)
MOVE_BOOKING = (
    update(BookingRow.__table__)
    .where(BookingRow.__table__.c.id == bindparam("moved_id"))
    .values(node=bindparam("new_node"), gpu_indices=bindparam("new_gpus"),
            updated=bindparam("moved_at"))
)

#: A booking bound to a server (see :meth:`UnitOfWork.bind_booking`)
BIND_BOOKING = (
    update(BookingRow.__table__)
    .where(BookingRow.__table__.c.id == bindparam("bound_id"))
    .values(server=bindparam("bound_server"), claimed_at=bindparam("bound_at"),
            updated=bindparam("bound_at"), stopped_at=None)
)

#: How far before and after a request a create that has to move bookings reads the pool:
#: only bookings inside that wider interval may move (reading a busy pool costs ~0.1 ms per
#: booking, and bookings reaching further are rarely the ones that can move anyway).
MOVE_READ_MARGIN = timedelta(hours=4)
#: An extension moves upcoming bookings to make room only this far past the booking's end:
#: further, the bookings in the way are many (each placed again in the extension's transaction,
#: under the pool's lock), and a day-long extension is rare enough to be booked anew.
EXTENSION_MOVE_REACH = timedelta(hours=4)
#: The exact step's limit once a transaction has spent its ``exact_move_seconds``: enough to
#: build the program and stop, not to search it.
SPENT_SECONDS = 0.001


def move_reach(request: Booking) -> tuple[datetime, datetime]:
    """The longest interval a create of ``request`` reads to move bookings: the request
    widened by :data:`MOVE_READ_MARGIN` on each side."""
    return request.start - MOVE_READ_MARGIN, request.end + MOVE_READ_MARGIN


class BookingChecks:
    """What a booking change checks, read on one transaction's session: a unit of work's, or a
    read transaction's when only asking whether a change would pass (nothing is locked then,
    so the change itself may still be refused)."""

    def __init__(self, store: BookingStore, session: Session):
        self.store = store
        self._session = session

    @property
    def session(self) -> Session:
        """The transaction's ORM session."""
        return self._session

    def rows(self) -> Connection:
        """The transaction's connection, for Core statements, with the session's pending ORM
        changes written (a Core statement does not autoflush, and must see them)."""
        return rows_connection(self.session)

    def overlapping(
        self, pool: str, start: datetime, end: datetime, node: str | None = None
    ) -> tuple[list[Booking], list[MaintenanceWindow]]:
        """What holds capacity of ``pool`` (of ``node`` only, if given) in [start, end): see
        :func:`.queries.overlapping`."""
        return overlapping(self.rows(), pool, start, end, self.store.now(), node)

    def check_rules(self, request: Booking, groups: Any, now: datetime, check: Callable,
                    others: list[Booking] | None = None) -> None:
        """The policy ``check`` (check_booking / check_end_change), then the budget book's.
        ``others``: the user's bookings for the policy, when the caller read them already."""
        policy = self.store.policy_for(groups)
        if others is None:
            others = policy_context(self.rows(), policy, request, now)
        budgets = self.store.budgets
        if budgets is None:
            return check(policy, request, others, now)
        check(budgets.own_rules(policy), request, others, now)
        if budgets.charged_to(request, policy):  # only then its reads need the ORM session
            budgets.check(self.session, request, policy, now)

    def check_end_change(self, booking: Booking, end: datetime, groups: Any, is_admin: bool,
                         now: datetime) -> tuple[Move, ...]:
        """Raise the refusal ``BookingStore.change_end`` gives for moving ``booking``'s end to
        ``end``; else the moves of upcoming bookings an extension needs (usually none)."""
        state = booking.state(now)
        if state in (BookingState.CANCELLED, BookingState.ENDED):
            raise Conflict(f"This booking is {state.value} and can no longer be changed.")
        if end <= booking.start:
            raise InvalidRequest("The end time must be after the start time.")
        if end <= now:
            earliest = ceil_to_grid(now, self.store.slot_minutes)
            raise InvalidRequest(
                f"The new end {clock_text(end)} is in the past; choose "
                f"{clock_text(earliest)} or later."
            )
        if end == booking.end:
            return ()
        if not is_admin:
            changed = booking.with_changes(end=end)
            self.check_rules(changed, groups, now, booking_policy.check_end_change)
        if end > booking.end:
            return self.check_extension(booking, end)
        return ()

    def check_extension(self, booking: Booking, end: datetime) -> tuple[Move, ...]:
        """Refuse (409) unless the booking's own GPUs are free from its end until ``end``, or
        moving upcoming bookings off them frees them (an extension never moves the booking
        itself: it may already run there); the moves needed."""
        taken_from = self.taken_from(booking, end)
        if taken_from is None:
            return ()
        room = self.extension_room(booking, end)
        moves = room(end)
        if moves is not None:
            return moves
        taken = self.taken_by(booking, taken_from)
        latest = self.latest_end_with_room(room, taken_from, end)
        if latest > taken_from:
            raise Conflict(
                f"{taken}; moving bookings that have not started to other GPUs makes room "
                f"until {clock_text(latest)} at most."
            )
        raise Conflict(f"{taken}; the booking can be extended to {clock_text(taken_from)} at "
                       "most.")

    def taken_by(self, booking: Booking, when: datetime) -> str:
        """What takes ``booking``'s GPUs at ``when``, for a refusal: a maintenance window of its
        node (the user cannot see those on the page), else other bookings."""
        node = booking.placement.node
        _, windows = self.overlapping(booking.pool, when, when + timedelta(seconds=1), node)
        window = min((w for w in windows if w.covers(node)), key=lambda w: w.start, default=None)
        if window is None:
            return f"The GPU this booking holds on {node} is taken from {clock_text(when)}"
        return window.describe()

    def latest_end_with_room(self, room: Callable[[datetime], tuple[Move, ...] | None],
                             fits_until: datetime, limit: datetime) -> datetime:
        """The latest end on the grid after ``fits_until`` (an end that fits) and before
        ``limit`` that ``room`` (see :meth:`extension_room`) makes room for, else
        ``fits_until``. Room until an end is taken to mean room until every earlier one: the
        search gallops (1, 2, 4, ... slots on) and then bisects, so the usual answer, no room
        past ``fits_until``, costs one look, under the pool's lock when a refusal says it."""
        slot = timedelta(minutes=self.store.slot_minutes)
        first = floor_to_grid(fits_until, self.store.slot_minutes) + slot

        def end_at(k: int) -> datetime:
            return fits_until if k == 0 else first + (k - 1) * slot

        good, bad, step = 0, max(0, -(-(limit - first) // slot)) + 1, 1
        while good + step < bad:
            if room(end_at(good + step)) is None:
                bad = good + step
                break
            good, step = good + step, 2 * step
        while bad - good > 1:
            middle = (good + bad) // 2
            good, bad = (middle, bad) if room(end_at(middle)) is not None else (good, middle)
        return end_at(good)

    def taken_from(self, booking: Booking, end: datetime) -> datetime | None:
        """When, between the booking's end and ``end``, another booking or a maintenance window
        first takes the booking's own GPUs; None if they stay free (409 if the pool or the GPU
        is gone)."""
        pool = self.store.pools.get(booking.pool)
        if pool is None:
            raise Conflict(
                f"Pool {booking.pool!r} is no longer configured; its bookings cannot be extended."
            )
        placement = booking.placement
        if not {(placement.node, gpu) for gpu in placement.gpus} <= set(pool.gpu_keys):
            raise Conflict(
                "This booking's GPU is no longer part of the pool; it cannot be extended."
            )
        # only the node's bookings: the JupyterLab status asks this every 30 s and looks a week
        # ahead, where reading the whole pool cost a busy pool's service 200 ms a time
        bookings, windows = self.overlapping(pool.name, booking.end, end, placement.node)
        others = [b for b in bookings if b.id != booking.id]
        return extension_room.taken_from(pool, others, placement, booking.end, end, windows)

    def extension_room(self, booking: Booking, until: datetime
                       ) -> Callable[[datetime], tuple[Move, ...] | None]:
        """For an end up to ``until``: the moves that free the booking's own GPUs until then
        (:func:`~..core.extension_room.room_for_extension`), None beyond
        :data:`EXTENSION_MOVE_REACH` after its end, from one read of its pool that reaches
        :data:`MOVE_READ_MARGIN` further (bookings reaching further stay)."""
        pool = self.store.pools[booking.pool]
        last = min(until, booking.end + EXTENSION_MOVE_REACH)
        reach = (booking.end - MOVE_READ_MARGIN, last + MOVE_READ_MARGIN)
        bookings, windows = self.overlapping(pool.name, *reach)
        now = self.store.now()

        @cache  # a refusal looks again at the end it refuses, to say how far room is made
        def room(end: datetime) -> tuple[Move, ...] | None:
            if end > last:
                return None
            return extension_room.room_for_extension(pool, bookings, booking, end, now, windows,
                                                     known=reach)

        return room


class UnitOfWork(BookingChecks):
    """One write transaction of a :class:`~.store.BookingStore`, from its ``unit_of_work()``.

    ``session`` is the transaction's SQLAlchemy session, for the caller's own reads and row
    changes: they commit with the placements and events made here, or roll back with them.
    """

    def __init__(self, store: BookingStore, connection: Connection,
                 make_session: Callable[..., Session]):
        super().__init__(store, None)
        self._connection = connection
        self._make_session = make_session
        self._locked: list[str] = []
        #: seconds this transaction's searches for bookings to move may still take: the pool's
        #: lock is held for all of them, so a batch or a series shares one ``exact_move_seconds``
        self._search_seconds_left = store.exact_move_seconds

    @property
    def session(self) -> Session:
        """An ORM session in this transaction, made when first asked for: a create sends only
        Core statements (through :meth:`rows`) and never needs one."""
        if self._session is None:
            # the transaction is the unit of work's: the session never commits it, nor makes
            # a savepoint of its own when it is made inside one of create_all's
            self._session = self._make_session(bind=self._connection,
                                               join_transaction_mode="rollback_only")
        return self._session

    def rows(self) -> Connection:
        if self._session is not None:
            self._session.flush()
        return self._connection

    def forget_session(self) -> None:
        """Drop the ORM session without ending the transaction: after a savepoint was rolled
        back its rows may hold changes the database no longer has; the next use of
        :attr:`session` makes a fresh one."""
        if self._session is not None:
            self._session.close()
            self._session = None

    def close(self) -> None:
        """Detach what the session loaded (its rows stay readable); after the transaction."""
        if self._session is not None:
            self._session.close()

    @property
    def locked_pools(self) -> tuple[str, ...]:
        """The pools held, in the order they were locked."""
        return tuple(self._locked)

    def lock_pools(self, names: Iterable[str]) -> None:
        """Lock the pools ``names`` not held yet, in name order (NotFound for an unknown one).

        One global order keeps lock waits free of cycles: two transactions that both need
        pools a and b both wait for a first. A pool sorting before one already held would
        break that order, so it is refused before anything waits: lock every pool a unit of
        work needs when it starts.
        """
        wanted = sorted(set(names) - set(self._locked))
        if wanted and self._locked and wanted[0] < max(self._locked):
            raise RuntimeError(
                f"Pool {wanted[0]!r} would be locked after {max(self._locked)!r}, out of name "
                "order; lock every pool the unit of work needs when it starts."
            )
        if not wanted:
            return
        connection = self.rows()
        # SQLite has no row locks: the transaction's BEGIN IMMEDIATE already holds the whole
        # database, and the SELECT would only tell whether the pool's row exists, which a pool
        # this store synced is known to (pool rows are never deleted)
        if connection.dialect.name == "sqlite":
            to_read = [name for name in wanted if name not in self.store.synced_pools]
        else:
            to_read = wanted
        found = set(connection.execute(
            lock_pools_statement(len(to_read)),
            {f"name_{n}": name for n, name in enumerate(to_read)},
        ).scalars()) if to_read else set()
        for name in to_read:
            if name not in found and name in self.store.pools:
                # a setup bug, not a user error: the service must sync pools before serving
                raise RuntimeError(
                    f"Pool {name!r} is configured but not in the database: call sync_pools()."
                )
            if name not in found:
                raise NotFound(f"There is no GPU pool named {name!r}.")
        self._locked.extend(wanted)

    def pool_of(self, booking_id: int) -> str:
        """The name of the pool a booking belongs to (a booking never changes pools)."""
        pool = self.session.execute(
            select(BookingRow.pool).where(BookingRow.id == booking_id)
        ).scalar_one_or_none()
        if pool is None:
            raise NotFound(f"There is no booking with id {booking_id}.")
        return pool

    def lock_booking(self, booking_id: int, pool: str | None = None) -> BookingRow:
        """The booking's row, locked after its pool (always pool first: no lock cycles).

        ``pool``: the booking's pool, when the caller has read the booking already (a booking
        never changes pools), which saves reading it here: a statement less on the spawn's
        claim."""
        self.lock_pools([pool if pool is not None else self.pool_of(booking_id)])
        statement = select(BookingRow).where(BookingRow.id == booking_id).with_for_update()
        # another transaction may have changed the row since this session last read it
        row = self.session.execute(
            statement, execution_options={"populate_existing": True}
        ).scalar_one_or_none()
        if row is None:
            raise NotFound(f"There is no booking with id {booking_id}.")
        if pool is not None and row.pool != pool:
            # a caller's mistake, not the user's: the pool locked is not the booking's
            raise RuntimeError(f"Booking {booking_id} is in pool {row.pool!r}, not {pool!r}.")
        return row

    def record(self, row: BookingRow | Booking, actor: str | None, kind: str,
               **detail: Any) -> None:
        """Add an event to the booking's history (``actor`` None: the service itself)."""
        self.record_events([NewEvent(row.id, row.pool, actor, kind, detail)])

    def record_events(self, events: list[NewEvent]) -> None:
        """Add ``events`` in one statement; each booking's pool must be locked in this unit of
        work (:func:`.events.check_locked`, RuntimeError otherwise)."""
        insert_events(self.rows(), self._locked, self.store.stamp(), events)

    def pools_of(self, booking_ids: Iterable[int]) -> dict[int, str]:
        """The pool of each booking of ``booking_ids`` there is (none locked by the read)."""
        return {booking_id: pool for booking_id, pool in self.rows().execute(
            select(BookingRow.id, BookingRow.pool).where(BookingRow.id.in_(sorted(booking_ids))))}

    def place(self, request: Booking, groups: Any, is_admin: bool, now: datetime,
              actor: str | None, proposal: Replacement | None = None,
              request_key: str | None = None) -> Booking:
        """Check policy and budgets (not for admins), place ``request`` on the GPUs with the
        least waste and add it; raises the refusal a user would see. Its pool must be locked
        (and every pool a rule counts across, see ``BookingStore.pools_for_rules``).
        ``proposal``: a re-placement found earlier without the lock, used if it still holds
        (see :meth:`place_by_moving`). ``request_key``: the create's Idempotency-Key, stored.

        A refusal comes before anything is written (the moves and the inserts are the last
        steps): creates written together rely on it to need no savepoint each
        (:mod:`.creates`)."""
        if is_admin:
            bookings, windows = self.overlapping(request.pool, request.start, request.end)
        else:
            # the user's bookings and the pool's in one round trip, then the rules
            others, bookings, windows = policy_context_and_overlapping(
                self.rows(), self.store.policy_for(groups), request, now, self.store.now())
            self.check_rules(request, groups, now, booking_policy.check_booking, others)
        pool_spec = self.store.pools[request.pool]
        placed = placing.fit(
            pool_spec, bookings, request.start, request.end, request.amount, windows
        )
        if placed is None:
            placed = self.place_by_moving(request, bookings, windows, proposal)
        return self.add_placed(request.with_changes(placement=placed), actor,
                               request_key=request_key)

    def place_by_moving(self, request: Booking, bookings: list[Booking],
                        windows: list[MaintenanceWindow],
                        proposal: Replacement | None = None) -> Placement:
        """Placement for ``request`` after moving upcoming, unclaimed bookings of its pool
        (:func:`~..core.replacement.place_or_move`); ``bookings`` and ``windows`` are what
        holds capacity during the request. The moves are written here, each with a "moved"
        event keeping the old placement. Raises the plain refusal if nothing helps.

        A moved booking must not collide with anything over its own interval, so the read is
        widened once, to cover the movable bookings overlapping the request but by at most
        :data:`MOVE_READ_MARGIN` on each side; bookings reaching outside that read stay where
        they are (a bound: one short read keeps a create on a busy pool fast). The exact last
        resort may take up to the store's ``exact_move_seconds``, under the pool's lock, for
        all the searches of this transaction together (:meth:`_exact_seconds`).

        A ``proposal`` (found by ``BookingStore.search_longer`` without the lock, over the
        whole margin) is written instead when it still holds on the pool as read now
        (:func:`~..core.proposed_moves.still_holds`); the whole margin is then read, since it
        may move any booking there."""
        pool_spec = self.store.pools[request.pool]
        # read under the pool's lock: a booking that started while this request waited for
        # the lock has started, and a claim (which takes the same lock) is already visible
        now = self.store.now()
        reach = move_reach(request)
        if proposal is not None:
            start, end = reach  # the proposal may move any booking within reach
        else:
            movable = [b for b in bookings if replacement.is_movable(b, now)]
            start = max(min([request.start, *(b.start for b in movable)]), reach[0])
            end = min(max([request.end, *(b.end for b in movable)]), reach[1])
        if (start, end) != (request.start, request.end):
            more, windows = overlapping_besides(
                self.rows(), request.pool, start, end, (request.start, request.end), now)
            bookings = bookings + more
        found = None
        if proposal is not None:
            found = proposed_moves.still_holds(pool_spec, bookings, proposal, request.start,
                                               request.end, request.amount, now, windows)
        if found is None:
            began = time.monotonic()
            try:
                found = replacement.place_or_move(
                    pool_spec, bookings, request.start, request.end, request.amount, now,
                    windows, known=(start, end), exact_seconds=self._exact_seconds(),
                    exact_solver=self.store.exact_move_solver,
                )
            finally:
                self._search_seconds_left -= time.monotonic() - began
        self.move_all([(move.booking, move.placement) for move in found.moves])
        return found.placement

    def _exact_seconds(self) -> float:
        """The exact step's time limit for the next search: what this transaction has left of
        the store's ``exact_move_seconds`` (0: the step is off). Once that is spent the step
        still runs, for :data:`SPENT_SECONDS`, so that a hard program ends as "ran out" and the
        create is searched for longer without the lock (``BookingStore.search_longer``) rather
        than refused as if no re-placement existed."""
        if self.store.exact_move_seconds <= 0:
            return 0
        return max(self._search_seconds_left, SPENT_SECONDS)

    def move_all(self, moves: list[tuple[Booking, Placement]]) -> None:
        """Put each booking (as read in this unit of work, with its pool locked) on other GPUs
        of its node or pool, recording a "moved" event with the old and the new placement.

        All moves go in two statements, executed for many rows at once: a create on a busy
        pool may move a dozen bookings or more, and a round trip per move was most of its cost
        on PostgreSQL."""
        if not moves:
            return
        stamp = self.store.stamp()
        connection = self.rows()
        insert_events(connection, self._locked, stamp, [
            NewEvent(booking.id, booking.pool, None, "moved", dict(
                old_node=booking.placement.node, old_gpu_indices=list(booking.placement.gpus),
                node=placement.node, gpu_indices=list(placement.gpus),
            ))
            for booking, placement in moves
        ])
        connection.execute(MOVE_BOOKING, [
            {"moved_id": booking.id, "new_node": placement.node,
             "new_gpus": list(placement.gpus), "moved_at": stamp}
            for booking, placement in moves
        ])

    def add_placed(self, booking: Booking, actor: str | None, request_key: str | None = None,
                   **detail: Any) -> Booking:
        """Insert ``booking``, already placed, with its create's ``request_key``, and record its
        "created" event (with ``detail``); returns it as stored (with its id)."""
        check_locked(self._locked, [booking.pool])
        values = booking_row(booking, self.store.pools[booking.pool], self.store.stamp())
        if request_key is not None:
            values["request_key"] = request_key
        placed = booking.placement
        event = dict(
            gpus=str(booking.amount), start=format_time(booking.start),
            end=format_time(booking.end), node=placed.node, gpu_indices=list(placed.gpus),
            **detail,
        )
        connection = self.rows()
        if connection.dialect.name == "postgresql":
            booking_id = connection.execute(insert_booking_and_event(tuple(values)), {
                **values, "event_at": self.store.stamp(), "event_actor": actor,
                "event_kind": "created", "event_detail": event,
            }).scalar_one()
            return booking_from_new_row(booking_id, values)
        inserted = connection.execute(INSERT_BOOKING, values)
        stored = booking_from_new_row(inserted.inserted_primary_key[0], values)
        self.record_events([NewEvent(stored.id, stored.pool, actor, "created", event)])
        return stored

    def bind(self, row: BookingRow, server: str) -> BookingRow:
        """Bind the locked booking ``row`` to ``server`` (taking it over from its holder, whom
        the caller found stopped) by :meth:`bind_booking`; ``row`` is left as the UPDATE left
        the table (loaded, not changed: nothing more to flush). Returns ``row``."""
        claimed_at = self.bind_booking(row, server)
        for name, value in (("server", server), ("claimed_at", claimed_at),
                            ("updated", claimed_at), ("stopped_at", None)):
            set_committed_value(row, name, value)
        return row

    def bind_booking(self, booking: BookingRow | Booking, server: str) -> datetime:
        """Bind the locked ``booking``, as read in this unit of work, to ``server`` in this
        transaction: the holder and the claim time, a usage interval (the server holding it
        before, if any, has its interval closed first) and a "claimed" event. Core statements
        built once, as every server start claims: no row is read for it. Returns the claim
        time."""
        check_locked(self._locked, [booking.pool])  # before the UPDATE takes the row's lock
        claimed_at = self.store.stamp()
        taken_from = booking.server
        connection = self.rows()
        connection.execute(BIND_BOOKING, {"bound_id": booking.id, "bound_server": server,
                                          "bound_at": claimed_at})
        open_usage(connection, booking.id, server, claimed_at, held=taken_from is not None)
        self.record_events([NewEvent(booking.id, booking.pool, booking.user, "claimed",
                                     {"server": server, "taken_over_from": taken_from})])
        return claimed_at

    def cancel(self, row: BookingRow, actor: str | None, **detail: Any) -> None:
        """Cancel the locked booking ``row`` as :func:`~..core.policy.cancel_outcome` says: an
        upcoming one is cancelled, an active one ends now, keeping the time already used
        (history, budget) and freeing the rest at once. Conflict if it is over already."""
        now = self.store.stamp()
        outcome = booking_policy.cancel_outcome(booking_from_row(row), now)
        kind = "cancelled" if actor == row.user else "force_cancelled"
        if outcome.status == "cancelled":
            self.record(row, actor, kind, **detail)
            row.status = "cancelled"
        else:
            self.record(row, actor, kind, **detail, old_end=format_time(row.end),
                        new_end=format_time(outcome.end))
            row.end = outcome.end
            row.release_reason = outcome.release_reason
        row.updated = now
