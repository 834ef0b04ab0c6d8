"""The async service client: answers, refusals and outages become typed results."""

from __future__ import annotations

import pytest

from jhub_gpubooking.client import (
    RECONNECT_SECONDS,
    BookingClient,
    BookingRefused,
    BookingServiceStarting,
    BookingServiceUnavailable,
    BookingServiceUnreachable,
)


def client_for(url: str, token: str = "spawner-test-token") -> BookingClient:
    return BookingClient(url, token, request_timeout=1.0, connect_timeout=0.5)


async def test_reads_pools_and_bookings(booking_service, make_booking):
    booking_service.active = [make_booking(1), make_booking(2, user="bob")]
    booking_service.upcoming = [make_booking(3)]
    client = client_for(booking_service.url)
    assert [pool["name"] for pool in await client.pools()] == ["a100", "t4"]
    assert [b["id"] for b in await client.active_bookings("ada")] == [1]
    assert [b["id"] for b in await client.upcoming_bookings("ada")] == [3]
    assert booking_service.requests[-1][1] == (
        "/services/gpu-booking/api/bookings?user=ada&state=upcoming"
    )


async def test_user_names_are_escaped_in_paths(booking_service):
    await client_for(booking_service.url).active_bookings("ada/../admin")
    assert booking_service.requests[-1][1] == (
        "/services/gpu-booking/api/users/ada%2F..%2Fadmin/bookings/active"
    )


async def test_claim_conflict_is_a_refusal_with_the_service_message_and_details(
    booking_service, make_booking
):
    booking_service.active = [make_booking(5, server="other")]
    with pytest.raises(BookingRefused) as refused:
        await client_for(booking_service.url).claim_in_pool("a100", "ada", "", 5)
    assert refused.value.status == 409
    assert refused.value.message == "This booking is already in use by server 'other'."
    assert refused.value.details == {
        "status": 409, "message": "This booking is already in use by server 'other'.",
        "reason": "in_use", "pool": booking_service.pools[0], "server": "other",
    }
    assert booking_service.requests[-1][1:] == (
        "/services/gpu-booking/api/pools/a100/claim", {"user": "ada", "server": "", "booking": 5}
    )


async def test_server_error_means_unavailable(booking_service):
    booking_service.pools = None
    with pytest.raises(BookingServiceUnavailable, match="HTTP 500"):
        await client_for(booking_service.url).pools()


async def test_a_service_that_has_just_started_says_when_to_ask_again(booking_service):
    booking_service.active = []
    booking_service.starting = 1
    with pytest.raises(BookingServiceStarting) as starting:
        await client_for(booking_service.url).claim_in_pool("a100", "ada", "")
    assert starting.value.retry_after == 0.05
    # still an outage to whoever does not wait for it
    assert isinstance(starting.value, BookingServiceUnavailable)
    booking_service.starting, booking_service.starting_retry_after = 1, "soon"
    with pytest.raises(BookingServiceUnavailable) as unavailable:
        await client_for(booking_service.url).claim_in_pool("a100", "ada", "")
    assert type(unavailable.value) is BookingServiceUnavailable  # no usable Retry-After


async def test_closed_port_and_hanging_server_mean_unavailable(closed_port_url, hanging_url):
    for url in (closed_port_url, hanging_url):
        with pytest.raises(BookingServiceUnavailable):
            await BookingClient(url, "t", request_timeout=0.3, connect_timeout=0.3).pools()


async def test_each_outage_says_whether_asking_again_soon_may_help(
    booking_service, closed_port_url, hanging_url
):
    """``retry_after``: 1 s without an answer (nothing listens, or none in time), a 503's
    Retry-After (its database down), None for a server error."""
    with pytest.raises(BookingServiceUnreachable) as unreachable:
        await client_for(closed_port_url).pools()
    assert unreachable.value.retry_after == RECONNECT_SECONDS == 1.0
    assert "Connect call failed" in str(unreachable.value)
    booking_service.database_down = 1
    with pytest.raises(BookingServiceUnavailable) as database_down:
        await client_for(booking_service.url).claim_in_pool("a100", "ada", "")
    assert type(database_down.value) is BookingServiceUnavailable
    assert database_down.value.retry_after == 0.05
    with pytest.raises(BookingServiceUnreachable) as timed_out:
        await BookingClient(hanging_url, "t", request_timeout=0.3, connect_timeout=0.3).pools()
    assert timed_out.value.retry_after == RECONNECT_SECONDS
    # the log says what happened, also when the error's own text is empty
    assert str(timed_out.value).endswith(": TimeoutError"), str(timed_out.value)
    booking_service.pools = None  # a 500
    with pytest.raises(BookingServiceUnavailable) as server_error:
        await client_for(booking_service.url).pools()
    assert server_error.value.retry_after is None

