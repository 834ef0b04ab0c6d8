"""The waitlist component in the service, with a ManualClock: the lifecycle tick books a wait
once a no-show release frees its GPUs, e-mails the user and shows a notice; the JSON validates
against openapi.yaml."""

from __future__ import annotations

from test_lifecycle_service import (  # noqa: F401  (fake_hub, mailbox and service are fixtures)
    at,
    fake_hub,
    mailbox,
    service,
)
from test_service_wire_openapi import validator

from jhub_gpubooking.core.waitlist import WaitState, wait_to_json
from jhub_gpubooking.service.waitlist import wait_notices


async def test_a_no_show_release_books_the_wait_mails_and_notices(service, mailbox):
    box, _ = mailbox
    store, waitlist = service.store, service.waitlist
    service.store.create("bob", "a100", "2", at(10), at(12))  # nobody will use it
    wait = waitlist.waits.join("cy", "a100", 1, at(10, 30), at(11, 30),
                               window_end=at(12), priority=waitlist.priority_for(()))
    assert await waitlist.capacity_freed(["a100"]) == []  # still full
    await service.lifecycle.tick(at(10, 20))  # bob's booking released at 10:30 (no-show)
    booked = waitlist.waits.get(wait.id)
    assert booked.state is WaitState.BOOKED
    booking = store.get(booked.booking_id)
    assert (booking.user, booking.start, booking.end) == ("cy", at(10, 30), at(11, 30))
    [mail] = box.messages
    assert (mail["To"], mail["Subject"]) == (
        "cy@lab.example", "Your wait was booked: GPUs from 2030-01-07 10:30 UTC",
    )
    assert f"booking #{booking.id}" in mail.get_payload(decode=True).decode()
    [notice] = wait_notices([booked])
    assert notice["kind"] == "wait_booked" and notice["booking_id"] == booking.id
    assert validator("Notice").is_valid(notice)
    assert validator("Wait").is_valid(wait_to_json(booked))


async def test_the_tick_expires_waits_and_priorities_come_from_groups(service):
    waitlist = service.waitlist
    waitlist.group_priorities = {"staff": 2, "students": 1}
    assert waitlist.priority_for(["students", "staff"]) == 2
    assert waitlist.priority_for(["guests"]) == 0
    service.store.add_maintenance("a100", at(10), at(13), reason="driver upgrade")
    wait = waitlist.waits.join("cy", "a100", 1, at(11), at(12))
    await service.lifecycle.tick(at(11, 14))
    assert waitlist.waits.get(wait.id).state is WaitState.WAITING
    await service.lifecycle.tick(at(11, 15))
    expired = waitlist.waits.get(wait.id)
    assert expired.state is WaitState.EXPIRED
    [notice] = wait_notices([expired])
    assert notice["kind"] == "wait_expired" and validator("Notice").is_valid(notice)


async def test_a_failure_while_serving_never_fails_the_change_that_freed_capacity(service, caplog):
    def broken(*args):
        raise RuntimeError("disk on fire")

    service.waitlist.waits.serve = broken
    assert await service.waitlist.capacity_freed(["a100"]) == []
    assert "Serving the waitlist failed" in caplog.text


async def test_the_tick_lets_a_wait_search_longer_a_users_change_does_not(service):
    """The longer search (up to exact_move_retry_seconds) runs on the lifecycle tick, never
    inside the request of a user whose cancel or shortened booking freed the capacity."""
    asked = []

    def serve(pools, now, search_longer):
        asked.append((pools, search_longer))
        return []

    service.waitlist.waits.serve = serve
    await service.waitlist.capacity_freed(["a100"])  # as the cancel and PATCH handlers call it
    await service.lifecycle.tick(at(10, 20))
    assert asked == [(["a100"], False), (None, True)]
