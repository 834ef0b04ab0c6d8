"""What a user of the lifecycle soak (see soak.py) does when a booking is refused for capacity:
join the waitlist, book in one click the next free slot the refusal names (as the page
offers), or give up.

The service promises that the next free slot is exactly what booking it would get right now
(jhub_gpubooking/core/next_free.py), and ``GET api/pools/{name}/next-free`` answers the same.
The walk asks that, then books the slot at once, so a different answer or a refusal must be
explained by what changed in between without the walk: the service itself made or changed a
booking (its waitlist booked a wait, say), or the running slot the interval began in passed.
Anything else fails the walk.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

import httpx
from soak_invariants import SoakFailure

from jhub_gpubooking.core.timegrid import floor_to_grid, format_time, parse_time

if TYPE_CHECKING:
    from soak import Walk

#: how often a refused user joins the waitlist, or else books the next free slot
JOIN_WAITLIST, TAKE_NEXT_FREE = 0.5, 0.3
#: the invariant's name in the walk's table of checks
NEXT_FREE_CHECK = "a refusal's next free slot is bookable"
NEXT_FREE_AGREES = "next-free answers what a refusal names"


def slot_passed_since(moment: datetime) -> bool:
    """Whether the running slot of the walk's one-minute grid changed since ``moment``."""
    return floor_to_grid(datetime.now(timezone.utc), 1) != floor_to_grid(moment, 1)


class Refused:
    """Acts for a user refused for capacity, and checks what the service answers."""

    def __init__(self, walk: Walk) -> None:
        self.walk = walk

    def choose(self, request: dict, refusal: httpx.Response) -> str:
        roll = self.walk.rng.random()
        if roll < JOIN_WAITLIST:
            return self.join_waitlist(request)
        if roll < JOIN_WAITLIST + TAKE_NEXT_FREE:
            return self.book_next_free(request, refusal)
        return "full"

    def join_waitlist(self, request: dict) -> str:
        """Wait for the same interval, or for any start up to 3 minutes later."""
        window_end = parse_time(request["end"]) + timedelta(minutes=self.walk.rng.randint(0, 3))
        response = self.walk.driver.booking.post(
            "waits", json={**request, "window_end": format_time(window_end)})
        outcome = self.walk.answered(response, {
            201: "full, waits", 409: "full, waits enough", 403: "full, over a limit",
            400: "full, start passed"})
        if outcome == "full, waits" and response.json()["state"] == "booked":
            return "full, booked from the waitlist"
        return outcome

    def book_next_free(self, request: dict, refusal: httpx.Response) -> str:
        named = refusal.json().get("next_free")
        if named is None:
            return "full, no next free"
        start, end = parse_time(named["start"]), parse_time(named["end"])
        asked_start = parse_time(request["start"])
        if end - start != parse_time(request["end"]) - asked_start or start < asked_start:
            raise SoakFailure(f"refusal of {request} named {named}: not the same length, or "
                              "earlier than the start asked for")
        # when the refused request went out: a change by the service since explains a refusal
        refused_at = datetime.now(timezone.utc) - refusal.elapsed
        self.ask_next_free(request, named, refused_at)
        response = self.walk.driver.booking.post(
            "bookings", json={**request, "start": format_time(start), "end": format_time(end)})
        outcome = self.walk.answered(response, {
            201: "full, booked the next free", 409: "full, next free taken meanwhile",
            403: "full, next free over a limit", 400: "full, next free started"})
        self.walk.checker.checks[NEXT_FREE_CHECK] += 1
        if response.status_code == 409 and not self.service_changed_since(refused_at):
            raise SoakFailure(f"the next free slot {named} of refused {request} was refused at "
                              f"once, with no change by the service: {response.text[:300]}")
        if response.status_code == 400 and not slot_passed_since(refused_at):
            raise SoakFailure(f"the next free slot {named} of refused {request} was refused as "
                              f"passed in the slot it was named in: {response.text[:300]}")
        return outcome

    def ask_next_free(self, request: dict, named: dict, refused_at: datetime) -> None:
        """``GET api/pools/{name}/next-free`` must name the refusal's slot (one rule, two ways
        to ask), unless the service changed a booking or the running slot passed since."""
        minutes = (parse_time(request["end"]) - parse_time(request["start"])) // timedelta(minutes=1)
        answer = self.walk.get(self.walk.driver.booking, f"pools/{request['pool']}/next-free",
                               params={"gpus": request["gpus"], "minutes": minutes,
                                       "after": request["start"]})
        self.walk.checker.checks[NEXT_FREE_AGREES] += 1
        if ((answer["start"], answer["end"]) != (named["start"], named["end"])
                and not slot_passed_since(refused_at)
                and not self.service_changed_since(refused_at)):
            raise SoakFailure(f"the refusal of {request} named {named}, but api/pools/"
                              f"{request['pool']}/next-free answers {answer}")

    def service_changed_since(self, moment: datetime) -> bool:
        """Whether some booking was made or changed at ``moment`` or later: the walk made none
        since, so the service did (its waitlist or lifecycle). ``updated`` has whole seconds."""
        second = moment.replace(microsecond=0)
        return any(parse_time(booking["updated"]) >= second
                   for booking in self.walk.all_bookings().values())
