"""An admin makes the booking grid coarser (15 to 30 minutes) and restarts the service (real
Hub, Chromium): a booking made on the old grid ends off the new one, and its one-click
extension on the page goes to the next point of the new grid instead of being refused."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from hub_harness import start_booking_hub
from page_browser import NO_REFRESH, PAGE_POOLS, LocalWindows, book_through_api, open_page

from jhub_gpubooking.core.timegrid import format_time, parse_time

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect

windows = LocalWindows()
COARSER = NO_REFRESH + "c.GPUBookingService.slot_minutes = 30\n"


def test_a_booking_ending_off_a_coarser_grid_extends_to_the_next_point_of_it(tmp_path, context):
    directory = tmp_path / "hub"
    start, _ = windows.next()
    end = start + timedelta(minutes=135)  # on the 15-minute grid, between two 30-minute points
    with start_booking_hub(directory, pools=PAGE_POOLS, extra_service_config=NO_REFRESH) as hub:
        booking = book_through_api(hub, "ada", "a100", 1, start, end)["id"]

    with start_booking_hub(directory, pools=PAGE_POOLS, extra_service_config=COARSER) as hub:
        page = open_page(context, hub, "ada")
        row = page.locator(f'#gb-my-bookings tr[data-booking-id="{booking}"]')
        plus = row.get_by_role("button", name=re.compile(r"^Extend booking"))
        # what the click does, said on the button: 15 minutes to the next 30-minute point
        expect(plus).to_have_text("+15 min")
        plus.click()
        expect(page.locator("#gb-mine-feedback")).to_have_class(re.compile(r"\balert-success\b"))
        stored = hub.api(hub.user_token("ada")).get(f"api/bookings/{booking}").json()
        assert parse_time(stored["end"]) == end + timedelta(minutes=15)
        # back on the grid: one click is one slot again
        expect(plus).to_have_text("+30 min")
        with page.expect_response(re.compile(rf"/api/bookings/{booking}$")) as answer:
            plus.click()
        assert answer.value.status == 200
        stored = hub.api(hub.user_token("ada")).get(f"api/bookings/{booking}").json()
        assert stored["end"] == format_time(end + timedelta(minutes=45))
