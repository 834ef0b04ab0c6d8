"""Fixtures for the spawner tests: a test double of the booking service and a real, in-process Hub.

:class:`FakeBookingService` implements only the REST routes the spawner calls, with canned
per-test state (pools, the bookings the service would call active / upcoming, which servers
hold which booking, an opportunistic grant). The real service is exercised by the end-to-end tests.

The spawners come from pytest-jupyterhub's ``hub_app`` (JupyterHub's MockHub, started in the
test's event loop with the real proxy): the Hub builds them from its config, users, database
and URL prefixes, as at a real start, and its REST API and pages show what users see. Nothing
here starts a pod; tests/e2e runs the whole path on the simulated cluster.
"""

from __future__ import annotations

import json
import socket
from datetime import datetime, timedelta, timezone

import pytest
import yaml
from jupyterhub import orm
from jupyterhub.proxy import Proxy
from jupyterhub.tests.mocking import MockHub
from jupyterhub.tests.utils import add_user
from jupyterhub.user import User
from kubernetes_asyncio.config import kube_config
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port
from traitlets.config import Config

from jhub_gpubooking.core.choice import claim_order, current_bookings
from jhub_gpubooking.core.timegrid import format_time
from jhub_gpubooking.core.wire import SERVICE_STARTING
from jhub_gpubooking.db.session import DATABASE_UNAVAILABLE_MESSAGE
from jhub_gpubooking.spawner import GPUBookingSpawner

SERVICE_TOKEN = "spawner-test-token"
SERVICE_PREFIX = "/services/gpu-booking/"
#: the test Hub's base URL: the booking page, and so the refusals, live under it
BASE_URL = "/lab/"

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
        #: what a start without a booking gets: None (no opportunistic use), "none free", or
        #: the grant (a booking) the service hands out
        self.opportunistic: dict | str | None = None
        #: how many claims to answer as a service that has just started (503, reason
        #: service_starting, Retry-After ``starting_retry_after`` seconds) before the answer
        self.starting = 0
        self.starting_retry_after = "0.05"
        #: how many claims to answer as a service whose database is down (503 with
        #: Retry-After ``starting_retry_after`` seconds, no reason) before the answer
        self.database_down = 0
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
                (SERVICE_PREFIX + r"api/pools/([^/]+)/claim", PoolClaimHandler, handler_args),
                (SERVICE_PREFIX + r"api/bookings/(\d+)/release", ReleaseHandler, handler_args),
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

    def refuse(self, status: int, message: str, **details) -> None:
        self.set_status(status)
        self.finish({"status": status, "message": message, **details})

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


class PoolClaimHandler(FakeHandler):
    """``POST api/pools/{pool}/claim`` with the service's rule of which booking a start takes
    (:mod:`jhub_gpubooking.core.choice`); every other holder counts as running (no Hub here)."""

    def post(self, pool_name: str) -> None:
        if self.service.pools is None:
            raise web.HTTPError(500, "database is down")
        if self.service.starting:
            self.service.starting -= 1
            self.set_header("Retry-After", self.service.starting_retry_after)
            return self.refuse(503, "The service has just started.", reason=SERVICE_STARTING)
        if self.service.database_down:
            self.service.database_down -= 1
            self.set_header("Retry-After", self.service.starting_retry_after)
            return self.refuse(503, DATABASE_UNAVAILABLE_MESSAGE)
        pool = next((p for p in self.service.pools if p["name"] == pool_name), None)
        if pool is None:
            return self.refuse(404, f"There is no GPU pool named {pool_name!r}.",
                               reason="pool_unknown")
        user, server = self.body["user"], self.body["server"]
        mine = [b for b in self.service.active if b["user"] == user]
        now = datetime.now(timezone.utc)
        candidates = claim_order(current_bookings(mine, pool_name, now), server,
                                 self.body.get("booking"))
        if not candidates:
            grant = self.service.opportunistic
            if grant == "none free":
                return self.refuse(409, "Nothing is free.", reason="none_free", pool=pool)
            if grant is None:
                return self.refuse(403, f"{user} has no active booking.", reason="not_booked",
                                   pool=pool)
            self.service.active.append(grant)
            candidates = [grant]
        for candidate in candidates:
            if candidate["server"] in (None, server):
                candidate["server"] = server
                return self.finish({"pool": pool, "booking": candidate})
        holder = candidates[0]["server"]
        self.refuse(409, f"This booking is already in use by server '{holder}'.",
                    reason="in_use", pool=pool, server=holder)


