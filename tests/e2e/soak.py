"""The lifecycle soak: a seeded random walk of user and admin actions on the demo (real
JupyterHub, configurable-http-proxy, booking service, GPUBookingSpawner and the simulated
cluster running real jupyterhub-singleuser processes), with every invariant of
:mod:`soak_invariants` checked after every step.

Actions: book (a refused user may join the waitlist or book the next free slot, see
soak_refusals.py; a create may be sent twice with its Idempotency-Key, soak_resends.py),
withdraw a wait, extend, shorten, end now, cancel, take an offer to start early; an admin's
maintenance windows (added, their collisions cleared, removed), backups of the database
(soak_backup.py) and a restore of one (soak_restore.py); start and stop default and named
servers on CPU and GPU profiles; open a stopped server's chooser (soak_chooser.py); pods
made outside the Hub in gated namespaces (the service's admission webhook, see soak_pods.py);
restarts of the booking service and of the Hub in the
middle of the walk, and, with the service on a private PostgreSQL or MariaDB server, outages of
its database (soak_outage.py); pauses, so bookings start and end on the one-minute grid of the
fast lifecycle clock.

The seed fixes every choice the walk makes from what it sees; the live stack's timing still
varies from run to run. Run it longer than CI does with::

    SOAK_SEED=7 SOAK_ACTIONS=5000 ./scripts/test --deps pins -q tests/e2e/test_lifecycle_soak.py -s

or without pytest: ``python tests/e2e/soak.py --seed 7 --actions 5000``.
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx

from jhub_gpubooking.core.timegrid import ceil_to_grid, floor_to_grid, format_time, parse_time

# run as a script, too: the harness modules live next to this file and in tests/
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from e2e_harness import Driver, running_demo  # noqa: E402
from soak_backup import Backups  # noqa: E402
from soak_chooser import Chooser  # noqa: E402
from soak_invariants import (  # noqa: E402
    Extension,
    InvariantChecker,
    Snapshot,
    SoakFailure,
    WalkFacts,
)
from soak_json import pod_booking_id  # noqa: E402
from soak_outage import BACK_WITHIN_SECONDS, DatabaseOutages, StoppableDatabase  # noqa: E402
from soak_pods import GATED, OutsidePods  # noqa: E402
from soak_refusals import Refused  # noqa: E402
from soak_resends import RESEND, RESEND_WINDOW, Resends  # noqa: E402
from soak_restore import RESTORE_AFTER_STEPS, Restores  # noqa: E402
from soak_series import Series  # noqa: E402

USERS = ("u0", "u1", "u2", "u3", "u4")
SERVER_NAMES = ("", "gpu")
PROFILES = ("cpu", "a100", "a100", "l4")
AMOUNTS = {"a100": (0.25, 0.25, 0.5, 1, 2), "l4": (1, 1, 2)}
#: relative weights of the actions the walk picks from (restarts come at seeded steps)
WEIGHTS = {
    "book": 14, "book for pod": 5, "extend": 8, "shorten": 5, "end now": 5, "cancel": 4,
    "start server": 12, "stop server": 7, "create pod": 7, "delete pod": 4, "pause": 9,
    "withdraw wait": 2, "start early": 4, "maintenance": 3, "open chooser": 4,
}
#: active and upcoming bookings a user may hold (tests/e2e/gpubooking_config.py's policy)
MAX_BOOKINGS = 10
#: real single-user servers cost CPU: beyond this many the walk stops one instead
MAX_SERVERS = 6


def now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class SoakResult:
    seed: int
    actions: Counter = field(default_factory=Counter)  # by action type
    outcomes: Counter = field(default_factory=Counter)  # by (action type, outcome)
    checks: Counter = field(default_factory=Counter)  # by invariant
    seconds_by_action: Counter = field(default_factory=Counter)  # by action type
    seconds_by_read: Counter = field(default_factory=Counter)  # snapshot reads, by API path
    webhook: Counter = field(default_factory=Counter)  # what became of pods made outside the Hub
    waits: Counter = field(default_factory=Counter)  # the waits' states at the end, by state
    steps: int = 0
    seconds: float = 0.0
    check_seconds: float = 0.0

    def table(self) -> str:
        lines = [f"lifecycle soak, seed {self.seed}: {self.steps} actions, "
                 f"{sum(self.checks.values())} invariant checks in {self.seconds:.0f} s", "",
                 f"{'action':<16}{'runs':>6}{'seconds':>9}  outcomes"]
        for action, runs in sorted(self.actions.items()):
            outcomes = ", ".join(f"{outcome} {count}" for (kind, outcome), count
                                 in sorted(self.outcomes.items()) if kind == action)
            seconds = self.seconds_by_action[action]
            lines.append(f"{action:<16}{runs:>6}{seconds:>9.1f}  {outcomes}")
        lines += ["", f"{'invariant':<44}{'checks':>8}  ({self.check_seconds:.0f} s checking)"]
        lines += [f"{name:<44}{count:>8}" for name, count in sorted(self.checks.items())]
        lines += ["", "snapshot reads (seconds, in parallel threads): " + ", ".join(
            f"{path} {seconds:.1f}" for path, seconds in sorted(self.seconds_by_read.items()))]
        lines += ["webhook pods outside the Hub: " + (", ".join(
            f"{what} {count}" for what, count in sorted(self.webhook.items())) or "none")]
        lines += ["waits at the end: " + (", ".join(
            f"{state} {count}" for state, count in sorted(self.waits.items())) or "none")]
        return "\n".join(lines)


class Walk:
    """One seeded walk on a running demo; :meth:`run` returns what it did and checked."""

    def __init__(self, driver: Driver, seed: int, actions: int, log: Callable[[str], None],
                 database: StoppableDatabase | None = None):
        self.driver = driver
        self.demo = driver.demo
        self.rng = random.Random(seed)
        self.total = actions
        self.log = log
        self.result = SoakResult(seed=seed)
        self.facts = WalkFacts()
        # no grace in the soak's config; a stop takes a tick, the Hub's stop and the pod's end,
        # which on a machine busy with other work can take tens of seconds (a pod the service
        # fails to stop runs on for minutes, far beyond this)
        # the waitlist is served every tick (a second here) by the service alone: a wait that
        # fits for longer than a few ticks (outages aside) was lost
        self.checker = InvariantChecker(grace=timedelta(0), slack=timedelta(seconds=45),
                                        max_bookings=MAX_BOOKINGS,
                                        serve_slack=timedelta(seconds=10))
        self.started = now()
        self.snapshot: Snapshot | None = None
        self.pools: dict[str, dict] = {}
        #: reads the Hub and the cluster while the walk's thread reads the service
        self.reader = ThreadPoolExecutor(max_workers=2, thread_name_prefix="soak-snapshot")
        self.outside = OutsidePods(self, AMOUNTS)
        self.outages = None if database is None else DatabaseOutages(self, database)
        self.backups, self.refused, self.restores = Backups(self), Refused(self), Restores(self)
        self.resends, self.series = Resends(self, seed), Series(self, seed)
        self.chooser = Chooser(self, USERS, SERVER_NAMES)
        # what interrupts the walk comes at seeded steps of its middle
        span = range(actions // 5, max(actions * 4 // 5, actions // 5 + 1))
        self.interruptions = {step: "restart service"
                              for step in self.rng.sample(span, max(1, actions // 400))}
        for kind, count in (("restart hub", max(1, actions // 500)),
                            ("backup", max(1, actions // 100)),
                            ("database outage", max(1, actions // 125) if database else 0)):
            for step in self.rng.sample([s for s in span if s not in self.interruptions],
                                        count):
                self.interruptions[step] = kind
        # one restore, of a backup taken at least RESTORE_AFTER_STEPS before it
        first_backup = min(step for step, kind in self.interruptions.items() if kind == "backup")
        later = [step for step in span if step >= first_backup + RESTORE_AFTER_STEPS
                 and step not in self.interruptions]
        if later:
            self.interruptions[self.rng.choice(later)] = "restore"

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> SoakResult:
        try:
            return self._run()
        finally:
            self.reader.shutdown(wait=True)
            self.chooser.close()

    def _run(self) -> SoakResult:
        begin = time.monotonic()
        for user in USERS:
            self.driver.ensure_user(user)
        self.check()
        for step in range(self.total):
            kind = self.interruptions.get(step) or self.pick()
            acting = time.monotonic()
            outcome = self.act(kind)
            checking = time.monotonic()
            self.result.seconds_by_action[kind] += checking - acting
            self.result.actions[kind] += 1
            self.result.outcomes[(kind, outcome)] += 1
            self.result.steps += 1
            self.check(f"step {step} ({kind}: {outcome})")
            self.result.check_seconds += time.monotonic() - checking
            if (step + 1) % 50 == 0:
                self.log(f"{step + 1} actions after {time.monotonic() - begin:.0f} s")
        self.result.checks = self.checker.checks
        self.result.waits = Counter(wait["state"] for wait in self.snapshot.waits.values())
        self.result.seconds = time.monotonic() - begin
        return self.result

    def pick(self) -> str:
        kinds = list(WEIGHTS)
        return self.rng.choices(kinds, weights=[WEIGHTS[k] for k in kinds])[0]

    def act(self, kind: str) -> str:
        # what the walk's helpers do; the rest is a do_ method of the walk
        delegated = {"book for pod": self.outside.book, "create pod": self.outside.create,
                     "delete pod": self.outside.delete, "backup": self.backups.backup,
                     "restore": self.restores.restore, "open chooser": self.chooser.open,
                     "database outage": self.outages and self.outages.outage}
        return (delegated.get(kind) or getattr(self, "do_" + kind.replace(" ", "_")))()

    def check(self, after: str = "the start") -> None:
        before, self.snapshot = self.snapshot, self.take_snapshot()
        violations = self.checker.check(self.snapshot, self.facts)
        self.outside.count_outcomes(before)
        if violations:
            raise SoakFailure(f"after {after}:\n  " + "\n  ".join(violations))

    # -- what the demo shows -------------------------------------------------------------------

    def take_snapshot(self) -> Snapshot:
        """One read of the Hub, the cluster and the service that every invariant shares.

        The three answer from three processes: the Hub's servers and the cluster's pods are
        read in threads while this one reads the service, so a step waits for the slowest of
        them, not for their sum."""
        if not self.pools:
            self.pools = {pool["name"]: pool for pool in self.get(self.driver.booking, "pools")}
        # users with a server pending or running: the others have nothing to show
        users = self.reader.submit(self.get, self.driver.hub, "users", params={"state": "active"})
        pods = self.reader.submit(self.timed, "cluster pods", self.driver.cluster_pods)
        period = (floor_to_grid(self.started, 1) - timedelta(minutes=1),
                  ceil_to_grid(now(), 1) + timedelta(hours=2))
        # bookings and report must show one moment: a start may create an opportunistic grant,
        # the lifecycle tick may release or preempt one, while they are read
        # waits before bookings: a wait read as booked names a booking made in the same
        # transaction, so the bookings read after it hold that booking
        waits = self.all_pages("waits", "waits")
        windows = self.all_pages("maintenance", "windows")
        bookings = self.all_bookings()
        for _attempt in range(5):
            report = self.get(self.driver.booking, "admin/report", params={
                "start": format_time(period[0]), "end": format_time(period[1]), "by": "pool"})
            before, bookings = bookings, self.all_bookings()
            if bookings == before:
                break
        servers = {}
        for user in users.result():
            for name, model in (user.get("servers") or {}).items():
                servers[(user["name"], name)] = model
        return Snapshot(now=now(), bookings=bookings, servers=servers, pods=pods.result(),
                        report=report, report_period=period, pools=self.pools, waits=waits,
                        windows=windows)

    def timed(self, what: str, read: Callable[[], object]):
        began = time.monotonic()
        try:
            return read()
        finally:
            self.result.seconds_by_read[what] += time.monotonic() - began

    def all_bookings(self) -> dict[int, dict]:
        return self.all_pages("bookings", "bookings")

    def all_pages(self, path: str, key: str) -> dict[int, dict]:
        """Every item of a paged list of the service, by id."""
        found, cursor = {}, None
        while True:
            page = self.get(self.driver.booking, path,
                            params={"limit": 500, **({"cursor": cursor} if cursor else {})})
            found.update({item["id"]: item for item in page[key]})
            cursor = page.get("next_cursor")
            if not cursor:
                return found

    def get(self, client: httpx.Client, path: str, **kwargs):
        response = self.timed(path, lambda: client.get(path, **kwargs))
        if response.status_code != 200:
            raise SoakFailure(f"GET {path}: {response.status_code} {response.text[:300]}")
        return response.json()

    def answered(self, response: httpx.Response, outcomes: dict[int, str]) -> str:
        """The outcome named for the answer's status; anything else (a 5xx above all) fails."""
        if response.status_code not in outcomes:
            raise SoakFailure(f"{response.request.method} {response.request.url}: "
                              f"{response.status_code} {response.text[:300]}")
        return outcomes[response.status_code]

    def bookings_in(self, *states: str) -> list[dict]:
        return [b for _id, b in sorted(self.snapshot.bookings.items()) if b["state"] in states]

    # -- bookings --------------------------------------------------------------------------------

    def do_book(self) -> str:
        pool = self.rng.choice(("a100", "a100", "l4"))
        start = floor_to_grid(now(), 1)
        if self.rng.random() < 0.25:
            start += timedelta(minutes=self.rng.randint(1, 3))
        end = start + timedelta(minutes=self.rng.randint(1, 4))
        request = {"user": self.rng.choice(USERS), "pool": pool,
                   "gpus": self.rng.choice(AMOUNTS[pool]),
                   "start": format_time(start), "end": format_time(end)}
        if self.series.wants():
            return self.series.act(request)
        if self.resends.rng.random() < RESEND:
            return self.resends.book_twice(request)
        response = self.driver.booking.post("bookings", json=request)
        outcome = self.answered(response, {201: "booked", 409: "full", 403: "over a limit",
                                           400: "start passed"})
        return self.refused.choose(request, response) if outcome == "full" else outcome

    def do_withdraw_wait(self) -> str:
        waiting = [w for _id, w in sorted(self.snapshot.waits.items()) if w["state"] == "waiting"]
        if not waiting:
            return "nothing waits"
        response = self.driver.booking.delete(f"waits/{self.rng.choice(waiting)['id']}")
        return self.answered(response, {200: "withdrawn", 409: "ended meanwhile"})

    def do_extend(self) -> str:
        candidates = self.bookings_in("active", "upcoming")
        running = sorted((b for b in candidates if self.hub_server_on(b["id"]) is not None),
                         key=lambda b: (b["end"], b["id"]))
        if running and self.rng.random() < 0.6:
            # the case that matters most: a server outlives the old end; the sooner that end,
            # the sooner the checker can tell (the walk is short)
            candidates = running[:2]
        if not candidates:
            return "nothing to extend"
        booking = self.rng.choice(candidates)
        old_end = parse_time(booking["end"])
        new_end = old_end + timedelta(minutes=self.rng.randint(1, 3))
        made = now()
        response = self.driver.booking.patch(f"bookings/{booking['id']}",
                                             json={"end": format_time(new_end)})
        outcome = self.answered(response, {200: "extended", 409: "full", 403: "over a limit",
                                           400: "ended meanwhile"})
        server = self.hub_server_on(booking["id"])
        # running still, after the extension: an End now may have stopped it since the snapshot
        model = self.driver.server_model(*server) if server and outcome == "extended" else None
        if model and model.get("ready") and not model.get("pending"):
            self.facts.extensions.append(Extension(booking["id"], server, old_end, made))
            outcome = "extended a running server"
        return outcome

    def hub_server_on(self, booking_id: int) -> tuple[str, str] | None:
        for key, pod in self.snapshot.hub_pods().items():
            if pod_booking_id(pod) == booking_id and self.snapshot.servers.get(key, {}).get("ready"):
                return key
        return None

    def watched(self) -> tuple[set[int], set[tuple[str, str]]]:
        """Bookings and servers of extensions not checked yet: the walk leaves them alone
        until the old end has passed, or the check would rarely get to run."""
        pending = [extension for extension in self.facts.extensions if not extension.checked]
        return {e.booking_id for e in pending}, {e.server for e in pending}

    def do_shorten(self) -> str:
        moment = now()
        candidates = []
        for booking in self.changeable("active", "upcoming"):
            earliest = max(parse_time(booking["start"]), moment) + timedelta(seconds=1)
            new_end = ceil_to_grid(earliest, 1)
            if new_end < parse_time(booking["end"]):
                candidates.append((booking, new_end))
        if not candidates:
            return "nothing to shorten"
        booking, new_end = self.rng.choice(candidates)
        response = self.driver.booking.patch(f"bookings/{booking['id']}",
                                             json={"end": format_time(new_end)})
        return self.answered(response, {200: "shortened", 400: "ended meanwhile",
                                        409: "ended meanwhile"})

    def do_end_now(self) -> str:
        return self.delete_one(self.changeable("active"), "ended now")

    def changeable(self, *states: str) -> list[dict]:
        watched, _servers = self.watched()
        return [b for b in self.bookings_in(*states) if b["id"] not in watched]

    def do_cancel(self) -> str:
        return self.delete_one(self.bookings_in("upcoming"), "cancelled")

    def delete_one(self, candidates: list[dict], done: str) -> str:
        if not candidates:
            return "none to " + done.split()[0]
        booking = self.rng.choice(candidates)
        response = self.driver.booking.delete(f"bookings/{booking['id']}")
        return self.answered(response, {200: done, 409: "ended meanwhile"})

    def do_start_early(self) -> str:
        """A user takes the service's offer (one of their notices) to start an upcoming booking
        now, keeping its length; now and then one nobody offered (refused unless it fits)."""
        upcoming = self.changeable("upcoming")
        if not upcoming:
            return "nothing to start early"
        user = self.rng.choice(sorted({b["user"] for b in upcoming}))
        notices = self.get(self.driver.booking, f"users/{user}/notices")["notices"]
        offered = sorted(n["booking_id"] for n in notices if n["kind"] == "start_early")
        if offered and self.rng.random() < 0.9:
            booking_id, kind = self.rng.choice(offered), "offered"
        else:
            booking_id = self.rng.choice([b["id"] for b in upcoming if b["user"] == user])
            kind = "not offered"
        booking = self.snapshot.bookings.get(booking_id)
        response = self.driver.booking.post(f"bookings/{booking_id}/start-early")
        outcome = f"{kind}: " + self.answered(response, {200: "started early", 409: "refused",
                                                         403: "over a limit"})
        if response.status_code == 200:
            moved = response.json()
            self.facts.started_early[booking_id] = parse_time(moved["updated"])
            if booking is not None and (
                    parse_time(moved["end"]) - parse_time(moved["start"])
                    != parse_time(booking["end"]) - parse_time(booking["start"])):
                raise SoakFailure(f"booking {booking_id} started early did not keep its length: "
                                  f"{booking['start']}..{booking['end']} became "
                                  f"{moved['start']}..{moved['end']}")
        return outcome

    def do_maintenance(self) -> str:
        """An admin blocks one node for a few minutes soon and clears what the window collides
        with, as the docs say (cancel what has not started, shorten or end what has); or
        removes a window, which serves the waitlist."""
        windows = [w for _id, w in sorted(self.snapshot.windows.items())
                   if parse_time(w["end"]) > now()]
        if windows and self.rng.random() < 0.4:
            response = self.driver.booking.delete(f"maintenance/{self.rng.choice(windows)['id']}")
            return self.answered(response, {204: "window removed", 404: "window gone"})
        pool = self.rng.choice(sorted(self.pools))
        start = ceil_to_grid(now(), 1) + timedelta(minutes=self.rng.randint(0, 2))
        window = {"pool": pool, "node": self.rng.choice(sorted(self.pools[pool]["nodes"])),
                  "start": format_time(start),
                  "end": format_time(start + timedelta(minutes=self.rng.randint(1, 3))),
                  "reason": "soak"}
        if self.resends.rng.random() < RESEND_WINDOW:
            response = self.resends.add_window_twice(window)
        else:
            response = self.driver.booking.post("maintenance", json=window)
        self.answered(response, {201: "window added"})
        added = response.json()
        for booking in added["colliding_bookings"]:
            if not self.clear_collision(booking, start):
                self.facts.uncleared.add((added["id"], booking["id"]))
        return f"window added, {len(added['colliding_bookings'])} collisions"

    def clear_collision(self, booking: dict, window_start: datetime) -> bool:
        """Cancel ``booking`` if it has not started, else end it where the window starts (now
        if that passed); False if it still holds the GPU into the window: it ended or started
        meanwhile in a way no call undoes, or the window began before the admin ended it."""
        path = f"bookings/{booking['id']}"
        if parse_time(booking["start"]) > now():
            response = self.driver.booking.delete(path)
            if response.status_code == 200:
                return self.kept_out(response.json(), window_start)
        if ceil_to_grid(now(), 1) < window_start:
            response = self.driver.booking.patch(path, json={"end": format_time(window_start)})
        else:
            response = self.driver.booking.delete(path)
        cleared = self.answered(response, {200: "cleared", 400: "ended", 409: "ended"})
        return cleared == "cleared" and self.kept_out(response.json(), window_start)

    @staticmethod
    def kept_out(booking: dict, window_start: datetime) -> bool:
        return booking["state"] == "cancelled" or parse_time(booking["end"]) <= window_start

    # -- Hub servers -----------------------------------------------------------------------------

    def free_servers(self) -> list[tuple[str, str]]:
        """The servers the walk may start now: none while MAX_SERVERS run."""
        if len(self.snapshot.servers) >= MAX_SERVERS:
            return []
        return [(user, name) for user in USERS for name in SERVER_NAMES
                if (user, name) not in self.snapshot.servers]

    def do_start_server(self) -> str:
        free = self.free_servers()
        if not free:
            return self.do_stop_server()
        user, name = self.rng.choice(free)
        profile = self.rng.choice(PROFILES)
        unused = [b for b in self.bookings_in("active") if b["server"] is None
                  and any(key[0] == b["user"] for key in free)]
        if unused and self.rng.random() < 0.6:
            # mostly a user with a booking nobody uses yet starts on it (else: a refusal, or
            # an opportunistic grant on a free GPU)
            booking = self.rng.choice(unused)
            user, profile = booking["user"], booking["pool"]
            name = self.rng.choice([key[1] for key in free if key[0] == user])
        response = self.driver.start_server(user, profile, name)
        outcome = self.answered(response, {201: "started", 202: "requested",
                                           400: "still stopping"})
        return f"{outcome} ({'gpu' if profile != 'cpu' else 'cpu'})"

    def do_stop_server(self) -> str:
        _bookings, watched = self.watched()
        running = sorted(key for key, model in self.snapshot.servers.items()
                         if model.get("ready") and key not in watched)
        if not running:
            return "none running"
        user, name = self.rng.choice(running)
        self.facts.user_stops[(user, name)] = now()
        path = f"users/{user}/servers/{name}" if name else f"users/{user}/server"
        response = self.driver.hub.delete(path)
        if response.status_code == 500 and self.the_service_stopped_it_too(user, name):
            return "stopping (the service stopped it at the same moment)"
        return self.answered(response, {202: "stopping", 204: "stopped", 400: "not running"})

    def the_service_stopped_it_too(self, user: str, name: str) -> bool:
        """JupyterHub 5 answers 500 ("RuntimeError: … pending stop") to a DELETE of a server
        whose poll another DELETE overtook: here the service's stop of a server whose booking
        had just ended (seen once on pins, after an outage, when the late tick caught up)."""
        pod = self.snapshot.hub_pods().get((user, name))
        booking = self.all_bookings().get(pod_booking_id(pod)) if pod else None
        model = self.driver.server_model(user, name) or {}
        stopping = model.get("pending") == "stop" or not model.get("ready", False)
        return booking is not None and booking["state"] != "active" and stopping

    # -- time and restarts -----------------------------------------------------------------------

    def do_pause(self) -> str:
        time.sleep(self.rng.uniform(0.1, 0.7))
        return "paused"

    def do_restart_service(self) -> str:
        """SIGTERM the service; the Hub notices (its poll, up to 30 s) and starts it again."""
        self.log(f"restarting the booking service at step {self.result.steps}")
        down = now()
        self.facts.outages.append((down, None))
        self.restart_service(answering=True)
        self.facts.outages[-1] = (down, now())
        return "restarted"

    def restart_service(self, answering: bool) -> int:
        """SIGTERM the service; the process id of the one the Hub starts again, once it runs
        (and, with ``answering``, once it answers: a service restarted while its database is
        down waits for the database first)."""
        old = self.driver.signal_service(signal.SIGTERM)
        deadline = time.monotonic() + BACK_WITHIN_SECONDS
        while time.monotonic() < deadline:
            try:
                service = self.driver.service_pid()
                if service != old and (
                        not answering or self.driver.booking.get("pools").status_code == 200):
                    return service
            except (AssertionError, httpx.HTTPError):
                pass  # not started again yet
            time.sleep(0.5)
        raise SoakFailure(
            f"the Hub did not start the booking service again within {BACK_WITHIN_SECONDS} s")

    def do_restart_hub(self) -> str:
        down = now()
        self.facts.outages.append((down, None))
        self.log(f"restarting the Hub at step {self.result.steps}")
        self.demo.restart_hub()
        self.facts.outages[-1] = (down, now())
        # the old connections went to the Hub's old proxy
        self.driver.close()
        self.driver = Driver(self.demo)
        return "restarted"


