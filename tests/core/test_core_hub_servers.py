"""The rule comparing the Hub's running servers with the bookings they run on
(core/hub_servers.py): every case of a table, by equality."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction

import pytest

from jhub_gpubooking.core.hub_servers import Finding, RunningServer, compare, running_servers
from jhub_gpubooking.core.lifecycle import SERVER_STATE_BOOKING_KEY, SERVER_STATE_PLACEMENT_KEY
from jhub_gpubooking.core.model import Booking, Placement

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=timezone.utc)
GRACE = timedelta(minutes=1)


def booking(booking_id: int, *, user: str = "ada", server: str | None = None,
            start: timedelta = timedelta(hours=-1), end: timedelta = timedelta(hours=1),
            status: str = "booked", node: str = "n1", gpus: tuple[int, ...] = (0,)) -> Booking:
    return Booking(user=user, pool="a100", amount=Fraction(1), start=NOW + start, end=NOW + end,
                   id=booking_id, status=status, server=server,
                   placement=Placement(node, gpus, 1))


def on(booking_id, **model) -> dict:
    """The Hub's model of a server whose state names ``booking_id``."""
    return {"ready": True, "pending": None, "state": {SERVER_STATE_BOOKING_KEY: booking_id},
            **model}


def pod_holder(holder: str) -> bool:
    return holder.startswith("pod:")


def findings(servers: dict, bookings: list[Booking]) -> list[tuple[str, str, Finding]]:
    by_id = {b.id: b for b in bookings}
    return [(server.user, server.server, finding)
            for server, finding in compare(servers, by_id, NOW, GRACE, pod_holder)]


def test_only_ready_servers_that_name_a_booking_count():
    servers = {
        "ada": {"": on(1), "starting": on(2, ready=False, pending="spawn"),
                "stopping": on(3, pending="stop"), "cpu": {"ready": True, "state": {}},
                "odd": on("4"), "flag": on(True), "hidden": {"ready": True}},
        "bob": {"gpu": on(5)},
    }
    assert running_servers(servers) == [RunningServer("ada", "", 1), RunningServer("bob", "gpu", 5)]
    # the placement its pod was made for, kept by GPUBookingSpawner since 0.2.0
    made_for = {SERVER_STATE_BOOKING_KEY: 1, SERVER_STATE_PLACEMENT_KEY: {"node": "n2", "gpus": [0, 1]}}
    assert running_servers({"ada": {"": on(1, state=made_for)}}) == [
        RunningServer("ada", "", 1, "n2", (0, 1))]


@pytest.mark.parametrize(("held", "finding"), [
    # the lifecycle's own case: the booking is held by this server
    (booking(1, server=""), None),
    (booking(1), Finding.UNCLAIMED),
    # held by a server of ada's that stopped (not in the Hub's list), or runs a CPU profile
    (booking(1, server="old"), Finding.HOLDER_STOPPED),
    (booking(1, server="cpu"), Finding.HOLDER_STOPPED),
    # held by a server that runs, starts or stops on it, or by a pod of the webhook
    (booking(1, server="twin"), Finding.HELD_ELSEWHERE),
    (booking(1, server="starting"), Finding.HELD_ELSEWHERE),
    (booking(1, server="pod:lab/job-x"), Finding.HELD_ELSEWHERE),
    # the Hub does not say what the holder runs on: looked at again later
    (booking(1, server="unknown"), None),
    (booking(1, user="bob"), Finding.OTHER_USER),
    (booking(1, user="bob", server=""), Finding.OTHER_USER),
    (booking(1, status="cancelled"), Finding.NOT_ACTIVE),
    (booking(1, start=timedelta(hours=1), end=timedelta(hours=2)), Finding.NOT_ACTIVE),
    (booking(1, end=-GRACE - timedelta(seconds=1)), Finding.NOT_ACTIVE),
    # ended within the grace: the lifecycle's stop at the end comes first
    (booking(1, end=-GRACE + timedelta(seconds=1)), None),
    (None, Finding.GONE),
    # placed elsewhere than the server's pod (a restore gave back where it was before it
    # moved and started): its GPUs there count as free
    (booking(1, node="n2"), Finding.OTHER_PLACEMENT),
    (booking(1, gpus=(1,)), Finding.OTHER_PLACEMENT),
    (booking(1, node="n2", server="old"), Finding.OTHER_PLACEMENT),
    # held by it, yet placed elsewhere: its claim was recorded while the Hub checked it
    (booking(1, node="n2", server=""), Finding.OTHER_PLACEMENT),
    # ended: the lifecycle stops it
    (booking(1, node="n2", server="", end=-GRACE - timedelta(seconds=1)), None),
])
def test_what_is_wrong_with_a_running_servers_booking(held, finding):
    servers = {"ada": {
        "": on(1, state={SERVER_STATE_BOOKING_KEY: 1,
                         SERVER_STATE_PLACEMENT_KEY: {"node": "n1", "gpus": [0]}}),
        "twin": on(1),
        "starting": on(1, ready=False, pending="spawn"),
        "cpu": {"ready": True, "state": {}},
        "unknown": {"ready": True},
    }}
    expected = [] if finding is None else [("ada", "", finding)]
    # the other servers are the holders here; what is found about them is not this case's
    found = findings(servers, [held] if held else [])
    assert [row for row in found if row[1] == ""] == expected


