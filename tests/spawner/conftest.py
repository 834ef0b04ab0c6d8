"""Fixtures for the spawner tests: a test double of the booking service and spawner factories.

:class:`FakeBookingService` implements only the REST routes the spawner calls, with canned
per-test state (pools, the bookings the service would call active / upcoming, which servers
hold which booking). The real service is exercised by the end-to-end tests.
"""

from __future__ import annotations

import json
import socket
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from unittest.mock import Mock

import pytest
import yaml
from jupyterhub.objects import Hub, Server
from kubernetes_asyncio.config import kube_config
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port
from traitlets.config import Config

from jhub_gpubooking.core.timegrid import format_time
from jhub_gpubooking.spawner import GPUBookingSpawner

SERVICE_TOKEN = "spawner-test-token"
SERVICE_PREFIX = "/services/gpu-booking/"

A100_POOL = {
    "name": "a100",
    "display_name": "A100 80 GB",
    "gpu_model": "A100",
    "gpu_memory_mib": 81920,
    "slices_per_gpu": 4,
    "backend": "hami",
    "nodes": {"gpu-node-1": 2, "gpu-node-2": 2},
    "total_gpus": 4,
    "gpu_uuids": {
        "gpu-node-1": ["GPU-aaaa-0", "GPU-aaaa-1"],
        "gpu-node-2": ["GPU-bbbb-0", "GPU-bbbb-1"],
    },
    "node_selector": {"gpu-type": "a100"},
    "resource_name": "",
}
T4_POOL = {
    "name": "t4",
    "display_name": "T4",
    "gpu_model": "T4",
    "gpu_memory_mib": 16384,
    "slices_per_gpu": 1,
    "backend": "whole",
    "nodes": {"t4-node": 4},
    "total_gpus": 4,
}


def booking(
    id: int,
    *,
    pool: str = "a100",
    user: str = "ada",
    slices: int = 2,
    start: datetime | None = None,
    end: datetime | None = None,
    node: str = "gpu-node-1",
    gpus: tuple[int, ...] = (1,),
    server: str | None = None,
    slices_per_gpu: int = 4,
    now: datetime | None = None,
) -> dict:
    """A booking as the service's JSON shows it at ``now`` (default: 0.5 A100, 2 more hours)."""
    now = now or datetime.now(timezone.utc).replace(microsecond=0)
    start = start or now - timedelta(hours=1)
    end = end or now + timedelta(hours=2)
    return {
        "id": id,
        "user": user,
        "pool": pool,
        "gpus": slices / slices_per_gpu,
        "slices": slices,
        "start": format_time(start),
        "end": format_time(end),
        "state": "active" if start <= now < end else ("upcoming" if now < start else "ended"),
        "note": "",
        "created": format_time(start - timedelta(days=1)),
        "updated": format_time(start - timedelta(days=1)),
        "placement": {"node": node, "gpus": list(gpus), "slices": slices // len(gpus)},
        "server": server,
    }


class FakeBookingService:
    """Canned state plus a log of every request: ``(method, path, body)``."""

    def __init__(self) -> None:
        self.pools = [A100_POOL, T4_POOL]
        self.active: list[dict] = []
        self.upcoming: list[dict] = []
        self.requests: list[tuple[str, str, dict | None]] = []
        self.url = ""

    def booking_by_id(self, booking_id: int) -> dict | None:
        return next((b for b in self.active + (self.upcoming or []) if b["id"] == booking_id), None)

    @property
    def claims(self) -> list[tuple[str, dict]]:
        return [(path, body) for method, path, body in self.requests if method == "POST"]

    def application(self) -> web.Application:
        handler_args = {"service": self}
        return web.Application(
            [
                (SERVICE_PREFIX + r"api/pools", PoolsHandler, handler_args),
                (SERVICE_PREFIX + r"api/users/([^/]+)/bookings/active", ActiveHandler, handler_args),
                (SERVICE_PREFIX + r"api/bookings", BookingsHandler, handler_args),
                (SERVICE_PREFIX + r"api/bookings/(\d+)/(claim|release)", ClaimHandler, handler_args),
            ]
        )


class FakeHandler(web.RequestHandler):
    def initialize(self, service: FakeBookingService) -> None:
        self.service = service

    def prepare(self) -> None:
        body = json.loads(self.request.body) if self.request.body else None
        self.service.requests.append((self.request.method, self.request.uri, body))
        self.body = body
        if self.request.headers.get("Authorization") != f"token {SERVICE_TOKEN}":
            self.refuse(403, "Missing or invalid API token.")

    def refuse(self, status: int, message: str) -> None:
        self.set_status(status)
        self.finish({"status": status, "message": message})

    def write_list(self, items: list) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(items))


class PoolsHandler(FakeHandler):
    def get(self) -> None:
        if self.service.pools is None:
            raise web.HTTPError(500, "database is down")
        self.write_list(self.service.pools)


class ActiveHandler(FakeHandler):
    def get(self, user: str) -> None:
        self.finish({"bookings": [b for b in self.service.active if b["user"] == user]})


