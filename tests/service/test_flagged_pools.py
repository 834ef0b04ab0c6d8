"""Bookings an edit of the configured pools left without GPUs: the service flags them when it
starts (a pool removed, a node taken out or given fewer GPUs), takes the flags off when the
pools hold them again, and its user's notices say so; the notice validates against
openapi.yaml."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from test_service_wire_openapi import validator

from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.core.model import Booking
from jhub_gpubooking.db.flags import Flag
from jhub_gpubooking.service.app import GPUBookingService
from jhub_gpubooking.service.flagged import flagged_notices

NOW = datetime(2030, 1, 7, 10, 5, tzinfo=timezone.utc)
A100 = {"name": "a100", "nodes": {"node-a": 2, "node-b": 4}}
T4 = {"name": "t4", "nodes": {"node-c": 2}, "slices_per_gpu": 4, "backend": "hami", "gpu_memory_mib": 15360}


def at(hour: int) -> datetime:
    return NOW.replace(hour=hour, minute=0)


def started(db_url: str, pools: list[dict]) -> GPUBookingService:
    """The service as it is after its start with these pools (set up, not serving)."""
    service = GPUBookingService(db_url=db_url, upgrade_db=True, pools=pools, clock=ManualClock(NOW),
                                hub_api_url="http://127.0.0.1:9/hub/api", api_token="t")
    service.setup()
    service.executor.shutdown(wait=True)  # its database work runs in the test's thread here
    return service


def test_an_edit_of_the_pools_flags_what_it_left_without_gpus_and_undoing_it_unflags(tmp_path):
    db_url = f"sqlite:///{tmp_path / 'bookings.sqlite'}"
    store = started(db_url, [A100, T4]).store
    in_t4 = store.create("ada", "t4", "1/4", at(12), at(13))
    on_node_b = store.create("bob", "a100", 4, at(10), at(12))  # active: node-b's GPUs 0-3
    on_node_a = store.create("cy", "a100", 2, at(12), at(13))
    cancelled = store.cancel(store.create("dee", "t4", 1, at(12), at(13)).id, "dee")  # not flagged
    assert on_node_b.placement.node == "node-b" and on_node_a.placement.node == "node-a"

    # t4 removed, node-b down to 2 GPUs
    shrunk = started(db_url, [{**A100, "nodes": {"node-a": 2, "node-b": 2}}])
    assert {booking_id: flag.message for booking_id, flag in shrunk.booking_flags.current().items()} == {
        in_t4.id: f"GPU pool t4 no longer exists, so booking {in_t4.id} cannot be used.",
        on_node_b.id: f"Node node-b of pool a100 now reports 2 GPU(s) and booking {on_node_b.id} "
        "holds GPU 3 there, so it cannot be used.",
    }
    assert [e.kind for e in shrunk.store.history(in_t4.id)][-1] == "flagged"
    # a start with the same pools again adds nothing to the history
    again = started(db_url, [{**A100, "nodes": {"node-a": 2, "node-b": 2}}])
    assert [e.kind for e in again.store.history(in_t4.id)].count("flagged") == 1
    assert again.booking_flags.current([on_node_a.id, cancelled.id]) == {}

    restored = started(db_url, [A100, T4])
    assert restored.booking_flags.current() == {}
    assert [e.kind for e in restored.store.history(on_node_b.id)][-2:] == ["flagged", "unflagged"]


def test_a_flagged_booking_not_over_yet_is_a_notice_of_its_user():
    flagged_at = NOW - timedelta(minutes=3)
    upcoming = Booking("ada", "t4", 1, at(12), at(13), id=7)
    over = Booking("ada", "t4", 1, at(8), at(9), id=8)
    cancelled = Booking("ada", "t4", 1, at(14), at(15), id=9, status="cancelled")
    unflagged = Booking("ada", "a100", 1, at(12), at(13), id=10)
    flags = {
        n: Flag(n, f"GPU pool t4 no longer exists, so booking {n} cannot be used.", flagged_at)
        for n in (7, 8, 9)
    }

    notices = flagged_notices([upcoming, over, cancelled, unflagged], flags, NOW)

    assert notices == [
        {
            "kind": "flagged",
            "booking_id": 7,
            "at": "2030-01-07T10:02:00Z",
            "message": "GPU pool t4 no longer exists, so booking 7 cannot be used. It stays "
            "booked in case its GPUs come back; end or cancel it to book other GPUs instead.",
        }
    ]
    assert validator("Notice").is_valid(notices[0])