def test_each_server_is_compared_with_its_own_booking():
    servers = {"ada": {"": on(1), "b": on(2)}, "bob": {"": on(3)}, "carol": {"": on(4)}}
    bookings = [booking(1, server=""), booking(2), booking(3, user="bob", status="cancelled")]
    assert findings(servers, bookings) == [
        ("ada", "b", Finding.UNCLAIMED),
        ("bob", "", Finding.NOT_ACTIVE),
        ("carol", "", Finding.GONE),
    ]
    assert [finding.stops for finding in Finding] == [
        False, False, True, True, True, True, True, False]


def test_a_server_the_hub_is_checking_gets_its_claim_but_is_not_stopped_yet():
    """Just started, the Hub checks that the servers it had still run (in the background past
    init_spawners_timeout): meanwhile its booking must not go to another claim."""
    checking = on(1, ready=False, pending="check")
    assert running_servers({"ada": {"": checking}}) == [
        RunningServer("ada", "", 1, checking=True)]
    assert findings({"ada": {"": checking}}, [booking(1)]) == [("ada", "", Finding.UNCLAIMED)]
    assert findings({"ada": {"": checking}}, [booking(1, server="old")]) == [
        ("ada", "", Finding.HOLDER_STOPPED)]
    assert findings({"ada": {"": checking}}, []) == []  # gone: stopped once it runs
    assert findings({"ada": {"": on(1)}}, []) == [("ada", "", Finding.GONE)]


def test_a_server_the_hub_is_checking_keeps_a_booking_placed_elsewhere_until_it_runs():
    """A start pending when the Hub stopped, then a restore giving its booking back unclaimed
    where it was before it moved (found by the PostgreSQL walk, seed 1): the pod runs on the
    booking while the Hub checks the server, so its claim is recorded (a start of another
    server would make a second pod on it); once the Hub has it running it is stopped."""
    made_for = {SERVER_STATE_BOOKING_KEY: 1, SERVER_STATE_PLACEMENT_KEY: {"node": "n1", "gpus": [0]}}
    checking = {"": on(1, ready=False, pending="check", state=made_for), "cpu": {"ready": True}}
    elsewhere = booking(1, node="n2")
    assert findings({"ada": checking}, [elsewhere]) == [("ada", "", Finding.CHECKING_ELSEWHERE)]
    # held by a server of ada's that stopped: taken over the same way
    assert findings({"ada": checking}, [booking(1, node="n2", server="old")]) == [
        ("ada", "", Finding.CHECKING_ELSEWHERE)]
    # held by one that runs on it, or by a pod: stopped once it runs, nothing recorded now
    held = {**checking, "twin": on(1)}
    assert findings({"ada": held}, [booking(1, node="n2", server="twin")]) == []
    assert findings({"ada": checking}, [booking(1, node="n2", server="pod:lab/job")]) == []
    # claim recorded, the Hub has it running now: stopped
    running = {"": on(1, state=made_for)}
    assert findings({"ada": running}, [booking(1, node="n2", server="")]) == [
        ("ada", "", Finding.OTHER_PLACEMENT)]
    assert Finding.CHECKING_ELSEWHERE.describe(RunningServer("ada", "", 1, "n1", (0,)),
                                               elsewhere, NOW) == (
        "booking 1 is placed on n2 GPU 0, the server's pod was made for n1 GPU 0; the Hub is "
        "still checking the server, which is stopped once it runs")


def test_the_log_says_why():
    server = RunningServer("ada", "", 7)
    assert Finding.GONE.describe(server, None, NOW) == (
        "booking 7 is not in the booking database (taken away by a restore, or a database set "
        "up anew)")
    cancelled = booking(7, status="cancelled")
    assert Finding.NOT_ACTIVE.describe(server, cancelled, NOW) == "booking 7 is cancelled"
    assert Finding.HOLDER_STOPPED.describe(server, booking(7, server="old"), NOW) == (
        "booking 7 was held by server 'old', which is stopped")
    assert Finding.OTHER_USER.describe(server, booking(7, user="bob"), NOW) == (
        "booking 7 is bob's")
    assert Finding.OTHER_PLACEMENT.describe(RunningServer("ada", "", 7, "n2", (0, 1)), booking(7),
                                            NOW) == (
        "booking 7 is placed on n1 GPU 0, the server's pod was made for n2 GPU 0,1")
