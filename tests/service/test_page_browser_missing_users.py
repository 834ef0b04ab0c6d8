"""An admin deletes a student from the Hub (real Hub, Chromium): the admin's part of the page
lists the student, with when their booking and calendar link are taken off (in the browser's
time zone), until the student is in the Hub again."""

from __future__ import annotations

from zoneinfo import ZoneInfo

import httpx
import pytest
from hub_harness import start_booking_hub, wait_for
from page_browser import BROWSER_ZONE, NO_REFRESH, PAGE_POOLS, LocalWindows, book_through_api, open_page

from jhub_gpubooking.core.timegrid import parse_time

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect

windows = LocalWindows()
CHECK_OFTEN = """
c.Lifecycle.lifecycle_interval_seconds = 1
c.RemovedUsers.check_interval_minutes = 0.01
c.RemovedUsers.grace_hours = 24
"""


def test_the_admin_page_lists_a_student_deleted_from_the_hub_until_they_are_back(
    tmp_path, context
):
    start, end = windows.next()
    config = CHECK_OFTEN + NO_REFRESH
    with start_booking_hub(tmp_path / "hub", pools=PAGE_POOLS, extra_service_config=config) as hub:
        booking = book_through_api(hub, "bob", "a100", 1, start, end)["id"]
        hub.api(hub.user_token("bob")).post("api/users/bob/feed-token").raise_for_status()
        admin_api = {"Authorization": f"token {hub.admin_token}"}
        httpx.delete(f"{hub.hub_api_url}/users/bob", headers=admin_api).raise_for_status()
        admin = hub.api(hub.user_token("admin"))

        def listed() -> list[dict]:
            return admin.get("api/admin/missing-users").json()["users"]

        wait_for(lambda: listed() != [], "bob is listed as missing", hub)
        [entry] = listed()
        due = parse_time(entry["removal_due"]).astimezone(ZoneInfo(BROWSER_ZONE))

        page = open_page(context, hub, "admin")
        section = page.locator("#gb-missing-users")
        expect(section.get_by_role("heading")).to_have_text("Users deleted from the Hub")
        cells = section.locator("tbody tr td")
        expect(cells).to_have_count(6)
        expect(cells.nth(0)).to_have_text("bob")
        expect(cells.nth(2)).to_contain_text(f"{due:%H:%M}")
        expect(cells.nth(3)).to_have_text(f"#{booking}")
        expect(cells.nth(4)).to_have_text("none")
        expect(cells.nth(5)).to_have_text("yes")

        # bob is in the Hub again: the next round forgets him, and so does the page
        httpx.post(f"{hub.hub_api_url}/users/bob", headers=admin_api).raise_for_status()
        wait_for(lambda: listed() == [], "bob is no longer listed", hub)
        page.reload()
        page.wait_for_selector(".gb-pool-row[data-pool] .gb-seg")
        expect(section.locator("table")).to_have_count(0)
        page.close()