class BookingsHandler(FakeHandler):
    def get(self) -> None:
        if self.service.upcoming is None:
            return self.refuse(403, "Only booking administrators may list other users' bookings.")
        user = self.get_argument("user")
        assert self.get_argument("state") == "upcoming"
        self.finish({"bookings": [b for b in self.service.upcoming if b["user"] == user]})


class ClaimHandler(FakeHandler):
    def post(self, booking_id: str, action: str) -> None:
        found = self.service.booking_by_id(int(booking_id))
        server = self.body["server"]
        if found is None:
            return self.refuse(404, f"Booking {booking_id} does not exist.")
        if action == "claim":
            if found["server"] not in (None, server):
                return self.refuse(
                    409, f"Booking {booking_id} is already used by server '{found['server']}'."
                )
            found["server"] = server
        elif found["server"] == server:
            found["server"] = None
        self.finish(found)


@pytest.fixture(scope="session", autouse=True)
def offline_kube_config(tmp_path_factory):
    """KubeSpawner loads a kube config when constructed; give it one that is never contacted."""
    path = tmp_path_factory.mktemp("kube") / "config"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "none", "cluster": {"server": "http://127.0.0.1:9"}}],
                "users": [{"name": "none", "user": {"token": "unused"}}],
                "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}],
                "current-context": "none",
            }
        )
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
        yield


@pytest.fixture
def make_booking():
    """The :func:`booking` builder, for tests (conftest modules are not importable)."""
    return booking


@pytest.fixture
async def booking_service():
    """The fake service on a free port; ``.url`` is the spawner's ``booking_api_url``."""
    service = FakeBookingService()
    sock, port = bind_unused_port()
    server = HTTPServer(service.application())
    server.add_sockets([sock])
    service.url = f"http://127.0.0.1:{port}{SERVICE_PREFIX}"
    yield service
    server.stop()
    await server.close_all_connections()


@pytest.fixture
def closed_port_url():
    """A URL whose port nobody listens on: connections are refused."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}{SERVICE_PREFIX}"


@pytest.fixture
def hanging_url():
    """A URL whose server accepts connections (kernel backlog) but never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}{SERVICE_PREFIX}"
    sock.close()


class MockUser(Mock):
    """A Hub user as KubeSpawner's own tests mock it."""

    server = Server()

    def __init__(self, **kwargs):
        super().__init__()
        for key, value in kwargs.items():
            setattr(self, key, value)

    @property
    def escaped_name(self):
        return self.name

    @property
    def url(self):
        return self.server.url


GPU_PROFILES = [
    {
        "display_name": "Small CPU",
        "slug": "cpu",
        "description": "2 cores, no GPU",
        "kubespawner_override": {"cpu_limit": 2.0, "extra_labels": {"size": "small"}},
    },
    {
        "display_name": "A100 (booked share)",
        "slug": "a100",
        "gpu_pool": "a100",
        "kubespawner_override": {
            "image": "quay.io/jupyter/pytorch-notebook:cuda12-latest",
            "extra_resource_limits": {"nvidia.com/gpu": "2"},
            "extra_labels": {"gpu-profile": "yes"},
            "extra_annotations": {"lab.example.org/cost-centre": "physics"},
        },
        "profile_options": {
            "image": {
                "display_name": "Image",
                "choices": {
                    "torch": {
                        "display_name": "PyTorch",
                        "kubespawner_override": {"image": "pytorch:1"},
                    },
                    "tf": {
                        "display_name": "TensorFlow",
                        "kubespawner_override": {"image": "tensorflow:1"},
                    },
                },
            }
        },
    },
    {"display_name": "T4 (booked)", "slug": "t4", "gpu_pool": "t4"},
]


@pytest.fixture
def make_spawner(booking_service):
    """Build a GPUBookingSpawner for ``ada`` on a Hub under base URL ``/lab/``, no Kubernetes."""

    def make(
        user_options: dict | None = None,
        *,
        server_name: str = "",
        profile_list=None,
        api_url: str | None = None,
        **traits,
    ) -> GPUBookingSpawner:
        config = Config()
        config.GPUBookingSpawner.booking_api_url = api_url or booking_service.url
        config.GPUBookingSpawner.booking_api_token = SERVICE_TOKEN
        config.GPUBookingSpawner.booking_request_timeout = 1.0
        config.GPUBookingSpawner.booking_connect_timeout = 0.5
        config.GPUBookingSpawner.profile_list = (
            GPU_PROFILES if profile_list is None else profile_list
        )
        for name, value in traits.items():
            setattr(config.GPUBookingSpawner, name, value)
        spawner = GPUBookingSpawner(
            _mock=True,
            config=config,
            hub=Hub(base_url="/lab/hub/"),
            user=MockUser(name="ada", id=7),
            orm_spawner=SimpleNamespace(name=server_name, display_name=server_name, server=None),
            api_token="abc123",
            oauth_client_id="unused",
        )
        spawner.user_options = user_options or {}
        return spawner

    return make
