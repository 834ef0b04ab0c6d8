"""The lifecycle soak's pods made outside the Hub (see soak.py): in gated namespaces, whose
pods the service's admission webhook admits only on a booking of the namespace's owner.

Mostly a pod asks exactly what a free booking of the owner gives, so admissions, the
one-pod-per-booking refusal and the release of the booking at the pod's end all happen.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from pod_commands import sleeping
from soak_invariants import Snapshot
from soak_json import booked_resources, pod_booking_id, pod_name

from jhub_gpubooking.core.timegrid import floor_to_grid, format_time

if TYPE_CHECKING:
    from soak import Walk

#: gated namespace -> its owner: pods made there outside the Hub need the owner's booking
GATED = {"jobs-u0": "u0", "jobs-u1": "u1"}
MAX_OUTSIDE_PODS = 4
#: share of the pods made on a free booking that ask for more than it gives
GREEDY = 0.15


def now() -> datetime:
    return datetime.now(timezone.utc)


def refusal_kind(message: str) -> str:
    """The webhook's rule behind a refusal, from its sentence (admission/review.py)."""
    if "one booking admits one pod at a time" in message:
        return "booking in use"
    if "has none now" in message:
        return "no booking"
    if "but the booking gives" in message:
        return "more than booked"
    return "not covered"


class OutsidePods:
    """What the walk does with pods outside the Hub, and what it saw become of them."""

    def __init__(self, walk: Walk, amounts: dict[str, tuple]):
        self.walk = walk
        self.amounts = amounts  # the shares the walk books, by pool
        self.counter = 0
        #: pods the walk deleted while they held a booking: (booking id, holder) -> deleted at
        self.deleted_holders: dict[tuple[int, str], datetime] = {}
        self.deleted: set[str] = set()  # "namespace/name" of pods the walk deleted

    def live(self) -> list[dict]:
        return [pod for pod in self.walk.snapshot.live_pods()
                if pod["metadata"].get("namespace") in GATED]

    def book(self) -> str:
        """A gated namespace's owner books now for a job of its own: the next "create pod" there
        is admitted on it (a booking nobody uses is released as a no-show within a minute)."""
        pool = self.walk.rng.choice(("a100", "l4"))
        start = floor_to_grid(now(), 1)
        response = self.walk.driver.booking.post("bookings", json={
            "user": self.walk.rng.choice(sorted(GATED.values())), "pool": pool,
            "gpus": self.walk.rng.choice(self.amounts[pool]), "start": format_time(start),
            "end": format_time(start + timedelta(minutes=self.walk.rng.randint(1, 3)))})
        return self.walk.answered(response, {201: "booked", 409: "full", 403: "over a limit",
                                        400: "start passed"})

    def create(self) -> str:
        """Mostly a pod asking exactly what a free booking of its namespace's owner gives (the
        webhook admits it and claims the booking); sometimes one asking for a GPU more (refused:
        more than booked), a second pod on a booking a pod holds (refused: one pod per
        booking), or one in a namespace with nothing booked."""
        if len(self.live()) >= MAX_OUTSIDE_PODS:
            return self.delete()
        owned = {namespace: [b for b in self.walk.bookings_in("active") if b["user"] == owner]
                 for namespace, owner in sorted(GATED.items())}
        free = [(ns, b) for ns, bookings in owned.items() for b in bookings if b["server"] is None]
        held = [(ns, b) for ns, bookings in owned.items() for b in bookings
                if (b["server"] or "").startswith(f"pod:{ns}/")]
        roll = self.walk.rng.random()
        if free and roll < 0.65:
            namespace, booking = self.walk.rng.choice(free)
        elif held and roll < 0.9:
            namespace, booking = self.walk.rng.choice(held)
        else:
            namespace, booking = self.walk.rng.choice(sorted(GATED)), None
        resources = ({"nvidia.com/gpu": "1"} if booking is None else {
            name: str(count) for name, count in booked_resources(booking, self.walk.pools).items()})
        if free and roll < GREEDY * 0.65:  # within the draw that picked a free booking
            # a job that asks for one GPU more than its owner booked: refused, and the booking
            # stays free for the corrected job (the share invariant sees no such pod run)
            resources["nvidia.com/gpu"] = str(int(resources["nvidia.com/gpu"]) + 1)
        self.counter += 1
        # it runs until deleted (by the walk, or by the service at its booking's end); a long
        # walk lasts an hour
        pod = {"metadata": {"name": f"train-{self.counter}"},
               "spec": {"restartPolicy": "Never", "containers": [{
                   "name": "main", "image": "python:3.12", "command": sleeping(3600),
                   "resources": {"limits": resources}}]}}
        response = self.walk.driver.cluster.post(f"api/v1/namespaces/{namespace}/pods", json=pod)
        # the webhook refuses with a sentence (403)
        outcome = self.walk.answered(response, {201: "admitted", 403: "refused"})
        if outcome == "refused":
            outcome = "refused: " + refusal_kind(response.text)
        self.walk.result.webhook[outcome] += 1
        return outcome

    def delete(self) -> str:
        pods = self.live()
        if not pods:
            return "none to delete"
        pod = self.walk.rng.choice(sorted(pods, key=lambda p: p["metadata"]["name"]))
        metadata = pod["metadata"]
        response = self.walk.driver.cluster.delete(
            f"/api/v1/namespaces/{metadata['namespace']}/pods/{metadata['name']}")
        outcome = self.walk.answered(response, {200: "deleted", 404: "gone meanwhile"})
        self.deleted.add(pod_name(pod))
        booking_id = pod_booking_id(pod)
        if outcome == "deleted" and booking_id is not None:
            holder = f"pod:{metadata['namespace']}/{metadata['name']}"
            if self.walk.snapshot.bookings.get(booking_id, {}).get("server") == holder:
                self.deleted_holders[(booking_id, holder)] = now()
                self.walk.result.webhook["deleted while holding its booking"] += 1
        return outcome

    def count_outcomes(self, before: Snapshot | None) -> None:
        """Claims of pods the walk deleted that the service has released since (the checker's
        "pod claims end with their pod" fails one that outlives its pod too long), and
        admitted pods the service deleted because their booking ended."""
        for (booking_id, holder) in list(self.deleted_holders):
            if self.walk.snapshot.bookings.get(booking_id, {}).get("server") != holder:
                del self.deleted_holders[(booking_id, holder)]
                self.walk.result.webhook["claim released at pod end"] += 1
        if before is None:
            return
        live = {pod_name(pod) for pod in self.live()}
        for pod in before.live_pods():
            name = pod_name(pod)
            if (pod["metadata"].get("namespace") in GATED and name not in live
                    and name not in self.deleted and pod_booking_id(pod) is not None):
                why = ("after a restore undid its booking"
                       if self.walk.facts.undone_by_restore(pod_booking_id(pod))
                       else "at its booking's end")
                self.walk.result.webhook["deleted by the service " + why] += 1
