"""BookingStore: every booking change, as one short transaction on the database.

Changes go through the store's unit of work (:mod:`.unit_of_work`: the transaction holding
the pool locks, placement, events), reads through :mod:`.queries`; the other db modules
(series, lifecycle, opportunistic grants) use the same public unit of work. The store is
synchronous; the service runs it in an executor.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ..core import placement as placing
from ..core import policy as booking_policy
from ..core.clock import Clock, SystemClock
from ..core.errors import BookingError, Conflict, InvalidRequest, NotFound
from ..core.exact_moves import DEFAULT_RETRY_SECONDS
from ..core.exact_moves import DEFAULT_SECONDS as DEFAULT_EXACT_SECONDS
from ..core.model import Booking, BookingState, MaintenanceWindow, Pool
from ..core.timegrid import as_utc, clock_text, floor_to_grid, format_time, is_on_grid
from . import creates, maintenance
from .convert import BookingEvent, booking_from_row, event_from_row, pool_config
from .creates import MakeRoom, NewBooking
from .models import BookingEventRow, BookingRow, PoolRow
from .queries import overlapping, page, state_filter
from .session import write_transaction
from .unit_of_work import BookingChecks, UnitOfWork
from .usage import close_usage

# How late a "book now" may arrive: one sent in a slot's last seconds still gets that slot when
# it reaches the service just after the slot ended (network, a busy service, a browser's clock).
LATE_BOOK_NOW = timedelta(seconds=30)


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
        exact_move_seconds: float = DEFAULT_EXACT_SECONDS,
        exact_move_solver: str = "auto",
        exact_move_retry_seconds: float = DEFAULT_RETRY_SECONDS,
        on_longer_search: Callable[[str, float | None], None] | None = None,
    ):
        self._session_factory = session_factory
        self.pools = dict(pools)
        self._policies: dict[tuple[str, ...], booking_policy.Policy] = {}
        self.default_policy = default_policy if default_policy is not None else {}
        self.group_policies = dict(group_policies or {})
        self._synced_pools: frozenset[str] = frozenset()
        self.slot_minutes = slot_minutes
        self.clock = clock or SystemClock()
        #: a :class:`~.budgets.BudgetBook` (group budgets, charge mode) or None
        self.budgets = budgets
        #: seconds a create may spend on the exact re-placement of upcoming bookings (0: off)
        self.exact_move_seconds = exact_move_seconds
        #: which solver answers it (:data:`~..core.ilp_solvers.SOLVERS`)
        self.exact_move_solver = exact_move_solver
        #: seconds the search may go on without the pool's lock when that ran out (0: off)
        self.exact_move_retry_seconds = exact_move_retry_seconds
        #: told what each longer search came to and how long it took (for the metrics)
        self._on_longer_search = on_longer_search

    # -- configuration held in memory ------------------------------------------------------

    @property
    def default_policy(self) -> Any:
        return self._default_policy

    @default_policy.setter
    def default_policy(self, policy: Any) -> None:
        # every policy_for answer was derived from the old value
        self._default_policy = policy
        self._policies = {}

    @property
    def group_policies(self) -> dict[str, Mapping[str, Any]]:
        return self._group_policies

    @group_policies.setter
    def group_policies(self, policies: Mapping[str, Mapping[str, Any]]) -> None:
        # a copy: a change of the caller's dict later must not bypass the cache's reset
        self._group_policies = dict(policies)
        self._policies = {}

    @property
    def synced_pools(self) -> frozenset[str]:
        """Names of the pools :meth:`sync_pools` has written to the database (their rows are
        never deleted, so they stay there)."""
        return self._synced_pools

    # -- transactions ------------------------------------------------------------------------

    @contextmanager
    def unit_of_work(self, pools: Iterable[str] = ()) -> Iterator[UnitOfWork]:
        """A write transaction holding the locks of ``pools`` (taken in name order); it commits
        when the block ends and rolls everything back when the block raises."""
        work = None
        try:
            with write_transaction(self._session_factory.kw["bind"]) as connection:
                work = UnitOfWork(self, connection, self._session_factory)
                work.lock_pools(pools)
                yield work
                work.rows()  # the block's ORM changes go out before the commit
        finally:
            if work is not None:
                work.close()

    @contextmanager
    def read_transaction(self) -> Iterator[Session]:
        """A transaction for reads: it locks no pool, so it never queues behind placements."""
        with self._session_factory.begin() as session:
            yield session

    def now(self) -> datetime:
        return as_utc(self.clock.now())

    def stamp(self) -> datetime:
        """Now, as stored: whole seconds, so every backend keeps it identically."""
        return self.now().replace(microsecond=0)

    def pool(self, name: str) -> Pool:
        """The configured pool ``name`` (NotFound, the user's 404, for any other name)."""
        try:
            return self.pools[name]
        except KeyError:
            raise NotFound(f"There is no GPU pool named {name!r}.") from None

    def pools_for_rules(self, pool: str, groups: Any, is_admin: bool) -> list[str]:
        """The pools a change in ``pool`` must lock: every pool when a rule counts bookings
        across pools (booking count, GPU-hour budgets), so requests in two pools cannot both
        pass it; otherwise ``pool`` alone."""
        policy = self.policy_for(groups)
        across = not is_admin and (
            policy.max_bookings is not None or policy.budget_gpu_hours is not None
            or bool(self.budgets is not None and self.budgets.group_budgets)
        )
        return sorted({*self.pools, pool}) if across else [pool]

    def overlapping(
        self, pool: str, start: datetime, end: datetime
    ) -> tuple[list[Booking], list[MaintenanceWindow]]:
        """What holds capacity of ``pool`` in [start, end), read without locking."""
        with self.read_transaction() as session:
            return overlapping(session, pool, as_utc(start), as_utc(end), self.now())

    # -- validation -------------------------------------------------------------------------

    def _check_on_grid(self, when: datetime, field: str) -> None:
        if not is_on_grid(when, self.slot_minutes):
            before = floor_to_grid(when, self.slot_minutes)
            after = before + timedelta(minutes=self.slot_minutes)
            raise InvalidRequest(
                f"The {field} time {clock_text(when)} is not on the {self.slot_minutes}-minute "
                f"booking grid; choose e.g. {clock_text(before)} or {clock_text(after)}."
            )

    def check_interval(self, start: datetime, end: datetime, now: datetime) -> None:
        """Refuse (400) an interval off the booking grid, empty, or starting before the slot
        running at ``now``."""
        self._check_on_grid(start, "start")
        self._check_on_grid(end, "end")
        if end <= start:
            raise InvalidRequest("The end time must be after the start time.")
        current_slot = floor_to_grid(now, self.slot_minutes)
        # "book now": the slot that is running is still bookable from its beginning; so is the
        # one that ended moments ago, for a "now" sent in its last seconds that arrives after it
        if start < floor_to_grid(now - LATE_BOOK_NOW, self.slot_minutes):
            raise InvalidRequest(
                f"The start time {clock_text(start)} is in the past; start at "
                f"{clock_text(current_slot)} (the current slot) or later."
            )

    def policy_for(self, groups: Any = ()) -> booking_policy.Policy:
        """The policy that applies to a member of ``groups``.

        Worked out once per set of groups and kept: the policies come from the configuration,
        and assigning ``default_policy`` or ``group_policies`` forgets every kept answer.
        """
        key = tuple(sorted(set(groups)))
        policy = self._policies.get(key)
        if policy is None:
            policy = booking_policy.effective_policy(
                self._default_policy, self._group_policies, key
            )
            self._policies[key] = policy
        return policy

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
        make_room: MakeRoom | None = None,
        request_key: str | None = None,
    ) -> Booking:
        """Book ``gpus`` of ``pool`` for [start, end) or raise the refusal a user would see.
        With ``request_key`` (a create's Idempotency-Key), the booking this user made with the
        same key, if any, instead of a second one (:mod:`.request_keys`).

        ``make_room(work, request, now)`` is called when the pool is full, inside the same
        locked transaction; when it frees capacity (returns the bookings it changed) the booking
        is placed again.
        One transaction: if the booking still does not fit, what it freed is rolled back, and
        the refusal names the earliest free interval of the same length from ``start`` on.
        When the search for bookings to move ran out of time under the pool's lock, a longer one
        follows without it (:meth:`search_longer`).
        """
        new = self.new_booking(user, pool, gpus, start, end, note=note, groups=groups,
                               is_admin=is_admin, actor=actor, make_room=make_room,
                               request_key=request_key)
        return creates.created(self.create_one(new))

    def create_one(self, new: NewBooking) -> Booking | Exception:
        """The outcome of the create ``new`` alone, searching longer without the pool's lock
        when its search under the lock ran out of time (:meth:`search_longer`)."""
        (outcome,) = self.create_all([new])
        return self.search_longer(new, outcome)

    def search_longer(self, new: NewBooking,
                      outcome: Booking | Exception) -> Booking | Exception:
        """``outcome`` of ``new`` from :meth:`create_all`, or what a longer search without the
        pool's lock makes of it: see :func:`.creates.search_longer`."""
        return creates.search_longer(self, new, outcome)

    def observe_longer_search(self, outcome: str, seconds: float | None) -> None:
        """Pass on what a longer search came to (``creates.LONGER_*``) and its seconds (None
        when none ran) to whoever asked to be told."""
        if self._on_longer_search is not None:
            self._on_longer_search(outcome, seconds)

    def new_booking(self, user: str, pool: str, gpus: Any, start: datetime, end: datetime,
                    **options: Any) -> NewBooking:
        """A create as :meth:`create` takes it, checked without the database, for
        :meth:`create_all` (see :func:`.creates.prepare`)."""
        return creates.prepare(self, user, pool, gpus, start, end, **options)

    def create_all(self, new: Sequence[NewBooking],
                   seconds: float | None = None) -> list[Booking | Exception]:
        """Create the bookings ``new`` in one transaction, each refused or failed on its own,
        taking no further create after ``seconds``: see :func:`.creates.create_all`."""
        return creates.create_all(self, new, seconds)

    def get(self, booking_id: int) -> Booking:
        with self.read_transaction() as session:
            row = session.get(BookingRow, booking_id)
            if row is None:
                raise NotFound(f"There is no booking with id {booking_id}.")
            return booking_from_row(row)

    def get_many(self, booking_ids: Collection[int]) -> dict[int, Booking]:
        """The bookings of ``booking_ids`` that exist, by id, in one query (a missing id is
        simply not in the answer)."""
        if not booking_ids:
            return {}
        statement = select(BookingRow).where(BookingRow.id.in_(sorted(booking_ids)))
        with self.read_transaction() as session:
            return {row.id: booking_from_row(row) for row in session.scalars(statement)}

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
        statement = page(
            select(BookingRow).order_by(BookingRow.start, BookingRow.id), BookingRow, limit, after
        )
        if user is not None:
            statement = statement.where(BookingRow.user == user)
        if start is not None:
            statement = statement.where(BookingRow.end > as_utc(start))
        if end is not None:
            statement = statement.where(BookingRow.start < as_utc(end))
        if state is not None:
            statement = statement.where(*state_filter(state, self.now()))
        with self.read_transaction() as session:
            return [booking_from_row(row) for row in session.scalars(statement)]

    def active_for_user(self, user: str) -> list[Booking]:
        return self.list(user=user, state=BookingState.ACTIVE)

    def active_for_users(self, users: Collection[str]) -> list[Booking]:
        """Active bookings of any of ``users`` (one query, e.g. the members of a group)."""
        if not users:
            return []
        statement = (
            select(BookingRow)
            .where(BookingRow.user.in_(sorted(users)), *state_filter(BookingState.ACTIVE, self.now()))
            .order_by(BookingRow.start, BookingRow.id)
        )
        with self.read_transaction() as session:
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
        with self.read_transaction() as session:
            return [(booking_from_row(row), as_utc(row.claimed_at or row.updated))
                    for row in session.scalars(statement)]

    def upcoming_for_user(self, user: str) -> list[Booking]:
        return self.list(user=user, state=BookingState.UPCOMING)

    def cancel(self, booking_id: int, actor: str | None,
               check: Callable[[Booking], None] | None = None, **detail: Any) -> Booking:
        """Cancel an upcoming booking; an active one ends now ("End now"): state ``ended``, the
        rest of its time free at once, no longer counted by the user's limits, never claimed
        again. Its server is the caller's to stop.

        ``check(booking)`` sees the booking, locked, before anything changes, and raises to
        refuse (who may cancel it): no read of its own before this transaction. ``detail``
        goes into the cancel's event (e.g. the ``reason``)."""
        with self.unit_of_work() as work:
            row = work.lock_booking(booking_id)
            if check is not None:
                check(booking_from_row(row))
            work.cancel(row, actor, **detail)
            return booking_from_row(row)

    def change_end(
        self,
        booking_id: int,
        end: datetime,
        actor: str | None,
        groups: Any = (),
        is_admin: bool = False,
    ) -> Booking:
        """Move a booking's end; an extension must fit on the GPUs the booking already holds,
        which upcoming bookings no server claimed leave for other GPUs if that makes room."""
        end, now = as_utc(end), self.now()
        self._check_on_grid(end, "end")
        with self.unit_of_work() as work:
            # a shorter end can matter to a rule counted across pools (budgets): lock like create
            work.lock_pools(self.pools_for_rules(work.pool_of(booking_id), groups, is_admin))
            row = work.lock_booking(booking_id)
            booking = booking_from_row(row)
            moves = work.check_end_change(booking, end, groups, is_admin, now)
            if end == booking.end:
                return booking
            work.move_all([(move.booking, move.placement) for move in moves])
            work.record(row, actor, "end_changed", old_end=format_time(row.end),
                        new_end=format_time(end))
            row.end = end
            row.updated = self.stamp()
            return booking_from_row(row)

    def largest_extension(
        self, booking_id: int, horizon: timedelta, groups: Any = (), is_admin: bool = False
    ) -> tuple[Booking, datetime | None, str | None]:
        """The booking, the latest end :meth:`change_end` would accept right now (at most
        ``horizon`` after the current end), and None with the refusal of the shortest
        extension when there is none.

        change_end's own checks decide, on one read transaction: the shortest extension is
        checked in full; the booking's GPUs are looked at once, up to the horizon (the first
        moment they are taken bounds the search, or, when upcoming bookings there can move to
        other GPUs, the latest end they make room for); then the rules (length, gap to the next
        booking, budgets), each of which refuses a later end once it refuses an earlier one, by
        a binary search over grid slots. Read only: nothing is locked, so a change in between
        can still refuse the extension itself.
        """
        now, slot = self.now(), timedelta(minutes=self.slot_minutes)
        with self.read_transaction() as session:
            checks = BookingChecks(self, session)
            row = session.get(BookingRow, booking_id)
            if row is None:
                raise NotFound(f"There is no booking with id {booking_id}.")
            booking = booking_from_row(row)
            first = floor_to_grid(booking.end, self.slot_minutes) + slot

            def end_after(slots: int) -> datetime:
                return first + (slots - 1) * slot

            try:
                checks.check_end_change(booking, first, groups, is_admin, now)
            except BookingError as refused:
                return booking, None, refused.message
            most = max(1, horizon // slot)
            taken_from = checks.taken_from(booking, end_after(most))
            if taken_from is not None:
                # as far as moving upcoming bookings off the booking's GPUs makes room
                fits_until = max(end_after(1), floor_to_grid(taken_from, self.slot_minutes))
                latest = checks.latest_end_with_room(
                    checks.extension_room(booking, end_after(most)), fits_until,
                    end_after(most) + slot)
                most = (latest - first) // slot + 1

            def allowed(slots: int) -> bool:
                changed = booking.with_changes(end=end_after(slots))
                try:
                    checks.check_rules(changed, groups, now, booking_policy.check_end_change)
                except BookingError:
                    return False
                return True

            good, bad = 1, most + 1  # allowed(good); bad is beyond
            if not is_admin:
                while bad - good > 1:
                    middle = (good + bad) // 2
                    good, bad = (middle, bad) if allowed(middle) else (good, middle)
            else:
                good = most
            return booking, end_after(good), None

    def claim(
        self,
        booking_id: int,
        server: str,
        is_running: Callable[[str], bool | None] | None = None,
        read: Booking | None = None,
    ) -> Booking:
        """Bind an active booking to ``server``; take it over only from a server known stopped.

        ``read`` is the booking as the caller has just read it: its holder is the one
        ``is_running`` is asked about, so the store need not read it again (under the lock, a
        holder other than that one still refuses)."""
        holder = holder_running = None
        if is_running is not None:
            # ask about the other server before locking: the answer may take a Hub round trip
            holder = (read if read is not None else self.get(booking_id)).server
            if holder is not None and holder != server:
                holder_running = is_running(holder)  # None: unknown, which is not "stopped"
        now = self.now()
        with self.unit_of_work() as work:
            row = work.lock_booking(booking_id, read.pool if read is not None else None)
            booking = booking_from_row(row)
            state = booking.state(now)
            if state is BookingState.UPCOMING:
                raise Conflict(
                    f"This booking starts at {clock_text(booking.start)}; it cannot be used "
                    "before then."
                )
            if state is not BookingState.ACTIVE:
                raise Conflict(f"This booking is {state.value} and can no longer be used.")
            if row.server == server:
                return booking
            taken_from = row.server
            if taken_from is not None and (taken_from != holder or holder_running is not False):
                raise Conflict(f"This booking is already in use by server '{taken_from}'.")
            return booking_from_row(work.bind(row, server))

    def release(self, booking_id: int, server: str, user: str | None = None) -> Booking:
        """Unbind ``server`` (of ``user``, when given) from the booking; a server that does not
        hold it, or another user's server of the same name, changes nothing."""
        with self.unit_of_work() as work:
            row = work.lock_booking(booking_id)
            if row.server == server and user in (None, row.user):
                self._unbind(work, row, row.user, "released")
            return booking_from_row(row)

    def expire_claim(self, booking_id: int, server: str, checked_at: datetime) -> Booking | None:
        """Drop ``server``'s claim, found stale by a check of the Hub at ``checked_at`` (its
        server stopped, or runs without this booking). A claim made since then, in the same
        second or later, is newer than the check and kept. None when nothing was expired."""
        checked_second = as_utc(checked_at).replace(microsecond=0)
        with self.unit_of_work() as work:
            row = work.lock_booking(booking_id)
            claimed_at = as_utc(row.claimed_at) if row.claimed_at else None
            if row.server != server or claimed_at is None or claimed_at >= checked_second:
                return None
            self._unbind(work, row, None, "claim_expired")
            return booking_from_row(row)

    def _unbind(self, work: UnitOfWork, row: BookingRow, actor: str | None, kind: str) -> None:
        work.record(row, actor, kind, server=row.server)
        row.server = None
        row.claimed_at = None
        row.updated = self.stamp()
        close_usage(work.session, row, row.updated)

    def held_except_prefix(self, prefix: str) -> list[tuple[Booking, datetime]]:
        """Booked bookings held by a server whose name does not start with ``prefix`` (the Hub's
        servers, leaving the webhook's ``pod:`` holders out), with their claim times."""
        statement = (
            select(BookingRow)
            .where(BookingRow.status == "booked", BookingRow.server.is_not(None),
                   ~BookingRow.server.startswith(prefix, autoescape=True))
            .order_by(BookingRow.user, BookingRow.id)
        )
        with self.read_transaction() as session:
            return [(booking_from_row(row), as_utc(row.claimed_at or row.updated))
                    for row in session.scalars(statement)]

    def history(self, booking_id: int) -> list[BookingEvent]:
        with self.read_transaction() as session:
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
        pool_spec = self.pool(pool)
        start, end = as_utc(start), as_utc(end)
        bookings, windows = self.overlapping(pool, start, end)
        return placing.availability(pool_spec, bookings, start, end, windows)

    def add_maintenance(self, pool: str, start: datetime, end: datetime, node: str | None = None,
                        reason: str = "", actor: str | None = None, request_key: str | None = None
                        ) -> tuple[MaintenanceWindow, list[Booking]]:
        """Block a pool (or one node): see :func:`.maintenance.add_window`."""
        return maintenance.add_window(self, pool, start, end, node, reason, actor, request_key)

    def list_maintenance(self, pool: str | None = None, start: datetime | None = None,
                         end: datetime | None = None, limit: int | None = None,
                         after: tuple[datetime, int] | None = None) -> list[MaintenanceWindow]:
        """Windows by (start, id), paged like :meth:`list`."""
        return maintenance.list_windows(self, pool, start, end, limit, after)

    def delete_maintenance(self, window_id: int) -> None:
        maintenance.delete_window(self, window_id)

    # -- configuration ----------------------------------------------------------------------

    def sync_pools(self) -> None:
        """Upsert the configured pools; rows (and bookings) of removed pools are kept.

        Only pools whose stored config differs are written: node discovery calls this on every
        node change, and a written row is its pool's lock, which creates in the pool wait for."""
        for attempt in range(2):
            pools = self.pools
            try:
                with self.unit_of_work() as work:
                    self._write_pools(work, pools)
                # committed: these rows exist from now on
                self._synced_pools = self._synced_pools | frozenset(pools)
                return
            except IntegrityError:
                # another process inserted the same pool at the same moment: update instead
                if attempt:
                    raise

    def _write_pools(self, work: UnitOfWork, pools: Mapping[str, Pool]) -> None:
        configs = {name: pool_config(pool) for name, pool in pools.items()}
        stored = {row.name: row for row in work.session.scalars(
            select(PoolRow).where(PoolRow.name.in_(sorted(configs))))}
        # compared as the JSON column gives it back (a tuple comes back as a list)
        changed = sorted(name for name, row in stored.items()
                         if row.config != json.loads(json.dumps(configs[name])))
        # Locked as placements lock, at once in name order: writing row after row in the pools'
        # own order deadlocked (PostgreSQL, MariaDB) with a create that locks two pools.
        work.lock_pools(changed)
        stamp = self.stamp()
        for name in changed:
            stored[name].config = configs[name]
            stored[name].synced_at = stamp
        work.session.add_all(PoolRow(name=name, config=configs[name], synced_at=stamp)
                             for name in sorted(set(configs) - set(stored)))
