"""The service preempts an opportunistic grant for a booking: the grant is released, the Hub is
asked to stop its server, the user gets a notice and the lifecycle tick does not stop it twice.
The Hub API is a tiny in-process Tornado app recording the calls."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

import pytest
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets
from traitlets.config import Config

from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.service.app import GPUBookingService
from jhub_gpubooking.service.lifecycle_api import notices_json

NOW = datetime(2030, 1, 7, 10, 5, tzinfo=timezone.utc)


class FakeHubServers(web.RequestHandler):
    def delete(self, user: str, server: str) -> None:
        self.application.settings["calls"].append((user, server))
        self.set_status(202)


class FakeHubUser(web.RequestHandler):
    def get(self, user: str) -> None:
        # the user's default server runs on the booking the test put in "running"
        running = self.application.settings["running"]
        state = {"gpu_booking_id": running[user]} if user in running else {}
        self.finish({"name": user, "servers": {"": {"ready": True, "pending": None,
                                                    "state": state}}})


@pytest.fixture
async def service(tmp_path):
    calls: list = []
    running: dict = {}
    app = web.Application(
        [(r"/hub/api/users/([^/]+)/servers/([^/]*)", FakeHubServers),
         (r"/hub/api/users/([^/]+)", FakeHubUser)], calls=calls, running=running,
    )
    sockets = bind_sockets(0, "127.0.0.1")
    server = HTTPServer(app)
    server.add_sockets(sockets)
    service = GPUBookingService(
        db_url=f"sqlite:///{tmp_path / 'bookings.sqlite'}",
        upgrade_db=True,
        pools=[{"name": "t4", "nodes": {"node-c": 1}, "slices_per_gpu": 4, "backend": "hami",
                "gpu_memory_mib": 15360}],
        hub_api_url=f"http://127.0.0.1:{sockets[0].getsockname()[1]}/hub/api",
        api_token="service-token",
        clock=ManualClock(NOW),
        config=Config(
            Opportunistic={"opportunistic_enabled": True, "opportunistic_horizon_minutes": 30}
        ),
    )
    service.setup()
    yield service, calls, running
    service.executor.shutdown(wait=True)
    server.stop()


async def test_a_booking_preempts_a_running_grant_and_the_hub_stops_its_server(service):
    service, calls, running = service
    grant = service.opportunistic.bookings.grant(
        "ada", "t4", 1, service.opportunistic.opportunistic_horizon_minutes
    )
    service.store.claim(grant.id, "")
    running["ada"] = grant.id
    start, end = NOW.replace(minute=0), NOW.replace(hour=11, minute=0)

    booking = await service.opportunistic.create_booking("bob", "t4", "1/2", start, end, actor="bob")

    assert booking.amount * 4 == 2 and not booking.opportunistic
    assert calls == [("ada", "")]
    released = service.store.get(grant.id)
    assert released.release_reason == "preempted"
    [notice] = notices_json([released], NOW, None, {})
    assert notice["message"] == (
        f"Your booking #{grant.id} in pool t4 was released at 2030-01-07 10:00 UTC because a "
        "booking needed the GPU it was using."
    )
    # the stop is recorded, so the lifecycle tick does not ask the Hub again
    assert await service.lifecycle.tick(NOW) == []
    assert calls == [("ada", "")]
    assert service.metrics.releases.labels("preempted")._value.get() == 1


async def test_a_preempted_grant_a_webhook_pod_holds_deletes_the_pod_and_keeps_the_claim(service):
    service, calls, _running = service
    deleted = []

    class PodClaims:
        """The webhook's pod claims: records the pods the lifecycle asks it to delete."""

        async def stop_pod(self, booking) -> bool:
            deleted.append((booking.id, booking.server))
            return True

    service.lifecycle.webhook = SimpleNamespace(pod_claims=PodClaims())
    grant = service.opportunistic.bookings.grant(
        "ada", "t4", 1, service.opportunistic.opportunistic_horizon_minutes
    )
    service.store.claim(grant.id, "pod:jobs-ada/train-1")
    start, end = NOW.replace(minute=0), NOW.replace(hour=11, minute=0)

    await service.opportunistic.create_booking("bob", "t4", "1/2", start, end, actor="bob")

    assert deleted == [(grant.id, "pod:jobs-ada/train-1")]
    assert calls == []  # no Hub server holds it
    # the claim stays until the webhook sees the pod gone: no second pod takes the grant
    assert service.store.get(grant.id).server == "pod:jobs-ada/train-1"
