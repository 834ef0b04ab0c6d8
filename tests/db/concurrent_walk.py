"""Every kind of write the service makes, at once, on one database: a seeded concurrent walk.

The service runs its database work in a thread pool: users' requests (create, end now, extend,
claim at a server's start, the waitlist, series, start early, grants), the admission webhook's
pod claims, the lifecycle tick (releases, warnings, the waitlist's serving), node discovery
(``sync_pools`` and booking flags), an admin's maintenance windows and ends, and
``jhub-gpubooking users rename`` (a user renamed and back) all share one
:class:`BookingStore`. Single-path tests run them one after another;
here each kind has its own thread, seeded, for a fixed number of actions, while the clock moves
on. A write that fails for anything but a refusal the user would be shown (a deadlock, a lock
wait time-out, an integrity error) is recorded with what the thread was doing.

The threads' interleaving is up to the OS and the database, so a run is not repeatable step by
step; the seed fixes what each thread asks for. :func:`check_invariants` then re-reads the
database: no GPU over capacity at any instant, no wait booked twice or without its booking.
"""

from __future__ import annotations

import random
import threading
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from jhub_gpubooking.core.errors import BookingError
from jhub_gpubooking.core.lifecycle import ActionKind, LifecycleRules
from jhub_gpubooking.core.model import Booking, BookingState, Pool
from jhub_gpubooking.core.placement import overbooked_instants
from jhub_gpubooking.core.recurrence import Occurrence
from jhub_gpubooking.core.timegrid import floor_to_grid
from jhub_gpubooking.core.waitlist import WaitState
from jhub_gpubooking.db import claims, series, user_rename
from jhub_gpubooking.db.flags import BookingFlags
from jhub_gpubooking.db.lifecycle import BookingLifecycle
from jhub_gpubooking.db.opportunistic import OpportunisticBookings
from jhub_gpubooking.db.start_early import EarlyStarts
from jhub_gpubooking.db.store import BookingStore
from jhub_gpubooking.db.waitlist import WaitStore

SLOT = timedelta(minutes=15)

#: The walk's pools, deliberately *not* in name order: discovered pools follow the configured
#: ones in the service's dict, and every lock must still be taken in name order.
def walk_pools() -> dict[str, Pool]:
    return {
        "t4": Pool(name="t4", nodes={"node-c": 2}, slices_per_gpu=4, backend="hami"),
        "a100": Pool(name="a100", nodes={"node-a": 2, "node-b": 2}),
    }


AMOUNTS = {"a100": ["1", "1", "2"], "t4": ["1/4", "1/2", "1"]}
#: Users of this group may hold at most two bookings: every change of theirs locks both pools.
LIMITED = {"limited": {"max_bookings": 2}}


@dataclass
class Failure:
    """A write that failed for a reason no user should be shown."""

    thread: str
    action: str
    error: str
    trace: str

    def __str__(self) -> str:
        return f"{self.thread} {self.action}: {self.error}\n{self.trace}"


@dataclass
class WalkResult:
    done: Counter = field(default_factory=Counter)  # action -> completed
    refused: Counter = field(default_factory=Counter)  # action -> refused as a user sees it
    failures: list[Failure] = field(default_factory=list)


