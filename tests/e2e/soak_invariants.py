"""The invariants of the lifecycle soak, checked on one snapshot of the demo after every step.

Pure: :class:`Snapshot` holds what the Hub API, the simulated cluster and the booking service
answered; :class:`InvariantChecker` compares it with what the walk did (:class:`WalkFacts`) and
with the last snapshot, counts every check it makes and returns the violations as sentences.

The promise under test: the booked share, exactly while booked.

- one booking, one running pod (Hub servers and pods made outside the Hub alike);
- no GPU pod without an active booking, beyond the service's grace (plus the time the service or
  the Hub was down, when nobody could stop it);
- no server stopped unless its own booking ended (or its user stopped it);
- an extended booking's server outlives the booking's old end;
- no instant at which a GPU is booked beyond its capacity;
- a booking the admission webhook claimed for a pod is released once the pod is gone;
- the accounting adds up: booked = used + idle + released + no-show + scheduled;
- a booked wait names its own booking (its user, pool and share, starting within the wait's
  window, or before it once its user took an offer to start early), no booking serves two
  waits, a wait that ended stays as it ended, and none is still waiting a slot after its latest
  start;
- no booking holds a GPU under a maintenance window, but for collisions the window's admin was
  told about and could not clear;
- a wait whose request fits as the pool stands (nothing moved), of a user under the booking
  limit, is booked within a few ticks: the service serves the waitlist every tick;
- a server start is decided (ready, or refused and gone) within a minute, the time a
  service, Hub or database outage took aside: the simulated cluster starts a server in seconds;
- nothing is lost (a restart or a database outage included): every booking and wait once
  listed stays listed as it was made (its user, pool, share and creation), and a booking's
  state only moves on (upcoming, active, ended; cancelled before its start), never back;
- a restore of the database (:class:`Restore`) lists the backup's bookings and waits as they
  were then, gives no booking id twice, and within the slack leaves no server or GPU pod on a
  booking it took away, moved back before its start or to other GPUs, and stops no server
  whose booking it gave back still covering it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fractions import Fraction

from soak_capacity import wait_fits
from soak_json import (
    booked_hours,
    booking_over,
    not_covered,
    placed_at,
    pod_booking_id,
    pod_is_live,
    pod_name,
    pod_wants_gpus,
)

from jhub_gpubooking.admission.claims import POD_CREATE_WINDOW
from jhub_gpubooking.admission.review import SERVERNAME_KEY, USERNAME_KEY, holder_pod
from jhub_gpubooking.core.lifecycle import SERVER_STATE_BOOKING_KEY
from jhub_gpubooking.core.timegrid import parse_time
from jhub_gpubooking.gpu import pod_placement

#: what a booking or a wait was made as: it never changes
MADE = ("user", "pool", "gpus", "created")
#: The report rounds each bucket to 4 decimals: six buckets may differ by this much in all.
HOURS_TOLERANCE = 0.0005
BUCKETS = ("used", "idle", "released", "no_show", "scheduled")
#: how far along its life each state of a booking is: a state never goes back
STATE_RANK = {"upcoming": 0, "active": 1, "ended": 2, "cancelled": 2}

ServerKey = tuple[str, str]  # (user, server name; "" for the default server)


class SoakFailure(AssertionError):
    """An invariant broke, or the product answered what no user should ever see (a 5xx)."""


@dataclass
class Snapshot:
    """What the demo answered at ``now`` (one step)."""

    now: datetime
    bookings: dict[int, dict]  # every booking, by id (the service's JSON)
    servers: dict[ServerKey, dict]  # every server the Hub shows (its JSON model)
    pods: list[dict]  # every pod of the cluster
    report: dict  # the service's usage report by pool over ``report_period``
    report_period: tuple[datetime, datetime]
    pools: dict[str, dict]  # the service's pools, by name
    waits: dict[int, dict] = field(default_factory=dict)  # every wait, by id (the service's JSON)
    windows: dict[int, dict] = field(default_factory=dict)  # every maintenance window, by id

    def live_pods(self) -> list[dict]:
        return [pod for pod in self.pods if pod_is_live(pod)]

    def hub_pods(self) -> dict[ServerKey, dict]:
        """Live pods of Hub servers, by the server they belong to."""
        found = {}
        for pod in self.live_pods():
            annotations = pod["metadata"].get("annotations") or {}
            if USERNAME_KEY in annotations:  # KubeSpawner's, on every Hub server's pod
                found[(annotations[USERNAME_KEY], annotations.get(SERVERNAME_KEY, ""))] = pod
        return found


@dataclass
class Extension:
    """The walk moved a booking's end later while a server ran on it."""

    booking_id: int
    server: ServerKey
    old_end: datetime
    made: datetime
    checked: bool = False


