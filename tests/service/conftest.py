"""Fixtures of the service tests: for the reservation page's browser tests one Chromium per
module and a fresh context (cookies, time zone) per test (helpers in page_browser.py); the
Hub's list of running servers, reachable or not."""

from __future__ import annotations

import shutil

import pytest
from page_browser import CHROMIUM, CHROMIUM_ARGS, page_context

from jhub_gpubooking.service import hub_servers


@pytest.fixture
def hub_up(monkeypatch) -> list[bool]:
    """The Hub's list of active servers, as the service's first check reads it: refused
    (connection refused, a Hub still starting) while ``hub_up[0]`` is False, as it starts; else
    empty."""
    up = [False]

    async def listing(api_url, token):
        if not up[0]:
            raise OSError("Connection refused")
        return {}

    monkeypatch.setattr(hub_servers, "active_servers", listing)
    return up


@pytest.fixture(scope="module")
def browser():
    if not shutil.which(CHROMIUM):
        reason = f"Chromium is not installed at {CHROMIUM}"
        print(reason)
        pytest.skip(reason)
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def context(browser):
    context = page_context(browser)
    yield context
    context.close()
