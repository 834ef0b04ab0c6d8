"""Chromium through Playwright for the end-to-end browser tests: the ``page`` fixture (import it
into the test module) and ``screenshot``. Screenshots go to test-output/screenshots/."""

from __future__ import annotations

import shutil

import pytest
from e2e_harness import OUTPUT

sync_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
ZONE = "America/New_York"  # not UTC, so the pages' time-zone handling is on the path
SCREENSHOTS = OUTPUT / "screenshots"


@pytest.fixture
def page():
    if not shutil.which(CHROMIUM):
        reason = f"Chromium is not installed at {CHROMIUM}"
        print(reason)
        pytest.skip(reason)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(
            timezone_id=ZONE, locale="en-US", viewport={"width": 1280, "height": 900}
        )
        page = context.new_page()
        page.on("dialog", lambda dialog: dialog.accept())
        yield page
        context.close()
        browser.close()


def screenshot(page, name: str, height: int | None = None) -> None:
    """The whole page, or its top ``height`` pixels (a page that is mostly empty)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    clip = None if height is None else {"x": 0, "y": 0, "width": 1280, "height": height}
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=clip is None, clip=clip)
