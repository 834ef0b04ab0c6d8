"""The reservation page against what a user audit of the demo found: amounts the user's policy
refuses, UTC times in the service's sentences, a page left stale by a refusal and offers left
after they were used, the report's Scheduled column, raw fractions in the timeline, and long
notes widening the tables. One Hub for the module; each test books in its own window.

The students (ada, bob) may book at most 2 GPUs at once (``max_gpus``); carol is a booking admin,
exempt from the policy. Pool ``big`` has two 4-GPU nodes sliced in halves, so a booking of 4
GPUs fits a node, and a half GPU booked leaves 7.5 of 8 free.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hub_harness import start_booking_hub
from page_browser import (
    BROWSER_ZONE,
    NO_REFRESH,
    PAGE_POOLS,
    LocalWindows,
    api_bookings,
    book_through_api,
    fill_booking_form,
    open_page,
    page_context,
    screenshot,
    shown_sentence,
    shown_time,
    utc,
)

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect

BIG = {
    "name": "big",
    "display_name": "H100 sliced",
    "gpu_model": "NVIDIA H100",
    "gpu_memory_mib": 81559,
    "backend": "hami",
    "slices_per_gpu": 2,
    "nodes": {"node-x": 4, "node-y": 4},
}
POLICY = 'c.GPUBookingService.default_policy = {"max_days_ahead": 60, "max_gpus": 2}\n'
KOLKATA = "Asia/Kolkata"

windows = LocalWindows()


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    directory = tmp_path_factory.mktemp("audit-hub")
    with start_booking_hub(directory, pools=[*PAGE_POOLS, BIG],
                           extra_service_config=POLICY + NO_REFRESH) as running:
        yield running


@pytest.fixture
def kolkata(browser):
    context = page_context(browser, KOLKATA)
    yield context
    context.close()


def as_datetime(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def fill_both_nodes_of_a100(hub, start, end) -> list[dict]:
    return [book_through_api(hub, "bob", "a100", 2, start, end) for _ in range(2)]


# ---------------------------------------------------------------- 1. the policy's max_gpus


def test_the_form_and_the_timeline_offer_no_more_gpus_than_the_policy_allows(hub, context):
    page = open_page(context, hub, "ada")
    page.select_option("#gb-pool", "big")
    # a node holds 4, the policy allows 2
    assert page.locator("#gb-amount option").all_inner_texts() == ["1/2 GPU", "1 GPU", "2 GPUs"]

    stretch = page.locator('.gb-pool-row[data-pool="big"] .gb-seg').first
    assert "at most 2 GPUs bookable at once" in stretch.get_attribute("aria-label")
    stretch.click()
    assert page.locator("#gb-pool").input_value() == "big"
    assert page.locator("#gb-amount").input_value() == "2"
    page.fill("#gb-note", "policy sized")
    page.click("#gb-book-button")
    feedback = page.locator("#gb-form-feedback.alert-success")
    feedback.wait_for()
    assert feedback.inner_text().startswith("Booked 2 GPUs in H100 sliced")
    [booking] = [b for b in api_bookings(hub, "ada").values() if b["note"] == "policy sized"]
    hub.api(hub.user_token("ada")).delete(f"api/bookings/{booking['id']}").raise_for_status()


def test_an_admin_exempt_from_the_policy_is_offered_a_whole_node(hub, context):
    page = open_page(context, hub, "carol")
    page.select_option("#gb-pool", "big")
    assert page.locator("#gb-amount option").all_inner_texts()[-1] == "4 GPUs"


# ---------------------------------------------------------------- 2. times in the browser's zone


def test_a_refusal_names_its_times_in_the_browsers_zone_like_the_offer_beside_it(hub, kolkata):
    start, end = windows.next()
    fill_both_nodes_of_a100(hub, start, end)
    body = {"pool": "a100", "gpus": 1, "start": utc(start), "end": utc(end)}
    refused = hub.api(hub.user_token("ada")).post("api/bookings", json=body)
    assert refused.status_code == 409 and " UTC" in refused.json()["message"]
    free = refused.json()["next_free"]

    page = open_page(kolkata, hub, "ada")
    assert page.locator("#gb-time-zone").inner_text() in (KOLKATA, "Asia/Calcutta")  # ICU's name
    fill_booking_form(page, "a100", "1 GPU", start, end)
    for field, when in (("#gb-start", start), ("#gb-end", end)):  # Kolkata's wall clock
        page.fill(field, when.astimezone(ZoneInfo(KOLKATA)).strftime("%Y-%m-%dT%H:%M"))
    page.click("#gb-book-button")
    alert = page.locator("#gb-form-feedback.alert-danger")
    alert.wait_for()
    text = alert.inner_text()
    assert "UTC" not in text
    assert text == shown_sentence(page, refused.json()["message"], KOLKATA)
    # the times of the request and of the earliest free time, as the page writes times
    for when in (start, as_datetime(free["start"])):
        assert shown_time(page, when) in text
    # the same times as the offer beside it ("Book <start> – <end> instead")
    label = page.locator("#gb-next-free-button").inner_text()
    offered_start = label.removeprefix("Book ").split(" – ")[0]
    assert offered_start == shown_time(page, as_datetime(free["start"]))
    assert f"is {offered_start} to " in text


def test_a_notice_names_its_times_in_the_browsers_zone(hub, kolkata):
    now = datetime.now(timezone.utc)
    later = now.replace(minute=now.minute - now.minute % 15, second=0, microsecond=0)
    later += timedelta(hours=3)
    booking = book_through_api(hub, "bob", "big", 1, later, later + timedelta(hours=1))
    try:
        notices = hub.api(hub.user_token("bob")).get("api/users/bob/notices").json()["notices"]
        [offer] = [n for n in notices if n["booking_id"] == booking["id"]]
        assert offer["kind"] == "start_early" and " UTC" in offer["message"]
        page = open_page(kolkata, hub, "bob")
        notice = page.locator(f'#gb-notices [data-kind="start_early"][data-booking-id="{booking["id"]}"]')
        notice.wait_for()
        text = notice.inner_text()
        assert "UTC" not in text
        assert shown_time(page, later) in text  # the booking as it stands
        # "can start at <now> and end at <an hour on>": Kolkata's clock, not UTC's
        at, new_end = as_datetime(offer["at"]), as_datetime(offer["end"])
        assert f"can start at {shown_time(page, at, clock_only=True)}" in text \
            or f"can start at {shown_time(page, at)}" in text
        assert shown_time(page, new_end, clock_only=True) in text
        assert f"{at:%H:%M} and" not in text
    finally:
        hub.api(hub.user_token("bob")).delete(f"api/bookings/{booking['id']}").raise_for_status()


# ---------------------------------------------------------------- 3. refusals refresh, offers go


def test_a_refused_withdraw_shows_the_wait_booked_meanwhile(hub, context):
    start, end = windows.next()
    blocking, _ = fill_both_nodes_of_a100(hub, start, end)
    ada = hub.api(hub.user_token("ada"))
    wait = ada.post("api/waits", json={"pool": "a100", "gpus": 1, "start": utc(start), "end": utc(end)})
    assert wait.status_code == 201, wait.text
    wait = wait.json()
    page = open_page(context, hub, "ada")  # the tab opened while the wait still waited
    withdraw = page.get_by_role("button", name=f"Withdraw wait {wait['id']}", exact=True)
    withdraw.wait_for()

    hub.api(hub.user_token("bob")).delete(f"api/bookings/{blocking['id']}").raise_for_status()
    deadline = time.monotonic() + 60
    while (booked := ada.get(f"api/waits/{wait['id']}").json())["state"] != "booked":
        assert time.monotonic() < deadline, booked
        time.sleep(0.5)

    withdraw.click()
    feedback = page.locator("#gb-mine-feedback.alert-danger")
    feedback.wait_for()
    assert "booked" in feedback.inner_text()
    # the page read its lists again: the wait is gone, its booking is listed
    expect(page.locator(f'#gb-my-waits li[data-wait-id="{wait["id"]}"]')).to_have_count(0)
    expect(page.locator(f'#gb-my-bookings tr[data-booking-id="{booked["booking_id"]}"]')).to_have_count(1)


def test_a_refused_extension_of_a_booking_cancelled_elsewhere_takes_it_off_the_list(hub, context):
    start, end = windows.next()
    booking = book_through_api(hub, "ada", "big", 1, start, end)
    page = open_page(context, hub, "ada")
    row = page.locator(f'#gb-my-bookings tr[data-booking-id="{booking["id"]}"]')
    row.wait_for()
    hub.api(hub.user_token("ada")).delete(f"api/bookings/{booking['id']}").raise_for_status()  # another tab

    page.get_by_role("button", name=f"Extend booking {booking['id']} by 15 minutes").click()
    page.locator("#gb-mine-feedback.alert-danger").wait_for()
    expect(row).to_have_count(0)  # cancelled: no longer listed, nor its buttons


def test_the_offers_of_a_refusal_go_once_one_is_used_or_the_form_changes(hub, context):
    start, end = windows.next()
    fill_both_nodes_of_a100(hub, start, end)
    page = open_page(context, hub, "ada")
    fill_booking_form(page, "a100", "1 GPU", start, end, note="offers")
    page.click("#gb-book-button")
    page.locator("#gb-next-free-button").wait_for()
    page.locator("#gb-join-waitlist").wait_for()
    # the waitlist offer's own controls leave the offers alone
    page.check("#gb-wait-flexible")
    expect(page.locator("#gb-join-waitlist")).to_be_visible()
    # asking for something else: the offers answered the refused request
    page.fill("#gb-note", "offers, changed")
    expect(page.locator("#gb-next-free-button")).to_have_count(0)
    expect(page.locator("#gb-join-waitlist")).to_have_count(0)

    page.click("#gb-book-button")
    offer = page.locator("#gb-next-free-button")
    offer.wait_for()
    offer.click()
    page.locator("#gb-form-feedback.alert-success").wait_for()
    # the request is booked: neither offer is left to take
    expect(page.locator("#gb-join-waitlist")).to_have_count(0)
    expect(page.locator("#gb-next-free-button")).to_have_count(0)


# ---------------------------------------------------------------- 4. the report's Scheduled column


def test_the_usage_report_has_every_column_of_its_sum(hub, context):
    now = datetime.now(timezone.utc)
    start = now.replace(minute=now.minute - now.minute % 15, second=0, microsecond=0)
    booking = book_through_api(hub, "bob", "shared", 0.25, start, start + timedelta(hours=2))
    try:
        report = hub.api(hub.user_token("carol")).get("api/admin/report", params={"by": "user"}).json()
        page = open_page(context, hub, "carol")
        table = page.locator("#gb-report table")
        table.wait_for()
        headings = table.locator("thead th").all_inner_texts()
        assert "Scheduled" in headings
        total = dict(zip(headings, table.locator("tbody tr").last.locator("td").all_inner_texts(),
                         strict=True))
        assert total["user"] == "total"
        assert float(total["Scheduled"]) > 0
        assert float(total["Scheduled"]) == pytest.approx(report["total"]["scheduled_gpu_hours"], abs=0.3)
        parts = ("Used", "Idle", "Released", "No-show", "Scheduled")
        assert float(total["Booked"]) == pytest.approx(sum(float(total[p]) for p in parts), abs=0.02)
    finally:
        hub.api(hub.user_token("bob")).delete(f"api/bookings/{booking['id']}").raise_for_status()


# ---------------------------------------------------------------- 5. amounts in the timeline


def test_the_timeline_shows_free_amounts_as_the_page_shows_amounts(hub, context):
    start, end = windows.next()
    book_through_api(hub, "bob", "big", 0.5, start, end)
    page = open_page(context, hub, "ada")
    segment = page.locator(f'.gb-pool-row[data-pool="big"] .gb-seg[data-start="{utc(start)}"]')
    label = segment.get_attribute("aria-label")
    assert "7.5 of 8 GPUs free" in label, label
    assert not re.search(r"\d+/\d+ of", label)
    segment.focus()
    assert "7.5 of 8 GPUs free" in page.locator("#gb-timeline-detail").inner_text()


# ---------------------------------------------------------------- 6. long notes


def test_a_long_note_wraps_inside_the_tables(hub, context, browser):
    start, end = windows.next()
    body = {"pool": "big", "gpus": 1, "start": utc(start), "end": utc(end), "note": "x" * 400}
    made = hub.api(hub.user_token("ada")).post("api/bookings", json=body)
    assert made.status_code == 201, made.text
    booking = made.json()
    admin_context = browser.new_context(
        timezone_id=BROWSER_ZONE, locale="en-GB", viewport={"width": 1280, "height": 900})
    try:
        for where, user, table, label in ((context, "ada", "gb-my-bookings", "Cancel"),
                                          (admin_context, "carol", "gb-all-bookings", "Force cancel")):
            page = open_page(where, hub, user)
            row = page.locator(f'#{table} tr[data-booking-id="{booking["id"]}"]')
            row.wait_for()
            box = page.locator(f"#{table}").bounding_box()
            scroller = page.locator(f"#{table} .table-responsive")
            assert scroller.evaluate("(node) => node.scrollWidth <= node.clientWidth + 1"), (
                user, scroller.evaluate("(node) => [node.scrollWidth, node.clientWidth]"))
            button = row.get_by_role("button", name=re.compile(f"^{label} booking {booking['id']} "))
            right = button.bounding_box()
            assert right["x"] + right["width"] <= box["x"] + box["width"] + 1, (user, right, box)
            screenshot(page, f"long-note-{user}")
    finally:
        admin_context.close()
        hub.api(hub.user_token("ada")).delete(f"api/bookings/{booking['id']}").raise_for_status()
