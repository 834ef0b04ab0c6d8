"""Several booking service processes on one PostgreSQL/MariaDB database run each lifecycle rule
once: the database lock around the tick (``db/locks.py``).

Two real service processes (``tests/service/lifecycle_process.py``) share a fast clock (two
minutes a second) and tick every 50 ms against one database and one stand-in Hub API that
records every server stop. Afterwards each warning, stop and release happened exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from db_test_times import NOW
from server_databases import SERVERS
from sqlalchemy import select

from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.db.locks import DatabaseLock
from jhub_gpubooking.db.models import BookingEventRow
from jhub_gpubooking.db.session import make_engine, make_session_factory
from jhub_gpubooking.db.store import BookingStore

WORKER = Path(__file__).resolve().parents[1] / "service" / "lifecycle_process.py"
FACTOR = 120  # fast-clock seconds per real second
T0 = NOW.replace(minute=0)  # on the 15-minute grid: the bookings start "now"
servers_only = pytest.mark.parametrize("db_url", SERVERS, indirect=True)


@servers_only
def test_the_lock_is_held_by_one_process_and_freed_when_its_connection_dies(migrated_url):
    engines = [make_engine(migrated_url) for _ in range(2)]
    first, second = (DatabaseLock(engine, "test.lock") for engine in engines)
    try:
        assert first.acquire()
        assert not second.acquire()
        first.release()
        assert second.acquire()
        assert not first.acquire()
        # the holder's connection dies (a crashed process): the server frees the lock
        second._connection.invalidate()
        second._connection = None
        second._local.release()
        assert first.wait(timeout=10, poll_seconds=0.05)  # once the server noticed
        first.release()
    finally:
        for engine in engines:
            engine.dispose()


class StandInHub(BaseHTTPRequestHandler):
    """Records the server stops the services ask for (``DELETE .../servers/NAME``) and answers
    ``GET .../users/NAME`` with the servers in ``servers`` (the service stops a server only when
    the Hub shows it running on the booking, and expires claims of servers the Hub shows stopped)."""

    stops: ClassVar[list[str]] = []
    #: user -> {server name: the Hub's server model}
    servers: ClassVar[dict[str, dict]] = {}

    def do_DELETE(self):
        self.stops.append(self.path)
        user, _, name = self.path.removeprefix("/hub/api/users/").partition("/servers/")
        self.servers.get(user, {}).pop(name, None)
        self.send_response(204)
        self.end_headers()

    def do_GET(self):
        user = self.path.removeprefix("/hub/api/users/").split("?")[0]
        if "/" in user or user not in self.servers:
            self.send_response(404)
            self.end_headers()
            return
        body = json.dumps({"name": user, "servers": self.servers[user]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def stand_in_hub():
    StandInHub.stops = []
    StandInHub.servers = {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandInHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def start_service(tmp_path, index, db_url, hub_port, start_file) -> subprocess.Popen:
    from hub_harness import free_port

    config = tmp_path / f"service{index}.py"
    config.write_text(
        f"c.GPUBookingService.db_url = {db_url!r}\n"
        f"c.GPUBookingService.pools = {json.dumps(POOLS)}\n"
        "c.Lifecycle.lifecycle_interval_seconds = 0.05\n"
        "c.Lifecycle.warn_before_minutes = 15\n"
        "c.Lifecycle.no_show_minutes = 30\n"
        "c.Lifecycle.stopped_release_minutes = 30\n"
        "c.Lifecycle.end_grace_seconds = 60\n"
    )
    env = {
        **os.environ,
        "JUPYTERHUB_API_URL": f"http://127.0.0.1:{hub_port}/hub/api",
        "JUPYTERHUB_API_TOKEN": "stand-in",
        "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{free_port()}",
    }
    log = open(tmp_path / f"service{index}.log", "wb")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(
        [sys.executable, str(WORKER), T0.isoformat(), str(start_file), str(FACTOR), "--",
         "--config", str(config), "--log-level", "DEBUG"],
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
    )  # fmt: skip


POOLS = [{"name": "a100", "nodes": {"node-a": 4}}]


def service_logs(tmp_path) -> list[str]:
    return [
        (tmp_path / f"service{i}.log").read_text(errors="replace")
        if (tmp_path / f"service{i}.log").exists()
        else ""
        for i in (1, 2)
    ]


#: Real seconds the processes may take, after the fast clock passed every rule, to act on them.
ACTED_WITHIN_SECONDS = 120
LIFECYCLE_KINDS = {"end_warned", "server_stop_requested", "reclaimed"}


def lifecycle_events(engine) -> dict[tuple[int, str], int]:
    """How often each booking's lifecycle events were recorded."""
    with make_session_factory(engine)() as session:
        events = Counter(
            (row.booking_id, row.kind) for row in session.scalars(select(BookingEventRow))
        )
    return {key: count for key, count in events.items() if key[1] in LIFECYCLE_KINDS}


