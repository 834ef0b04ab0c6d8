"""Helpers of the reservation page's browser tests (Debian's Chromium through Playwright on a
real Hub); the ``browser`` and ``context`` fixtures are in this folder's conftest.py.

The browser runs in Europe/Berlin so the page's conversion between local inputs and the API's
UTC times is exercised. Screenshots go to ``test-output/screenshots/`` for the docs.

The page's Content-Security-Policy forbids eval, so ``wait_for_function`` gets functions
(``"() => …"``): Playwright evals plain expression strings inside the page.
"""

from __future__ import annotations

import itertools
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

from hub_harness import RunningHub, start_booking_hub

from jhub_gpubooking.core.timegrid import format_time

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
BROWSER_ZONE = "Europe/Berlin"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-output" / "screenshots"

PAGE_POOLS = [
    {
        "name": "a100",
        "display_name": "A100 80GB",
        "gpu_model": "NVIDIA A100",
        "gpu_memory_mib": 81920,
        "nodes": {"node-a": 2, "node-b": 2},
    },
    {
        "name": "shared",
        "display_name": "L40S shared",
        "gpu_model": "NVIDIA L40S",
        "gpu_memory_mib": 46068,
        "backend": "hami",
        "slices_per_gpu": 4,
        "nodes": {"node-s": 1},
    },
]


# The page's own refresh would send requests these tests count or hold; the tests of the refresh
# (test_page_browser_refresh.py) turn it on.
NO_REFRESH = "c.ReservationPage.page_refresh_seconds = 0\n"


def page_context(browser, zone: str = BROWSER_ZONE):
    """A fresh browser context (cookies, time zone ``zone``), as one user's browser."""
    return browser.new_context(timezone_id=zone, locale="en-GB",
                               viewport={"width": 1280, "height": 900})


def start_page_hub(directory: Path, extra_service_config: str = "", refresh: bool = False):
    """A Hub with the booking service of ``PAGE_POOLS`` (a context manager, see hub_harness)."""
    extra = extra_service_config + ("" if refresh else NO_REFRESH)
    return start_booking_hub(directory, pools=PAGE_POOLS, extra_service_config=extra)


class LocalWindows:
    """Non-overlapping 2-hour windows from tomorrow 08:00 in the browser's zone, on the grid.

    "Tomorrow" is taken at the first window, when the tests run, not at import: collected
    before midnight in the browser's zone and run after it, the first window fell on the page's
    today, and its 3-day view then showed the day the zoom test expects to be out of view."""

    def __init__(self) -> None:
        self.day0: datetime | None = None
        self.counter = itertools.count()

    def next(self) -> tuple[datetime, datetime]:
        if self.day0 is None:
            zone = ZoneInfo(BROWSER_ZONE)
            tomorrow = datetime.now(zone).date() + timedelta(days=1)
            self.day0 = datetime(tomorrow.year, tomorrow.month, tomorrow.day, 8, tzinfo=zone)
        start = self.day0 + timedelta(hours=3 * next(self.counter))
        return start, start + timedelta(hours=2)


def local_input(when: datetime) -> str:
    """The value a datetime-local input shows for ``when`` in the browser's zone."""
    return when.astimezone(ZoneInfo(BROWSER_ZONE)).strftime("%Y-%m-%dT%H:%M")


def utc(when: datetime) -> str:
    return format_time(when.astimezone(timezone.utc))


def open_page(context, hub: RunningHub, user: str):
    """Log in at the Hub's own login form and land on the reservation page (via Hub OAuth)."""
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(f"{hub.public_url}{hub.hub_prefix}login?next={hub.service_prefix}")
    log_in(page, hub, user)
    return page


def log_in(page, hub: RunningHub, user: str) -> None:
    """Fill in the Hub's login form ``page`` shows and wait for the reservation page."""
    page.fill("#username_input", user)
    page.fill("#password_input", "correct-horse-battery")
    page.click("#login_submit")
    page.wait_for_url(hub.service_url)
    page.wait_for_selector(".gb-pool-row[data-pool] .gb-seg")


def csp_violations(context) -> list[str]:
    """The console messages of every page of ``context`` that report a CSP violation (filled live)."""
    violations: list[str] = []
    context.on(
        "console",
        lambda message: violations.append(message.text)
        if "Content Security Policy" in message.text
        else None,
    )
    return violations


class LostFirstAnswer:
    """The first of the page's ``method`` requests to a URL matching ``url`` (a regex) reaches
    the service, whose answer never reaches the page (the connection drops, as a proxy's or a
    laptop's would); later ones pass. ``statuses``: what the service answered the lost one;
    ``keys``: every such request's Idempotency-Key."""

    def __init__(self, page, url: str, method: str = "POST"):
        self.statuses: list[int] = []
        self.keys: list[str | None] = []

        def lose_the_first(route):
            if route.request.method != method:
                route.continue_()
                return
            self.keys.append(route.request.headers.get("idempotency-key"))
            if self.statuses:
                route.continue_()
                return
            self.statuses.append(route.fetch().status)  # the service makes it ...
            route.abort("connectionreset")  # ... and its answer never reaches the page

        page.route(re.compile(url), lose_the_first)