@dataclass(frozen=True)
class Restore:
    """The walk restored the booking database from a backup, the hub down from ``down`` to
    ``up``: the backup's bookings and waits as the walk listed them when it was taken,
    ``undone`` the bookings the restore took away or changed, ``last_id`` the highest booking
    id given before it."""

    down: datetime
    up: datetime
    bookings: dict[int, dict]
    waits: dict[int, dict]
    undone: frozenset[int]
    last_id: int


@dataclass
class WalkFacts:
    """What the walk did that the checker must know: whom it stopped, which extensions to
    watch, when the service or the Hub was down (nobody could stop a server then), which
    bookings started early and which collisions with maintenance the admin left."""

    user_stops: dict[ServerKey, datetime] = field(default_factory=dict)
    extensions: list[Extension] = field(default_factory=list)
    outages: list[tuple[datetime, datetime | None]] = field(default_factory=list)
    #: bookings whose user took the offer to start early -> when they moved (their "updated")
    started_early: dict[int, datetime] = field(default_factory=dict)
    #: (window id, booking id): collisions a new window reported that the admin could not clear
    uncleared: set[tuple[int, int]] = field(default_factory=set)
    restores: list[Restore] = field(default_factory=list)

    def undone_by_restore(self, booking_id: int | None, since: datetime | None = None,
                          ) -> Restore | None:
        """The last restore (after ``since``) that took the booking away or changed it."""
        return next((restore for restore in reversed(self.restores)
                     if booking_id in restore.undone and (since is None or restore.down >= since)),
                    None)

    def outage_within(self, start: datetime, end: datetime) -> timedelta:
        total = timedelta(0)
        for down, up in self.outages:
            overlap = min(up or end, end) - max(down, start)
            total += max(overlap, timedelta(0))
        return total


