"""The reservation page's budget box, "Repeat" choice and series controls, in Chromium on a
real Hub (helpers in page_browser.py)."""

from __future__ import annotations

import pytest
from page_browser import (
    LocalWindows,
    LostFirstAnswer,
    api_bookings,
    fill_booking_form,
    open_page,
    start_page_hub,
)

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

windows = LocalWindows()

BUDGET_CONFIG = """
c.Budgets.group_budgets = {"students": {"gpu_hours": 40, "period": "month"}}
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with start_page_hub(tmp_path_factory.mktemp("planning-page-hub"), BUDGET_CONFIG) as running:
        yield running


def test_weekly_series_from_the_form_shows_badges_budget_and_cancels_as_a_whole(hub, context):
    page = open_page(context, hub, "ada")
    budget = page.locator('#gb-budget li[data-budget-name="students"]')
    budget.wait_for()
    assert budget.inner_text().startswith("Group students: 40 of 40 GPU-hours left this month")

    start, end = windows.next()
    fill_booking_form(page, "shared", "1/4 GPU", start, end, note="weekly lab")
    page.select_option("#gb-repeat", "weekly")
    page.fill("#gb-repeat-count", "3")
    page.click("#gb-book-button")
    feedback = page.locator("#gb-form-feedback.alert-success")
    feedback.wait_for()
    series = [b for b in api_bookings(hub, "ada").values() if b["note"] == "weekly lab"]
    assert len(series) == 3 and len({b["series_id"] for b in series}) == 1
    series_id = series[0]["series_id"]
    assert feedback.inner_text() == f"Booked 3 occurrences of series {series_id}."

    rows = page.locator("#gb-my-bookings tr", has_text=f"series {series_id}")
    rows.nth(2).wait_for()
    assert rows.count() == 3
    rows.first.get_by_role("button", name=f"Cancel series {series_id}").click()
    page.locator("#gb-mine-feedback.alert-success").wait_for()
    assert page.locator("#gb-mine-feedback").inner_text() == f"Series {series_id} is cancelled."
    states = {b["state"] for b in api_bookings(hub, "ada").values() if b["series_id"] == series_id}
    assert states == {"cancelled"}


def test_a_series_sent_again_after_its_answer_was_lost_is_booked_once(hub, context):
    page = open_page(context, hub, "ada")
    start, end = windows.next()
    fill_booking_form(page, "shared", "1/4 GPU", start, end, note="lost series")
    page.select_option("#gb-repeat", "weekly")
    page.fill("#gb-repeat-count", "2")
    lost = LostFirstAnswer(page, r".*/api/series$")  # the service books both weeks
    page.click("#gb-book-button")
    page.locator("#gb-form-feedback.alert-danger").wait_for()
    assert lost.statuses == [201]
    page.click("#gb-book-button")  # tried again, as the page says
    feedback = page.locator("#gb-form-feedback.alert-success")
    feedback.wait_for()
    series = [b for b in api_bookings(hub, "ada").values() if b["note"] == "lost series"]
    assert len(series) == 2 and len({b["series_id"] for b in series}) == 1
    assert feedback.inner_text() == f"Booked 2 occurrences of series {series[0]['series_id']}."
