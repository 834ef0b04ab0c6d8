"""The service's lifecycle tick with a ManualClock: Hub stop calls, e-mail warnings, releases,
notices and report builders. The Hub API is a tiny in-process Tornado app that records the
calls; the mail server is aiosmtpd on a free port."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.handlers import Message
from hub_harness import free_port
from tornado import web
from tornado.httpserver import HTTPServer
from traitlets.config import Config

from jhub_gpubooking.core.accounting import Report, UsageTotals
from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.core.lifecycle import ActionKind
from jhub_gpubooking.core.model import Booking, MaintenanceWindow, Placement
from jhub_gpubooking.db.endings import endings
from jhub_gpubooking.db.removed_users import missing_users
from jhub_gpubooking.service import lifecycle
from jhub_gpubooking.service.app import GPUBookingService
from jhub_gpubooking.service.email import warning_text
from jhub_gpubooking.service.lifecycle_api import maintenance_notices, notices_json, report_csv

#: Monday 2030-01-07 10:05 UTC.
NOW = datetime(2030, 1, 7, 10, 5, tzinfo=timezone.utc)


def at(hour: int, minute: int = 0) -> datetime:
    return NOW.replace(hour=hour, minute=minute)


class FakeHubServers(web.RequestHandler):
    """DELETE users/{user}/servers/{name}: records the call; 404 for unknown users."""

    def delete(self, user: str, server: str) -> None:
        self.application.settings["calls"].append(
            (user, server, self.request.headers.get("Authorization"))
        )
        if user == "ghost":
            raise web.HTTPError(404)
        self.set_status(204)


class FakeHubUser(web.RequestHandler):
    """GET users/{user}: the user's servers from the test's ``servers`` dict; 404 if unknown."""

    def get(self, user: str) -> None:
        servers = self.application.settings["servers"]
        if user not in servers:
            raise web.HTTPError(404)
        self.finish({"name": user, "servers": servers[user]})


def running_on(booking_id: int | None) -> dict:
    """A ready server as the Hub shows it, its state naming the booking it runs on."""
    state = {} if booking_id is None else {"gpu_booking_id": booking_id}
    return {"ready": True, "pending": None, "state": state}


@pytest.fixture
async def fake_hub():
    calls: list = []
    servers: dict = {}
    app = web.Application(
        [(r"/hub/api/users/([^/]+)/servers/([^/]*)", FakeHubServers),
         (r"/hub/api/users/([^/]+)", FakeHubUser)], calls=calls, servers=servers,
    )
    port = free_port()
    server = HTTPServer(app)
    server.listen(port, "127.0.0.1")
    yield f"http://127.0.0.1:{port}/hub/api", calls, servers
    server.stop()


class Mailbox(Message):
    def __init__(self):
        super().__init__()
        self.messages = []

    def handle_message(self, message) -> None:
        self.messages.append(message)


@pytest.fixture
def mailbox():
    box = Mailbox()
    controller = Controller(box, hostname="127.0.0.1", port=free_port())
    controller.start()
    yield box, controller.port
    controller.stop()


def make_service(tmp_path, hub_api_url: str, smtp_port: int) -> GPUBookingService:
    """A service on the SQLite file in ``tmp_path``: a second one on the same path is the
    service restarted (or a second process)."""
    service = GPUBookingService(
        db_url=f"sqlite:///{tmp_path / 'bookings.sqlite'}",
        upgrade_db=True,
        pools=[{"name": "a100", "nodes": {"node-a": 2}}],
        hub_api_url=hub_api_url,
        api_token="service-token",
        clock=ManualClock(NOW),
        public_url="https://hub.example",
        config=Config(
            Lifecycle={
                "end_grace_seconds": 120,
                "warn_before_minutes": 10,
                "no_show_minutes": 15,
                "stopped_release_minutes": 30,
            },
            EmailWarnings={
                "smtp_host": "127.0.0.1",
                "smtp_port": smtp_port,
                "email_address_template": "{user}@lab.example",
            },
        ),
    )
    service.setup()
    return service


@pytest.fixture
async def service(tmp_path, fake_hub, mailbox):
    hub_api_url, _, _ = fake_hub
    _, smtp_port = mailbox
    service = make_service(tmp_path, hub_api_url, smtp_port)
    yield service
    service.executor.shutdown(wait=True)


async def test_tick_warns_by_email_then_stops_the_server_through_the_hub(
    service, fake_hub, mailbox
):
    _, calls, servers = fake_hub
    box, _ = mailbox
    booking = service.store.create("ada", "a100", "1", at(10), at(11))
    service.store.claim(booking.id, "gpu-lab")
    servers["ada"] = {"gpu-lab": running_on(booking.id)}

    assert await service.lifecycle.tick(at(10, 49)) == []
    [warn] = await service.lifecycle.tick(at(10, 50))
    assert warn.kind is ActionKind.WARN
    [mail] = box.messages
    assert (mail["To"], mail["Subject"]) == (
        "ada@lab.example",
        "Your GPU booking ends at 11:00 UTC",
    )
    assert "https://hub.example/services/gpu-booking/" in mail.get_payload(decode=True).decode()
    assert await service.lifecycle.tick(at(10, 55)) == []

    assert await service.lifecycle.tick(at(11, 1)) == []  # within the 2-minute grace
    [stop] = await service.lifecycle.tick(at(11, 2))
    assert stop.kind is ActionKind.STOP_SERVER
    assert calls == [("ada", "gpu-lab", "token service-token")]
    assert await service.lifecycle.tick(at(11, 3)) == []
    assert service.metrics.server_stops._value.get() == 1


async def test_a_claim_whose_server_the_hub_does_not_know_expires_and_nothing_is_stopped(
    service, fake_hub
):
    _, calls, _ = fake_hub
    booking = service.store.create("ghost", "a100", "1", at(10), at(11))
    service.store.claim(booking.id, "")
    await service.lifecycle.tick(at(11, 5))
    assert calls == []
    assert service.store.get(booking.id).server is None
    assert await service.lifecycle.tick(at(11, 10)) == []


async def test_the_end_stops_no_server_that_runs_without_its_booking(service, fake_hub):
    _, calls, servers = fake_hub
    booking = service.store.create("ada", "a100", "1", at(10), at(11))
    service.store.claim(booking.id, "")
    servers["ada"] = {"": running_on(None)}  # a CPU server now holds the name
    await service.lifecycle.tick(at(10, 30))
    assert service.store.get(booking.id).server is None  # the stale claim expired
    assert [e.kind for e in service.store.history(booking.id)][-1] == "claim_expired"
    await service.lifecycle.tick(at(11, 5))
    assert calls == []


async def test_while_the_hub_cannot_say_nothing_is_stopped_or_expired(service, fake_hub):
    _, calls, servers = fake_hub
    booking = service.store.create("ada", "a100", "1", at(10), at(11))
    service.store.claim(booking.id, "")
    servers["ada"] = {"": {"ready": True, "pending": None}}  # no state: scope missing
    await service.lifecycle.tick(at(11, 5))
    assert calls == [] and service.store.get(booking.id).server == ""
    servers["ada"] = {"": {"ready": False, "pending": "spawn", "state": {}}}  # starting
    await service.lifecycle.tick(at(11, 6))
    assert calls == [] and service.store.get(booking.id).server == ""
    servers["ada"] = {"": running_on(booking.id)}
    await service.lifecycle.tick(at(11, 7))
    assert calls == [("ada", "", "token service-token")]


async def test_a_booking_extended_after_the_tick_listed_its_stop_keeps_its_server(
        service, fake_hub, monkeypatch):
    """The tick lists the stop at the old end; the user's extension lands before the tick acts
    on it: the server runs on (CI's SQLite walk: *server u1/ stopped at the old end*)."""
    _, calls, servers = fake_hub
    booking = service.store.create("ada", "a100", "1", at(10), at(11))
    service.store.claim(booking.id, "")
    servers["ada"] = {"": running_on(booking.id)}
    listed = service.lifecycle.bookings.due

    def due_then_extended(now):
        actions = listed(now)
        service.store.change_end(booking.id, at(12), actor="ada")  # the PATCH lands meanwhile
        return actions

    monkeypatch.setattr(service.lifecycle.bookings, "due", due_then_extended)
    actions = await service.lifecycle.tick(at(11, 2))  # past the end and its grace
    assert [action.kind for action in actions] == [ActionKind.STOP_SERVER]
    assert calls == [] and service.store.get(booking.id).server == ""
    monkeypatch.setattr(service.lifecycle.bookings, "due", listed)
    await service.lifecycle.tick(at(12, 2))  # the new end: stopped then
    assert calls == [("ada", "", "token service-token")]


async def test_claims_wait_for_a_first_tick_that_reached_the_hub(service, hub_up):
    """A first tick that could not list the Hub's servers (the Hub still starting) compared
    nothing: claims wait on for a tick that did, since after a restore a booking a server runs
    on looks unclaimed until then."""
    service.lifecycle.lifecycle_interval_seconds = 0.05
    service.lifecycle.start()
    try:
        assert not await service.lifecycle.after_first_check(0.3)
        hub_up[0] = True
        assert await service.lifecycle.after_first_check(2)
    finally:
        service.lifecycle.stop()


async def test_a_hub_that_stays_unreachable_holds_claims_only_so_long(service, monkeypatch,
                                                                       caplog, hub_up):
    monkeypatch.setattr(lifecycle, "FIRST_CHECK_WAIT_SECONDS", 0.3)
    service.lifecycle.lifecycle_interval_seconds = 0.05
    service.lifecycle.start()
    try:
        assert not await service.lifecycle.after_first_check(0.1)
        assert await service.lifecycle.after_first_check(2)
    finally:
        service.lifecycle.stop()
    assert "Claims no longer wait for the first comparison" in caplog.text


async def test_a_start_still_pending_at_the_end_is_stopped_not_left_to_come_up(
    service, fake_hub
):
    _, calls, servers = fake_hub
    booking = service.store.create("ada", "a100", "1", at(10), at(11))
    service.store.claim(booking.id, "gpu-lab")
    # the start (e.g. an image pull) is still pending; its spawner claimed this booking
    servers["ada"] = {"gpu-lab": {"ready": False, "pending": "spawn",
                                  "state": {"gpu_booking_id": booking.id}}}
    assert await service.lifecycle.tick(at(11, 1)) == []  # within the grace: it may start
    [stop] = await service.lifecycle.tick(at(11, 2))
    assert stop.kind is ActionKind.STOP_SERVER
    # the Hub's DELETE interrupts a pending start; the stop is recorded, not repeated
    assert calls == [("ada", "gpu-lab", "token service-token")]
    assert await service.lifecycle.tick(at(11, 3)) == []
    assert calls == [("ada", "gpu-lab", "token service-token")]


async def test_unused_booking_is_released_and_noticed(service):
    booking = service.store.create("bob", "a100", "2", at(10), at(12))
    [release] = await service.lifecycle.tick(at(10, 20))
    assert release.kind is ActionKind.RELEASE
    released = service.store.get(booking.id)
    assert (released.end, released.release_reason) == (at(10, 30), "no_show")
    assert service.metrics.releases.labels(reason="no_show")._value.get() == 1


def test_notices_tell_of_the_coming_end_and_of_releases():
    ending = Booking("ada", "a100", 1, at(10), at(11), id=1, server="")
    released = Booking(
        "ada", "a100", 1, at(9), at(10, 30), id=2, released_end=at(12), release_reason="no_show"
    )
    later = Booking("ada", "a100", 1, at(14), at(15), id=3)
    notices = notices_json(
        [ending, released, later], at(10, 52), timedelta(minutes=10), {"no_show": 15}
    )
    assert notices == [
        {
            "kind": "ending_soon",
            "booking_id": 1,
            "at": "2030-01-07T11:00:00Z",
            "message": "Your booking #1 in pool a100 ends at 2030-01-07 11:00 UTC; save your "
            "work, the server will be stopped then.",
        },
        {
            "kind": "released",
            "booking_id": 2,
            "at": "2030-01-07T10:30:00Z",
            "message": "Your booking #2 in pool a100 was released at 2030-01-07 10:30 UTC "
            "because no server used it within 15 minutes of its start.",
        },
    ]


def test_notices_name_a_server_only_when_the_booking_had_one():
    unused = Booking("ada", "a100", 1, at(10), at(11), id=1)
    pod = Booking("ada", "a100", 1, at(10), at(11), id=2, server="pod:lab/train-1")
    ended = Booking("ada", "a100", 1, at(9), at(10, 40), id=3, release_reason="ended")
    notices = notices_json([unused, pod, ended], at(10, 52), timedelta(minutes=10), {})
    assert [notice["message"] for notice in notices] == [
        "Your booking #1 in pool a100 ends at 2030-01-07 11:00 UTC.",
        "Your booking #2 in pool a100 ends at 2030-01-07 11:00 UTC; save your work, the pod "
        "lab/train-1 will be stopped then.",
        "Your booking #3 in pool a100 was ended at 2030-01-07 10:40 UTC (End now); the rest of "
        "its time is free for others.",
    ]
    assert "server" not in warning_text(unused, "https://hub.example/services/gpu-booking/")
    assert "Save your work: the server using it will be stopped then." in warning_text(
        unused.with_changes(server=""), "https://hub.example/services/gpu-booking/")


async def test_an_ended_notice_says_who_ended_it_and_what_held_it_then(service):
    """The history decides: the holder was released once its server stopped, and an
    administrator's end is told as theirs, not as the user's own "End now"."""
    service.clock.set(at(10, 20))
    claimed = service.store.create("ada", "a100", "1", at(10, 15), at(11))
    service.store.claim(claimed.id, "gpu-lab")
    unused = service.store.create("ada", "a100", "1", at(10, 15), at(11))
    service.clock.set(at(10, 30))
    service.store.cancel(claimed.id, "admin")
    service.store.release(claimed.id, "gpu-lab")
    service.store.cancel(unused.id, "ada")
    bookings = [service.store.get(b.id) for b in (claimed, unused)]
    assert bookings[0].server is None
    ended = endings(service.store, [b.id for b in bookings])
    assert [n["message"] for n in notices_json(bookings, at(10, 31), None, {}, None, ended)] == [
        f"Your booking #{claimed.id} in pool a100 was ended at 2030-01-07 10:30 UTC by an "
        "administrator; its server was stopped and the rest of its time is free for others.",
        f"Your booking #{unused.id} in pool a100 was ended at 2030-01-07 10:30 UTC (End now); "
        "the rest of its time is free for others.",
    ]


def test_a_no_show_notice_names_the_wait_of_its_own_pool():
    released = [
        Booking("ada", pool, 1, at(9), at(9, 15), id=n, released_end=at(12),
                release_reason="no_show")
        for n, pool in enumerate(("a100", "t4"), start=1)
    ]
    notices = notices_json(released, at(10), None, {"no_show": 15}, {"t4": 10})

    assert [notice["message"].split(" because ")[1] for notice in notices] == [
        "no server used it within 15 minutes of its start.",
        "no server used it within 10 minutes of its start.",
    ]


def test_a_maintenance_window_over_a_booking_is_noticed_by_its_user():
    running = Booking("ada", "a100", 1, at(10), at(12), id=1, placement=Placement("n1", (0,), 1))
    unplaced = Booking("ada", "a100", 1, at(13), at(14), id=2)  # may be on any node
    on_n2 = Booking("ada", "a100", 1, at(11), at(12), id=3, placement=Placement("n2", (0,), 1))
    over = Booking("ada", "a100", 1, at(9), at(10), id=4, placement=Placement("n1", (0,), 1))
    cancelled = Booking("ada", "a100", 1, at(11), at(12), id=5, status="cancelled")
    node = MaintenanceWindow("a100", at(11), at(14), node="n1", reason="firmware", id=7)
    gone = MaintenanceWindow("a100", at(8), at(10), id=8)
    notices = maintenance_notices([running, unplaced, on_n2, over, cancelled], [node, gone],
                                  at(10, 30))
    assert notices == [
        {"kind": "maintenance", "booking_id": 1, "at": "2030-01-07T11:00:00Z",
         "message": "Node n1 is down for maintenance from 2030-01-07 11:00 to 14:00 UTC "
         "(firmware), which overlaps your booking #1 in pool a100 (2030-01-07 10:00 to 12:00 "
         "UTC). An administrator may cancel it; change or cancel it yourself to book other "
         "times or GPUs."},
        {"kind": "maintenance", "booking_id": 2, "at": "2030-01-07T11:00:00Z",
         "message": "Node n1 is down for maintenance from 2030-01-07 11:00 to 14:00 UTC "
         "(firmware), which overlaps your booking #2 in pool a100 (2030-01-07 13:00 to 14:00 "
         "UTC). An administrator may cancel it; change or cancel it yourself to book other "
         "times or GPUs."},
    ]


def test_report_csv_has_a_row_per_key_and_a_total():
    ada = UsageTotals(bookings=1, booked=2, used=1, idle=1)
    report = Report(at(0), at(23), "user", rows={"ada": ada}, total=ada)
    assert report_csv(report).splitlines() == [
        (
            "user,bookings,no_shows,booked_gpu_hours,used_gpu_hours,idle_gpu_hours,"
            "released_gpu_hours,no_show_gpu_hours,scheduled_gpu_hours"
        ),
        "ada,1,0,2.0,1.0,1.0,0.0,0.0,0.0",
        "total,1,0,2.0,1.0,1.0,0.0,0.0,0.0",
    ]


async def test_a_booking_that_can_start_now_is_offered_by_email_once(service, fake_hub, mailbox):
    _, _, servers = fake_hub
    box, _ = mailbox
    servers["bob"] = {}
    # ada holds both GPUs until 11:00, then one; bob's booking at 13:00 needs both
    ada = service.store.create("ada", "a100", "2", at(10), at(11))
    service.store.claim(ada.id, "gpu-lab")
    servers["ada"] = {"gpu-lab": running_on(ada.id)}
    bob = service.store.create("bob", "a100", "2", at(13), at(14))

    await service.lifecycle.tick(service.clock.set(at(10, 30)))
    assert box.messages == []  # the GPUs are not free for an hour from now

    service.clock.set(at(10, 31))
    service.store.cancel(ada.id, "ada")  # "End now": ada's GPUs are free from now
    await service.lifecycle.tick(at(10, 31))
    [offer] = box.messages
    assert (offer["To"], offer["Subject"]) == (
        "bob@lab.example", f"GPUs free now: start booking #{bob.id} early?"
    )
    text = offer.get_payload(decode=True).decode()
    assert "It can start at 2030-01-07 10:30 UTC and end at 2030-01-07 11:30 UTC instead" in text
    assert "https://hub.example/services/gpu-booking/" in text
    [event] = [e for e in service.store.history(bob.id) if e.kind == "start_early_emailed"]
    assert (event.detail["new_start"], event.detail["new_end"]) == (
        "2030-01-07T10:30:00Z", "2030-01-07T11:30:00Z")

    await service.lifecycle.tick(service.clock.set(at(10, 32)))
    assert len(box.messages) == 1  # once per booking
    assert service.store.get(bob.id).start == at(13)  # an offer moves nothing


async def test_no_offer_email_for_a_user_the_hub_does_not_know(service, fake_hub, mailbox):
    box, _ = mailbox
    service.store.create("ghost", "a100", "1", at(13), at(14))  # free now, but no Hub user
    await service.lifecycle.tick(service.clock.set(at(10, 30)))
    assert box.messages == []


async def test_a_booking_made_late_in_the_running_slot_gets_its_whole_no_show_time(service):
    # "Book now" at 10:14 books the running slot from 10:00: the 15 minutes count from 10:14
    service.clock.set(at(10, 14))
    booking = service.store.create("bob", "a100", "1", at(10), at(12))
    assert await service.lifecycle.tick(service.clock.set(at(10, 15))) == []
    assert await service.lifecycle.tick(service.clock.set(at(10, 28))) == []
    [release] = await service.lifecycle.tick(service.clock.set(at(10, 29)))
    assert (release.kind, release.reason.value) == (ActionKind.RELEASE, "no_show")
    assert service.store.get(booking.id).end == at(10, 30)


class Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record) -> None:
        self.lines.append((record.levelname, record.getMessage()))


