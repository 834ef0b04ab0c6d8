"""A seeded random walk of what a booking admin does on the reservation page (see page_walk.py).

The admin creates maintenance windows (for a node or a whole pool, in the slots the students
book) and deletes them, ends and cancels anyone's booking, shows the past of everyone's
bookings and groups the usage report another way, while two students book now or tomorrow,
and cancel, through the API. After each step, within a few of the page's own refreshes:

- *All bookings* lists exactly the API's bookings of everyone, each once, in its state;
- the maintenance table lists exactly the windows still running or ahead;
- *GPUs in use now* has a row per holder the API names, and the report's total counts the
  bookings the API's report counts, for the grouping chosen;
- no load error, no script error, and what the page said of the step agrees with the API.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from page_browser import BROWSER_ZONE, local_input, utc
from page_walk import ACTIVE, OTHER, STUDENT, PageWalk, slot_floor

from jhub_gpubooking.core.timegrid import format_time

ADMIN = "admin"
NODES = {"a100": ["", "node-a", "node-b"], "shared": ["", "node-s"]}
GROUPINGS = ["user", "pool", "group"]

ADMIN_PAGE = """() => {
  const error = document.querySelector("#gb-load-error");
  const total = [...document.querySelectorAll("#gb-report tbody tr")].at(-1);
  return {
    rows: [...document.querySelectorAll("#gb-all-bookings tr[data-booking-id]")]
      .map((row) => [Number(row.dataset.bookingId), row.dataset.state]),
    windows: [...document.querySelectorAll("#gb-maintenance-list tr[data-window-id]")]
      .map((row) => Number(row.dataset.windowId)),
    holders: document.querySelectorAll("#gb-holders tbody tr").length,
    reportBookings: total ? Number(total.children[1].textContent) : null,
    error: error.classList.contains("d-none") ? null : error.textContent,
    showPast: document.querySelector("#gb-all-show-past").checked,
    by: document.querySelector("#gb-report-by").value,
  };
}"""


class AdminWalk(PageWalk):
    """The admin's part of the page: maintenance, everyone's bookings, holders, the report."""

    STATE = ADMIN_PAGE

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.admin = self.hub.api(self.hub.user_token(ADMIN))
        self.reasons = 0

    def expected(self, shown: dict) -> dict:
        bookings = self.bookings(shown["showPast"], client=self.admin, user=None).values()
        start = format_time(slot_floor(datetime.now(timezone.utc)))
        windows = self.admin.get("api/maintenance", params={"start": start, "limit": 500}).json()["windows"]
        holders = self.admin.get("api/admin/holders").json()["holders"]
        report = self.admin.get("api/admin/report", params={"by": shown["by"]}).json()
        return {
            "rows": sorted((b["id"], b["state"]) for b in bookings if shown["showPast"] or b["state"] in ACTIVE),
            "windows": sorted(w["id"] for w in windows),
            "holders": len(holders),
            "reportBookings": report["total"]["bookings"],
            "showPast": shown["showPast"],
            "by": shown["by"],
        }

    # ------------------------------------------------------------ steps

    def create_window(self) -> str:
        pool = self.random.choice(list(NODES))
        node = self.random.choice(NODES[pool])
        start = self.day + timedelta(hours=self.random.randrange(6))
        end = start + timedelta(hours=self.random.choice([1, 2]))
        self.reasons += 1
        reason = f"walk {self.seed}.{self.reasons}"
        self.page.select_option("#gb-mw-pool", pool)
        self.page.select_option("#gb-mw-node", node)
        self.page.fill("#gb-mw-start", local_input(start))
        self.page.fill("#gb-mw-end", local_input(end))
        self.page.fill("#gb-mw-reason", reason)
        answer = self.press(self.page.locator("#gb-mw-create"), "gb-admin-feedback")
        made = [w for w in self.admin.get("api/maintenance").json()["windows"] if w["reason"] == reason]
        said = self.agree(answer, len(made) == 1, f"window {reason}", made)
        return f"{pool} {node or 'whole pool'} {start:%H:%M}-{end:%H:%M}: {said}"

    def delete_window(self) -> str:
        shown = self.page.evaluate(self.STATE)["windows"]
        if not shown:
            return "no window"
        window = self.random.choice(shown)
        button = self.page.get_by_role("button", name=f"Delete maintenance window {window}", exact=True)
        answer = self.press(button, "gb-admin-feedback")
        left = [w["id"] for w in self.admin.get("api/maintenance").json()["windows"]]
        return f"window {window}: {self.agree(answer, window not in left, 'deleting it', left)}"

    def end_anyones(self) -> str:
        shown = {row[0] for row in self.page.evaluate(self.STATE)["rows"]}
        bookings = [b for b in self.bookings(client=self.admin, user=None).values()
                    if b["state"] in ACTIVE and b["id"] in shown]
        if not bookings:
            return "nothing to end"
        booking = self.random.choice(bookings)
        label = "Force end now" if booking["state"] == "active" else "Force cancel"
        button = self.page.locator("#gb-all-bookings").get_by_role("button", name=f"{label} booking {booking['id']} (")
        answer = self.press(button, "gb-admin-feedback")
        state = self.bookings(True, client=self.admin, user=None).get(booking["id"], {}).get("state")
        return f"{label} {booking['user']}'s {booking['id']}: {self.agree(answer, state not in ACTIVE, label, state)}"

    def toggle_past(self) -> str:
        self.page.click("#gb-all-show-past")
        return f"show past: {self.page.is_checked('#gb-all-show-past')}"

    def regroup_report(self) -> str:
        by = self.random.choice(GROUPINGS)
        self.page.select_option("#gb-report-by", by)
        return f"report by {by}"

    def student_books(self) -> str:
        user = self.random.choice([STUDENT, OTHER])
        if self.random.random() < 0.3:
            start = slot_floor(datetime.now(ZoneInfo(BROWSER_ZONE)))
        else:
            start = self.day + timedelta(hours=self.random.randrange(6))
        pool = self.random.choice(list(NODES))
        body = {"pool": pool, "gpus": 1, "start": utc(start), "end": utc(start + timedelta(hours=2))}
        client = self.student if user == STUDENT else self.other
        answer = client.post("api/bookings", json=body)
        return f"{user} books 1 GPU of {pool} at {start:%H:%M}: {answer.status_code}"

    def student_cancels(self) -> str:
        user = self.random.choice([STUDENT, OTHER])
        client = self.student if user == STUDENT else self.other
        upcoming = client.get("api/bookings", params={"user": user, "state": "upcoming"}).json()["bookings"]
        if not upcoming:
            return f"{user} has nothing to cancel"
        booking = self.random.choice(upcoming)
        status = client.delete(f"api/bookings/{booking['id']}").status_code
        return f"{user} cancels {booking['id']}: {status}"

    def reload(self) -> str:
        self.page.reload()
        self.page.wait_for_selector("#gb-all-bookings p, #gb-all-bookings table")
        return "reloaded"

    ACTIONS: dict[str, Callable[[PageWalk], str]] = {
        "create a maintenance window": create_window,
        "delete a maintenance window": delete_window,
        "end or cancel anyone's booking": end_anyones,
        "show or hide the past": toggle_past,
        "group the report another way": regroup_report,
        "a student books": student_books,
        "a student books again": student_books,
        "a student cancels": student_cancels,
        "reload": reload,
    }
