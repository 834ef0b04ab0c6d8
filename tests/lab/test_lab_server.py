"""The server extension inside a real Jupyter server (as the venv enables it: the wheel's
jupyter_server_config.d file), against a stand-in booking service that checks the user's token."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest
from hub_harness import free_port
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port

from jhub_gpubooking.core.timegrid import format_time, parse_time

USER_TOKEN = "ada-server-token"
SERVER_TOKEN = "jupyter-token"
PREFIX = "/services/gpu-booking/"
POOL = {"name": "a100", "gpu_model": "A100", "slices_per_gpu": 4, "display_name": "A100"}


class FakeService:
    """One booking of ada's and the service's rules for it: extensions up to ``max_end``."""

    def __init__(self) -> None:
        now = datetime.now(timezone.utc).replace(microsecond=0)
        self.now = now
        self.booking = {
            "id": 11, "user": "ada", "pool": "a100", "slices": 1, "state": "active",
            "start": format_time(now - timedelta(hours=1)),
            "end": format_time(now + timedelta(minutes=20)), "release_reason": None,
        }
        self.max_end = now + timedelta(minutes=80)
        self.down = False
        self.requests: list[tuple[str, str, dict | None]] = []

    def extension(self) -> dict:
        end = parse_time(self.booking["end"])
        minutes = int((self.max_end - end).total_seconds() // 60)
        return {"booking": dict(self.booking), "minutes": minutes,
                "max_end": format_time(self.max_end) if minutes else None,
                "reason": None if minutes else "The GPU is booked by someone else next.",
                "now": format_time(self.now)}


class Handler(web.RequestHandler):
    def initialize(self, service: FakeService) -> None:
        self.service = service

    def prepare(self) -> None:
        body = json.loads(self.request.body) if self.request.body else None
        self.service.requests.append((self.request.method, self.request.path, body))
        self.body = body
        if self.service.down:
            self.reply(503, {"status": 503, "message": "The database is not reachable."})
        elif self.request.headers.get("Authorization") != f"token {USER_TOKEN}":
            self.reply(403, {"status": 403, "message": "Authentication required."})

    def reply(self, status: int, answer) -> None:
        self.set_status(status)
        self.finish(json.dumps(answer))


class Pools(Handler):
    def get(self) -> None:
        self.reply(200, [POOL])


class Extension(Handler):
    def get(self, booking_id: str) -> None:
        self.reply(200, self.service.extension())


class Booking(Handler):
    def patch(self, booking_id: str) -> None:
        end = parse_time(self.body["end"])
        if end > self.service.max_end:
            return self.reply(409, {"status": 409, "message": "The GPU is taken from then."})
        self.service.booking["end"] = format_time(end)
        self.reply(200, self.service.booking)


@pytest.fixture
async def service():
    fake = FakeService()
    sock, port = bind_unused_port()
    server = HTTPServer(web.Application([
        (PREFIX + "api/pools", Pools, {"service": fake}),
        (PREFIX + r"api/bookings/(\d+)/extension", Extension, {"service": fake}),
        (PREFIX + r"api/bookings/(\d+)", Booking, {"service": fake}),
    ]))
    server.add_sockets([sock])
    fake.url = f"http://127.0.0.1:{port}{PREFIX}"
    yield fake
    server.stop()


async def start_jupyter_server(tmp_path: Path, environment: dict[str, str]):
    """A Jupyter server under base URL /user/ada/ with ``environment``; its URL and process."""
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("GPU_BOOKING")}
    env.update(environment, HOME=str(tmp_path), JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), JUPYTERHUB_API_TOKEN=USER_TOKEN)
    log = (tmp_path / "server.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", f"--ServerApp.port={port}",
         "--ServerApp.ip=127.0.0.1", "--ServerApp.base_url=/user/ada/",
         f"--IdentityProvider.token={SERVER_TOKEN}", "--ServerApp.open_browser=False",
         f"--ServerApp.root_dir={tmp_path}", "--allow-root"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/user/ada/"
    async with httpx.AsyncClient() as client:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, (tmp_path / "server.log").read_text()
            try:
                if (await client.get(url + "api/status", headers=auth())).status_code == 200:
                    return url, process
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()
            await asyncio.sleep(0.2)


def auth() -> dict:
    return {"Authorization": f"token {SERVER_TOKEN}"}


@pytest.fixture
async def booked_server(service, tmp_path):
    url, process = await start_jupyter_server(tmp_path, {
        "GPU_BOOKING_ID": "11", "GPU_BOOKING_END": service.booking["end"],
        "GPU_BOOKING_POOL": "a100", "GPU_BOOKING_GPUS": "0.25",
        "GPU_BOOKING_SERVICE_URL": service.url, "GPU_BOOKING_PAGE_URL": PREFIX,
        "GPU_BOOKING_WARN_MINUTES": "10,2", "GPU_BOOKING_POLL_SECONDS": "5",
    })
    yield url
    process.terminate()
    process.wait(30)


async def test_a_booked_server_shows_and_extends_its_booking(service, booked_server):
    async with httpx.AsyncClient(base_url=booked_server, headers=auth()) as lab:
        status = (await lab.get("gpu-booking/status")).json()
        assert status == {
            "booked": True, "service": "ok", "message": None,
            "booking": {key: service.booking[key] for key in ("id", "pool", "state", "start",
                                                                "end")},
            "share": "¼ A100", "now": format_time(service.now), "seconds_left": 1200.0,
            "warn_minutes": [10, 2], "poll_seconds": 5.0,
            "extension": {"minutes": 60, "max_end": format_time(service.max_end),
                          "reason": None},
            "bookings_url": PREFIX,
        }
        extended = await lab.post("gpu-booking/extend", json={"minutes": 45})
        assert extended.status_code == 200, extended.text
        new_end = format_time(service.now + timedelta(minutes=65))
        assert ("PATCH", PREFIX + "api/bookings/11", {"end": new_end}) in service.requests
        assert extended.json()["booking"]["end"] == new_end
        assert extended.json()["extension"]["minutes"] == 15

        refused = await lab.post("gpu-booking/extend", json={"minutes": 30})
        assert (refused.status_code, refused.json()) == (
            409, {"message": "The GPU is taken from then."}
        )
        for bad in ({"minutes": 0}, {"minutes": "15"}, {"minutes": True}, {}):
            answer = await lab.post("gpu-booking/extend", json=bad)
            assert answer.status_code == 400 and "'minutes' must be" in answer.json()["message"]

        service.down = True
        down = (await lab.get("gpu-booking/status")).json()
        assert down["service"] == "unavailable" and "cannot be reached" in down["message"]
        # the end the server started with: the environment is all that is left
        assert down["booking"]["end"] == format_time(service.now + timedelta(minutes=20))
        failed = await lab.post("gpu-booking/extend", json={"minutes": 15})
        assert failed.status_code == 503 and "cannot be reached" in failed.json()["message"]

    async with httpx.AsyncClient(base_url=booked_server) as anonymous:
        assert (await anonymous.get("gpu-booking/status")).status_code == 403


async def test_an_extension_sent_again_after_its_answer_was_lost_is_made_once(
        service, booked_server):
    """The labextension sends the end it showed: a second click after a lost answer finds the
    end already there and extends nothing more."""
    shown = service.booking["end"]
    wanted = format_time(parse_time(shown) + timedelta(minutes=30))
    async with httpx.AsyncClient(base_url=booked_server, headers=auth()) as lab:
        answers = [await lab.post("gpu-booking/extend", json={"minutes": 30, "from_end": shown})
                   for _ in range(2)]
        assert [a.status_code for a in answers] == [200, 200], answers[-1].text
        assert [a.json()["booking"]["end"] for a in answers] == [wanted, wanted]
        patches = [r for r in service.requests if r[0] == "PATCH"]
        assert patches == [("PATCH", PREFIX + "api/bookings/11", {"end": wanted})]

        # extended further elsewhere meanwhile (the page): nothing is taken back
        service.booking["end"] = format_time(parse_time(wanted) + timedelta(minutes=15))
        again = await lab.post("gpu-booking/extend", json={"minutes": 30, "from_end": shown})
        assert again.json()["booking"]["end"] == service.booking["end"]
        assert len([r for r in service.requests if r[0] == "PATCH"]) == 1

        bad = await lab.post("gpu-booking/extend", json={"minutes": 30, "from_end": "soon"})
        assert bad.status_code == 400
        assert bad.json()["message"].startswith("'from_end' is not a valid ISO 8601 time")


async def test_a_cpu_server_is_not_booked(service, tmp_path):
    url, process = await start_jupyter_server(tmp_path, {})
    try:
        async with httpx.AsyncClient(base_url=url, headers=auth()) as lab:
            assert (await lab.get("gpu-booking/status")).json() == {"booked": False}
            answer = await lab.post("gpu-booking/extend", json={"minutes": 15})
            assert answer.status_code == 409 and "without a GPU booking" in answer.json()["message"]
    finally:
        process.terminate()
        process.wait(30)
    assert service.requests == []