async def test_tick_frees_what_a_user_deleted_from_the_hub_left_after_the_grace(
    service, fake_hub
):
    _, _, servers = fake_hub  # the fake Hub has the users of this dict
    servers["ada"] = {}
    checker = service.lifecycle.removed_users
    checker.grace_hours = 1
    records = Records()
    checker.log.addHandler(records)
    kept = service.store.create("ada", "a100", "1", at(14), at(15))
    gone = service.store.create("bob", "a100", "1", at(14), at(15))

    await service.lifecycle.tick(at(10, 10))  # bob is missing: his grace starts
    assert missing_users(service.store) == {"bob": at(10, 10)}
    assert records.lines[-1] == ("WARNING", (
        "The Hub no longer has user bob: their bookings, waits and calendar link here are taken "
        "off from 2030-01-07T11:10+00:00 unless the Hub has them again by then (renamed in the "
        "Hub? `jhub-gpubooking users rename bob NEW` moves them)."))
    servers["bob"] = {}  # added again within the grace: nothing is lost
    await service.lifecycle.tick(at(10, 40))  # a round an hour: the Hub is not asked yet
    assert missing_users(service.store) == {"bob": at(10, 10)}
    await service.lifecycle.tick(at(11, 10))
    assert missing_users(service.store) == {}
    assert service.store.get(gone.id).status == "booked"

    del servers["bob"]
    await service.lifecycle.tick(at(12, 10))
    assert await checker.check(at(13, 10)) == ["bob"]
    assert service.store.get(gone.id).status == "cancelled"
    assert service.store.get(kept.id) == kept
    assert records.lines[-1] == ("WARNING", "User bob was deleted from the Hub: 1 booking(s) "
                                 "cancelled or ended, 0 wait(s) withdrawn, calendar link none.")
    metrics = service.metrics.registry
    assert metrics.get_sample_value("gpubooking_removed_users_total") == 1
    assert metrics.get_sample_value("gpubooking_users_missing_from_hub") == 1

    # more users missing at once than an admin deletes: the Hub's database is in doubt
    checker.max_users_at_once = 1
    cy = service.store.create("cy", "a100", "1", at(16), at(17))
    dan = service.store.create("dan", "a100", "1", at(16), at(17))
    assert await checker.check(at(14, 10)) == []
    assert records.lines[-1][0] == "ERROR"
    assert records.lines[-1][1].startswith("The Hub no longer has 2 of the 3 users with bookings")
    assert metrics.get_sample_value("gpubooking_users_missing_from_hub") == 2
    assert await checker.check(at(16, 10)) == []  # and so on every round, no clock started
    assert [service.store.get(b.id).status for b in (cy, dan)] == ["booked", "booked"]
    assert missing_users(service.store) == {}


async def test_a_restart_keeps_the_grace_a_missing_user_has_left(service, fake_hub, mailbox,
                                                                tmp_path):
    """Each ``helm upgrade`` restarts the hub pod and the service with it: the grace counts
    from when bob was first found missing, not from the restart, and a second process sharing
    the database sees the same time."""
    hub_api_url, _, servers = fake_hub
    servers["ada"] = {}
    service.lifecycle.removed_users.grace_hours = 1
    gone = service.store.create("bob", "a100", "1", at(14), at(15))
    assert await service.lifecycle.removed_users.check(at(10, 10)) == []
    service.executor.shutdown(wait=True)

    restarted = make_service(tmp_path, hub_api_url, mailbox[1])
    try:
        checker = restarted.lifecycle.removed_users
        checker.grace_hours, checker.check_interval_minutes = 1, 30
        assert await checker.check(at(10, 40)) == []  # its first round: bob missing since 10:10
        assert missing_users(restarted.store) == {"bob": at(10, 10)}
        assert await checker.check(at(11, 10)) == ["bob"]
        assert restarted.store.get(gone.id).status == "cancelled"
        assert missing_users(restarted.store) == {}
    finally:
        restarted.executor.shutdown(wait=True)
