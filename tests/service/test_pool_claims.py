"""The spawn gate's one round trip (``claim_in_pool``, behind ``POST api/pools/{pool}/claim``)
against an in-process service on SQLite and a tiny in-process Hub API that records which users'
servers it was asked about: which booking a start takes, when the Hub is asked, what refuses."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import event
from tornado import web
from tornado.httpclient import AsyncHTTPClient
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets
from traitlets.config import Config

from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.core.errors import Conflict
from jhub_gpubooking.service.app import GPUBookingService
from jhub_gpubooking.service.claims import (
    IN_USE,
    NONE_FREE,
    NOT_BOOKED,
    STARTING,
    STARTING_MESSAGE,
    STARTING_RETRY_AFTER_SECONDS,
    UNUSABLE,
    PoolClaimRefused,
    claim_in_pool,
)

BOOKED_AT = datetime(2030, 1, 7, 9, 0, tzinfo=timezone.utc)
NOW = BOOKED_AT + timedelta(hours=1, minutes=5)


class FakeHubUser(web.RequestHandler):
    """``GET api/users/{user}``: the servers the test put in ``servers`` (absent: no servers
    key at all, i.e. the Hub does not say)."""

    def get(self, user: str) -> None:
        self.application.settings["asked"].append(user)
        model = {"name": user, "groups": []}
        servers = self.application.settings["servers"]
        if user in servers:
            model["servers"] = servers[user]
        self.finish(model)


class FakeHubToken(web.RequestHandler):
    """``GET api/user``: who a token belongs to; only "user-token" is known (a user, ada)."""

    def get(self) -> None:
        token = self.request.headers.get("Authorization", "").removeprefix("token ")
        self.application.settings["tokens"].append(token)
        if token != "user-token":
            raise web.HTTPError(403)
        self.finish({"kind": "user", "name": "ada", "admin": False, "groups": [],
                     "scopes": ["access:services"]})


@pytest.fixture
async def gate(tmp_path):
    """(service, Hub's ``servers`` by user, the users the Hub was asked about)."""
    asked: list[str] = []
    servers: dict = {}
    app = web.Application([(r"/hub/api/users/([^/]+)", FakeHubUser),
                           (r"/hub/api/user", FakeHubToken)],
                          asked=asked, servers=servers, tokens=[])
    sockets = bind_sockets(0, "127.0.0.1")
    hub = HTTPServer(app)
    hub.add_sockets(sockets)
    clock = ManualClock(BOOKED_AT)
    service = GPUBookingService(
        db_url=f"sqlite:///{tmp_path / 'bookings.sqlite'}",
        upgrade_db=True,
        pools=[{"name": "a100", "nodes": {"n1": 4}, "slices_per_gpu": 4, "backend": "hami",
                "gpu_memory_mib": 81920},
               {"name": "t4", "nodes": {"t1": 1}, "backend": "whole"}],
        hub_api_url=f"http://127.0.0.1:{sockets[0].getsockname()[1]}/hub/api",
        api_token="service-token",
        clock=clock,
        config=Config(Opportunistic={"opportunistic_horizon_minutes": 30}),
    )
    service.setup()
    service.hub_tokens = app.settings["tokens"]  # the tokens the Hub was asked about
    yield service, servers, asked
    service.executor.shutdown(wait=True)
    hub.stop()


def book(service, hours: float, gpus: str = "1/4", user: str = "ada", pool: str = "a100"):
    """A booking made at BOOKED_AT for ``hours``; the clock is then at NOW (it is active)."""
    service.clock.set(BOOKED_AT)
    booking = service.store.create(user, pool, gpus, BOOKED_AT,
                                   BOOKED_AT + timedelta(hours=hours), is_admin=True)
    service.clock.set(NOW)
    return booking


def claim(service, server: str = "", chosen: int | None = None, pool: str = "a100"):
    return claim_in_pool(service, "ada", service.pool_objects[pool], server, chosen,
                         actor="gpu-booking")


async def refusal(service, **options) -> PoolClaimRefused:
    with pytest.raises(PoolClaimRefused) as refused:
        await claim(service, **options)
    return refused.value


async def test_a_free_booking_is_claimed_without_asking_the_hub(gate):
    service, _servers, asked = gate
    booked = book(service, 3)
    claimed = await claim(service, "gpu")
    assert (claimed.id, claimed.server) == (booked.id, "gpu")
    assert service.store.get(booked.id).server == "gpu"
    # the same server again (a restart): still its booking, still no Hub round trip
    assert (await claim(service, "gpu")).id == booked.id
    assert asked == []


async def test_the_common_start_is_one_write_transaction_and_a_restart_writes_nothing(gate):
    service, _servers, _asked = gate
    booked = book(service, 3)
    statements: list[str] = []
    event.listen(service.db_engine, "before_cursor_execute",
                 lambda _conn, _cursor, sql, *_: statements.append(" ".join(sql.split()[:3])))
    await claim(service, "gpu")
    # no read transaction before it, no row read back: the read, the booking's row, its usage
    # interval and its "claimed" event (SQLite's BEGIN IMMEDIATE holds the database)
    assert statements == ["BEGIN IMMEDIATE", "SELECT bookings.id, bookings.user,", "UPDATE bookings SET",
                          "INSERT INTO usage_intervals", "INSERT INTO booking_events"]
    statements.clear()
    await claim(service, "gpu")
    assert statements == ["BEGIN IMMEDIATE", "SELECT bookings.id, bookings.user,"]
    assert [e.kind for e in service.store.history(booked.id)] == ["created", "claimed"]


async def test_the_services_own_token_is_the_spawner_without_asking_the_hub(gate):
    service, _servers, _asked = gate
    book(service, 3)
    sockets = bind_sockets(0, "127.0.0.1")
    server = HTTPServer(service.tornado_app)
    server.add_sockets(sockets)
    url = (f"http://127.0.0.1:{sockets[0].getsockname()[1]}{service.service_prefix}"
           "api/pools/a100/claim")

    async def post(token: str) -> tuple[int, dict]:
        response = await AsyncHTTPClient().fetch(
            url, method="POST", headers={"Authorization": f"token {token}"},
            body=json.dumps({"user": "ada", "server": ""}), raise_error=False)
        return response.code, json.loads(response.body)

    try:
        code, answer = await post("service-token")
        assert (code, answer["booking"]["server"]) == (200, "")
        assert service.hub_tokens == []
        # any other token is the Hub's to identify: a user may not claim
        assert (await post("user-token"))[0] == 403
        assert (await post("forged-token"))[0] == 403
        assert service.hub_tokens == ["user-token", "forged-token"]
    finally:
        server.stop()


async def test_a_claim_before_the_first_check_is_answered_starting_then_goes_through(
        gate, hub_up):
    """Just after the service started, a claim waits only briefly for the first check of the
    running servers and pods (the spawner's request would time out on a longer wait and call
    the service down): 503, reason ``service_starting``, Retry-After; nothing claimed. Once
    the check has run, the same claim goes through. The older per-booking claim says the
    same."""
    service, _servers, _asked = gate
    # begun five minutes ago: the lifecycle's ticks do not release it as a no-show
    begun = NOW - timedelta(minutes=5)
    service.clock.set(begun)
    booked = service.store.create("ada", "a100", "1/4", begun, begun + timedelta(hours=2))
    service.clock.set(NOW)
    # hub_up: the Hub's list of running servers, which the first check needs, cannot be had yet
    sockets = bind_sockets(0, "127.0.0.1")
    server = HTTPServer(service.tornado_app)
    server.add_sockets(sockets)
    api = f"http://127.0.0.1:{sockets[0].getsockname()[1]}{service.service_prefix}api/"

    async def post(path: str) -> tuple[int, str | None, dict]:
        body = {"server": "gpu"} if path.startswith("bookings/") else {"user": "ada", "server": "gpu"}
        response = await AsyncHTTPClient().fetch(
            api + path, method="POST", headers={"Authorization": "token service-token"},
            body=json.dumps(body), raise_error=False)
        return response.code, response.headers.get("Retry-After"), json.loads(response.body)

    service.lifecycle.lifecycle_interval_seconds = 0.05
    service.lifecycle.start()
    try:
        code, retry_after, answer = await post("pools/a100/claim")
        assert (code, retry_after, answer["reason"]) == (
            503, str(STARTING_RETRY_AFTER_SECONDS), STARTING)
        assert answer["message"] == STARTING_MESSAGE
        code, retry_after, answer = await post(f"bookings/{booked.id}/claim")
        assert (code, retry_after, answer["message"]) == (
            503, str(STARTING_RETRY_AFTER_SECONDS), STARTING_MESSAGE)
        assert service.store.get(booked.id).server is None
        assert [e.kind for e in service.store.history(booked.id)] == ["created"]

        hub_up[0] = True
        assert await service.lifecycle.after_first_check(5)
        code, _retry_after, answer = await post("pools/a100/claim")
        assert (code, answer["booking"]["id"], answer["booking"]["server"]) == (
            200, booked.id, "gpu")
    finally:
        service.lifecycle.stop()
        server.stop()


async def test_default_order_is_longest_running_then_largest(gate):
    service, _servers, _asked = gate
    book(service, 2, "1")
    small_long = book(service, 4, "1/4")
    large_long = book(service, 4, "1/2")
    book(service, 3, "1", pool="t4")  # another pool never counts
    assert (await claim(service, "a")).id == large_long.id
    # the next server takes the next one in the order
    assert (await claim(service, "b")).id == small_long.id


async def test_the_users_choice_wins_and_a_stale_choice_falls_back(gate):
    service, _servers, _asked = gate
    short = book(service, 2)
    long = book(service, 4)
    assert (await claim(service, "a", chosen=short.id)).id == short.id
    assert (await claim(service, "b", chosen=999)).id == long.id


def running_on(booking) -> dict:
    """A Hub server model running on ``booking`` (its state names it)."""
    return {"ready": True, "pending": None, "state": {"gpu_booking_id": booking.id}}


async def test_a_running_holder_refuses_and_the_next_booking_is_taken(gate):
    service, servers, asked = gate
    held = book(service, 4)
    free = book(service, 2)
    await claim(service, "training", chosen=held.id)
    servers["ada"] = {"training": running_on(held)}
    # held elsewhere ranks last: the notebook gets the free one, and the Hub is not asked
    assert (await claim(service, "notebook")).id == free.id
    assert asked == []

    servers["ada"]["notebook"] = running_on(free)
    refused = await refusal(service, server="third")
    assert (refused.status, refused.reason) == (409, IN_USE)
    # both were tried, longest first; the refusal names the first one's holder
    assert asked == ["ada", "ada"]
    assert refused.holder == "training"
    assert [service.store.get(b.id).server for b in (held, free)] == ["training", "notebook"]


async def test_a_holder_the_hub_cannot_tell_about_refuses(gate):
    service, _servers, asked = gate
    held = book(service, 4)
    await claim(service, "training")
    # the Hub's answer has no servers: missing means unknown, never stopped
    refused = await refusal(service, server="notebook")
    assert (refused.status, refused.reason, refused.holder) == (409, IN_USE, "training")
    assert refused.message == "This booking is already in use by server 'training'."
    assert asked == ["ada"]
    assert service.store.get(held.id).server == "training"


async def test_a_holder_the_hub_shows_stopped_is_taken_over(gate):
    service, servers, _asked = gate
    held = book(service, 4)
    await claim(service, "training")
    servers["ada"] = {}
    assert (await claim(service, "notebook")).id == held.id
    assert service.store.get(held.id).server == "notebook"


async def test_ended_and_cancelled_bookings_are_never_claimed(gate):
    service, _servers, _asked = gate
    ended = book(service, 1)  # ended at 10:00, five minutes ago
    cancelled = book(service, 4)
    service.store.cancel(cancelled.id, actor="ada")
    refused = await refusal(service)
    assert (refused.status, refused.reason) == (403, NOT_BOOKED)
    assert refused.message == "ada has no active booking in the GPU pool a100 right now."
    assert service.store.get(ended.id).server is None
    assert service.store.get(cancelled.id).server is None


async def test_without_a_booking_an_opportunistic_grant_is_claimed(gate):
    service, _servers, asked = gate
    service.opportunistic.opportunistic_enabled = True
    claimed = await claim(service, "gpu")
    assert claimed.opportunistic and claimed.server == "gpu"
    assert claimed.user == "ada" and claimed.amount == 1
    assert asked == ["ada"]  # the user's groups decide which pools a grant may use


async def test_a_pod_admitted_right_after_the_grant_cannot_take_it(gate):
    """The grant is created claimed: a pod the webhook admits the moment it is committed finds
    it held, and the start that asked for it gets it (two transactions used to let the pod in
    between, and the start was refused 409)."""
    service, _servers, _asked = gate
    service.opportunistic.opportunistic_enabled = True
    bookings = service.opportunistic.bookings
    grant_once = bookings.grant
    pod_claims = []

    def grant_then_a_pod_claims(*args, **kwargs):
        granted = grant_once(*args, **kwargs)
        try:
            pod_claims.append(service.store.claim(granted.id, "pod:default/eager"))
        except Conflict as refused:
            pod_claims.append(refused.message)
        return granted

    bookings.grant = grant_then_a_pod_claims
    claimed = await claim(service, "gpu")
    assert (claimed.opportunistic, claimed.server) == (True, "gpu")
    assert pod_claims == ["This booking is already in use by server 'gpu'."]
    assert service.store.get(claimed.id).server == "gpu"


async def test_without_a_booking_and_nothing_free_the_reason_says_so(gate):
    service, _servers, _asked = gate
    service.opportunistic.opportunistic_enabled = True
    book(service, 4, "1", user="bob", pool="t4")
    refused = await refusal(service, pool="t4")
    assert (refused.status, refused.reason) == (409, NONE_FREE)



async def test_a_booking_on_gpus_the_pool_no_longer_has_is_refused_with_the_reason(gate):
    """A node given fewer GPUs (a config edit, or node discovery after a GPU failed): the start
    is refused with the flag's reason instead of a pod that would wait for GPUs that are gone;
    a booking the pool still holds is taken instead when the user has one, even over the
    user's pick."""
    service, _servers, _asked = gate
    whole, quarter = book(service, 3, "3"), book(service, 3)
    assert (whole.placement.gpus, quarter.placement.gpus) == ((0, 1, 2), (3,))
    a100 = service.pool_objects["a100"]

    with pytest.raises(PoolClaimRefused) as refused:  # n1 down to GPUs 0 and 1: neither fits
        await claim_in_pool(service, "ada", replace(a100, nodes={"n1": 2}), "gpu")
    assert (refused.value.status, refused.value.reason) == (409, UNUSABLE)
    assert refused.value.message == (
        f"Node n1 of pool a100 now reports 2 GPU(s) and booking {whole.id} holds GPU 2 there, "
        "so it cannot be used. End or cancel it on the booking page and book other GPUs."
    )
    assert service.store.get(whole.id).server is None

    # GPU 3 gone: the quarter the user picked cannot run, the whole GPUs can
    claimed = await claim_in_pool(service, "ada", replace(a100, nodes={"n1": 3}), "gpu",
                                  quarter.id)
    assert claimed.id == whole.id
    assert service.store.get(quarter.id).server is None
