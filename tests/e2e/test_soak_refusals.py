"""The soak's "book the next free slot" on answers made by hand: it books what the refusal names,
and fails the walk when that slot is refused, or ``api/pools/{name}/next-free`` names another,
with nothing changed by the service."""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import httpx
import pytest
from soak import Walk
from soak_invariants import SoakFailure
from soak_refusals import NEXT_FREE_AGREES, NEXT_FREE_CHECK, Refused

from jhub_gpubooking.core.timegrid import floor_to_grid, format_time

START = floor_to_grid(datetime.now(timezone.utc), 1) + timedelta(minutes=30)
REQUEST = {"user": "u0", "pool": "a100", "gpus": 1, "start": format_time(START),
           "end": format_time(START + timedelta(minutes=3))}
NEXT = {"start": format_time(START + timedelta(minutes=5)),
        "end": format_time(START + timedelta(minutes=8))}


def answer_with(status: int, body: dict) -> httpx.Response:
    """An answer of the service as it comes off the wire (so the client times it)."""
    return httpx.Response(status, headers={"Content-Type": "application/json"},
                          stream=httpx.ByteStream(json.dumps(body).encode()))


class FakeWalk:
    """What Refused uses of the walk; the service answers creates with ``answers`` in turn."""

    answered = Walk.answered

    def __init__(self, answers: list[httpx.Response], updated: datetime,
                 next_free: dict | None = None) -> None:
        self.rng = random.Random(0)
        self.checker = SimpleNamespace(checks=Counter())
        self.posted: list[dict] = []
        self.asked: list[dict] = []
        self.updated = updated

        def answer(request: httpx.Request) -> httpx.Response:
            if request.method == "GET":
                self.asked.append(dict(request.url.params))
                return answer_with(200, {"pool": "a100", "gpus": 1, "minutes": 3,
                                         **(next_free or NEXT)})
            self.posted.append(json.loads(request.content))
            return answers[len(self.posted) - 1]

        self.driver = SimpleNamespace(booking=httpx.Client(
            transport=httpx.MockTransport(answer), base_url="http://service/api/"))

    def get(self, client: httpx.Client, path: str, **kwargs) -> dict:
        return client.get(path, **kwargs).json()

    def all_bookings(self) -> dict[int, dict]:
        return {1: {"id": 1, "updated": format_time(self.updated)}}


def refused_then(second: httpx.Response, named: dict | None = NEXT,
                 updated: datetime | None = None,
                 next_free: dict | None = None) -> tuple[FakeWalk, str]:
    refusal = answer_with(409, {"status": 409, "message": "full"}
                     | ({"next_free": named} if named else {}))
    walk = FakeWalk([refusal, second], updated or datetime(2020, 1, 1, tzinfo=timezone.utc),
                    next_free)
    first = walk.driver.booking.post("bookings", json=REQUEST)
    return walk, Refused(walk).book_next_free(REQUEST, first)


def test_books_the_named_interval_and_counts_the_check():
    walk, outcome = refused_then(answer_with(201, {"id": 2}))
    assert outcome == "full, booked the next free"
    assert walk.posted[1] == {**REQUEST, **NEXT}
    assert walk.asked == [{"gpus": "1", "minutes": "3", "after": REQUEST["start"]}]
    assert walk.checker.checks == {NEXT_FREE_CHECK: 1, NEXT_FREE_AGREES: 1}


def test_next_free_answering_another_slot_with_nothing_changed_fails_the_walk():
    later = {"start": NEXT["end"], "end": format_time(START + timedelta(minutes=11))}
    with pytest.raises(SoakFailure, match="next-free answers"):
        refused_then(answer_with(201, {"id": 2}), next_free=later)


def test_a_refusal_of_the_named_slot_with_nothing_changed_fails_the_walk():
    with pytest.raises(SoakFailure, match="refused at once, with no change by the service"):
        refused_then(answer_with(409, {"status": 409, "message": "full"}))


def test_a_refusal_after_the_service_booked_meanwhile_is_an_outcome():
    _walk, outcome = refused_then(answer_with(409, {"status": 409, "message": "full"}),
                                  updated=datetime.now(timezone.utc))
    assert outcome == "full, next free taken meanwhile"


def test_a_named_slot_of_another_length_fails_the_walk():
    longer = {**NEXT, "end": format_time(START + timedelta(minutes=9))}
    with pytest.raises(SoakFailure, match="not the same length"):
        refused_then(answer_with(201, {"id": 2}), named=longer)


def test_no_slot_named_books_nothing():
    walk, outcome = refused_then(answer_with(201, {"id": 2}), named=None)
    assert outcome == "full, no next free"
    assert len(walk.posted) == 1


def test_a_create_sent_again_must_answer_the_booking_it_made():
    from soak_resends import RESENT_CHECK, Resends

    same = FakeWalk([answer_with(201, {"id": 2}), answer_with(201, {"id": 2})], START)
    assert Resends(same, 0).book_twice(REQUEST) == "booked, sent again"
    assert same.posted == [REQUEST, REQUEST]
    assert same.checker.checks == {RESENT_CHECK: 1}
    for second in (answer_with(201, {"id": 3}), answer_with(409, {"message": "full"})):
        twice = FakeWalk([answer_with(201, {"id": 2}), second], START)
        with pytest.raises(SoakFailure, match="booking 2 sent again with its Idempotency-Key"):
            Resends(twice, 0).book_twice(REQUEST)
    refused = FakeWalk([answer_with(409, {"message": "full"}), answer_with(201, {"id": 4})], START)
    assert Resends(refused, 0).book_twice(REQUEST) == "booked, sent again"
    assert refused.checker.checks == {}
