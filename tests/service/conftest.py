"""Fixtures of the reservation page's browser tests: one Chromium per module, a fresh context
(cookies, time zone) per test. Helpers are in page_browser.py."""

from __future__ import annotations

import shutil

import pytest
from page_browser import CHROMIUM, CHROMIUM_ARGS, page_context


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
