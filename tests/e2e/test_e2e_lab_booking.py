"""JupyterLab on a booked GPU server (issue 19), in Chromium on the demo with the lifecycle rules
on their fast clock: the status bar shows the share and the time left and follows a change made
elsewhere, the warning before the end offers Extend, and extending from JupyterLab keeps the
server running past the old end. A CPU server shows nothing.

Saves test-output/screenshots/jupyterlab-booking.png (the tutorial shows it).
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone

import pytest
from browser_harness import page, screenshot  # noqa: F401 (page is a fixture)
from e2e_harness import Driver, running_demo

from jhub_gpubooking.core.timegrid import ceil_to_grid, format_time, parse_time

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

STATUS_ITEM = ".jp-gpubooking-status"
TOAST = ".Toastify__toast"


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    with running_demo(tmp_path_factory.mktemp("e2e-lab"), profile="lifecycle") as client:
        yield client


def now() -> datetime:
    return datetime.now(timezone.utc)


def open_lab(page, driver: Driver, user: str):
    """Log in as ``user`` and open their running server's JupyterLab; the extension's first
    status answer (JSON)."""
    hub = driver.demo.hub_url
    page.goto(f"{hub}/hub/login?next=/hub/home")
    page.fill("#username_input", user)
    page.fill("#password_input", "demo")
    page.click("#login_submit")
    page.wait_for_url(f"{hub}/hub/home**")
    with page.expect_response(lambda r: "/gpu-booking/status" in r.url, timeout=120_000) as first:
        page.goto(f"{hub}/user/{user}/lab")
    page.locator(".jp-Launcher").first.wait_for(timeout=90_000)
    return first.value.json()


def dismiss_news_prompt(page) -> None:
    """JupyterLab's own first-start toast (may it fetch Jupyter news?) is not ours: answer it
    when it is there, so the screenshot shows what the extension shows."""
    prompt = page.locator(TOAST, has_text="Jupyter news")
    if prompt.count():
        prompt.get_by_role("button", name="No", exact=True).click()
        prompt.wait_for(state="detached")


def test_a_cpu_server_shows_nothing(driver, page):
    driver.start_server("carl", "cpu")
    driver.wait_ready("carl")
    try:
        assert open_lab(page, driver, "carl") == {"booked": False}
        page.wait_for_timeout(3_000)  # time for anything the extension would show
        assert page.locator(STATUS_ITEM).count() == 0
        assert page.locator(TOAST, has_text="GPU booking").count() == 0
    finally:
        driver.stop_server("carl")


# waits out real minutes past the old end, then the module's demo stops in its teardown; minutes
# of a real clock, so with both dependency sets side by side only the hub image's set runs it
# (the latest set runs the same rules in tests/service/test_lifecycle_hub.py; tests/one_set.py)
@pytest.mark.one_set("pins")
@pytest.mark.wall_clock
@pytest.mark.timeout(600)
def test_jupyterlab_warns_before_the_end_and_extends_the_booking(driver, page):
    user = "dana"
    booking = driver.book(user, "a100", 0.25, minutes=30)
    assert driver.start_server(user, "a100").status_code in (201, 202)
    driver.wait_ready(user)

    status = open_lab(page, driver, user)
    assert status["booked"] is True and status["service"] == "ok"
    assert status["booking"]["id"] == booking["id"]
    share = re.escape(status["share"])
    item = page.locator(STATUS_ITEM)
    item.wait_for()
    assert re.fullmatch(rf"{share} · (29|30) min left", item.inner_text())

    # shortened elsewhere (the reservation page, here its API): 2.5-3.5 min left, inside the
    # 10-minute warning and outside the 2-minute one; JupyterLab follows at its next poll
    old_end = ceil_to_grid(now() + timedelta(minutes=2, seconds=30), 1)
    response = driver.booking.patch(f"bookings/{booking['id']}", json={"end": format_time(old_end)})
    assert response.status_code == 200, response.text
    warning = page.locator(TOAST, has_text="ends in")
    warning.wait_for(timeout=30_000)
    assert re.fullmatch(rf"{share} · [234] min left", item.inner_text())
    assert re.search(r"Your GPU booking \(.+\) ends in [234] min", warning.inner_text())
    assert page.locator(TOAST, has_text="ends in").count() == 1  # one warning, not one per threshold
    extend = warning.get_by_role("button", name=re.compile(r"^Extend by "))
    assert warning.get_by_role("button", name="Open bookings").is_visible()
    dismiss_news_prompt(page)
    screenshot(page, "jupyterlab-booking")

    # the server extends, and its answer never reaches the browser (a dropped connection)
    lost = []

    def lose_the_first_answer(route):
        if lost:
            route.continue_()
            return
        lost.append(route.fetch().status)
        route.abort("connectionreset")

    extend_url = re.compile(r"/gpu-booking/extend(\?|$)")  # JupyterLab adds a cache-buster
    page.route(extend_url, lose_the_first_answer)
    with page.expect_request(extend_url) as sent:
        extend.click()
    # the end it showed goes with the click: sent again, it extends at most once
    assert sent.value.post_data_json["from_end"] == format_time(old_end)
    failed = page.locator(TOAST, has_text="was not extended")
    failed.wait_for(timeout=30_000)
    assert lost == [200]
    extended = parse_time(driver.get_booking(booking["id"])["end"])
    failed.get_by_role("button", name="Try again").click()
    page.locator(TOAST, has_text="Booking extended").wait_for(timeout=30_000)
    new_end = parse_time(driver.get_booking(booking["id"])["end"])
    assert new_end == extended  # the same extension, not a second one
    assert new_end > old_end + timedelta(minutes=5)
    assert re.fullmatch(rf"{share} · .+ left", item.inner_text())
    assert not re.fullmatch(rf"{share} · [0-4] min left", item.inner_text())

    # past the old end (the lifecycle rules tick every second, no grace): the server runs on
    time.sleep(max(0.0, (old_end - now()).total_seconds()) + 15)
    assert driver.server_model(user)["ready"]
    assert f"jupyter-{user}" in driver.pods()
    assert page.locator(TOAST, has_text="is stopping").count() == 0
    assert re.fullmatch(rf"{share} · .+ left", item.inner_text())

    driver.booking.delete(f"bookings/{booking['id']}")  # end it now: the server stops
    page.locator(TOAST, has_text="stopp").wait_for(timeout=60_000)
    driver.wait_stopped(user, timeout=60)