def every_rule_acted(engine, expected: dict[tuple[int, str], int]) -> bool:
    return set(expected) <= set(lifecycle_events(engine))


@servers_only
def test_two_service_processes_warn_stop_and_release_once(migrated_url, stand_in_hub, tmp_path):
    from jhub_gpubooking.core.lifecycle import SERVER_STATE_BOOKING_KEY
    from jhub_gpubooking.core.model import Pool

    engine = make_engine(migrated_url)
    store = BookingStore(
        make_session_factory(engine),
        {"a100": Pool.from_config(POOLS[0])},
        {},
        {},
        clock=ManualClock(T0),
    )
    store.sync_pools()
    running = store.create("ada", "a100", 1, T0, T0 + timedelta(minutes=30))
    store.claim(running.id, "")  # warned at +15, stopped at +31 (after the grace)
    no_show = store.create("bob", "a100", 1, T0, T0 + timedelta(hours=2))  # released at +30
    stopped = store.create("carol", "a100", 1, T0, T0 + timedelta(hours=2))
    store.claim(stopped.id, "gpu")
    store.release(stopped.id, "gpu")  # stopped at once: its rest is released at +30
    StandInHub.servers = {
        "ada": {"": {"name": "", "ready": True, "pending": None,
                     "state": {SERVER_STATE_BOOKING_KEY: running.id}}},
        "bob": {},
        "carol": {},
    }

    expected = {
        (running.id, "end_warned"): 1,
        (running.id, "server_stop_requested"): 1,
        (no_show.id, "reclaimed"): 1,
        (stopped.id, "reclaimed"): 1,
    }
    hub_port = stand_in_hub.server_address[1]
    start_file = tmp_path / "clock-start"
    services = [start_service(tmp_path, i, migrated_url, hub_port, start_file) for i in (1, 2)]
    try:
        # the fast clock starts once both listen, so a slow start cannot skip a rule
        ready = time.monotonic() + 120
        while not all("listening on" in log for log in service_logs(tmp_path)):
            for service in services:
                assert service.poll() is None, service_logs(tmp_path)
            assert time.monotonic() < ready, service_logs(tmp_path)
            time.sleep(0.2)
        real_origin = time.time()
        start_file.write_text(repr(real_origin))
        # at least 40 fast-clock minutes (past every rule above), and on until every rule has
        # acted: a process starved of the CPU for seconds (a busy CI machine) ticks late, and
        # lateness is not what this test is about; once they all acted, a second copy of any
        # would already be there (each is due once, at one tick)
        deadline = real_origin + 40 * 60 / FACTOR
        give_up = deadline + ACTED_WITHIN_SECONDS
        while time.time() < deadline or (not every_rule_acted(engine, expected)
                                          and time.time() < give_up):
            for service in services:
                assert service.poll() is None, (tmp_path / "service1.log").read_text()[-3000:]
            time.sleep(0.5)
    finally:
        for service in services:
            service.send_signal(signal.SIGTERM)
        for service in services:
            try:
                service.wait(timeout=30)
            except subprocess.TimeoutExpired:
                service.kill()
                service.wait()

    done = lifecycle_events(engine)
    engine.dispose()
    assert done == expected
    assert StandInHub.stops == ["/hub/api/users/ada/servers/"]
    logs = service_logs(tmp_path)
    # both processes were really ticking side by side: each found the other one's lock taken
    assert all("Another service process is running the lifecycle tick" in log for log in logs)
    assert not any("Traceback" in log for log in logs)