class InvariantChecker:
    """Checks a snapshot; ``checks`` counts what was checked, per invariant."""

    def __init__(self, grace: timedelta, slack: timedelta, slot: timedelta = timedelta(minutes=1),
                 max_bookings: int | None = None, serve_slack: timedelta | None = None,
                 start_slack: timedelta = timedelta(minutes=1)):
        self.grace = grace
        #: what stopping takes when nothing is down: the lifecycle tick, the Hub's stop, the
        #: pod's deletion; the walk's own step and check come on top
        self.slack = slack
        self.slot = slot  # the service's booking grid: a wait expires once its last slot ended
        #: the policy's limit of active and upcoming bookings per user: a wait of a user at it
        #: is not booked however free the pool is
        self.max_bookings = max_bookings
        #: what booking a wait that fits may take: the service serves the waitlist every tick,
        #: without the Hub or the cluster (default: ``slack``)
        self.serve_slack = slack if serve_slack is None else serve_slack
        #: how long a server may stay pending "spawn" (the simulated cluster needs seconds)
        self.start_slack = start_slack
        self._starting: dict[ServerKey, datetime] = {}
        self._fitting_waits: dict[int, datetime] = {}
        self.checks: Counter[str] = Counter()
        self._ended_waits: dict[int, tuple[str, int | None]] = {}
        #: servers ready since: their booking, since when, the placement their pod was made for
        self._ready: dict[ServerKey, tuple[int | None, datetime, tuple | None]] = {}
        #: watched servers whose booking the last snapshot showed over (their stop was due)
        self._due: set[ServerKey] = set()
        self._podless_claims: dict[tuple[int, str], datetime] = {}
        self._listed: tuple[dict[int, dict], dict[int, dict]] = ({}, {})
        self._made: dict[int, dict] = {}  # every booking listed, as it was first made
        self._restores: list[Restore] = []
        self._given: set[int] = set()

    def check(self, snapshot: Snapshot, facts: WalkFacts) -> list[str]:
        return [
            *self.one_pod_per_booking(snapshot),
            *self.no_gpu_pod_without_booking(snapshot, facts),
            *self.servers_stop_only_when_their_booking_ends(snapshot, facts),
            *self.extended_servers_outlive_the_old_end(snapshot, facts),
            *self.no_instant_overbooked(snapshot, facts),
            *self.pod_claims_end_with_their_pod(snapshot, facts),
            *self.accounting_adds_up(snapshot),
            *self.waits_keep_their_word(snapshot, facts),
            *self.maintenance_stays_free(snapshot, facts),
            *self.fitting_waits_are_booked(snapshot, facts),
            *self.nothing_is_lost(snapshot),
            *self.starts_are_decided(snapshot, facts),
        ]

    def one_pod_per_booking(self, snapshot: Snapshot) -> list[str]:
        holders: dict[int, list[str]] = {}
        for pod in snapshot.live_pods():
            booking_id = pod_booking_id(pod)
            if booking_id is not None:
                holders.setdefault(booking_id, []).append(pod_name(pod))
        self.checks["one pod per booking"] += len(holders)
        return [
            f"booking {booking_id} runs {len(pods)} pods at once: {', '.join(sorted(pods))}"
            for booking_id, pods in holders.items()
            if len(pods) > 1
        ]

    def no_gpu_pod_without_booking(self, snapshot: Snapshot, facts: WalkFacts) -> list[str]:
        # a start still pending at its booking's end gets no longer: the service interrupts it
        violations = []
        for pod in snapshot.live_pods():
            if not pod_wants_gpus(pod):
                continue
            self.checks["no GPU pod without an active booking"] += 1
            booking_id = pod_booking_id(pod)
            booking = snapshot.bookings.get(booking_id) if booking_id is not None else None
            wrong = not_covered(pod, booking_id, booking, snapshot.pools)
            if wrong is not None:
                # only a restore makes a pod's booking go, start later or move
                restore = facts.undone_by_restore(booking_id)
                if restore is None:
                    violations.append(f"GPU pod {pod_name(pod)} {wrong}")
                    continue
                allowed = self.slack + facts.outage_within(restore.up, snapshot.now)
                if snapshot.now - restore.up > allowed:
                    violations.append(f"GPU pod {pod_name(pod)} {wrong} "
                                      f"{snapshot.now - restore.up} after the restore that undid "
                                      f"it (allowed {allowed})")
                continue
            over = booking_over(booking, snapshot.now)
            if over is None:
                continue
            allowed = self.grace + self.slack + facts.outage_within(over, snapshot.now)
            if snapshot.now - over > allowed:
                violations.append(
                    f"GPU pod {pod_name(pod)} still runs {snapshot.now - over} after its booking "
                    f"{booking_id} ended ({booking['state']}, allowed {allowed})"
                )
        return violations

    def servers_stop_only_when_their_booking_ends(
        self, snapshot: Snapshot, facts: WalkFacts
    ) -> list[str]:
        violations = []
        pods = snapshot.hub_pods()
        for key, (booking_id, since, made_for) in self._ready.items():
            if key in snapshot.servers:
                continue
            self.checks["servers stop only when their booking ends"] += 1
            stopped_by_user = facts.user_stops.get(key)
            if stopped_by_user is not None and stopped_by_user >= since:
                continue
            booking = snapshot.bookings.get(booking_id) if booking_id is not None else None
            if booking is not None and booking_over(booking, snapshot.now) is not None:
                continue  # its own booking ended (end, end now, release)
            if booking is not None and booking.get("release_reason") == "preempted":
                continue  # an opportunistic grant yields at once to the booking that needs it
            user, name = key
            if key in self._due and facts.undone_by_restore(booking_id, since):
                continue  # stopped as its booking ended, then a restore gave back a longer one
            if facts.undone_by_restore(booking_id, since) and not (
                    booking is not None and booking["state"] == "active"
                    and booking["server"] in (None, name)
                    and placed_at(booking) in (None, made_for)):
                continue  # a restore took its booking away, or gave it back not covering it
            violations.append(
                f"server {user}/{name} (booking {booking_id}) stopped while its booking "
                f"{'was still active' if booking else 'does not exist'} and nobody stopped it"
            )
        # a server is watched from when it is ready until it is gone (stopping included); one
        # first seen ready with its pod gone already (the walk deleted it as a restore said)
        # runs on the booking its state names, since its start (before that restore)
        watched = {}
        for key, model in snapshot.servers.items():
            if key not in self._ready and not model.get("ready"):
                continue
            state = model.get("state") or {}
            started = parse_time(model["started"]) if model.get("started") else snapshot.now
            known_id, since, made_for = self._ready.get(
                key, (state.get(SERVER_STATE_BOOKING_KEY), started, None))
            pod = pods.get(key)
            watched[key] = ((pod_booking_id(pod), since, pod_placement(pod)) if pod
                            else (known_id, since, made_for))
        self._ready = watched
        self._due = {key for key, (booking_id, _since, _made_for) in watched.items()
                     if (booking := snapshot.bookings.get(booking_id)) is not None
                     and booking_over(booking, snapshot.now) is not None}
        return violations

    def extended_servers_outlive_the_old_end(
        self, snapshot: Snapshot, facts: WalkFacts
    ) -> list[str]:
        violations = []
        for extension in facts.extensions:
            if extension.checked or snapshot.now < extension.old_end + self.slack:
                continue
            extension.checked = True
            booking = snapshot.bookings.get(extension.booking_id)
            stopped = facts.user_stops.get(extension.server)
            if booking is None or booking_over(booking, snapshot.now) is not None:
                continue  # shortened or ended again since: invariant 3 covers its stop
            if stopped is not None and stopped >= extension.made:
                continue  # its user stopped it since
            if (extension.server not in snapshot.servers
                    and facts.undone_by_restore(extension.booking_id, extension.made)):
                # a restore since changed the booking back: what stopped the server (an end
                # now, a shortening) may be what it undid (seed 3 on latest ended it now)
                continue
            self.checks["extended servers outlive the old end"] += 1
            if extension.server not in snapshot.servers:
                user, name = extension.server
                violations.append(
                    f"server {user}/{name} stopped at the old end {extension.old_end} of its "
                    f"extended booking {extension.booking_id} (now ends {booking['end']})"
                )
        return violations

    def no_instant_overbooked(self, snapshot: Snapshot, facts: WalkFacts) -> list[str]:
        events: dict[tuple[str, str, int], list[tuple[datetime, int]]] = {}
        for booking in snapshot.bookings.values():
            placement = booking.get("placement")
            if booking["state"] == "cancelled" or not placement:
                continue
            # a booking made "now" starts at the slot's start, but holds its GPUs only from its
            # creation: what an ended booking or a preempted grant gave back before is not
            # taken twice; a booking started early, likewise from when it moved
            held_from = [parse_time(booking["start"]), parse_time(booking["created"])]
            if booking["id"] in facts.started_early:
                held_from.append(facts.started_early[booking["id"]])
            start = max(held_from)
            end = parse_time(booking["end"])
            if end <= start:
                continue
            for gpu in placement["gpus"]:
                timeline = events.setdefault((booking["pool"], placement["node"], gpu), [])
                timeline += [(start, placement["slices"], booking["id"]),
                             (end, -placement["slices"], booking["id"])]
        violations = []
        for (pool, node, gpu), timeline in events.items():
            self.checks["no instant overbooked"] += 1
            capacity = snapshot.pools[pool]["slices_per_gpu"]
            level, holding = 0, set()
            # at equal times the ends come first: [start, end) intervals only touch
            for when, change, booking_id in sorted(timeline, key=lambda event: event[:2]):
                level += change
                (holding.add if change > 0 else holding.discard)(booking_id)
                if level > capacity:
                    violations.append(
                        f"GPU {gpu} of {node} (pool {pool}) is booked {level}/{capacity} "
                        f"slices at {when} by bookings {sorted(holding)}"
                    )
                    break
        return violations

    def pod_claims_end_with_their_pod(self, snapshot: Snapshot, facts: WalkFacts) -> list[str]:
        """A webhook claim whose pod is gone (or ending) is released within the service's
        window for a pod still being created (POD_CREATE_WINDOW) plus the slack."""
        live = {pod_name(pod) for pod in snapshot.live_pods()}
        podless = {}
        violations = []
        for booking in snapshot.bookings.values():
            pod = holder_pod(booking.get("server"))
            if pod is None:
                continue
            self.checks["pod claims end with their pod"] += 1
            if "/".join(pod) in live:
                continue
            key = (booking["id"], booking["server"])
            since = podless[key] = self._podless_claims.get(key, snapshot.now)
            allowed = (POD_CREATE_WINDOW + self.slack
                       + facts.outage_within(since, snapshot.now))
            if snapshot.now - since > allowed:
                violations.append(
                    f"booking {booking['id']} is still claimed by pod {'/'.join(pod)} "
                    f"{snapshot.now - since} after the pod was gone (allowed {allowed})"
                )
        self._podless_claims = podless
        return violations

    def accounting_adds_up(self, snapshot: Snapshot) -> list[str]:
        report = snapshot.report
        violations = []
        for row in [*report["rows"], {"key": "total", **report["total"]}]:
            self.checks["accounting identity"] += 1
            parts = {bucket: row[f"{bucket}_gpu_hours"] for bucket in BUCKETS}
            booked = row["booked_gpu_hours"]
            if abs(booked - sum(parts.values())) > HOURS_TOLERANCE:
                violations.append(f"accounting of {row['key']}: booked {booked} != {parts}")
            negative = {name: value for name, value in parts.items() if value < -HOURS_TOLERANCE}
            if negative:
                violations.append(f"accounting of {row['key']}: negative {negative}")
        # each pool's booked hours, from the bookings themselves
        expected: dict[str, Fraction] = {}
        for booking in snapshot.bookings.values():
            hours = booked_hours(booking, *snapshot.report_period)
            if hours:
                expected[booking["pool"]] = expected.get(booking["pool"], Fraction(0)) + hours
        reported = {row["key"]: row["booked_gpu_hours"] for row in report["rows"]}
        for pool in sorted(set(expected) | set(reported)):
            self.checks["accounting identity"] += 1
            hours = float(expected.get(pool, 0))
            if abs(hours - reported.get(pool, 0.0)) > HOURS_TOLERANCE:
                mine = sorted((b["id"], b["start"], b["end"], b["released_end"], b["state"])
                              for b in snapshot.bookings.values() if b["pool"] == pool)
                violations.append(
                    f"the report books {reported.get(pool, 0.0)} GPU-hours in pool {pool}, "
                    f"its bookings {hours:.4f}: {mine}"
                )
        return violations

    def waits_keep_their_word(self, snapshot: Snapshot, facts: WalkFacts) -> list[str]:
        violations = []
        served: dict[int, int] = {}  # booking id -> the wait it was made for
        for wait_id, wait in sorted(snapshot.waits.items()):
            ended = self._ended_waits.get(wait_id)
            if ended is not None:
                self.checks["a wait's end is final"] += 1
                if (wait["state"], wait["booking_id"]) != ended:
                    violations.append(f"wait {wait_id} ended {ended} and is now "
                                      f"{(wait['state'], wait['booking_id'])}")
            if wait["state"] == "waiting":
                self.checks["waits expire after their latest start"] += 1
                expires = parse_time(wait["latest_start"]) + self.slot
                allowed = self.slack + facts.outage_within(expires, snapshot.now)
                if snapshot.now - expires > allowed:
                    violations.append(f"wait {wait_id} still waits {snapshot.now - expires} after "
                                      f"its last slot ended (allowed {allowed})")
            elif wait["state"] == "booked":
                self.checks["a booked wait names its own booking"] += 1
                violations += self._booked_as_asked(wait_id, wait, snapshot, served,
                                                    booking_moved=wait["booking_id"]
                                                    in facts.started_early)
        self._ended_waits = {wait_id: (wait["state"], wait["booking_id"])
                             for wait_id, wait in snapshot.waits.items()
                             if wait["state"] != "waiting"}
        return violations

    @staticmethod
    def _booked_as_asked(wait_id: int, wait: dict, snapshot: Snapshot,
                         served: dict[int, int], booking_moved: bool = False) -> list[str]:
        booking_id = wait["booking_id"]
        booking = snapshot.bookings.get(booking_id)
        if booking is None:
            return [f"wait {wait_id} was booked as booking {booking_id}, which does not exist"]
        problems = []
        other = served.setdefault(booking_id, wait_id)
        if other != wait_id:
            problems.append(f"booking {booking_id} was made for waits {other} and {wait_id}")
        asked = (wait["user"], wait["pool"], Fraction(str(wait["gpus"])))
        got = (booking["user"], booking["pool"], Fraction(str(booking["gpus"])))
        if asked != got:
            problems.append(f"wait {wait_id} asked for {asked}, its booking {booking_id} is {got}")
        # an early start moves the booking before the window, on its user's word
        earliest = None if booking_moved else parse_time(wait["start"])
        if not ((earliest is None or earliest <= parse_time(booking["start"]))
                and parse_time(booking["start"]) <= parse_time(wait["latest_start"])):
            problems.append(f"wait {wait_id} may start {wait['start']}..{wait['latest_start']}, "
                            f"its booking {booking_id} starts {booking['start']}")
        return problems

    def maintenance_stays_free(self, snapshot: Snapshot, facts: WalkFacts) -> list[str]:
        """No booking placed, moved, extended or started early onto a node under maintenance;
        the bookings a window collided with when it was added were cleared by the admin."""
        violations = []
        for window_id, window in sorted(snapshot.windows.items()):
            self.checks["maintenance windows stay free"] += 1
            start, end = parse_time(window["start"]), parse_time(window["end"])
            for booking_id, booking in sorted(snapshot.bookings.items()):
                placement = booking.get("placement")
                if (booking["pool"] != window["pool"] or booking["state"] == "cancelled"
                        or (window_id, booking_id) in facts.uncleared
                        or (placement and window["node"] not in (None, placement["node"]))):
                    continue
                if parse_time(booking["start"]) < end and parse_time(booking["end"]) > start:
                    violations.append(
                        f"booking {booking_id} ({booking['start']}..{booking['end']} on "
                        f"{placement and placement['node']}) holds a GPU under maintenance "
                        f"window {window_id} ({window['start']}..{window['end']} on "
                        f"{window['node'] or 'every node'} of {window['pool']})")
        return violations

    def fitting_waits_are_booked(self, snapshot: Snapshot, facts: WalkFacts) -> list[str]:
        """A wait that has fitted since ``since`` (every snapshot since) and still waits after the
        slack (plus any outage) was lost by the waitlist."""
        live = Counter(booking["user"] for booking in snapshot.bookings.values()
                       if booking["state"] in ("active", "upcoming"))
        fitting, violations = {}, []
        for wait_id, wait in sorted(snapshot.waits.items()):
            if wait["state"] != "waiting" or (self.max_bookings is not None
                                              and live[wait["user"]] >= self.max_bookings):
                continue
            self.checks["waits that fit are booked"] += 1
            if not wait_fits(wait, snapshot, self.slot):
                continue
            since = fitting[wait_id] = self._fitting_waits.get(wait_id, snapshot.now)
            allowed = self.serve_slack + facts.outage_within(since, snapshot.now)
            if snapshot.now - since > allowed:
                violations.append(
                    f"wait {wait_id} ({wait['user']}: {wait['gpus']} of {wait['pool']} for "
                    f"{wait['minutes']} min, from {wait['start']} to {wait['latest_start']}) "
                    f"still waits {snapshot.now - since} after its request fitted "
                    f"(allowed {allowed})")
        self._fitting_waits = fitting
        return violations

    def nothing_is_lost(self, snapshot: Snapshot) -> list[str]:
        """Every booking and wait the last snapshot listed is still listed as it was made, and
        no booking went back in its life (an ended one active again, a cancelled one ended)."""
        bookings, waits = self._listed
        violations = []
        for kind, before, listed in (("booking", bookings, snapshot.bookings),
                                     ("wait", waits, snapshot.waits)):
            for item_id, was in sorted(before.items()):
                self.checks["nothing is lost"] += 1
                item = listed.get(item_id)
                if item is None:
                    violations.append(f"{kind} {item_id} ({was['user']}: {was['gpus']} of "
                                      f"{was['pool']}) is no longer listed")
                    continue
                made = {key: was.get(key) for key in MADE}
                now_made = {key: item.get(key) for key in made}
                if now_made != made:
                    violations.append(f"{kind} {item_id} was made as {made}, now shows {now_made}")
        for booking_id, was in sorted(bookings.items()):
            state = snapshot.bookings.get(booking_id, was)["state"]
            if STATE_RANK[state] < STATE_RANK[was["state"]] or (
                    STATE_RANK[was["state"]] == 2 and state != was["state"]):
                violations.append(f"booking {booking_id} went from {was['state']} to {state}")
        for booking_id, booking in sorted(snapshot.bookings.items()):
            self.checks["no booking id given twice"] += 1
            made = {key: booking.get(key) for key in MADE}
            # one listed last time too was compared above
            if self._made.setdefault(booking_id, made) != made and booking_id not in bookings:
                violations.append(f"booking id {booking_id} was given twice: made as "
                                  f"{self._made[booking_id]}, now {made}")
            violations += [f"booking {booking_id} is neither the backup's nor made after the "
                           f"restore (ids up to {restore.last_id} were given before it)"
                           for restore in self._restores if booking_id <= restore.last_id
                           and booking_id not in restore.bookings and booking_id not in bookings]
        self._listed = (dict(snapshot.bookings), dict(snapshot.waits))
        return violations

    def restored(self, restore: Restore, given: set[int]) -> None:
        """The walk restored the database (``given``: every booking id it held before): the
        next snapshot must list the backup's bookings and waits, as they were then."""
        self._listed = (dict(restore.bookings), dict(restore.waits))
        self._ended_waits = {wait_id: (wait["state"], wait["booking_id"])
                             for wait_id, wait in restore.waits.items()
                             if wait["state"] != "waiting"}
        self._restores.append(restore)
        self._given |= given

    def given_ids(self) -> set[int]:
        """Every booking id listed, or held by the database before a restore."""
        return self._given | set(self._made)

    def starts_are_decided(self, snapshot: Snapshot, facts: WalkFacts) -> list[str]:
        """No server stays pending "spawn" longer than ``start_slack`` (plus outages): a start
        that hangs fails only at the Hub's start_timeout, and nothing else would notice it."""
        starting, violations = {}, []
        for key, model in sorted(snapshot.servers.items()):
            if model.get("pending") != "spawn":
                continue
            self.checks["server starts are decided"] += 1
            since = starting[key] = self._starting.get(key, snapshot.now)
            allowed = self.start_slack + facts.outage_within(since, snapshot.now)
            if snapshot.now - since > allowed:
                user, name = key
                violations.append(f"server {user}/{name} still starting "
                                  f"{snapshot.now - since} after its start (allowed {allowed})")
        self._starting = starting
        return violations
