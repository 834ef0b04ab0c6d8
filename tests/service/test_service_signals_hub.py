"""The hub-managed service stops at once on SIGINT (what the Hub sends first) and on SIGTERM
(what Kubernetes sends the hub pod), so the Hub's clean-up fits the hub pod's 30 s."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from hub_harness import descendant_pids, pid_alive, start_booking_hub

#: The Hub waits this long after SIGINT before it escalates to SIGTERM (LocalProcessSpawner's
#: interrupt_timeout); a service that ignores SIGINT is only still alive after it.
HUB_INTERRUPT_TIMEOUT_SECONDS = 10


def service_pid(hub) -> int:
    for pid in descendant_pids(hub.process.pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"jhub_gpubooking.service" in cmdline:
            return pid
    raise AssertionError("the booking service is not running under the Hub")


def exits_by_itself(pid: int, within: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < within:
        if not pid_alive(pid):
            return time.monotonic() - started
        time.sleep(0.05)
    return None


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_the_service_exits_on_its_own_when_signalled(tmp_path, signum):
    with start_booking_hub(tmp_path) as hub:
        pid = service_pid(hub)
        # busy: the lifecycle tick and a request are running when the signal comes
        with hub.api(hub.service_token) as client:
            assert client.get("api/pools").status_code == 200
        os.kill(pid, signum)
        took = exits_by_itself(pid, HUB_INTERRUPT_TIMEOUT_SECONDS)
        assert took is not None, f"the service ignored {signal.Signals(signum).name}"
        print(f"service exited {took:.2f} s after {signal.Signals(signum).name}")
        assert "Stopping the GPU booking service" in hub.service_log()
