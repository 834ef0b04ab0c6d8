"""The lifecycle soak's database outages (see soak.py): with the booking service on a private
PostgreSQL or MariaDB server (tests/private_postgres.py, tests/private_mariadb.py), the walk
stops that server at seeded steps for a few seconds, as a crash or a restart of the database
would, and starts it again.

While it is down the walk checks what users meet, as test_e2e_database_outage.py does on one
path: the API answers 503 in its JSON shape with ``Retry-After``; the server chooser offers
the GPU profiles, saying a start waits for the service (soak_chooser.py); a GPU start waits (the
spawner asks again) and goes on once the database is back, or, when the outage outlasts its
wait, is refused with the spawner's "cannot be reached" sentence; a GPU pod made outside the
Hub is refused (the admission webhook's sentence); a CPU server starts. Half the time the
service is restarted meanwhile, as when the hub pod moves during an outage: the new process
must wait for its database. When the server is back, the service answers again in the process
that waited, and the invariants checked after the step (the outage counted as time nobody
could stop a server, book a wait or release a claim) find nothing lost and nothing half done:
bookings that ended meanwhile have their servers stopped, waits that fit are booked.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Protocol

import httpx
from soak_invariants import SoakFailure
from soak_pods import GATED

from jhub_gpubooking.admission.server import STARTING as WEBHOOK_STARTING
from jhub_gpubooking.admission.server import UNAVAILABLE as WEBHOOK_UNAVAILABLE
from jhub_gpubooking.chooser import SERVICE_UNAVAILABLE_MESSAGE
from jhub_gpubooking.core.timegrid import ceil_to_grid, format_time
from jhub_gpubooking.db.session import DATABASE_UNAVAILABLE_MESSAGE
from jhub_gpubooking.service.base import RETRY_AFTER_SECONDS
from jhub_gpubooking.spawner import GPUBookingSpawner

if TYPE_CHECKING:
    from soak import Walk

#: how long the database stays down (seconds, drawn by the walk's seed): long enough that a
#: lifecycle tick or two fail, sometimes across a booking's end on the one-minute grid
OUTAGE_SECONDS = (3.0, 15.0)
#: the least time before the spawner may refuse a start as unreachable: it asks again for
#: booking_request_retry_timeout (the default in the soak profile), less the longest wait it
#: may skip at the end (a 503's Retry-After)
UNAVAILABLE_AFTER_SECONDS = (
    GPUBookingSpawner.class_traits()["booking_request_retry_timeout"].default_value
    - RETRY_AFTER_SECONDS)
#: a safety net for a service that never answers again, after an outage or a restart (no
#: timing is asserted)
BACK_WITHIN_SECONDS = 120


class StoppableDatabase(Protocol):
    """A private database server (tests/private_postgres.py, tests/private_mariadb.py)."""

    url: str

    def start(self) -> None: ...

    def stop(self) -> None: ...


def now() -> datetime:
    return datetime.now(timezone.utc)


class DatabaseOutages:
    """Stops and starts the booking service's database; says what users met meanwhile."""

    def __init__(self, walk: Walk, database: StoppableDatabase):
        self.walk = walk
        self.database = database
        self.pods = 0
        #: the booking (request, headers) the last outage answered 503
        self.unanswered: tuple[dict, dict] | None = None
        #: the server (user, name) of a GPU start asked during the outage, still going on,
        #: and when it was asked (time.monotonic)
        self.waiting_start: tuple[str, str] | None = None
        self.start_asked_at = 0.0

    def outage(self) -> str:
        walk = self.walk
        seconds = walk.rng.uniform(*OUTAGE_SECONDS)
        # half the time the service restarts too (a hub pod rescheduled while the database is
        # down): it must wait for the database, not crash-loop
        restart = walk.rng.random() < 0.5
        walk.log(f"stopping the booking database for {seconds:.0f} s at step {walk.result.steps}"
                 + (", restarting the service meanwhile" if restart else ""))
        down = now()
        walk.facts.outages.append((down, None))
        self.database.stop()
        try:
            met = self.what_users_meet()
            service = walk.restart_service(answering=False) if restart else walk.driver.service_pid()
            if restart:
                met.append("service restarted")
            time.sleep(max(0.0, seconds - (now() - down).total_seconds()))
        finally:
            self.database.start()
        self.wait_until_back()
        walk.facts.outages[-1] = (down, now())
        if self.waiting_start is not None:
            met.append(self.gpu_start_outcome(*self.waiting_start))
            self.waiting_start = None
        met.append(self.sent_again())
        if walk.driver.service_pid() != service:
            raise SoakFailure("the booking service exited during the database outage (the Hub "
                              "started another); it should have waited the outage out")
        return ", ".join(met)

    def what_users_meet(self) -> list[str]:
        walk = self.walk
        user = walk.rng.choice(sorted({b["user"] for b in walk.bookings_in("active")} or
                                      {"u0"}))
        self.unavailable(walk.driver.booking.get("bookings", params={"user": user}),
                         "listing bookings")
        start = ceil_to_grid(now(), 1) + timedelta(minutes=1)
        # as the page does, the booking carries an Idempotency-Key: sent again once the
        # database is back (sent_again), it books once
        self.unanswered = ({"user": user, "pool": "a100", "gpus": 1, "start": format_time(start),
                            "end": format_time(start + timedelta(minutes=2))},
                           {"Idempotency-Key": f"outage-{walk.result.steps}"})
        self.unavailable(walk.driver.booking.post("bookings", json=self.unanswered[0],
                                                  headers=self.unanswered[1]), "booking")
        met = ["API 503", walk.chooser.open_while_unanswered()]
        free = [(name, key) for key in walk.free_servers() for name in ("gpu", "cpu")]
        walk.rng.shuffle(free)
        gpu = next((key for name, key in free if name == "gpu"), None)
        if gpu is not None:
            asked = self.gpu_start_asked(*gpu)
            if isinstance(asked, tuple):
                self.waiting_start = asked
            else:
                met.append(asked)
        cpu = next((key for name, key in free if name == "cpu" and key != gpu), None)
        if cpu is not None:
            met.append(self.cpu_start_served(*cpu))
        met.append(self.gpu_pod_refused())
        return met

    def sent_again(self) -> str:
        """The booking the outage refused, sent again twice with its key: the 503 made nothing,
        so the first books (or is refused as any create may be) and the second answers the
        same booking."""
        request, key = self.unanswered
        outcomes = {201: "booked", 409: "full", 403: "over a limit", 400: "start passed"}
        first = self.walk.driver.booking.post("bookings", json=request, headers=key)
        outcome = self.walk.answered(first, outcomes)
        again = self.walk.driver.booking.post("bookings", json=request, headers=key)
        self.walk.answered(again, outcomes)
        if first.status_code == 201 and (again.status_code, again.json().get("id")) != (
                201, first.json()["id"]):
            raise SoakFailure(f"the booking refused by the outage, sent again twice, was answered "
                              f"{first.json()['id']}, then {again.status_code} {again.text[:300]}")
        return f"sent again: {outcome}"

    def unavailable(self, response: httpx.Response, what: str) -> None:
        try:
            body = response.json()
        except ValueError:
            body = None
        if (response.status_code != 503 or body != {"status": 503,
                                                    "message": DATABASE_UNAVAILABLE_MESSAGE}
                or response.headers.get("Retry-After") != str(RETRY_AFTER_SECONDS)):
            raise SoakFailure(
                f"{what} while the database was down: {response.status_code} "
                f"(Retry-After {response.headers.get('Retry-After')}) {response.text[:300]}")

    def gpu_start_asked(self, user: str, name: str) -> tuple[str, str] | str:
        """Ask for a GPU start while the database is down. The soak's Hub answers before the
        spawn ends (202; on JupyterHub 6 a 201 for a spawn that failed meanwhile): the start
        is then ``(user, name)``, to be seen through once the database is back
        (:meth:`gpu_start_outcome`). Else what the user met."""
        profile = self.walk.rng.choice(("a100", "l4"))
        response = self.walk.driver.start_server(user, profile, name)
        outcome = self.walk.answered(response, {201: "answered", 202: "requested",
                                                400: "refused", 500: "refused", 503: "refused"})
        if outcome == "refused" and "pending stop" in response.text:
            return "GPU start: still stopping"
        if outcome == "refused":
            # the spawner refuses at once only what asking again cannot mend
            raise SoakFailure(f"GPU start of {user}/{name} while the database was down was "
                              f"refused at once: {response.status_code} {response.text[:300]}")
        self.start_asked_at = time.monotonic()
        return (user, name)

    def gpu_start_outcome(self, user: str, name: str) -> str:
        """The spawner asks a service whose database is down again until
        ``booking_request_retry_timeout`` (the default 45 s in the soak profile): a start asked
        during a shorter outage goes on once the database is back (started on its booking, or
        refused for a booking reason); one that outlasted it is refused with the sentence that
        says the service cannot be reached. The invariants check what it left."""
        said = self.spawn_failure(user, name)
        if said is None:
            # it failed, and the Hub forgot the failed start before the page asked why
            model = self.walk.driver.server_model(user, name)
            if model and (model.get("ready") or model.get("pending")):
                raise SoakFailure(f"GPU start of {user}/{name} asked during the outage is "
                                  f"neither started nor failed: {model}")
            return "GPU start refused (its page gone)"
        if not said:
            return "GPU start waited the outage out"
        if SERVICE_UNAVAILABLE_MESSAGE in said:
            # read once the database is back, so at least as long after the start as its
            # refusal: a shorter time means the spawner stopped asking before its time was up
            seconds = time.monotonic() - self.start_asked_at
            if seconds < UNAVAILABLE_AFTER_SECONDS:
                raise SoakFailure(f"GPU start of {user}/{name} asked during the outage was "
                                  f"refused as unreachable within {seconds:.0f} s: {said[:200]}")
            return "GPU start refused (the outage outlasted its wait)"
        return f"GPU start refused after the outage ({said[:40]}…)"

    def spawn_failure(self, user: str, name: str) -> str | None:
        """What the spawn page says of a start that failed ("" if it got ready; None if the Hub
        no longer knows the start: it failed and was cleared before the page asked)."""
        events = self.walk.driver.spawn_progress(user, name)
        if events is None:
            return None
        return events[-1].get("message", "") if events and events[-1].get("failed") else ""

    def cpu_start_served(self, user: str, name: str) -> str:
        response = self.walk.driver.start_server(user, "cpu", name)
        if self.walk.answered(response, {201: "started", 202: "requested",
                                         400: "still stopping"}) == "still stopping":
            return "CPU start: still stopping"
        try:
            self.walk.driver.wait_ready(user, name)
        except AssertionError as error:
            raise SoakFailure(
                f"CPU server {user}/{name} did not start while the database was down: {error}"
            ) from error
        return "CPU server started"

    def gpu_pod_refused(self) -> str:
        namespace = self.walk.rng.choice(sorted(GATED))
        self.pods += 1
        pod = {"metadata": {"name": f"outage-{self.pods}"},
               "spec": {"restartPolicy": "Never", "containers": [{
                   "name": "main", "image": "python:3.12", "command": ["true"],
                   "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
        response = self.walk.driver.cluster.post(f"api/v1/namespaces/{namespace}/pods", json=pod)
        # a service started shortly before (a restore, a restart) cannot finish its first check
        # while the database is down: the webhook then says it has just started
        if response.status_code != 403 or not any(
                sentence in response.text for sentence in (WEBHOOK_UNAVAILABLE, WEBHOOK_STARTING)):
            raise SoakFailure(
                f"GPU pod in {namespace} while the database was down: "
                f"{response.status_code} {response.text[:300]}")
        return "GPU pod refused"

    def wait_until_back(self) -> None:
        deadline = time.monotonic() + BACK_WITHIN_SECONDS
        while time.monotonic() < deadline:
            try:
                if self.walk.driver.booking.get("bookings", params={"limit": 1}).status_code == 200:
                    return
            except httpx.HTTPError:
                pass  # answering again is what is awaited
            time.sleep(0.2)
        raise SoakFailure(
            f"the booking service did not answer within {BACK_WITHIN_SECONDS} s of its "
            "database coming back")
