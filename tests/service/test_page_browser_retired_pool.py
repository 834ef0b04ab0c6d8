"""An admin retires a pool that still holds bookings and restarts the service (real Hub,
Chromium): the admin's part of the page lists the booking with the reason; the student sees on
the page that their booking there cannot be used, cannot extend it, and cancels it; the booking
in the pool that stays is left alone, with a notice of the maintenance window the admin put
over it."""

from __future__ import annotations

import re

import pytest
from hub_harness import start_booking_hub
from page_browser import NO_REFRESH, PAGE_POOLS, LocalWindows, book_through_api, open_page

from jhub_gpubooking.core.timegrid import format_time

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect

windows = LocalWindows()


def test_a_booking_in_a_retired_pool_is_flagged_on_the_page_and_can_be_cancelled(
    tmp_path, context
):
    directory = tmp_path / "hub"
    start, end = windows.next()
    with start_booking_hub(directory, pools=PAGE_POOLS, extra_service_config=NO_REFRESH) as hub:
        retired = book_through_api(hub, "ada", "shared", "0.25", start, end)["id"]
        kept = book_through_api(hub, "ada", "a100", 1, start, end)["id"]

    # the admin removes the shared pool from the config; the Hub starts the service again
    remaining = [pool for pool in PAGE_POOLS if pool["name"] != "shared"]
    with start_booking_hub(directory, pools=remaining, extra_service_config=NO_REFRESH) as hub:
        admin = hub.api(hub.user_token("admin"))
        reason = f"GPU pool shared no longer exists, so booking {retired} cannot be used."
        flagged = admin.get("api/admin/flagged").json()["flagged"]
        assert [(f["booking"]["id"], f["message"]) for f in flagged] == [(retired, reason)]

        # the admin's part of the page lists it with the reason, above everything else
        page = open_page(context, hub, "admin")
        listed = page.locator("#gb-flagged tr[data-booking-id]")
        expect_only(listed, retired, reason)
        expect(listed.get_by_role("button", name=re.compile(r"^Force cancel booking"))).to_be_visible()
        page.close()
        context.clear_cookies()

        # and blocks the a100 pool for maintenance over ada's booking there
        window = admin.post("api/maintenance", json={
            "pool": "a100", "start": format_time(start), "end": format_time(end),
            "reason": "driver update"})
        assert [b["id"] for b in window.json()["colliding_bookings"]] == [kept], window.text

        page = open_page(context, hub, "ada")
        maintenance = page.locator('#gb-notices [data-kind="maintenance"]')
        expect_only(maintenance, kept, "(driver update), which overlaps your booking "
                    f"#{kept} in pool a100")
        expect(maintenance).to_have_class(re.compile(r"\balert-warning\b"))
        notices = page.locator('#gb-notices [data-kind="flagged"]')
        expect_only(notices, retired, f"{reason} It stays booked in case its GPUs come back; "
                    "end or cancel it to book other GPUs instead.")
        expect(notices).to_have_class(re.compile(r"\balert-warning\b"))

        # still listed, under its pool's name marked as gone, with its own amount (the page
        # knows no slicing of that pool any more); extending it is refused in a sentence
        row = page.locator(f'#gb-my-bookings tr[data-booking-id="{retired}"]')
        expect(row.locator("td").nth(0)).to_have_text("shared (no longer configured)")
        expect(row.locator("td").nth(1)).to_have_text("1/4 GPU")
        row.get_by_role("button", name=re.compile(r"^Extend booking")).click()
        feedback = page.locator("#gb-mine-feedback")
        expect(feedback).to_have_text(
            "Pool 'shared' is no longer configured; its bookings cannot be extended."
        )

        row.get_by_role("button", name=re.compile(r"^Cancel booking")).click()  # confirmed
        expect(feedback).to_have_text(f"Booking {retired} is cancelled.")
        expect(notices).to_have_count(0)
        expect(row).to_have_count(0)
        expect(page.locator(f'#gb-my-bookings tr[data-booking-id="{kept}"]')).to_have_count(1)
        assert admin.get("api/admin/flagged").json() == {"flagged": []}


def expect_only(locator, booking_id: int, text: str) -> None:
    """``locator`` comes to match one element, of booking ``booking_id``, saying ``text``."""
    expect(locator).to_have_count(1)
    expect(locator).to_have_attribute("data-booking-id", str(booking_id))
    expect(locator).to_contain_text(text)
