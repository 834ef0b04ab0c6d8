"""Recurring series in the lifecycle soak (see soak.py): now and then a user books their
booking as a daily series instead (a weekly lab, with days for weeks), half of the time sent
twice with one ``Idempotency-Key`` as the page does after a lost answer, and now and then
cancels a series of theirs.

A series is all or nothing, and the walk checks it against the service's own list of bookings
each time: a 201 lists every occurrence, a day apart, each stored with its series; a refusal
leaves none of them behind; a series sent again answers the same series; a cancel leaves no
occurrence active or upcoming.
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import TYPE_CHECKING

from soak_invariants import SoakFailure

from jhub_gpubooking.core.timegrid import format_time, parse_time

if TYPE_CHECKING:
    from soak import Walk

#: how often a book of the walk is a series action instead; of those, how often it cancels
#: one of the series still upcoming, and how often a new series is sent twice
SERIES, CANCEL, SENT_TWICE = 0.15, 0.35, 0.5
#: the invariant's name in the walk's table of checks
SERIES_CHECK = "a series is booked and cancelled whole"
OUTCOMES = {201: "series booked", 409: "series full", 403: "series over a limit",
            400: "series start passed"}


class Series:
    """Books and cancels series for the walk, and checks each against the service's list."""

    def __init__(self, walk: Walk, seed: int) -> None:
        self.walk = walk
        #: its own draws, so the walk's stay as they were
        self.rng = random.Random(seed + 2)
        self.booked: list[int] = []
        self.made = 0

    def wants(self) -> bool:
        return self.rng.random() < SERIES

    def act(self, request: dict) -> str:
        """A new series like ``request``, or the cancel of one booked before."""
        # a restore (soak_restore.py) takes away the series booked since its backup
        listed = {booking["series_id"] for booking in self.walk.snapshot.bookings.values()}
        self.booked = [series_id for series_id in self.booked if series_id in listed]
        if self.booked and self.rng.random() < CANCEL:
            return self.cancel(self.booked.pop(self.rng.randrange(len(self.booked))))
        self.made += 1
        body = {**request, "repeat": "daily", "count": self.rng.randint(2, 3),
                "note": f"soak series {self.made}"}
        twice = self.rng.random() < SENT_TWICE
        headers = {"Idempotency-Key": f"soak-series-{self.rng.getrandbits(64):016x}"}
        client = self.walk.driver.booking
        response = client.post("series", json=body, headers=headers if twice else None)
        outcome = self.walk.answered(response, OUTCOMES)
        if twice and response.status_code == 201:
            again = client.post("series", json=body, headers=headers)
            if again.status_code != 201 or again.json()["id"] != response.json()["id"]:
                raise SoakFailure(f"series {response.json()['id']} sent again with its "
                                  f"Idempotency-Key was answered {again.status_code} "
                                  f"{again.text[:300]}")
        self.check_booked(body, response.json() if response.status_code == 201 else None)
        if response.status_code == 201:
            self.booked.append(response.json()["id"])
        return outcome + (", sent again" if twice and response.status_code == 201 else "")

    def check_booked(self, body: dict, series: dict | None) -> None:
        stored = [b for b in self.walk.all_bookings().values() if b["note"] == body["note"]]
        if series is None:
            if stored:
                raise SoakFailure(f"a refused series left {len(stored)} booking(s): {stored}")
        else:
            start, end = parse_time(body["start"]), parse_time(body["end"])
            expected = [(series["id"], format_time(start + timedelta(days=n)),
                         format_time(end + timedelta(days=n))) for n in range(body["count"])]
            found = sorted((b["series_id"], b["start"], b["end"]) for b in stored)
            # the running occurrence may have been extended or shortened since: only its start
            if [row[:2] for row in found] != [row[:2] for row in expected] or (
                    found[1:] != expected[1:]):
                raise SoakFailure(f"series {series['id']} should be {expected}, is {found}")
        self.walk.checker.checks[SERIES_CHECK] += 1

    def cancel(self, series_id: int) -> str:
        response = self.walk.driver.booking.delete(f"series/{series_id}")
        outcome = self.walk.answered(response, {200: "series cancelled"})
        left = [b for b in self.walk.all_bookings().values()
                if b["series_id"] == series_id and b["state"] in ("active", "upcoming")]
        if left:
            raise SoakFailure(f"series {series_id} was cancelled, yet {left} go on")
        self.walk.checker.checks[SERIES_CHECK] += 1
        return outcome
