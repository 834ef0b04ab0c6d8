"""Seeded random walks of what people do on the reservation page, in Chromium on a real Hub,
with what the page shows checked against the API after every step.

The student (ada, :class:`StudentWalk`) books through the form (now or tomorrow, in a few
overlapping slots, so refusals come; now and then a daily series, and cancels a series) or by
choosing a stretch of the timeline, takes the
offered next free interval or joins the waitlist, extends, picks a new end, ends or cancels,
starts a booking now when the page offers it, withdraws a wait, ticks "Show ended and
cancelled bookings" and reloads; meanwhile another user (bob) books and cancels through the
API, behind the page's back. After each step, within a few of the page's own refreshes:

- *My bookings* lists exactly ada's bookings the API lists (those still running or ahead, or
  all from 30 days back when the box is ticked), each once, in its state;
- the timeline marks exactly her upcoming and active bookings; her waits and notices are
  exactly the API's;
- the page shows no load error and threw no script error;
- what the page said of the step agrees with the API: a success changed the booking, a
  refusal left it as it was; a series is booked whole (every occurrence, one series, a day
  apart at the same local time) or not at all.

The admin's walk is in page_walk_admin.py. ``PAGE_WALK_SEED`` and ``PAGE_WALK_ACTIONS`` pick
the walk; a failure names the seed, the step and every step before it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from page_browser import BROWSER_ZONE, fill_booking_form, local_input, utc

from jhub_gpubooking.core.timegrid import format_time

STUDENT = "ada"
OTHER = "bob"
ACTIVE = ("upcoming", "active")
PAST_DAYS = 30  # booking.js PAST_DAYS
# the page refreshes every second in the walk's Hub: what it shows has caught up well within this
CATCH_UP_SECONDS = 10
AMOUNTS = {"a100": ["1 GPU", "2 GPUs"], "shared": ["1/4 GPU", "1/2 GPU", "3/4 GPU", "1 GPU"]}

STUDENT_PAGE = """() => {
  const ids = (selector, key) => [...document.querySelectorAll(selector)].map((e) => Number(e.dataset[key]));
  const error = document.querySelector("#gb-load-error");
  return {
    rows: [...document.querySelectorAll("#gb-my-bookings tr[data-booking-id]")]
      .map((row) => [Number(row.dataset.bookingId), row.dataset.state]),
    marks: ids(".gb-mine[data-booking-id]", "bookingId"),
    waits: ids("#gb-my-waits li[data-wait-id]", "waitId"),
    notices: [...document.querySelectorAll("#gb-notices [data-kind]")]
      .map((notice) => [notice.dataset.kind, Number(notice.dataset.bookingId)]),
    error: error.classList.contains("d-none") ? null : error.textContent,
    showPast: document.querySelector("#gb-mine-show-past").checked,
  };
}"""


def slot_floor(when: datetime) -> datetime:
    return when.replace(minute=when.minute - when.minute % 15, second=0, microsecond=0)


#: Counts the click events the page receives from now on (window.gbWalkClicks).
CLICKS_COUNTED = """() => {
  window.gbWalkClicks = 0;
  if (!window.gbWalkCounting) {
    document.addEventListener("click", () => { window.gbWalkClicks += 1; }, true);
    window.gbWalkCounting = true;
  }
}"""


class PageWalk:
    """A walk of one user's page: ``ACTIONS`` (name -> step, which says what happened),
    ``STATE`` (a script reading what the page shows) and ``expected`` (the same from the API)."""

    ACTIONS: dict[str, Callable[[PageWalk], str]] = {}
    STATE = ""

    def __init__(self, hub, page, seed: int, log: Callable[[str], None]):
        self.hub = hub
        self.page = page
        self.seed = seed
        self.random = random.Random(seed)
        self.log = log
        self.steps: list[str] = []
        self.script_errors: list[str] = []
        page.on("pageerror", lambda error: self.script_errors.append(str(error)))
        self.student = hub.api(hub.user_token(STUDENT))
        self.other = hub.api(hub.user_token(OTHER))
        zone = ZoneInfo(BROWSER_ZONE)
        tomorrow = datetime.now(zone).date() + timedelta(days=1)
        self.day = datetime(tomorrow.year, tomorrow.month, tomorrow.day, 8, tzinfo=zone)

    # ------------------------------------------------------------ the walk

    def next_action(self) -> str:
        return self.random.choice(list(self.ACTIONS))

    def run(self, actions: int) -> None:
        for number in range(1, actions + 1):
            kind = self.next_action()
            said = self.ACTIONS[kind](self)
            self.steps.append(f"{number}. {kind}: {said}")
            self.log(self.steps[-1])
            self.check()

    def fail(self, problem: str) -> None:
        history = "\n".join(self.steps)
        raise AssertionError(f"seed {self.seed}, after step {len(self.steps)}: {problem}\n{history}")

    # ------------------------------------------------------------ what the API says

    def bookings(self, show_past: bool = False, client=None, user: str | None = STUDENT) -> dict[int, dict]:
        """The bookings a table of the page lists: ``user``'s (everyone's for None), as the
        ``client`` sees them, from the running slot (or 30 days back)."""
        start = slot_floor(datetime.now(timezone.utc)) - timedelta(days=PAST_DAYS if show_past else 0)
        params = {"start": format_time(start), "limit": 500, **({"user": user} if user else {})}
        answer = (client or self.student).get("api/bookings", params=params)
        answer.raise_for_status()
        if answer.json().get("next_cursor"):
            self.fail("the walk made more bookings than one page of the page's table holds")
        return {b["id"]: b for b in answer.json()["bookings"]}

    def expected(self, shown: dict) -> dict:
        raise NotImplementedError

    def check(self) -> None:
        """What the page shows agrees with the API, within a few of its refreshes."""
        deadline = time.monotonic() + CATCH_UP_SECONDS
        while True:
            shown = self.page.evaluate(self.STATE)
            error = shown.pop("error")
            # lists compare sorted, with rows shown twice counted twice
            seen = {key: sorted(tuple(x) if isinstance(x, list) else x for x in value)
                    if isinstance(value, list) else value for key, value in shown.items()}
            expected = self.expected(shown)
            if self.script_errors:
                self.fail(f"the page threw {self.script_errors}")
            if error:
                self.fail(f"the page shows a load error: {error}")
            if seen == expected:
                return
            if time.monotonic() > deadline:
                self.fail(f"the page shows {seen}, the API says {expected}")
            self.page.wait_for_timeout(250)

    # ------------------------------------------------------------ the page's answers

    def settle(self) -> None:
        """Until every action button is enabled again (``oneAtATime`` disables it meanwhile)."""
        self.page.wait_for_function("() => ![...document.querySelectorAll('button')].some((b) => b.disabled)")

    def press(self, button, box: str) -> tuple[str, str]:
        """Click ``button`` (a locator); (kind, text) of what the page then says in the alert
        ``box`` ("success" or "danger"), once the action has settled."""
        self.page.evaluate(f"() => document.querySelector('#{box}').classList.add('d-none')")
        for _attempt in range(2):
            # the page redraws its tables every second here: a redraw between the mouse's down
            # and up replaces the button, and no click event fires at all (nothing ran, so the
            # student clicks again); a click that fired is never repeated
            self.page.evaluate(CLICKS_COUNTED)
            button.click()
            if self.page.evaluate("() => window.gbWalkClicks") > 0:
                break
        self.settle()
        alert = self.page.locator(f"#{box}")
        alert.wait_for(state="visible")
        kind = "success" if "alert-success" in (alert.get_attribute("class") or "") else "danger"
        return kind, alert.inner_text()

    def agree(self, answer: tuple[str, str], changed: bool, what: str, api_shows: object) -> str:
        """What the page said of ``what`` agrees with the API: a success changed it, a refusal
        left it as it was (``changed``: what the API shows now, ``api_shows``)."""
        kind, text = answer
        if (kind == "success") != changed:
            self.fail(f"{what}: the page said {kind} ({text}), the API shows {api_shows}")
        return f"{kind}: {text}"


class StudentWalk(PageWalk):
    """The student's page: the form, "My bookings", waits and notices."""

    STATE = STUDENT_PAGE

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.notes = 0

    def next_action(self) -> str:
        if self.random.random() < 0.5 and self.page.locator("#gb-next-free-button, #gb-join-waitlist").count():
            # a refusal offers these only until the next booking: take them often enough
            return self.random.choice(["take the next free interval", "join the waitlist"])
        return super().next_action()

    def expected(self, shown: dict) -> dict:
        bookings = self.bookings(shown["showPast"]).values()
        return {
            "rows": sorted((b["id"], b["state"]) for b in bookings if shown["showPast"] or b["state"] in ACTIVE),
            "marks": sorted(b["id"] for b in bookings if b["state"] in ACTIVE),
            "waits": self.waits(),
            "notices": self.notices(),
            "showPast": shown["showPast"],
        }

    def waits(self) -> list[int]:
        answer = self.student.get("api/waits", params={"user": STUDENT, "state": "waiting"})
        answer.raise_for_status()
        return sorted(w["id"] for w in answer.json()["waits"])

    def notices(self) -> list[tuple[str, int]]:
        answer = self.student.get(f"api/users/{STUDENT}/notices")
        answer.raise_for_status()
        return sorted((n["kind"], n["booking_id"]) for n in answer.json()["notices"])

    # ------------------------------------------------------------ steps

    def choose(self, bookings: list[dict]) -> dict | None:
        return self.random.choice(bookings) if bookings else None

    def visible_active(self, *states: str) -> list[dict]:
        shown = {row[0] for row in self.page.evaluate(self.STATE)["rows"]}
        return [b for b in self.bookings().values() if b["state"] in states and b["id"] in shown]

    def book(self) -> str:
        pool = self.random.choice(list(AMOUNTS))
        amount = self.random.choice(AMOUNTS[pool])
        if self.random.random() < 0.25:  # book now
            start = slot_floor(datetime.now(ZoneInfo(BROWSER_ZONE)))
        else:
            start = self.day + timedelta(hours=self.random.randrange(6))
        end = start + timedelta(hours=self.random.choice([1, 2, 3]))
        fill_booking_form(self.page, pool, amount, start, end)
        return f"{amount} of {pool} {start:%H:%M}-{end:%H:%M}: {self.submit_booking()}"

    def book_a_stretch(self) -> str:
        """Choose a stretch of the timeline (it fills in the form), then book it."""
        # a quarter of an hour is a pixel or two of the week: a mouse cannot hit it
        wide = self.page.evaluate(
            "() => [...document.querySelectorAll('.gb-pool-row[data-pool] .gb-seg')]"
            ".flatMap((seg, index) => (seg.getBoundingClientRect().width >= 8 ? [index] : []))"
        )
        stretch = self.page.locator(".gb-pool-row[data-pool] .gb-seg").nth(self.random.choice(wide))
        label = stretch.get_attribute("aria-label")
        stretch.click()
        return f"{label}: {self.submit_booking()}"

    def submit_booking(self) -> str:
        """Book what the form holds, with a note of its own; the page's answer agrees with the API."""
        note, answer = self.submit_with_note()
        made = [b for b in self.bookings().values() if b["note"] == note]
        return self.agree(answer, len(made) == 1, f"booking {note}", made)

    def submit_with_note(self) -> tuple[str, tuple[str, str]]:
        self.notes += 1
        note = f"walk {self.seed}.{self.notes}"
        self.page.fill("#gb-note", note)
        return note, self.press(self.page.locator("#gb-book-button"), "gb-form-feedback")

    def book_series(self) -> str:
        """A daily series through the form's Repeat choice: booked whole, or not at all."""
        pool = self.random.choice(list(AMOUNTS))
        amount = self.random.choice(AMOUNTS[pool])
        start = self.day + timedelta(hours=self.random.randrange(6))
        end = start + timedelta(hours=self.random.choice([1, 2]))
        count = self.random.choice([2, 3])
        fill_booking_form(self.page, pool, amount, start, end)
        self.page.select_option("#gb-repeat", "daily")
        self.page.fill("#gb-repeat-count", str(count))
        note, answer = self.submit_with_note()
        self.page.select_option("#gb-repeat", "")  # the student's next booking is a single one
        made = sorted((b for b in self.bookings().values() if b["note"] == note),
                      key=lambda b: b["start"])
        zone = ZoneInfo(BROWSER_ZONE)
        local = [datetime.fromisoformat(b["start"].replace("Z", "+00:00")).astimezone(zone)
                 for b in made]
        whole = (len(made) == count and len({b["series_id"] for b in made}) == 1
                 and made[0]["series_id"] is not None
                 and local == [start + timedelta(days=n) for n in range(count)])
        if made and not whole:
            self.fail(f"series {note} ({count} from {start}) was booked as {made}")
        said = self.agree(answer, bool(made), f"series {note}", made)
        return f"{count} x {amount} of {pool} daily from {start:%H:%M}: {said}"

    def cancel_series(self) -> str:
        shown = {row[0] for row in self.page.evaluate(self.STATE)["rows"]}
        series = sorted({b["series_id"] for b in self.bookings().values()
                         if b["series_id"] is not None and b["state"] == "upcoming" and b["id"] in shown})
        if not series:
            return "no series to cancel"
        series_id = self.random.choice(series)
        # every occurrence's row has the button; the page asks to confirm (accepted)
        button = self.page.get_by_role("button", name=f"Cancel series {series_id}", exact=True).first
        answer = self.press(button, "gb-mine-feedback")
        left = [b["id"] for b in self.bookings().values()
                if b["series_id"] == series_id and b["state"] in ACTIVE]
        return f"series {series_id}: " + self.agree(answer, not left, f"cancelling series {series_id}",
                                                    f"occurrences left {left}")

    def start_now(self) -> str:
        offers = self.page.locator('#gb-notices [data-kind="start_early"] button')
        if not offers.count():
            return "no offer to start early"
        offer = offers.nth(self.random.randrange(offers.count()))
        booking_id = int(offer.get_attribute("aria-label").split()[2])
        before = self.bookings()[booking_id]["start"]
        answer = self.press(offer, "gb-mine-feedback")
        # it starts in the running slot, or at the next one when the running one is not free
        after = self.bookings()[booking_id]["start"]
        said = self.agree(answer, after < before, f"starting {booking_id} early", f"start {before} -> {after}")
        return f"booking {booking_id}: {said}"

    def take_next_free(self) -> str:
        offer = self.page.locator("#gb-next-free-button")
        if not offer.is_visible():
            return "no next free interval offered"
        before = set(self.bookings())
        answer = self.press(offer, "gb-form-feedback")
        added = set(self.bookings()) - before
        return self.agree(answer, len(added) == 1, "the next free interval", f"new bookings {added}")

    def join_waitlist(self) -> str:
        join = self.page.locator("#gb-join-waitlist")
        if not join.is_visible():
            return "no waitlist offered"
        before = self.waits()
        kind, text = self.press(join, "gb-form-feedback")
        return f"{kind}: {text} (waiting before: {before})"

    def withdraw(self) -> str:
        waits = self.waits()
        if not waits:
            return "no wait"
        wait = self.random.choice(waits)
        button = self.page.get_by_role("button", name=f"Withdraw wait {wait}", exact=True)
        kind, text = self.press(button, "gb-mine-feedback")
        # (a refusal may come for a wait booked meanwhile: it no longer waits either)
        if kind == "success" and wait in self.waits():
            self.fail(f"withdrawing wait {wait} said {text} but it still waits")
        return f"wait {wait}: {kind}: {text}"

    def change_end(self, by_slot: bool) -> str:
        booking = self.choose(self.visible_active(*ACTIVE))
        if booking is None:
            return "nothing to change"
        row = self.page.locator(f'#gb-my-bookings tr[data-booking-id="{booking["id"]}"]')
        if by_slot:
            button = row.get_by_role("button", name=f"Extend booking {booking['id']} by 15 minutes")
        else:
            end = datetime.fromisoformat(booking["end"].replace("Z", "+00:00"))
            new_end = end + timedelta(minutes=self.random.choice([-60, -15, 30, 90]))
            row.locator("summary").click()
            self.page.fill(f"#gb-new-end-{booking['id']}", local_input(new_end))
            button = row.get_by_role("button", name="Save")
        answer = self.press(button, "gb-mine-feedback")
        details = row.locator("details")
        if details.count() and details.get_attribute("open") is not None:
            # refused: the student closes the form (the page waits while it is open)
            row.locator("summary").click()
        end = self.bookings(show_past=True).get(booking["id"], {}).get("end")
        said = self.agree(answer, end != booking["end"], f"the end of {booking['id']}", f"end {end}")
        return f"booking {booking['id']}: {said}"

    def end_or_cancel(self) -> str:
        booking = self.choose(self.visible_active(*ACTIVE))
        if booking is None:
            return "nothing to end"
        label = "End now" if booking["state"] == "active" else "Cancel"
        button = self.page.get_by_role("button", name=f"{label} booking {booking['id']} (")
        answer = self.press(button, "gb-mine-feedback")
        state = self.bookings(show_past=True).get(booking["id"], {}).get("state")
        return f"{label} {booking['id']}: {self.agree(answer, state not in ACTIVE, label, state)}"

    def toggle_past(self) -> str:
        self.page.click("#gb-mine-show-past")
        return f"show past: {self.page.is_checked('#gb-mine-show-past')}"

    def reload(self) -> str:
        self.page.reload()
        self.page.wait_for_selector(".gb-pool-row[data-pool] .gb-seg")
        return "reloaded"

    def other_books(self) -> str:
        start = self.day + timedelta(hours=self.random.randrange(6))
        pool = self.random.choice(list(AMOUNTS))
        body = {"pool": pool, "gpus": 1, "start": utc(start), "end": utc(start + timedelta(hours=2))}
        answer = self.other.post("api/bookings", json=body)
        return f"{OTHER} books 1 GPU of {pool} at {start:%H:%M}: {answer.status_code}"

    def other_cancels(self) -> str:
        answer = self.other.get("api/bookings", params={"user": OTHER, "state": "upcoming"})
        upcoming = answer.json()["bookings"]
        if not upcoming:
            return f"{OTHER} has nothing to cancel"
        booking = self.random.choice(upcoming)
        status = self.other.delete(f"api/bookings/{booking['id']}").status_code
        return f"{OTHER} cancels {booking['id']}: {status}"

    ACTIONS: dict[str, Callable[[PageWalk], str]] = {
        "book": book,
        "book a stretch of the timeline": book_a_stretch,
        "book a daily series": book_series,
        "cancel a series": cancel_series,
        "start a booking now": start_now,
        "take the next free interval": take_next_free,
        "join the waitlist": join_waitlist,
        "withdraw a wait": withdraw,
        "extend by a slot": lambda walk: walk.change_end(by_slot=True),
        "pick a new end": lambda walk: walk.change_end(by_slot=False),
        "end or cancel": end_or_cancel,
        "show or hide the past": toggle_past,
        "reload": reload,
        "another user books": other_books,
        "another user cancels": other_cancels,
    }