def run_soak(state_dir: Path, seed: int, actions: int, log: Callable[[str], None] = print,
             log_dir: Path | None = None, db_url: str | None = None,
             database: StoppableDatabase | None = None) -> SoakResult:
    """Start the demo with the soak's profile, walk, stop it; raises SoakFailure.

    The demo's logs go to ``log_dir`` (default: ``state_dir/logs``); ``db_url`` puts the
    booking service on that database instead of the demo's SQLite file; ``database`` on that
    private server, which the walk stops and starts (database outages)."""
    if database is not None:
        db_url = database.url
    with running_demo(state_dir, profile="soak", gated_namespaces=GATED, db_url=db_url,
                      log_dir=log_dir or state_dir / "logs") as driver:
        walk = Walk(driver, seed, actions, log, database)
        try:
            return walk.run()
        finally:
            walk.driver.close()  # after a Hub restart the walk drives with a new Driver


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--actions", type=int, default=500)
    args = parser.parse_args(argv)
    state = Path(tempfile.mkdtemp(prefix="gpubooking-soak-"))
    try:
        result = run_soak(state, args.seed, args.actions)
    except SoakFailure as failure:
        print(f"lifecycle soak seed {args.seed} FAILED {failure}\nlogs: {state / 'logs'}",
              file=sys.stderr)
        return 1
    shutil.rmtree(state, ignore_errors=True)
    print(result.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
