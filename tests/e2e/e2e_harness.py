"""The demo (a real Hub, proxy, booking service, GPUBookingSpawner and the simulated cluster) on
free ports, with helpers to drive it the way a script or a user would.

The simulated Kubernetes API is a contract test of the API calls KubeSpawner makes, not a cluster:
what these tests show is that the real KubeSpawner code path, driven by the real Hub, produces
the pods and API calls a cluster would accept, and that the singleuser server really answers.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
from hub_harness import free_ports, launch
from one_set import lane

from jhub_gpubooking.core.timegrid import format_time
from jhub_gpubooking.devcluster import KubeconfigAccess

REPO = Path(__file__).resolve().parents[2]
E2E_DIR = Path(__file__).resolve().parent
OUTPUT = REPO / "test-output"
#: the demo's logs, one folder per virtual environment and lane: scripts/test runs the dependency
#: sets side by side, each in two lanes (tests/one_set.py), and a test that reads a log must not
#: read another run's
E2E_LOGS = OUTPUT / "e2e-logs" / "-".join(filter(None, (Path(sys.prefix).name, lane())))


def _demo_on_free_ports(
    state_dir: Path,
    profile: str = "default",
    db_url: str | None = None,
    gated_namespaces: dict[str, str] | None = None,
    log_dir: Path | None = None,
) -> launch.Demo:
    """The demo, not started, on ports free right now; ``profile="lifecycle"`` runs the
    lifecycle rules on a fast clock (``"soak"``: the same, plus servers that outlive a Hub
    restart and no write rate limit);
    ``db_url`` puts the booking service on that database instead of the demo's SQLite file;
    ``gated_namespaces`` (namespace -> owner) are created in the cluster and gated by the
    service's admission webhook."""
    hub, k8s, hub_internal, proxy_api, service, webhook = free_ports(6)
    gated = gated_namespaces or {}
    demo = launch.Demo(
        state_dir=state_dir,
        port=hub,
        k8s_port=k8s,
        admin_token=secrets.token_hex(16),
        hub_config=E2E_DIR / "hub_config.py",
        log_dir=log_dir or E2E_LOGS / state_dir.name,
        extra_namespaces=tuple(gated),
        admission_webhooks=tuple(
            f"http://127.0.0.1:{webhook}/{review}" for review in ("mutate", "validate") if gated
        ),
        extra_env={
            "E2E_DEMO_DIR": str(REPO / "demo"),
            "E2E_PROFILE": profile,
            "DEMO_HUB_PORT": str(hub_internal),
            "DEMO_PROXY_API_PORT": str(proxy_api),
            "DEMO_SERVICE_PORT": str(service),
            **({"E2E_DB_URL": db_url} if db_url else {}),
            **({"E2E_WEBHOOK_PORT": str(webhook),
                "E2E_GATED_NAMESPACES": ",".join(f"{ns}={owner}" for ns, owner in gated.items())}
               if gated else {}),
        },
    )
    return demo


#: how often the demo starts on new ports when one it was given was taken before it could bind
PORT_ATTEMPTS = 3


def start_demo(state_dir: Path, **options) -> launch.Demo:
    """The demo started on free ports (the options of :func:`_demo_on_free_ports`).

    A port is free when picked and bound by the process that needs it a moment later; another
    test run on the machine (the dependency sets run side by side) may take it in between, and
    the Hub's proxy then exits with EADDRINUSE. Then the demo starts again on new ports."""
    options["log_dir"] = options.get("log_dir") or E2E_LOGS / state_dir.name
    for attempt in range(1, PORT_ATTEMPTS + 1):
        # a fresh state folder: the cluster's kubeconfig and CA of the failed start must go
        fresh = state_dir if attempt == 1 else state_dir / f"attempt-{attempt}"
        demo = _demo_on_free_ports(fresh, **options)
        logs = _log_sizes(demo.log_dir)
        try:
            return demo.start()
        except RuntimeError:
            if attempt == PORT_ATTEMPTS or not _port_was_taken(demo.log_dir, logs):
                raise
            print(f"a port of the demo was taken meanwhile; starting again ({attempt})")
    raise AssertionError("unreachable")


def _log_sizes(log_dir: Path) -> dict[Path, int]:
    return {log: log.stat().st_size for log in log_dir.glob("*.log")}


def _port_was_taken(log_dir: Path, before: dict[Path, int]) -> bool:
    """Whether a log written since ``before`` says a port was in use."""
    for log in log_dir.glob("*.log"):
        with open(log, "rb") as text:
            text.seek(before.get(log, 0))
            written = text.read().decode(errors="replace").lower()
        if "eaddrinuse" in written or "address already in use" in written:
            return True
    return False


