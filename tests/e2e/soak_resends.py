"""Creates of the lifecycle soak (see soak.py) whose answer was lost: sent again with the same
``Idempotency-Key``, as the reservation page does after a network failure. The second answer
must be the booking the first made, whatever else the walk did to the service before (restarts,
database outages, backups). A refusal decides nothing: sent again, the create may book. An
admin's maintenance window is sent twice the same way: the second answer is the window the
first added.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from soak_invariants import SoakFailure

if TYPE_CHECKING:
    import httpx
    from soak import Walk

#: how often a create of the walk is sent twice; a maintenance window, rarer, more often
RESEND = 0.2
RESEND_WINDOW = 0.5
#: the invariants' names in the walk's table of checks
RESENT_CHECK = "a create sent again answers the booking it made"
RESENT_WINDOW_CHECK = "a maintenance window sent again answers the window it added"


class Resends:
    """Sends creates twice, and checks the second answer."""

    def __init__(self, walk: Walk, seed: int) -> None:
        self.walk = walk
        #: its own draws, so the walk's (and every seed's choices before) stay as they were
        self.rng = random.Random(seed + 1)

    def new_key(self) -> dict[str, str]:
        return {"Idempotency-Key": f"soak-{self.rng.getrandbits(64):016x}"}

    def book_twice(self, request: dict) -> str:
        key = self.new_key()
        booking = self.walk.driver.booking
        first = booking.post("bookings", json=request, headers=key)
        self.walk.answered(first, {201: "booked", 409: "full", 403: "over a limit",
                                   400: "start passed"})
        again = booking.post("bookings", json=request, headers=key)
        outcome = self.walk.answered(again, {201: "booked, sent again", 409: "full",
                                             403: "over a limit", 400: "start passed"})
        if first.status_code != 201:
            return outcome
        if again.status_code != 201 or again.json()["id"] != first.json()["id"]:
            raise SoakFailure(
                f"booking {first.json()['id']} sent again with its Idempotency-Key was answered "
                f"{again.status_code} {again.text[:300]}")
        self.walk.checker.checks[RESENT_CHECK] += 1
        return outcome

    def add_window_twice(self, window: dict) -> httpx.Response:
        """POST the maintenance ``window`` twice with one key; returns the first answer. Nothing
        of the walk runs between the two, so the second must be the same window, with the same
        collisions."""
        key, booking = self.new_key(), self.walk.driver.booking
        first, again = (booking.post("maintenance", json=window, headers=key) for _ in range(2))
        for response in (first, again):
            self.walk.answered(response, {201: "window added"})
        if again.json() != first.json():
            raise SoakFailure(f"maintenance window {first.json()['id']} sent again with its "
                              f"Idempotency-Key was answered {again.text[:300]}")
        self.walk.checker.checks[RESENT_WINDOW_CHECK] += 1
        return first