class HeldRequests:
    """The page's requests whose URL contains ``part`` (and of ``method``, when given), held
    until the test lets them go; the page's other requests pass."""

    def __init__(self, page, part: str, method: str | None = None):
        self.page = page
        self.routes = []

        def hold(route):
            if method is None or route.request.method == method:
                self.routes.append(route)
            else:
                route.continue_()

        self._matches = lambda url: part in url
        self._hold = hold
        page.route(self._matches, hold)

    def wait_for(self, count: int) -> None:
        for _ in range(200):  # they reach the route within 10 s
            if len(self.routes) >= count:
                return
            self.page.wait_for_timeout(50)
        raise AssertionError(f"{len(self.routes)} of {count} requests came")

    def release(self, routes) -> None:
        for route in routes:
            route.continue_()

    def let_go(self) -> None:
        """Stop holding: the held requests go on, and later ones pass."""
        self.release(self.routes)
        self.page.unroute(self._matches, self._hold)

    def one_request_of_a_double_click(self, button) -> None:
        """Double-click ``button`` (a locator): exactly one request comes; let it go."""
        button.dblclick()
        assert self.count_after_a_pause() == 1
        self.release(self.routes)

    def count_after_a_pause(self) -> int:
        """How many are held once a second request, had the page sent one, has reached the
        route (a double click's two requests leave within milliseconds)."""
        self.page.wait_for_timeout(300)
        return len(self.routes)


def booking_rows(page, table: str) -> list[int]:
    """The booking ids of the table with id ``table``, in the order shown."""
    return [
        int(row.get_attribute("data-booking-id"))
        for row in page.locator(f"#{table} tr[data-booking-id]").all()
    ]


def api_bookings(hub: RunningHub, user: str) -> dict[int, dict]:
    response = hub.api(hub.user_token(user)).get("api/bookings", params={"user": user})
    assert response.status_code == 200, response.text
    return {booking["id"]: booking for booking in response.json()["bookings"]}


def book_through_api(
    hub: RunningHub, user: str, pool: str, gpus, start: datetime, end: datetime
) -> dict:
    body = {"pool": pool, "gpus": gpus, "start": utc(start), "end": utc(end)}
    response = hub.api(hub.user_token(user)).post("api/bookings", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def fill_booking_form(page, pool: str, amount_label: str, start: datetime, end: datetime, note=""):
    page.select_option("#gb-pool", pool)
    page.select_option("#gb-amount", label=amount_label)
    page.fill("#gb-start", local_input(start))
    page.fill("#gb-end", local_input(end))
    page.fill("#gb-note", note)


def screenshot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


# ---------------------------------------------------------------- times as the page shows them

_SHOWN_TIME = ("(ms) => new Intl.DateTimeFormat(undefined, {weekday: 'short', day: 'numeric', "
               "month: 'short', hour: '2-digit', minute: '2-digit'}).format(ms)")
_SHOWN_CLOCK = "(ms) => new Intl.DateTimeFormat(undefined, {hour: '2-digit', minute: '2-digit'}).format(ms)"
_SERVER_SPAN = re.compile(
    r"(\d{4}-\d\d-\d\d \d\d:\d\d)(?: to (\d{4}-\d\d-\d\d \d\d:\d\d|\d\d:\d\d))? UTC")


def shown_time(page, when: datetime, clock_only: bool = False) -> str:
    """``when`` as the page writes a time (the browser's zone and locale): weekday, day, month
    and clock, or the clock alone."""
    return page.evaluate(_SHOWN_CLOCK if clock_only else _SHOWN_TIME, when.timestamp() * 1000)


def shown_sentence(page, message: str, zone: str) -> str:
    """A service sentence as the page shows it, for the forms refusals use ("2026-12-07 10:00
    UTC", "2026-12-07 10:00 to 11:00 UTC"): in the browser's zone ``zone``, without "UTC"."""

    def local(match: re.Match) -> str:
        start = datetime.strptime(match[1], "%Y-%m-%d %H:%M").replace(tzinfo=timezone.utc)
        text = shown_time(page, start)
        if match[2] is None:
            return text
        if len(match[2]) == 5:
            end = start.replace(hour=int(match[2][:2]), minute=int(match[2][3:]))
            end += timedelta(days=1) if end <= start else timedelta(0)
        else:
            end = datetime.strptime(match[2], "%Y-%m-%d %H:%M").replace(tzinfo=timezone.utc)
        same_day = start.astimezone(ZoneInfo(zone)).date() == end.astimezone(ZoneInfo(zone)).date()
        return f"{text} to {shown_time(page, end, clock_only=same_day)}"

    return _SERVER_SPAN.sub(local, message)