def wait_for(condition, what: str, timeout: float = 120):
    """Poll ``condition`` until it returns something true, and return that; fail naming
    ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout:.0f} s"
        time.sleep(0.5)
    return result


@contextmanager
def running_demo(state_dir: Path, **options) -> Iterator[Driver]:
    """The demo started with ``options`` (those of :func:`start_demo`) and a Driver on it; both
    are stopped on leaving, whatever happened inside."""
    demo = start_demo(state_dir, **options)
    driver = Driver(demo)
    try:
        yield driver
    finally:
        driver.close()
        demo.stop()


class Driver:
    """What a script holding the admin token does: the Hub's REST API and the booking API."""

    def __init__(self, demo):
        self.demo = demo
        headers = {"Authorization": f"token {demo.admin_token}"}
        self.hub = httpx.Client(base_url=f"{demo.hub_url}/hub/api/", headers=headers, timeout=60)
        self.booking = httpx.Client(
            base_url=f"{demo.hub_url}/services/gpu-booking/api/", headers=headers, timeout=60
        )
        self.proxy = httpx.Client(base_url=demo.hub_url, headers=headers, timeout=30)
        access = KubeconfigAccess.read(demo.kubeconfig)  # what kubectl and KubeSpawner use
        self.cluster = httpx.Client(
            base_url=access.server, headers=access.headers, verify=access.ssl_context(), timeout=30
        )

    def close(self) -> None:
        for client in (self.hub, self.booking, self.proxy, self.cluster):
            client.close()

    # -- bookings --------------------------------------------------------------------------------

    def book(self, user: str, pool: str, gpus, minutes: int = 60, start: datetime | None = None):
        """Book now (the current 1-minute slot) for ``minutes``; returns the booking JSON. The
        user is added to the Hub first, as an admin does before booking for a new student (the
        service refuses a booking for a user the Hub does not have)."""
        self.ensure_user(user)
        now = datetime.now(timezone.utc)
        start = start or now.replace(second=0, microsecond=0)
        response = self.booking.post("bookings", json={
            "user": user, "pool": pool, "gpus": gpus,
            "start": format_time(start), "end": format_time(start + timedelta(minutes=minutes)),
        })
        assert response.status_code == 201, response.text
        return response.json()

    def get_booking(self, booking_id: int) -> dict:
        response = self.booking.get(f"bookings/{booking_id}")
        assert response.status_code == 200, response.text
        return response.json()

    # -- servers ---------------------------------------------------------------------------------

    def ensure_user(self, user: str) -> None:
        response = self.hub.post("users", json={"usernames": [user]})
        assert response.status_code in (201, 409), response.text

    def start_server(self, user: str, profile: str, server: str = "") -> httpx.Response:
        """Ask the Hub to start a server; returns the Hub's answer (201/202 or a refusal)."""
        self.ensure_user(user)
        path = f"users/{user}/servers/{server}" if server else f"users/{user}/server"
        return self.hub.post(path, json={"profile": profile})

    def server_model(self, user: str, server: str = "") -> dict | None:
        response = self.hub.get(f"users/{user}")
        assert response.status_code == 200, response.text
        return response.json()["servers"].get(server)

    def wait_ready(self, user: str, server: str = "", timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            model = self.server_model(user, server)
            if model and model["ready"]:
                return model
            if model is None:
                raise AssertionError(f"{user}/{server} stopped while starting (see e2e logs)")
            time.sleep(0.5)
        raise AssertionError(f"{user}/{server} not ready after {timeout:.0f} s")

    def spawn_progress(self, user: str, server: str = "") -> list[dict] | None:
        """The events of a start's progress stream, as the spawn page reads them, up to its
        end (the last one ``ready`` or ``failed``); None when the Hub no longer knows the start
        (it failed and was forgotten before the stream was asked for)."""
        path = (f"users/{user}/servers/{server}/progress" if server
                else f"users/{user}/server/progress")
        events = []
        with self.hub.stream("GET", path) as response:
            if response.status_code == 400 and b"is not starting" in response.read():
                return None
            assert response.status_code == 200, response.read()
            for line in response.iter_lines():
                if line.startswith("data:"):
                    events.append(json.loads(line[len("data:"):]))
                    if events[-1].get("ready") or events[-1].get("failed"):
                        break
        return events

    def wait_stopped(self, user: str, server: str = "", timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.server_model(user, server) is None:
                return
            time.sleep(0.5)
        raise AssertionError(f"{user}/{server} still running after {timeout:.0f} s")

    def stop_server(self, user: str, server: str = "") -> None:
        path = f"users/{user}/servers/{server}" if server else f"users/{user}/server"
        response = self.hub.delete(path)
        assert response.status_code in (202, 204), response.text
        self.wait_stopped(user, server)

    # -- the simulated cluster -------------------------------------------------------------------

    def pods(self) -> dict[str, dict]:
        """The pods of the Hub's namespace, by name."""
        response = self.cluster.get(f"/api/v1/namespaces/{self.demo.namespace}/pods")
        response.raise_for_status()
        return {pod["metadata"]["name"]: pod for pod in response.json()["items"]}

    def cluster_pods(self) -> list[dict]:
        """Every pod of the cluster, the Hub's and those made outside the Hub."""
        response = self.cluster.get("/api/v1/pods")
        response.raise_for_status()
        return response.json()["items"]

    # -- the booking service process -------------------------------------------------------------

    def service_pid(self) -> int:
        """The booking service is a child of the Hub process (a hub-managed service)."""
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                stat = (proc / "stat").read_text()
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            if parent == self.demo.hub.pid and "jhub_gpubooking.service" in cmdline:
                return int(proc.name)
        raise AssertionError("the booking service process is not running under the Hub")

    def signal_service(self, signum: int) -> int:
        pid = self.service_pid()
        os.kill(pid, signum)
        return pid


SIGSTOP, SIGCONT, SIGTERM = signal.SIGSTOP, signal.SIGCONT, signal.SIGTERM
