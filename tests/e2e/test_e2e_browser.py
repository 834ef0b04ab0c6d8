"""A student's journey in Chromium (Playwright) on the demo: log in, book on the reservation page,
pick the GPU profile in the chooser, land in JupyterLab. Screenshots go to test-output/screenshots/
(the documentation embeds reservation-page.png and chooser.png from there)."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from browser_harness import ZONE, page, screenshot  # noqa: F401 (page is a fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


def local_minute(when: datetime) -> str:
    return when.astimezone(ZoneInfo(ZONE)).strftime("%Y-%m-%dT%H:%M")


def test_student_books_picks_the_gpu_profile_and_lands_in_jupyterlab(demo, driver, page):
    hub = demo.hub_url
    page.goto(f"{hub}/hub/login?next=/services/gpu-booking/")
    page.fill("#username_input", "bob")
    page.fill("#password_input", "demo")
    page.click("#login_submit")
    page.wait_for_url(f"{hub}/services/gpu-booking/")
    page.wait_for_selector(".gb-pool-row[data-pool] .gb-seg")

    # book a quarter A100 from now (the tests' grid is one minute) for half an hour
    now = datetime.now(ZoneInfo(ZONE)).replace(second=0, microsecond=0)
    page.select_option("#gb-pool", "a100")
    page.select_option("#gb-amount", label="1/4 GPU")
    page.fill("#gb-start", local_minute(now))
    page.fill("#gb-end", local_minute(now + timedelta(minutes=30)))
    page.fill("#gb-note", "homework 3")
    page.click("#gb-book-button")
    page.locator("#gb-form-feedback.alert-success").wait_for()
    page.locator("#gb-my-bookings", has_text="homework 3").wait_for()
    screenshot(page, "reservation-page")

    # the chooser: the booked pool is available and says so, the unbooked one is not
    page.goto(f"{hub}/hub/spawn")
    booked = page.locator("#profile-item-a100")
    booked.wait_for()
    assert booked.is_enabled()
    assert "1/4" in page.locator("label[for=profile-item-a100]").inner_text() or "0.25" in (
        page.locator("label[for=profile-item-a100]").inner_text()
    )
    assert page.locator("#profile-item-l4").is_disabled()
    link = page.locator("label[for=profile-item-l4] a.gpu-booking-link")
    assert link.get_attribute("href").endswith("/services/gpu-booking/")
    assert page.locator("#profile-item-cpu").is_enabled()
    screenshot(page, "chooser")

    booked.check()
    page.click("#spawn_form button[type=submit]")
    page.wait_for_url(f"{hub}/user/bob/lab**", timeout=120_000)
    page.locator(".jp-Launcher").first.wait_for(timeout=90_000)  # JupyterLab is up, not its splash
    screenshot(page, "jupyterlab")

    pod = driver.pods()["jupyter-bob"]
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpucores"] == "25" and limits["nvidia.com/gpumem"] == "10240"
    driver.stop_server("bob")
