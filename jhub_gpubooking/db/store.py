"""BookingStore: every booking change, as one short transaction on the database.

Placements in a pool are serialised by locking the pool's row (``SELECT ... FOR UPDATE`` on
PostgreSQL/MySQL; a ``BEGIN IMMEDIATE`` write transaction on SQLite), and capacity is computed
inside that lock from the rows overlapping the requested interval only, so two concurrent
requests can never both take the last free slice and the cost does not grow with history.
The store is synchronous; the service runs it in an executor.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ..core import placement as placing
from ..core import policy as booking_policy
from ..core.clock import Clock, SystemClock
from ..core.errors import Conflict, InvalidRequest, NoCapacity, NotFound
from ..core.model import Booking, BookingState, MaintenanceWindow, Pool, parse_amount
from ..core.timegrid import as_utc, ceil_to_grid, floor_to_grid, format_time, is_on_grid
from .convert import (
    BookingEvent,
    booking_from_row,
    booking_row,
    event_from_row,
    maintenance_from_row,
    pool_config,
)
from .models import BookingEventRow, BookingRow, FeedTokenRow, MaintenanceWindowRow, PoolRow
from .session import begin_write
from .usage import close_usage, open_usage

#: Longest note / maintenance reason accepted.
MAX_TEXT_LENGTH = 500


def hash_feed_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _page(statement, row_class, limit: int | None, after: tuple[datetime, int] | None):
    """Keyset paging over (start, id): stable while rows are added, unlike an offset."""
    if after is not None:
        start, row_id = as_utc(after[0]), after[1]
        statement = statement.where(
            or_(row_class.start > start, and_(row_class.start == start, row_class.id > row_id))
        )
    return statement if limit is None else statement.limit(limit)


def _clock_time(when: datetime) -> str:
    return f"{when:%Y-%m-%d %H:%M} UTC"


class BookingStore:
    """Bookings, maintenance windows and feed tokens, backed by the session factory."""

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        pools: Mapping[str, Pool],
        default_policy: Any = None,
        group_policies: Mapping[str, Mapping[str, Any]] | None = None,
        slot_minutes: int = 15,
        clock: Clock | None = None,
        budgets: Any = None,
    ):
        self._session_factory = session_factory
        self.pools = dict(pools)
        self.default_policy = default_policy if default_policy is not None else {}
        self.group_policies = dict(group_policies or {})
        self.slot_minutes = slot_minutes
        self.clock = clock or SystemClock()
        #: a :class:`~.budgets.BudgetBook` (group budgets, charge mode) or None
        self.budgets = budgets

    # -- plumbing ---------------------------------------------------------------------------

    @contextmanager
    def _transaction(self, write: bool = False) -> Iterator[Session]:
        with self._session_factory.begin() as session:
            if write:
                begin_write(session)
            yield session

    def _now(self) -> datetime:
        return as_utc(self.clock.now())

    def _stamp(self) -> datetime:
        # stored timestamps are whole seconds, so every backend keeps them identically
        return self._now().replace(microsecond=0)

    def _pool(self, name: str) -> Pool:
        try:
            return self.pools[name]
        except KeyError:
            raise NotFound(f"There is no GPU pool named {name!r}.") from None

    def _lock_pool(self, session: Session, name: str) -> None:
        locked = session.execute(
            select(PoolRow.name).where(PoolRow.name == name).with_for_update()
        ).scalar_one_or_none()
        if locked is None and name in self.pools:
            # a setup bug, not a user error: the service must sync pools before serving
            raise RuntimeError(
                f"Pool {name!r} is configured but not in the database: call sync_pools()."
            )
        if locked is None:
            raise NotFound(f"There is no GPU pool named {name!r}.")

    def _lock_for_rules(self, session: Session, pool: str | None, groups: Any, is_admin: bool):
        """Lock ``pool``, or every pool in name order when a rule counts bookings across pools
        (booking count, GPU-hour budgets), so requests in two pools cannot both pass it; one
        fixed order keeps lock waits free of cycles."""
        policy = self.policy_for(groups)
        across = not is_admin and (
            policy.max_bookings is not None or policy.budget_gpu_hours is not None
            or bool(self.budgets is not None and self.budgets.group_budgets)
        )
        for name in sorted(self.pools) if across else [pool] if pool else []:
            self._lock_pool(session, name)

    def _lock_booking(self, session: Session, booking_id: int) -> BookingRow:
        """The booking's row, after locking its pool (always pool first: no lock cycles)."""
        pool = session.execute(
            select(BookingRow.pool).where(BookingRow.id == booking_id)
        ).scalar_one_or_none()
        if pool is None:
            raise NotFound(f"There is no booking with id {booking_id}.")
        self._lock_pool(session, pool)
        statement = select(BookingRow).where(BookingRow.id == booking_id).with_for_update()
        return session.execute(
            statement, execution_options={"populate_existing": True}
        ).scalar_one()

    def _record(
        self, session: Session, row: BookingRow, actor: str | None, kind: str, **detail: Any
    ) -> None:
        session.add(
            BookingEventRow(
                booking_id=row.id, at=self._stamp(), actor=actor, kind=kind, detail=detail
            )
        )

    def _overlapping(
        self, session: Session, pool: str, start: datetime, end: datetime
    ) -> tuple[list[Booking], list[MaintenanceWindow]]:
        """Bookings holding capacity and maintenance windows of ``pool`` that touch [start, end).

        A booking that has ended holds nothing any more, even inside the running slot: one
        ended early ("End now") frees its GPUs for a booking of the current slot at once.
        """
        bookings = session.scalars(
            select(BookingRow).where(
                BookingRow.pool == pool,
                BookingRow.end > max(as_utc(start), self._now()),
                BookingRow.start < end,
                BookingRow.status == "booked",
            )
        )
        windows = session.scalars(
            select(MaintenanceWindowRow).where(
                MaintenanceWindowRow.pool == pool,
                MaintenanceWindowRow.end > start,
                MaintenanceWindowRow.start < end,
            )
        )
        return [booking_from_row(b) for b in bookings], [maintenance_from_row(w) for w in windows]

    # -- validation -------------------------------------------------------------------------

    def _check_on_grid(self, when: datetime, field: str) -> None:
        if not is_on_grid(when, self.slot_minutes):
            before = floor_to_grid(when, self.slot_minutes)
            after = before + timedelta(minutes=self.slot_minutes)
            raise InvalidRequest(
                f"The {field} time {_clock_time(when)} is not on the {self.slot_minutes}-minute "
                f"booking grid; choose e.g. {before:%H:%M} or {after:%H:%M}."
            )

    def _check_interval(self, start: datetime, end: datetime, now: datetime) -> None:
        self._check_on_grid(start, "start")
        self._check_on_grid(end, "end")
        if end <= start:
            raise InvalidRequest("The end time must be after the start time.")
        current_slot = floor_to_grid(now, self.slot_minutes)
        # "book now": the slot that is running is still bookable from its beginning
        if start < current_slot:
            raise InvalidRequest(
                f"The start time {_clock_time(start)} is in the past; start at "
                f"{_clock_time(current_slot)} (the current slot) or later."
            )

    def policy_for(self, groups: Any = ()) -> booking_policy.Policy:
        """The policy that applies to a member of ``groups``."""
        return booking_policy.effective_policy(
            self.default_policy, self.group_policies, tuple(groups)
        )

    def _policy_context(
        self, session: Session, policy: Any, request: Booking, now: datetime
    ) -> list[Booking]:
        """The user's bookings that can matter to the policy: all future ones, and past ones
        only as far back as the cooldown and the budget periods reach (not the whole history).
        Opportunistic grants are left out: a best-effort use must not block a real booking."""
        horizon = min(now, request.start)
        if policy.cooldown_minutes:
            horizon = min(horizon, request.start - timedelta(minutes=policy.cooldown_minutes))
        if policy.budget_gpu_hours is not None:
            for when in (now, request.start):
                period_start, _ = booking_policy.period_bounds(policy.budget_period, when)
                horizon = min(horizon, period_start)
        rows = session.scalars(
            select(BookingRow).where(
                BookingRow.user == request.user,
                BookingRow.end > horizon,
                BookingRow.status == "booked",
            )
        )
        return [
            booking_from_row(row) for row in rows if row.id != request.id and not row.opportunistic
        ]

    # -- bookings ---------------------------------------------------------------------------

    def create(
        self,
        user: str,
        pool: str,
        gpus: Any,
        start: datetime,
        end: datetime,
        note: str = "",
        groups: Any = (),
        is_admin: bool = False,
        actor: str | None = None,
        make_room: Callable[[Session, Booking, datetime], bool] | None = None,
    ) -> Booking:
        """Book ``gpus`` of ``pool`` for [start, end) or raise the refusal a user would see.

        ``make_room(session, request, now)`` is called when the pool is full, inside the same
        locked transaction; when it frees capacity (returns True) the booking is placed again.
        One transaction: if the booking still does not fit, what it freed is rolled back.
        """
        pool_spec = self._pool(pool)
        amount = gpus if isinstance(gpus, Fraction) else parse_amount(gpus)
        start, end, now = as_utc(start), as_utc(end), self._now()
        self._check_interval(start, end, now)
        pool_spec.amount_to_slices(amount)
        if len(note) > MAX_TEXT_LENGTH:
            raise InvalidRequest(f"The note may be at most {MAX_TEXT_LENGTH} characters long.")
        request = Booking(
            user=user,
            pool=pool,
            amount=amount,
            start=start,
            end=end,
            note=note,
            groups=tuple(sorted(groups)),
        )
        with self._transaction(write=True) as session:
            self._lock_for_rules(session, pool, groups, is_admin)
            try:
                row = self._place(session, request, groups, is_admin, now, actor or user)
            except NoCapacity:
                if make_room is None or not make_room(session, request, now):
                    raise
                row = self._place(session, request, groups, is_admin, now, actor or user)
            return booking_from_row(row)

    def _check_rules(self, session: Session, request: Booking, groups: Any, now, check) -> None:
        """The policy ``check`` (check_booking / check_end_change), then the budget book's."""
        policy = self.policy_for(groups)
        others = self._policy_context(session, policy, request, now)
        if self.budgets is None:
            return check(policy, request, others, now)
        check(self.budgets.own_rules(policy), request, others, now)
        self.budgets.check(session, request, policy, now)

    def _place(self, session: Session, request: Booking, groups: Any, is_admin: bool,
               now: datetime, actor: str | None) -> BookingRow:
        """Check policy and budgets, place ``request`` and add its row (pool already locked)."""
        if not is_admin:
            self._check_rules(session, request, groups, now, booking_policy.check_booking)
        pool_spec, start, end = self.pools[request.pool], request.start, request.end
        bookings, windows = self._overlapping(session, request.pool, start, end)
        placed = placing.place(pool_spec, bookings, start, end, request.amount, windows)
        row = booking_row(request.with_changes(placement=placed), pool_spec, self._stamp())
        session.add(row)
        session.flush()
        self._record(
            session, row, actor, "created", gpus=str(request.amount), start=format_time(start),
            end=format_time(end), node=placed.node, gpu_indices=list(placed.gpus),
        )
        return row

    def get(self, booking_id: int) -> Booking:
        with self._transaction() as session:
            row = session.get(BookingRow, booking_id)
            if row is None:
                raise NotFound(f"There is no booking with id {booking_id}.")
            return booking_from_row(row)

    def list(
        self,
        user: str | None = None,
        state: BookingState | str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        limit: int | None = None,
        after: tuple[datetime, int] | None = None,
    ) -> list[Booking]:
        """Bookings by (start, id), optionally of one user, in one state, touching [start, end);
        at most ``limit``, and only those after the (start, id) ``after`` (a page's last)."""
        statement = _page(
            select(BookingRow).order_by(BookingRow.start, BookingRow.id), BookingRow, limit, after
        )
        if user is not None:
            statement = statement.where(BookingRow.user == user)
        if start is not None:
            statement = statement.where(BookingRow.end > as_utc(start))
        if end is not None:
            statement = statement.where(BookingRow.start < as_utc(end))
        if state is not None:
            statement = statement.where(*self._state_filter(state))
        with self._transaction() as session:
            return [booking_from_row(row) for row in session.scalars(statement)]

    def _state_filter(self, state: BookingState | str) -> list:
        try:
            state = BookingState(state)
        except ValueError:
            allowed = ", ".join(s.value for s in BookingState)
            raise InvalidRequest(f"'state' must be one of: {allowed}.") from None
        if state is BookingState.CANCELLED:
            return [BookingRow.status == "cancelled"]
        now = self._now()
        booked = BookingRow.status == "booked"
        if state is BookingState.UPCOMING:
            return [booked, BookingRow.start > now]
        if state is BookingState.ACTIVE:
            return [booked, BookingRow.start <= now, BookingRow.end > now]
        return [booked, BookingRow.end <= now]

    def active_for_user(self, user: str) -> list[Booking]:
        return self.list(user=user, state=BookingState.ACTIVE)

    def active_for_users(self, users: Collection[str]) -> list[Booking]:
        """Active bookings of any of ``users`` (one query, e.g. the members of a group)."""
        if not users:
            return []
        statement = (
            select(BookingRow)
            .where(BookingRow.user.in_(sorted(users)), *self._state_filter(BookingState.ACTIVE))
            .order_by(BookingRow.start, BookingRow.id)
        )
        with self._transaction() as session:
            return [booking_from_row(row) for row in session.scalars(statement)]

    def held_by_prefix(self, prefix: str) -> list[tuple[Booking, datetime]]:
        """Bookings (cancelled ones too: their holder may still run) whose holder name starts
        with ``prefix``, with the time each was claimed: the admission webhook's ``pod:``
        claims, for its reconcile."""
        statement = (
            select(BookingRow)
            .where(BookingRow.server.startswith(prefix, autoescape=True))
            .order_by(BookingRow.id)
        )
        with self._transaction() as session:
            return [(booking_from_row(row), as_utc(row.claimed_at or row.updated))
                    for row in session.scalars(statement)]

    def upcoming_for_user(self, user: str) -> list[Booking]:
        return self.list(user=user, state=BookingState.UPCOMING)

    def cancel(self, booking_id: int, actor: str | None) -> Booking:
        """Cancel an upcoming booking; an active one ends now ("End now"): state ``ended``, the
        rest of its time free at once, no longer counted by the user's limits, never claimed
        again. Its server is the caller's to stop."""
        now = self._stamp()
        with self._transaction(write=True) as session:
            row = self._lock_booking(session, booking_id)
            booking = booking_from_row(row)
            outcome = booking_policy.cancel_outcome(booking, now)
            # the time already used stays booked (history, budget); the rest is freed
            kind = "cancelled" if actor == row.user else "force_cancelled"
            if outcome.status == "cancelled":
                self._record(session, row, actor, kind)
                row.status = "cancelled"
            else:
                self._record(
                    session,
                    row,
                    actor,
                    kind,
                    old_end=format_time(row.end),
                    new_end=format_time(outcome.end),
                )
                row.end = outcome.end
                row.release_reason = outcome.release_reason
            row.updated = self._stamp()
            return booking_from_row(row)

    def change_end(
        self,
        booking_id: int,
        end: datetime,
        actor: str | None,
        groups: Any = (),
        is_admin: bool = False,
    ) -> Booking:
        """Move a booking's end; an extension must fit on the GPUs the booking already holds."""
        end, now = as_utc(end), self._now()
        self._check_on_grid(end, "end")
        with self._transaction(write=True) as session:
            self._lock_for_rules(session, None, groups, is_admin)  # budgets see every pool
            row = self._lock_booking(session, booking_id)
            booking = booking_from_row(row)
            state = booking.state(now)
            if state in (BookingState.CANCELLED, BookingState.ENDED):
                raise Conflict(f"This booking is {state.value} and can no longer be changed.")
            if end <= booking.start:
                raise InvalidRequest("The end time must be after the start time.")
            if end <= now:
                earliest = ceil_to_grid(now, self.slot_minutes)
                raise InvalidRequest(
                    f"The new end {_clock_time(end)} is in the past; choose "
                    f"{_clock_time(earliest)} or later."
                )
            if end == booking.end:
                return booking
            changed = booking.with_changes(end=end)
            if not is_admin:
                self._check_rules(session, changed, groups, now, booking_policy.check_end_change)
            if end > booking.end:
                self._check_extension(session, booking, end)
            self._record(session, row, actor, "end_changed", old_end=format_time(row.end),
                         new_end=format_time(end))
            row.end = end
            row.updated = self._stamp()
            return booking_from_row(row)

    def _check_extension(self, session: Session, booking: Booking, end: datetime) -> None:
        """Refuse (409) unless the booking's own GPUs are free from its end until ``end``."""
        pool = self.pools.get(booking.pool)
        if pool is None:
            raise Conflict(
                f"Pool {booking.pool!r} is no longer configured; its bookings cannot be extended."
            )
        placement = booking.placement
        bookings, windows = self._overlapping(session, pool.name, booking.end, end)
        others = [b for b in bookings if b.id != booking.id]
        table = placing.UsageTable(pool, others, booking.end, end, windows)
        own = [
            g
            for g, gpu in enumerate(table.gpus)
            if gpu[0] == placement.node and gpu[1] in placement.gpus
        ]
        if len(own) != len(placement.gpus):
            raise Conflict(
                "This booking's GPU is no longer part of the pool; it cannot be extended."
            )
        for piece in range(table.pieces):
            column = table.column(piece)
            if any(column[g] + placement.slices > pool.slices_per_gpu for g in own):
                taken_from = table.boundaries[piece]
                raise Conflict(
                    f"The GPU this booking holds on {placement.node} is taken from "
                    f"{_clock_time(taken_from)}; the booking can be extended to "
                    f"{_clock_time(taken_from)} at most."
                )

    def claim(
        self,
        booking_id: int,
        server: str,
        is_running: Callable[[str], bool | None] | None = None,
    ) -> Booking:
        """Bind an active booking to ``server``; take it over only from a server known stopped."""
        holder = self.get(booking_id).server
        # ask about the other server before locking: the answer may take a Hub round trip
        holder_running = None
        if holder is not None and holder != server and is_running is not None:
            holder_running = is_running(holder)  # None: unknown, which is not "stopped"
        now = self._now()
        with self._transaction(write=True) as session:
            row = self._lock_booking(session, booking_id)
            booking = booking_from_row(row)
            state = booking.state(now)
            if state is BookingState.UPCOMING:
                raise Conflict(
                    f"This booking starts at {_clock_time(booking.start)}; it cannot be used "
                    "before then."
                )
            if state is not BookingState.ACTIVE:
                raise Conflict(f"This booking is {state.value} and can no longer be used.")
            if row.server == server:
                return booking
            taken_from = row.server
            if taken_from is not None and (taken_from != holder or holder_running is not False):
                raise Conflict(f"This booking is already in use by server '{taken_from}'.")
            row.server = server
            row.claimed_at = row.updated = self._stamp()
            open_usage(session, row, server, row.claimed_at)
            self._record(
                session, row, row.user, "claimed", server=server, taken_over_from=taken_from
            )
            return booking_from_row(row)

    def release(self, booking_id: int, server: str) -> Booking:
        """Unbind ``server`` from the booking; a server that does not hold it changes nothing."""
        with self._transaction(write=True) as session:
            row = self._lock_booking(session, booking_id)
            if row.server == server:
                self._unbind(session, row, row.user, "released")
            return booking_from_row(row)

    def expire_claim(self, booking_id: int, server: str, checked_at: datetime) -> Booking | None:
        """Drop ``server``'s claim, found stale by a check of the Hub at ``checked_at`` (its
        server stopped, or runs without this booking). A claim made since then, in the same
        second or later, is newer than the check and kept. None when nothing was expired."""
        checked_second = as_utc(checked_at).replace(microsecond=0)
        with self._transaction(write=True) as session:
            row = self._lock_booking(session, booking_id)
            claimed_at = as_utc(row.claimed_at) if row.claimed_at else None
            if row.server != server or claimed_at is None or claimed_at >= checked_second:
                return None
            self._unbind(session, row, None, "claim_expired")
            return booking_from_row(row)

    def _unbind(self, session: Session, row: BookingRow, actor: str | None, kind: str) -> None:
        self._record(session, row, actor, kind, server=row.server)
        row.server = None
        row.claimed_at = None
        row.updated = self._stamp()
        close_usage(session, row, row.updated)

    def held_except_prefix(self, prefix: str) -> list[tuple[Booking, datetime]]:
        """Booked bookings held by a server whose name does not start with ``prefix`` (the Hub's
        servers, leaving the webhook's ``pod:`` holders out), with their claim times."""
        statement = (
            select(BookingRow)
            .where(BookingRow.status == "booked", BookingRow.server.is_not(None),
                   ~BookingRow.server.startswith(prefix, autoescape=True))
            .order_by(BookingRow.user, BookingRow.id)
        )
        with self._transaction() as session:
            return [(booking_from_row(row), as_utc(row.claimed_at or row.updated))
                    for row in session.scalars(statement)]

    def history(self, booking_id: int) -> list[BookingEvent]:
        with self._transaction() as session:
            if session.get(BookingRow, booking_id) is None:
                raise NotFound(f"There is no booking with id {booking_id}.")
            rows = session.scalars(
                select(BookingEventRow)
                .where(BookingEventRow.booking_id == booking_id)
                .order_by(BookingEventRow.id)
            )
            return [event_from_row(row) for row in rows]

    # -- capacity and maintenance -----------------------------------------------------------

    def availability(
        self, pool: str, start: datetime, end: datetime
    ) -> list[placing.AvailabilityInterval]:
        pool_spec = self._pool(pool)
        start, end = as_utc(start), as_utc(end)
        with self._transaction() as session:
            bookings, windows = self._overlapping(session, pool, start, end)
        return placing.availability(pool_spec, bookings, start, end, windows)

    def add_maintenance(
        self,
        pool: str,
        start: datetime,
        end: datetime,
        node: str | None = None,
        reason: str = "",
        actor: str | None = None,
    ) -> tuple[MaintenanceWindow, list[Booking]]:
        """Block a pool (or one node); returns the window and the bookings it collides with.

        Colliding bookings are not cancelled here: the admin decides (see ``cancel``).
        """
        pool_spec = self._pool(pool)
        start, end = as_utc(start), as_utc(end)
        if end <= start:
            raise InvalidRequest("The end time must be after the start time.")
        if node is not None and node not in pool_spec.nodes:
            raise InvalidRequest(f"Pool {pool} has no node named {node!r}.")
        if len(reason) > MAX_TEXT_LENGTH:
            raise InvalidRequest(f"The reason may be at most {MAX_TEXT_LENGTH} characters long.")
        with self._transaction(write=True) as session:
            self._lock_pool(session, pool)
            row = MaintenanceWindowRow(
                pool=pool,
                node=node,
                start=start,
                end=end,
                reason=reason,
                created=self._stamp(),
                created_by=actor,
            )
            session.add(row)
            session.flush()
            window = maintenance_from_row(row)
            bookings, _ = self._overlapping(session, pool, start, end)
            return window, placing.maintenance_collisions(window, bookings)

    def list_maintenance(
        self,
        pool: str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        limit: int | None = None,
        after: tuple[datetime, int] | None = None,
    ) -> list[MaintenanceWindow]:
        """Windows by (start, id), paged like :meth:`list`."""
        statement = _page(
            select(MaintenanceWindowRow).order_by(
                MaintenanceWindowRow.start, MaintenanceWindowRow.id
            ),
            MaintenanceWindowRow,
            limit,
            after,
        )
        if pool is not None:
            statement = statement.where(MaintenanceWindowRow.pool == pool)
        if start is not None:
            statement = statement.where(MaintenanceWindowRow.end > as_utc(start))
        if end is not None:
            statement = statement.where(MaintenanceWindowRow.start < as_utc(end))
        with self._transaction() as session:
            return [maintenance_from_row(row) for row in session.scalars(statement)]

    def delete_maintenance(self, window_id: int) -> None:
        with self._transaction(write=True) as session:
            row = session.get(MaintenanceWindowRow, window_id)
            if row is None:
                raise NotFound(f"There is no maintenance window with id {window_id}.")
            session.delete(row)

    # -- calendar feed tokens ---------------------------------------------------------------

    def feed_token(self, user: str, reset: bool = False) -> str:
        """A new secret calendar-feed token for ``user`` (only its SHA-256 is kept).

        Without ``reset`` this only works while the user has no token yet, because a stored
        hash cannot give the token back.
        """
        token = secrets.token_urlsafe(32)
        with self._transaction(write=True) as session:
            row = session.get(FeedTokenRow, user)
            if row is not None and not reset:
                raise Conflict(
                    "You already have a calendar link and it cannot be shown again; reset it "
                    "to get a new one (the old link then stops working)."
                )
            if row is None:
                session.add(
                    FeedTokenRow(
                        user=user, token_hash=hash_feed_token(token), created=self._stamp()
                    )
                )
            else:
                row.token_hash = hash_feed_token(token)
                row.created = self._stamp()
        return token

    def has_feed_token(self, user: str) -> bool:
        with self._transaction() as session:
            return session.get(FeedTokenRow, user) is not None

    def user_for_feed_token(self, token: str) -> str | None:
        with self._transaction() as session:
            return session.execute(
                select(FeedTokenRow.user).where(FeedTokenRow.token_hash == hash_feed_token(token))
            ).scalar_one_or_none()

    # -- configuration ----------------------------------------------------------------------

    def sync_pools(self) -> None:
        """Upsert the configured pools; rows (and bookings) of removed pools are kept."""
        for attempt in range(2):
            try:
                with self._transaction(write=True) as session:
                    for pool in self.pools.values():
                        row = session.get(PoolRow, pool.name)
                        if row is None:
                            row = PoolRow(name=pool.name)
                            session.add(row)
                        row.config = pool_config(pool)
                        row.synced_at = self._stamp()
                return
            except IntegrityError:
                # another process inserted the same pool at the same moment: update instead
                if attempt:
                    raise
