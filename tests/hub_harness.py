"""A real JupyterHub with the booking service as a hub-managed service, for tests.

``start_booking_hub(...)`` (a context manager) runs ``jupyterhub`` in a subprocess with the real
configurable-http-proxy, DummyAuthenticator (one password for everyone), a few users and groups,
and the booking service started by the Hub itself. All ports are free ports picked by the OS;
everything lives in a temporary directory; on exit every process the Hub started is gone.

Users: ``ada`` and ``bob`` (plain users, group ``students``), ``carol`` (member of the
``gpu-admins`` group, made a booking admin through ``admin_groups``) and ``admin`` (Hub admin).
The service's API token is :data:`SERVICE_TOKEN` (it is the "Hub spawner" principal);
:data:`ADMIN_SERVICE_TOKEN` belongs to a ``test-admin`` service allowed to manage Hub users and
tokens. Fixtures (defined in conftest.py):

- ``booking_hub``: a module-scoped Hub whose service uses SQLite.
- ``postgres_url``: a fresh PostgreSQL database (skips, printing the reason, when the server is
  unreachable; see server_databases.py).

A :class:`RunningHub` gives URLs and helpers: ``user_token(name)``, ``api(token)`` (an httpx
client rooted at the service prefix) and ``login_session(name)`` (an httpx client logged in
through the Hub's login form and the service's OAuth callback, holding the service's cookies).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from jhub_gpubooking.core.lifecycle import SERVER_STATE_BOOKING_KEY, SERVER_STATE_PLACEMENT_KEY

PASSWORD = "correct-horse-battery"
SERVICE_NAME = "gpu-booking"
SERVICE_TOKEN = "gpu-booking-service-token-" + secrets.token_hex(8)
ADMIN_SERVICE_TOKEN = "test-admin-service-token-" + secrets.token_hex(8)
USERS = ("ada", "bob", "carol", "admin")
GROUPS = {"students": ["ada", "bob"], "gpu-admins": ["carol"]}
HUB_START_TIMEOUT_SECONDS = 90

#: Pools used by the test Hub's service unless a test passes its own.
DEFAULT_TEST_POOLS = [
    {"name": "a100", "nodes": {"node-a": 2, "node-b": 2}, "display_name": "A100 80GB"},
    {"name": "shared", "nodes": {"node-s": 1}, "slices_per_gpu": 4, "backend": "hami",
     "gpu_memory_mib": 23034},
]


REPO = Path(__file__).resolve().parents[1]


def _load_launcher():
    spec = importlib.util.spec_from_file_location("demo_launch", REPO / "demo" / "launch.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


launch = _load_launcher()


#: different TCP ports nobody listens on right now (one rule, the demo's)
free_ports = launch.free_ports


def free_port() -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    return free_ports(1)[0]


def descendant_pids(pid: int) -> set[int]:
    """Every live process below ``pid`` (Linux /proc), to make sure teardown leaves none."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # the command name may contain spaces and parentheses: split after the last ')'
        fields = text[text.rindex(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    # a zombie is already dead; only its parent's wait() is missing
    return not (status.exists() and status.read_text().rsplit(")", 1)[1].split()[0] == "Z")


def log_in_at_hub(client: httpx.Client, login_url: str, name: str,
                  password: str) -> httpx.Response:
    """Send the Hub's login form as ``name`` (with the form's ``_xsrf`` token when it has one)
    and return the Hub's answer, not followed (a 302 on success): the Hub's redirect to
    /hub/spawn would start a single-user server."""
    form = client.get(login_url)
    form.raise_for_status()
    match = re.search(r'name="_xsrf"\s+value="([^"]+)"', form.text)
    data = {"username": name, "password": password}
    if match:
        data["_xsrf"] = match.group(1)
    return client.post(login_url, data=data, follow_redirects=False)


@dataclass
class RunningHub:
    """A running Hub + proxy + booking service, and helpers to talk to them."""

    public_url: str  # e.g. http://127.0.0.1:PORT (no path)
    base_url: str  # the Hub's base URL path, e.g. /
    hub_api_url: str
    service_prefix: str
    service_token: str
    admin_token: str
    directory: Path
    process: subprocess.Popen
    log_path: Path
    _tokens: dict[str, str] = field(default_factory=dict)

    @property
    def hub_prefix(self) -> str:
        return self.base_url + "hub/"

    @property
    def service_url(self) -> str:
        """Absolute public URL of the service prefix (ends with '/')."""
        return self.public_url + self.service_prefix

    def user_token(self, name: str) -> str:
        """A Hub API token of ``name`` (created once via the admin service token)."""
        if name not in self._tokens:
            response = httpx.post(
                f"{self.hub_api_url}/users/{name}/tokens",
                headers={"Authorization": f"token {self.admin_token}"},
                json={"note": "booking service tests"},
            )
            response.raise_for_status()
            self._tokens[name] = response.json()["token"]
        return self._tokens[name]

    def api(self, token: str | None = None) -> httpx.Client:
        """An httpx client rooted at the service prefix, authenticated with ``token`` if given."""
        headers = {"Authorization": f"token {token}"} if token else {}
        return httpx.Client(base_url=self.service_url, headers=headers, timeout=30)

    def login_session(self, name: str) -> httpx.Client:
        """A browser-like client logged in as ``name`` through the Hub and the service's OAuth.

        It logs in at the Hub's login form, then opens the service page, following the
        redirects to the Hub's authorize endpoint and back to ``oauth_callback``. The client
        keeps the service's OAuth and ``_xsrf`` cookies; see :func:`xsrf_headers`.
        """
        client = httpx.Client(base_url=self.service_url, timeout=30, follow_redirects=True)
        login = log_in_at_hub(client, f"{self.public_url}{self.hub_prefix}login", name, PASSWORD)
        if login.status_code != 302:
            raise RuntimeError(
                f"Hub login of {name} failed: {login.status_code} {login.text[:200]}"
            )
        page = client.get(self.service_url)
        page.raise_for_status()
        # HubOAuth names its cookie after the OAuth client id: service-<service name>
        if not any(cookie.name == f"service-{SERVICE_NAME}" for cookie in client.cookies.jar):
            raise RuntimeError(f"OAuth login of {name} to the service set no cookie")
        return client

    def xsrf_headers(self, client: httpx.Client) -> dict[str, str]:
        """The header carrying the service's ``_xsrf`` cookie value, for cookie-authenticated writes."""
        for cookie in client.cookies.jar:
            if cookie.name == "_xsrf" and cookie.path.rstrip("/") == self.service_prefix.rstrip(
                "/"
            ):
                return {"X-XSRFToken": cookie.value}
        raise RuntimeError("the service set no _xsrf cookie")

    def service_log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def hub_config(
    *,
    directory: Path,
    public_port: int,
    hub_port: int,
    proxy_api_port: int,
    service_port: int,
    service_config_path: Path,
) -> str:
    """The jupyterhub_config.py of the test Hub (documents the service's Hub-side setup)."""
    service_command = [
        sys.executable,
        "-m",
        "jhub_gpubooking.service",
        "--config",
        str(service_config_path),
        "--upgrade-db",
    ]
    return textwrap.dedent(f"""
        c.JupyterHub.ip = "127.0.0.1"
        c.JupyterHub.port = {public_port}
        c.JupyterHub.hub_ip = "127.0.0.1"
        c.JupyterHub.hub_port = {hub_port}
        c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
        c.ConfigurableHTTPProxy.pid_file = {str(directory / "proxy.pid")!r}
        c.JupyterHub.db_url = {"sqlite:///" + str(directory / "hub.sqlite")!r}
        c.JupyterHub.cookie_secret_file = {str(directory / "hub_cookie_secret")!r}
        c.JupyterHub.authenticator_class = "dummy"
        c.DummyAuthenticator.password = {PASSWORD!r}
        c.Authenticator.allowed_users = {set(USERS)!r}
        c.Authenticator.admin_users = {{"admin"}}
        c.JupyterHub.load_groups = {json.dumps({g: {"users": u} for g, u in GROUPS.items()})}
        c.JupyterHub.services = [
            {{
                "name": {SERVICE_NAME!r},
                "url": "http://127.0.0.1:{service_port}",
                "command": {service_command!r},
                "api_token": {SERVICE_TOKEN!r},
                "oauth_no_confirm": True,
                # the OAuth token must show the user's groups (admin_groups, group policies)
                "oauth_client_allowed_scopes": ["read:users:groups!user"],
            }},
            {{"name": "test-admin", "api_token": {ADMIN_SERVICE_TOKEN!r}}},
        ]
        c.JupyterHub.load_roles = [
            {{"name": "user", "scopes": ["self", "access:services!service={SERVICE_NAME}"]}},
            {{
                "name": "gpu-booking-service",
                "services": [{SERVICE_NAME!r}],
                "scopes": ["list:users", "read:users", "read:users:groups", "read:servers",
                           "admin:server_state", "delete:servers"],
            }},
            {{
                "name": "test-admin",
                "services": ["test-admin"],
                "scopes": ["admin:users", "admin:groups", "tokens", "admin:servers"],
            }},
        ]
    """)


def service_config(db_url: str, pools: list[dict], extra: str = "") -> str:
    return textwrap.dedent(f"""
        c.GPUBookingService.db_url = {db_url!r}
        c.GPUBookingService.pools = {pools!r}
        c.GPUBookingService.admin_groups = ["gpu-admins"]
        c.GPUBookingService.default_policy = {{"max_days_ahead": 60}}
    """) + textwrap.dedent(extra)


def wait_until_ready(hub: RunningHub) -> None:
    """Until the service answers through the proxy (so Hub, proxy and service are all up)."""
    deadline = time.monotonic() + HUB_START_TIMEOUT_SECONDS
    last_error = ""
    while time.monotonic() < deadline:
        if hub.process.poll() is not None:
            break
        try:
            response = httpx.get(
                hub.service_url + "api/pools",
                headers={"Authorization": f"token {hub.service_token}"},
                timeout=5,
            )
            if response.status_code == 200:
                return
            last_error = f"{response.status_code} {response.text[:200]}"
        except httpx.HTTPError as error:
            last_error = repr(error)
        time.sleep(0.25)
    raise RuntimeError(
        f"JupyterHub with the booking service did not become ready ({last_error}); "
        f"log:\n{hub.service_log()[-4000:]}"
    )


def stop_hub(process: subprocess.Popen, proxy_pid_file: Path) -> None:
    """SIGTERM the Hub (it stops the proxy and its services), then make sure all are gone."""
    started = descendant_pids(process.pid)
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(pid_alive(pid) for pid in started):
        time.sleep(0.1)
    for pid in started:
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    # a Hub that died (e.g. during start-up) leaves its proxy running in a session of its own
    launch.stop_orphaned_proxy(proxy_pid_file)


@contextlib.contextmanager
def start_booking_hub(
    directory: Path,
    db_url: str | None = None,
    pools: list[dict] | None = None,
    extra_service_config: str = "",
    extra_hub_config: str = "",
    wait: bool = True,
) -> Iterator[RunningHub]:
    """Run a Hub + proxy + booking service in ``directory``; stop everything on exit.

    ``extra_hub_config`` is appended to jupyterhub_config.py (e.g. a spawner that really runs).
    ``wait=False`` yields at once, for a test that watches a start-up fail.
    """
    directory.mkdir(parents=True, exist_ok=True)
    db_url = db_url or "sqlite:///" + str(directory / "bookings.sqlite")
    ports = dict(zip(("public_port", "hub_port", "proxy_api_port", "service_port"),
                     free_ports(4), strict=True))
    config_path = directory / "gpubooking_service_config.py"
    config_path.write_text(
        service_config(db_url, pools or DEFAULT_TEST_POOLS, extra_service_config)
    )
    (directory / "jupyterhub_config.py").write_text(
        hub_config(directory=directory, service_config_path=config_path, **ports)
        + textwrap.dedent(extra_hub_config)
    )
    log_path = directory / "jupyterhub.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(directory / "jupyterhub_config.py")],
            cwd=directory,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: see stop_hub
        )
    hub = RunningHub(
        public_url=f"http://127.0.0.1:{ports['public_port']}",
        base_url="/",
        hub_api_url=f"http://127.0.0.1:{ports['public_port']}/hub/api",
        service_prefix=f"/services/{SERVICE_NAME}/",
        service_token=SERVICE_TOKEN,
        admin_token=ADMIN_SERVICE_TOKEN,
        directory=directory,
        process=process,
        log_path=log_path,
    )
    try:
        if wait:
            wait_until_ready(hub)
        yield hub
    finally:
        stop_hub(process, directory / "proxy.pid")


# a real single-user server run as the test's own OS user, so the Hub has something to stop.
# It keeps the booking it runs on in its Hub state under the key GPUBookingSpawner uses
# (taken from the start's options, ``{"gpu_booking_id": id}``): the service stops a server only
# for the booking it runs on, and reads that from the state.
REAL_SERVER_HUB_CONFIG = f"""
from jupyterhub.spawner import SimpleLocalProcessSpawner


class BookingStateSpawner(SimpleLocalProcessSpawner):
    def get_state(self):
        state = super().get_state()
        for key in ({SERVER_STATE_BOOKING_KEY!r}, {SERVER_STATE_PLACEMENT_KEY!r}):
            if (self.user_options or {{}}).get(key) is not None:
                state[key] = self.user_options[key]
        return state


c.JupyterHub.spawner_class = BookingStateSpawner
c.Spawner.cmd = [{sys.executable!r}, "-m", "jupyterhub.singleuser", "--allow-root"]
# answer the start request at once (202) and let the test poll for readiness
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 0}}
c.Spawner.default_url = "/api/status"
c.Spawner.start_timeout = 120
"""


def hub_server(hub, user: str) -> dict | None:
    """The Hub's model of ``user``'s default server, None when it is not running."""
    response = httpx.get(
        f"{hub.hub_api_url}/users/{user}",
        headers={"Authorization": f"token {hub.admin_token}"},
    )
    response.raise_for_status()
    return (response.json().get("servers") or {}).get("")


def wait_for(condition, what: str, hub, timeout: float = 150) -> None:
    """Poll ``condition`` until true; fail with the end of the service's log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting until {what}; log:\n{hub.service_log()[-3000:]}")


def sent_twice(client: httpx.Client, path: str, body: dict, key: str) -> httpx.Response:
    """POST ``body`` to ``path`` twice with one Idempotency-Key, as a client whose first answer
    was lost; checks that both answers are the same 201 (its Location included) and returns
    the first."""
    first, again = (client.post(path, json=body, headers={"Idempotency-Key": key})
                    for _ in range(2))
    for response in (first, again):
        assert response.status_code == 201, response.text
        assert response.headers["Location"].endswith(f"{path}/{first.json()['id']}")
    assert again.json() == first.json()
    return first