class ConcurrentWalk:
    """The threads of one walk on ``store`` (synced, with a ManualClock)."""

    def __init__(self, store: BookingStore, seed: int, actions: int, users: int = 4):
        self.store = store
        self.clock = store.clock
        self.seed = seed
        self.actions = actions
        self.users = users
        self.waits = WaitStore(store)
        self.lifecycle = BookingLifecycle(store, LifecycleRules(
            warn_before=timedelta(minutes=10), no_show_after=timedelta(minutes=15),
            stopped_release_after=timedelta(minutes=15)))
        self.early = EarlyStarts(store, horizon=timedelta(hours=2))
        self.grants = OpportunisticBookings(store, self.lifecycle)
        self.flags = BookingFlags(store)  # as node discovery sets them
        self.result = WalkResult()
        self.syncs = 0
        self._lock = threading.Lock()  # guards result and the clock's moves

    # -- running ---------------------------------------------------------------------------------

    def run(self, timeout: float = 300) -> WalkResult:
        workers = [(f"user{n}", self._user_step) for n in range(self.users)]
        workers += [("service", self._service_step), ("admin", self._admin_step)]
        start = threading.Barrier(len(workers))
        threads = [
            threading.Thread(target=self._thread, args=(name, step, index, start),
                             name=f"walk-{name}", daemon=True)
            for index, (name, step) in enumerate(workers)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout)
            if thread.is_alive():
                raise TimeoutError(f"{thread.name} still runs after {timeout} s: a lock hang?")
        return self.result

    def _thread(self, name: str, step: Callable[[str, random.Random], None], index: int,
                start: threading.Barrier) -> None:
        chooser = random.Random(self.seed * 1000 + index)
        start.wait()
        for _ in range(self.actions):
            try:
                step(name, chooser)
            except Exception as error:  # a read choosing the action failed: recorded, not lost
                self._failed(name, "choosing", error)

    def _failed(self, thread: str, action: str, error: Exception | str) -> None:
        """Record a failure: an exception with the end of its traceback, or what a check saw."""
        if isinstance(error, Exception):
            failure = Failure(thread, action, f"{type(error).__name__}: {error}",
                              "".join(traceback.format_exception(error)[-6:]))
        else:
            failure = Failure(thread, action, error, "")
        with self._lock:
            self.result.failures.append(failure)

    def _attempt(self, thread: str, action: str, function: Callable[[], object]) -> object:
        try:
            outcome = function()
        except BookingError:
            with self._lock:
                self.result.refused[action] += 1
            return None
        except Exception as error:  # anything else is a defect of the concurrent path
            self._failed(thread, action, error)
            return None
        with self._lock:
            self.result.done[action] += 1
        return outcome

    # -- the threads' actions --------------------------------------------------------------------

    def _user_step(self, user: str, chooser: random.Random) -> None:
        groups = ("limited",) if user in ("user0", "user1") else ()
        store, now = self.store, self.clock.now()
        everything = store.list(user=user)
        mine = [b for b in everything if b.status == "booked"]
        live = [b for b in mine if b.state(now) in (BookingState.UPCOMING, BookingState.ACTIVE)]
        active = [b for b in live if b.state(now) is BookingState.ACTIVE]
        upcoming = [b for b in live if b.state(now) is BookingState.UPCOMING]
        pool = chooser.choice(sorted(store.pools))
        amount = chooser.choice(AMOUNTS[pool])
        start = floor_to_grid(now, store.slot_minutes) + SLOT * chooser.randrange(0, 6)
        end = start + SLOT * chooser.randrange(1, 5)
        kind = chooser.choices(
            ["create", "end", "extend", "claim", "release", "wait", "withdraw", "series",
             "start_early", "grant", "pod_claim"],
            weights=[8, 2, 2, 3, 1, 2, 1, 1, 1, 1, 1])[0]
        if kind == "create":
            # the service books through create_preempting when grants are on: half the time
            create = (self.grants.create_preempting if chooser.random() < 0.5
                      else store.create)
            self._attempt(user, kind, lambda: create(
                user, pool, amount, start, end, groups=groups, actor=user))
        elif kind == "grant":
            self._attempt(user, kind, lambda: self.grants.grant(
                user, pool, amount, 30, groups=groups, server=f"{user}/free"))
        elif kind == "pod_claim":
            # the admission webhook admitting a pod of the user's without a Hub server
            self._attempt(user, kind, lambda: claims.claim_first(
                store, user, pool, f"pod:{user}-{pool}", choose=list))
        elif kind == "end" and live:
            booking = chooser.choice(live)
            self._attempt(user, kind, lambda: store.cancel(booking.id, user))
            self._attempt(user, "serve", self.waits.serve)  # as the service does after it
        elif kind == "extend" and live:
            booking = chooser.choice(live)
            new_end = booking.end + SLOT * chooser.choice([-1, 1, 2])
            self._attempt(user, kind, lambda: store.change_end(
                booking.id, new_end, user, groups=groups))
        elif kind == "claim":
            # without an active booking the user books now to start a server on it, so claims
            # happen however the threads interleave (other threads end and release bookings)
            running_slot = floor_to_grid(now, store.slot_minutes)
            booking = chooser.choice(active) if active else self._attempt(
                user, "create", lambda: store.create(
                    user, pool, amount, running_slot, running_slot + (end - start),
                    groups=groups, actor=user))
            if booking is not None:
                self._attempt(user, kind, lambda: store.claim(
                    booking.id, f"{user}/gpu", is_running=lambda server: False))
        elif kind == "release" and active:
            booking = chooser.choice(active)
            self._attempt(user, kind, lambda: store.release(booking.id, f"{user}/gpu"))
        elif kind == "wait":
            self._attempt(user, kind, lambda: self.waits.join(
                user, pool, amount, start, end, window_end=end + SLOT * 4, groups=groups,
                actor=user))
        elif kind == "withdraw":
            waiting = self.waits.list(user=user, state=WaitState.WAITING)
            if waiting:
                wait = chooser.choice(waiting)
                self._attempt(user, kind, lambda: self.waits.withdraw(wait.id))
        elif kind == "series":
            self._series(user, chooser, everything, pool, amount, start, groups)
        elif kind == "start_early" and upcoming:
            booking = chooser.choice(upcoming)
            self._attempt(user, kind, lambda: self.early.start_early(
                booking.id, user, groups=groups))

    def _series(self, user: str, chooser: random.Random, bookings: list[Booking], pool: str,
                amount: str, start: datetime, groups: tuple[str, ...]) -> None:
        mine = [s for s in {b.series_id for b in bookings} if s is not None]
        if mine and chooser.random() < 0.5:
            series_id = chooser.choice(sorted(mine))
            self._attempt(user, "cancel_series",
                          lambda: series.cancel_series(self.store, series_id, user))
            return
        days = [Occurrence(start + timedelta(days=d), start + timedelta(days=d) + SLOT * 2)
                for d in range(3)]
        self._attempt(user, "series", lambda: series.create_series(
            self.store, user, pool, amount, days, "daily", groups=groups, actor=user))

    def _service_step(self, name: str, chooser: random.Random) -> None:
        """The lifecycle tick and node discovery; now and then the clock moves 3 minutes on."""
        now = self.clock.now()
        kind = chooser.choices(["tick", "serve", "sync", "expire_claim", "check", "advance"],
                               weights=[4, 2, 2, 1, 1, 2])[0]
        if kind == "check":
            # one read, while the others write: what it sees must hold as it is
            over = over_capacity_from(self.store, now)
            if over:
                self._failed(name, kind, "; ".join(over))
        elif kind == "tick":
            for action in self.lifecycle.due(now):
                if action.kind is ActionKind.RELEASE:
                    self._attempt(name, "release_rule",
                                  lambda a=action: self.lifecycle.release(a, now))
                elif action.kind is ActionKind.WARN:
                    self._attempt(name, "warn",
                                  lambda a=action: self.lifecycle.mark_warned(a.booking_id))
        elif kind == "serve":
            self._attempt(name, kind, lambda: self.waits.serve(search_longer=True))
        elif kind == "sync":
            # as discovery does after a node change: new configs (a pool unchanged is not
            # written, so every pool changes here, to take every pool's lock)
            self.syncs += 1
            self.store.pools = {name: replace(pool, description=f"sync {self.syncs}")
                                for name, pool in self.store.pools.items()}
            self._attempt(name, kind, self.store.sync_pools)
            # and flags bookings whose GPUs it no longer sees (here: any few)
            live = [b for b in self.store.list(start=now) if b.status == "booked"]
            lost = {b.id: "walk: GPUs gone" for b in chooser.sample(live, min(3, len(live)))}
            self._attempt(name, "flag", lambda: self.flags.update(lost, {b.id for b in live}))
        elif kind == "expire_claim":
            held = self.store.held_except_prefix("pod:")
            if held:
                booking, claimed_at = chooser.choice(held)
                self._attempt(name, kind, lambda: self.store.expire_claim(
                    booking.id, booking.server, claimed_at + timedelta(seconds=1)))
        else:
            with self._lock:
                self.clock.advance(timedelta(minutes=3))

    def _admin_step(self, name: str, chooser: random.Random) -> None:
        store, now = self.store, self.clock.now()
        kind = chooser.choices(["add", "delete", "end_any", "rename"], weights=[1, 1, 2, 1])[0]
        if kind == "add":
            pool = chooser.choice(sorted(store.pools))
            node = chooser.choice([None, *sorted(store.pools[pool].nodes)])
            start = floor_to_grid(now, store.slot_minutes) + SLOT * chooser.randrange(1, 8)
            self._attempt(name, "maintenance", lambda: store.add_maintenance(
                pool, start, start + SLOT, node=node, reason="walk", actor=name))
        elif kind == "delete":
            windows = store.list_maintenance()
            if windows:
                window = chooser.choice(windows)
                self._attempt(name, "delete_maintenance",
                              lambda: store.delete_maintenance(window.id))
        elif kind == "rename":
            # a user without a booking limit (the rename does not check limits again), renamed
            # and back: meanwhile their own thread books under the old name, merged on the way
            # back
            user = f"user{chooser.randrange(2, self.users)}"
            self._attempt(name, kind, lambda: (
                user_rename.rename_user(store, user, f"{user}.renamed"),
                user_rename.rename_user(store, f"{user}.renamed", user)))
        else:
            live = [b for b in store.list(start=now) if b.status == "booked"]
            if live:
                booking = chooser.choice(live)
                self._attempt(name, "admin_end", lambda: store.cancel(booking.id, name))


