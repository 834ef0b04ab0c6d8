"""What a student sees in Chromium when the booking service crashes just as they start a GPU
server: the spawn page says the start waits for the service, and JupyterLab opens once the Hub
has started the service again. And when the service stalls before they open the chooser: the
chooser offers the GPU profile anyway, saying the start will wait, and the start does.

The demo runs with the soak profile: the Hub polls its managed service every second (30 s by
default, which the spawner's 45 s of asking again also covers) and answers the form at once,
so the spawn page follows the whole start.
"""

from __future__ import annotations

import signal
import threading

import pytest
from browser_harness import page, screenshot  # noqa: F401 (page is a fixture)
from e2e_harness import SIGCONT, SIGSTOP, running_demo

from jhub_gpubooking.chooser import SERVICE_NOT_ANSWERING_NOTE

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

#: the spawn page's line while nothing listens where the service should
UNREACHABLE_WAIT = ("The GPU booking service is not answering (it may be restarting); asking "
                    "again in 1 s.")


def test_the_spawn_page_says_a_start_waits_for_a_crashed_service(tmp_path, page):
    with running_demo(tmp_path / "browser-waits-demo", profile="soak",
                      gated_namespaces={"waits-lab": "cho"}) as driver:
        hub = driver.demo.hub_url
        booking = driver.book("cho", "a100", 1, minutes=30)
        page.goto(f"{hub}/hub/login?next=/hub/spawn")
        page.fill("#username_input", "cho")
        page.fill("#password_input", "demo")
        page.click("#login_submit")
        booked = page.locator("#profile-item-a100")
        booked.wait_for()
        assert booked.is_enabled()
        booked.check()

        killed = driver.signal_service(signal.SIGKILL)  # the form is on screen
        page.click("#spawn_form button[type=submit]")
        page.wait_for_url(f"{hub}/hub/spawn-pending/cho**")
        page.click("#progress-details summary")  # the page's "Event log"
        page.locator("#progress-log", has_text=UNREACHABLE_WAIT).wait_for(timeout=30_000)
        screenshot(page, "spawn-waits", height=400)
        page.wait_for_url(f"{hub}/user/cho/lab**", timeout=120_000)
        page.locator(".jp-Launcher").first.wait_for(timeout=90_000)

        assert driver.service_pid() != killed
        assert driver.get_booking(booking["id"])["server"] == ""
        driver.stop_server("cho")

        # the service stalls (a hung process: the Hub does not restart it) before the chooser
        # opens: after GPUBookingSpawner.booking_chooser_retry_timeout the chooser offers the
        # GPU profile with a note, and the start waits until the service answers again
        driver.signal_service(SIGSTOP)
        resumed = threading.Timer(8, driver.signal_service, (SIGCONT,))
        try:
            page.goto(f"{hub}/hub/spawn")
            booked.wait_for()
            note = page.locator("#gpu-note-a100 .gpu-booking-note")
            assert note.inner_text() == SERVICE_NOT_ANSWERING_NOTE
            assert booked.is_enabled()
            booked.check()
            resumed.start()
            page.click("#spawn_form button[type=submit]")
            page.wait_for_url(f"{hub}/user/cho/lab**", timeout=120_000)
            page.locator(".jp-Launcher").first.wait_for(timeout=90_000)
        finally:
            resumed.cancel()
            driver.signal_service(SIGCONT)  # whether or not the timer had
        assert driver.get_booking(booking["id"])["server"] == ""
        driver.stop_server("cho")
