"""Through a real Hub: the service fails closed when it cannot see servers. It refuses to start,
in one line, with a token whose role lacks the scopes it needs; and a Hub answer without a
user's servers counts as unknown, never as "stopped"."""

from __future__ import annotations

import os
import subprocess
import sys

from hub_harness import free_port, service_config, start_booking_hub

from jhub_gpubooking.core.lifecycle import ServerUse, server_use


def test_the_service_refuses_to_start_when_its_role_lacks_scopes(tmp_path):
    with start_booking_hub(tmp_path / "hub") as hub:
        config = tmp_path / "config.py"
        config.write_text(service_config("sqlite:///" + str(tmp_path / "b.sqlite"), [
            {"name": "a100", "nodes": {"n": 1}}]))
        env = {
            **os.environ,
            # a user's token: it may see its own servers only, and no server state
            "JUPYTERHUB_API_TOKEN": hub.user_token("ada"),
            "JUPYTERHUB_API_URL": hub.hub_api_url,
            "JUPYTERHUB_SERVICE_URL": f"http://127.0.0.1:{free_port()}",
        }
        result = subprocess.run(
            [sys.executable, "-m", "jhub_gpubooking.service", "--config", str(config),
             "--upgrade-db"],
            env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )
    assert result.returncode == 2, result.stderr[-2000:]
    [line] = [line for line in result.stderr.splitlines() if line.startswith("[C ")]  # critical
    assert line.endswith(
        "This service's Hub role lacks the scopes list:users, read:users:groups, read:servers, "
        "admin:server_state, delete:servers; grant them (see jhub_gpubooking.configure or "
        "hub.loadRoles) and restart."
    )
    assert "listening" not in result.stderr


def test_a_hub_answer_without_servers_is_unknown_not_stopped():
    assert server_use(None, "", 7) is ServerUse.UNKNOWN
    ready = {"ready": True, "pending": None}
    assert server_use({"": ready}, "", 7) is ServerUse.UNKNOWN  # no state: no admin:server_state
    assert server_use({"": {**ready, "state": {"gpu_booking_id": 7}}}, "", 7) is ServerUse.ON_BOOKING
    assert server_use({"": {**ready, "state": {"gpu_booking_id": 8}}}, "", 7) is (
        ServerUse.NOT_ON_BOOKING
    )
    assert server_use({"": {**ready, "state": {}}}, "", 7) is ServerUse.NOT_ON_BOOKING  # CPU
    assert server_use({"": {"ready": False, "pending": "spawn"}}, "", 7) is ServerUse.BUSY
    assert server_use({}, "", 7) is ServerUse.NOT_ON_BOOKING  # stopped


def test_a_pending_start_is_on_the_booking_its_spawner_claimed():
    starting = {"ready": False, "pending": "spawn"}
    on_seven = server_use({"": {**starting, "state": {"gpu_booking_id": 7}}}, "", 7)
    assert on_seven is ServerUse.STARTING_ON_BOOKING and on_seven.on_booking
    # not claimed yet, or claimed another booking: look again later, stop nothing
    assert server_use({"": {**starting, "state": {}}}, "", 7) is ServerUse.BUSY
    assert server_use({"": {**starting, "state": {"gpu_booking_id": 8}}}, "", 7) is ServerUse.BUSY
    # already stopping: nothing to stop
    stopping = {"ready": False, "pending": "stop", "state": {"gpu_booking_id": 7}}
    assert server_use({"": stopping}, "", 7) is ServerUse.BUSY
