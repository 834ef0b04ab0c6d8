"""The lifecycle soak's server chooser (see soak.py): the walk opens the spawn page of a
stopped server, as its user does before a start, and checks what the form offers against the
service's answers read just before and just after it.

The Hub renders the form only for a browser session (its pages take no API token), so the walk
logs in as the demo's admin, who may open any user's spawn page (``/hub/spawn/<user>/<server>``).

What the form must show, per GPU profile (pool), at the moment it is rendered:

- the profile can be selected exactly when the user holds a booking of that pool that is active
  now, or the pool is free for opportunistic use;
- with several such bookings the user picks one: the choices are exactly those bookings; with
  one, its share is shown;
- never a note that the service cannot answer (it answered the reads around the form).

A booking that starts or ends, or an opportunistic grant made or released, between the two
reads leaves that pool unchecked (counted as "changed while rendered").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import httpx
from bs4 import BeautifulSoup
from hub_harness import log_in_at_hub
from soak_invariants import SoakFailure

from jhub_gpubooking.chooser import SERVICE_NOT_ANSWERING_NOTE, SERVICE_UNAVAILABLE_MESSAGE
from jhub_gpubooking.core.timegrid import parse_time

if TYPE_CHECKING:
    from soak import Walk

ADMIN, PASSWORD = "admin", "demo"  # the demo's admin (demo/jupyterhub_config.py)


@dataclass(frozen=True)
class Offer:
    """What a GPU profile offers: selectable, and which bookings a start may take."""

    enabled: bool
    bookings: frozenset[int]


def expected_offers(bookings: list[dict], opportunistic: dict, pools: list[str],
                    at: datetime) -> dict[str, Offer]:
    """What the form must offer per pool at ``at``, from the service's active bookings of the
    user and its ``GET api/opportunistic`` answer."""
    free = {entry["pool"] for entry in opportunistic.get("pools", [])
            if opportunistic.get("enabled") and entry.get("available")}
    offers = {}
    for pool in pools:
        current = frozenset(
            b["id"] for b in bookings
            if b["pool"] == pool and b["state"] == "active"
            and parse_time(b["start"], "start") <= at < parse_time(b["end"], "end"))
        offers[pool] = Offer(bool(current) or pool in free, current)
    return offers


def shown_offers(html: str, pools: list[str]) -> tuple[dict[str, Offer], list[str]]:
    """What the rendered form offers per pool, and the notes its GPU profiles show."""
    page = BeautifulSoup(html, "html.parser")
    offers, notes = {}, []
    for pool in pools:
        card = page.find("label", {"data-gpu-pool": pool})
        if card is None:
            raise SoakFailure(f"the server chooser shows no profile of pool {pool}")
        radio = card.find("input", {"name": "profile"})
        choices = frozenset(int(choice["value"]) for choice in card.select(".gpu-booking-choice input"))
        shown_share = card.find(class_="gpu-booking-share")
        if not choices and shown_share is not None:
            choices = frozenset({-1})  # one booking, named by its share only
        offers[pool] = Offer(not radio.has_attr("disabled"), choices)
        notes += [note.get_text() for note in card.select(".gpu-booking-note")]
    return offers, notes


def agrees(wanted: Offer, seen: Offer) -> bool:
    """The form offers what the service says (one booking is shown by its share, not its id)."""
    single = wanted.bookings if len(wanted.bookings) != 1 else frozenset({-1})
    return seen.enabled == wanted.enabled and seen.bookings == single


class Chooser:
    """The walk's "open chooser" action, and the admin's browser session it needs."""

    def __init__(self, walk: Walk, users: tuple[str, ...], server_names: tuple[str, ...]):
        self.walk = walk
        self.users, self.server_names = users, server_names
        self.session: httpx.Client | None = None

    def login(self) -> httpx.Client:
        hub = self.walk.demo.hub_url
        client = httpx.Client(base_url=hub, timeout=60)
        login = log_in_at_hub(client, "/hub/login", ADMIN, PASSWORD)
        if login.status_code != 302:
            raise SoakFailure(f"admin login: {login.status_code} {login.text[:200]}")
        return client

    def render(self, user: str, server: str) -> httpx.Response:
        path = f"/hub/spawn/{user}/{server}" if server else f"/hub/spawn/{user}"
        for _attempt in range(2):
            if self.session is None:
                self.session = self.login()
            try:
                response = self.session.get(path)
            except httpx.TransportError:
                self.close()  # a kept-alive connection to the proxy of a Hub since restarted
                continue
            if response.status_code == 302 and "/hub/login" in response.headers.get("location", ""):
                self.close()  # the login expired
                continue
            return response
        raise SoakFailure(f"GET {path}: the Hub asks the admin to log in again and again")

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None

    def reads(self, user: str) -> tuple[datetime, list[dict], dict]:
        bookings = self.walk.get(self.walk.driver.booking, "bookings",
                                 params={"user": user, "state": "active", "limit": 500})
        opportunistic = self.walk.get(self.walk.driver.booking, "opportunistic")
        return datetime.now(timezone.utc), bookings["bookings"], opportunistic

    def stopped_server(self) -> tuple[str, str] | None:
        stopped = [(user, name) for user in self.users for name in self.server_names
                   if (user, name) not in self.walk.snapshot.servers]
        return self.walk.rng.choice(stopped) if stopped else None

    def form(self, user: str, server: str) -> str | None:
        """The chooser's HTML (None: the server started meanwhile, its page is elsewhere)."""
        response = self.render(user, server)
        if response.status_code == 302:
            return None
        if response.status_code != 200:
            raise SoakFailure(f"the spawn page of {user}/{server}: {response.status_code} "
                              f"{response.text[:300]}")
        return response.text

    def open(self) -> str:
        if (key := self.stopped_server()) is None:
            return "no stopped server"
        user, server = key
        pools = sorted(self.walk.pools)
        before = self.reads(user)
        html = self.form(user, server)
        after = self.reads(user)
        if html is None:
            return "server started meanwhile"
        shown, notes = shown_offers(html, pools)
        for note in notes:
            if SERVICE_UNAVAILABLE_MESSAGE in note or SERVICE_NOT_ANSWERING_NOTE in note:
                raise SoakFailure(f"the chooser of {user}/{server} says the service cannot "
                                  f"answer, which answered around it: {note}")
        early = expected_offers(before[1], before[2], pools, before[0])
        late = expected_offers(after[1], after[2], pools, after[0])
        checked = 0
        for pool in pools:
            if early[pool] != late[pool]:
                continue  # changed while rendered
            wanted, seen = early[pool], shown[pool]
            if not agrees(wanted, seen):
                raise SoakFailure(
                    f"the chooser of {user}/{server} offers {pool} as {seen}, but the service "
                    f"says {wanted} (active bookings {sorted(b['id'] for b in before[1])}, "
                    f"opportunistic {before[2]})")
            checked += 1
        enabled = [pool for pool in pools if shown[pool].enabled] or ["none"]
        return (f"{'+'.join(enabled)} selectable" if checked == len(pools)
                else "changed while rendered")

    def open_while_unanswered(self) -> str:
        """The chooser while the service cannot answer (its database is down): after its brief
        wait it offers every GPU profile, saying the start waits for the service."""
        if (key := self.stopped_server()) is None:
            return "chooser: no stopped server"
        pools = sorted(self.walk.pools)
        html = self.form(*key)
        if html is None:
            return "chooser: server started meanwhile"
        shown, notes = shown_offers(html, pools)
        if not all(shown[pool].enabled for pool in pools) or notes != [
                SERVICE_NOT_ANSWERING_NOTE] * len(pools):
            raise SoakFailure(f"the chooser of {key[0]}/{key[1]} while the database was down "
                              f"offers {shown}, saying {notes}")
        return "chooser offers GPU starts that wait"
