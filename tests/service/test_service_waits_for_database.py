"""A service started while its PostgreSQL is down (a hub pod restarting during an outage) waits
for the database and comes up with it, instead of crash-looping with tracebacks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
from hub_harness import free_port

from jhub_gpubooking.db.session import upgrade


def start_service(url: str, port: int, log_path) -> subprocess.Popen:
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "jhub_gpubooking.service",
             "--db-url", url, "--upgrade-db", "--url", f"http://127.0.0.1:{port}"],
            cwd=log_path.parent, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "JUPYTERHUB_API_TOKEN": "not-used-here"},
        )  # fmt: skip


def wait_until_waiting(service: subprocess.Popen, log_path) -> None:
    deadline = time.monotonic() + 60
    while "Waiting for the booking database" not in log_path.read_text(errors="replace"):
        assert service.poll() is None, log_path.read_text()
        assert time.monotonic() < deadline, log_path.read_text()
        time.sleep(0.2)


def test_the_service_waits_for_an_unavailable_database_and_starts_with_it(
    private_postgres, tmp_path
):
    upgrade(private_postgres.url)
    private_postgres.stop()
    port = free_port()
    log_path = tmp_path / "service.log"
    service = start_service(private_postgres.url, port, log_path)
    try:
        wait_until_waiting(service, log_path)
        private_postgres.start()
        # ask only once it says it listens: until then the port is free, and whatever else
        # took it meanwhile (another test run's server) would answer instead
        deadline = time.monotonic() + 60
        while "listening on" not in log_path.read_text(errors="replace"):
            assert service.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        assert service.poll() is None, log_path.read_text()
        answer = httpx.get(f"http://127.0.0.1:{port}/services/gpu-booking/api/bookings")
        # it serves: an anonymous request gets the API's JSON refusal
        assert answer.status_code == 403
        assert answer.json()["status"] == 403
    finally:
        if not private_postgres.running:
            private_postgres.start()
        service.send_signal(signal.SIGTERM)
        try:
            service.wait(timeout=30)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()
    log = log_path.read_text()
    assert "Traceback" not in log
    assert log.count("Waiting for the booking database") >= 1


def test_a_service_waiting_for_the_database_stops_when_told(private_postgres, tmp_path):
    private_postgres.stop()
    log_path = tmp_path / "service.log"
    service = start_service(private_postgres.url, free_port(), log_path)
    try:
        wait_until_waiting(service, log_path)
        service.send_signal(signal.SIGINT)  # how the Hub stops a managed service first
        assert service.wait(timeout=30) == 0
    finally:
        private_postgres.start()
        if service.poll() is None:
            service.kill()
            service.wait()
    log = log_path.read_text()
    assert "Interrupted before serving" in log
    assert "Traceback" not in log