class ReleaseHandler(FakeHandler):
    def post(self, booking_id: str) -> None:
        found = self.service.booking_by_id(int(booking_id))
        if found is None:
            return self.refuse(404, f"Booking {booking_id} does not exist.")
        if found["server"] == self.body["server"] and self.body.get("user") in (None, found["user"]):
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


class RoutesInMemory(Proxy):
    """A Proxy that only keeps the Hub's routing table, for Hubs whose tests never send a
    request through the proxy: starting configurable-http-proxy (a node process) would take
    three quarters of each such test's time."""

    should_start = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.routes: dict[str, dict] = {}

    async def add_route(self, routespec, target, data):
        self.routes[routespec] = {"routespec": routespec, "target": target, "data": data}

    async def delete_route(self, routespec):
        self.routes.pop(routespec, None)

    async def get_all_routes(self):
        return dict(self.routes)


@pytest.fixture
async def mock_hub(hub_app, booking_service, monkeypatch, tmp_path):
    """Start pytest-jupyterhub's in-process MockHub with GPUBookingSpawner as its spawner.

    ``await mock_hub(**traits)`` configures ``c.GPUBookingSpawner`` the way an admin's
    jupyterhub_config.py does (these tests' profiles, the fake service's URL and token, short
    timeouts, then ``traits``), serves the Hub under :data:`BASE_URL` and returns the running
    app with the user ``ada``. One Hub per test: ``hub_app`` stops it afterwards. Tests that
    talk to the Hub over HTTP (pages, REST API) pass ``with_proxy=True`` for the real
    configurable-http-proxy in front of it.
    """

    # MockHub's documented database switch: in memory the Hub skips a temporary file's fsyncs
    # and starts about half a second sooner
    monkeypatch.setenv("JUPYTERHUB_TEST_DB_URL", "sqlite:///:memory:")

    async def start(
        *, profile_list=None, api_url: str | None = None, with_proxy: bool = False, **traits
    ) -> MockHub:
        config = Config()
        if not with_proxy:
            config.JupyterHub.proxy_class = RoutesInMemory
        config.JupyterHub.spawner_class = GPUBookingSpawner
        config.JupyterHub.base_url = BASE_URL
        config.JupyterHub.allow_named_servers = True
        # MockHub would write its cookie secret and the proxy's pid file into the current
        # directory; a shared pid file makes the Hub of another test run kill this one's proxy
        config.JupyterHub.cookie_secret_file = str(tmp_path / "jupyterhub_cookie_secret")
        config.ConfigurableHTTPProxy.pid_file = str(tmp_path / "jupyterhub-proxy.pid")
        spawner_config = config.GPUBookingSpawner
        spawner_config.booking_api_url = api_url or booking_service.url
        spawner_config.booking_api_token = SERVICE_TOKEN
        spawner_config.booking_request_timeout = 1.0
        spawner_config.booking_connect_timeout = 0.5
        spawner_config.profile_list = GPU_PROFILES if profile_list is None else profile_list
        for name, value in traits.items():
            setattr(spawner_config, name, value)
        app = await hub_app(config)
        add_user(app.db, app, name="ada")
        return app

    return start


def hub_built_spawner(user: User, server_name: str = "") -> GPUBookingSpawner:
    """The user's spawner for ``server_name`` as the Hub builds it after a restart: a new
    object with the state and user_options the Hub keeps in its database."""
    if server_name not in user.orm_spawners:
        # what the Hub's REST API does at a named server's first start (JupyterHub 6 builds
        # spawners only for servers in its database)
        orm_spawner = orm.Spawner(name=server_name)
        user.db.add(orm_spawner)
        orm_spawner.user = user.orm_user
        user.db.commit()
    user.spawners.pop(server_name, None)
    return user.spawners[server_name]


@pytest.fixture
def make_spawner(mock_hub):
    """``await make_spawner(user_options, server_name=..., **traits)``: start the test's Hub
    (see :func:`mock_hub`) and return ada's GPUBookingSpawner from it, no Kubernetes."""

    async def make(user_options: dict | None = None, *, server_name: str = "", **traits) -> GPUBookingSpawner:
        app = await mock_hub(**traits)
        spawner = hub_built_spawner(app.users["ada"], server_name)
        spawner.user_options = user_options or {}
        return spawner

    return make


@pytest.fixture
def restarted():
    """``restarted(spawner)``: the same server's spawner after a Hub restart; the Hub has stored
    its state and user_options, as it does after every start."""

    def rebuild(spawner: GPUBookingSpawner) -> GPUBookingSpawner:
        spawner.orm_spawner.state = spawner.get_state()
        spawner.orm_spawner.user_options = spawner.user_options
        spawner.user.db.commit()
        return hub_built_spawner(spawner.user, spawner.name)

    return rebuild