def over_capacity_from(store: BookingStore, since: datetime, bookings=None) -> list[str]:
    """Each pool's GPUs over capacity at or after ``since``, in words. Earlier instants do not
    count: a booking ended now frees the rest of its slot, and a create may then book the slot
    from its start (the past part of it is nobody's to use)."""
    bookings = store.list() if bookings is None else bookings
    return [
        f"pool {pool.name}: {over}"
        for pool in store.pools.values()
        for over in overbooked_instants(pool, bookings)
        if over.end > since
    ]


def check_invariants(store: BookingStore, since: datetime) -> list[str]:
    """What the database holds that it never may, in words (empty: all held)."""
    bookings = store.list()
    problems = over_capacity_from(store, since, bookings)
    by_id = {b.id: b for b in bookings}
    booked_for: dict[int, list[int]] = defaultdict(list)
    for booking in bookings:
        for event in store.history(booking.id):
            if event.kind == "waitlist_booked":
                booked_for[event.detail["wait"]].append(booking.id)
    for wait in WaitStore(store).list():
        made = booked_for.get(wait.id, [])
        if wait.state is WaitState.BOOKED:
            if made != [wait.booking_id] or wait.booking_id not in by_id:
                problems.append(f"wait {wait.id} booked as {wait.booking_id}, events say {made}")
        elif made:
            problems.append(f"wait {wait.id} is {wait.state.value} but booked {made}")
    return problems
