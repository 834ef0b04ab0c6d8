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


def test_the_service_waits_for_an_unavailable_database_and_starts_with_it(
    private_postgres, tmp_path
):
    upgrade(private_postgres.url)
    private_postgres.stop()
    port = free_port()
    log_path = tmp_path / "service.log"
    with open(log_path, "wb") as log:
        service = subprocess.Popen(
            [sys.executable, "-m", "jhub_gpubooking.service",
             "--db-url", private_postgres.url, "--upgrade-db",
             "--url", f"http://127.0.0.1:{port}"],
            cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "JUPYTERHUB_API_TOKEN": "not-used-here"},
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "Waiting for the booking database" not in log_path.read_text(errors="replace"):
            assert service.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        private_postgres.start()
        deadline = time.monotonic() + 60
        while True:
            assert service.poll() is None, log_path.read_text()
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/services/gpu-booking/api/bookings")
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.2)
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
