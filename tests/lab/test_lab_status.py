"""The status JSON of the contract with the labextension, built from the service's answer."""

from __future__ import annotations

from datetime import datetime, timezone
from fractions import Fraction

from jhub_gpubooking.lab.environment import LabSettings
from jhub_gpubooking.lab.status import (
    UNAVAILABLE_MESSAGE,
    booked_status,
    short_gpu_name,
    short_share,
    unavailable_status,
)

SETTINGS = LabSettings(
    booking_id=11, end="2030-01-07T12:00:00Z", pool="a100", gpus="0.25",
    service_url="http://svc/services/gpu-booking/", page_url="/services/gpu-booking/",
    warn_minutes=(10, 2), poll_seconds=30.0,
)
POOL = {"name": "a100", "gpu_model": "A100", "slices_per_gpu": 4}


def extension_answer(**booking) -> dict:
    """The service's GET api/bookings/11/extension (only the fields the status reads)."""
    return {
        "booking": {"id": 11, "user": "ada", "pool": "a100", "slices": 1, "state": "active",
                    "start": "2030-01-07T10:00:00Z", "end": "2030-01-07T12:30:00Z",
                    "release_reason": None, **booking},
        "minutes": 45,
        "max_end": "2030-01-07T13:15:00Z",
        "reason": None,
        "now": "2030-01-07T12:20:00Z",
    }


def test_an_active_booking_counts_down_by_the_service_clock():
    assert booked_status(SETTINGS, extension_answer(), POOL) == {
        "booked": True,
        "service": "ok",
        "message": None,
        "booking": {"id": 11, "pool": "a100", "state": "active",
                    "start": "2030-01-07T10:00:00Z", "end": "2030-01-07T12:30:00Z"},
        "share": "¼ A100",
        "now": "2030-01-07T12:20:00Z",
        "seconds_left": 600.0,  # the end moved by an extension elsewhere: the service knows
        "warn_minutes": [10, 2],
        "poll_seconds": 30.0,
        "extension": {"minutes": 45, "max_end": "2030-01-07T13:15:00Z", "reason": None},
        "bookings_url": "/services/gpu-booking/",
    }


def test_an_ended_booking_says_why_the_server_stops():
    for booking, words in (
        ({"state": "ended", "end": "2030-01-07T12:10:00Z", "release_reason": "ended"},
         "ended early (\"End now\")"),
        ({"state": "ended", "end": "2030-01-07T12:00:00Z"}, "booking has ended"),
        ({"state": "cancelled"}, "was cancelled"),
        ({"state": "ended", "release_reason": "preempted"}, "taken back"),
    ):
        status = booked_status(SETTINGS, extension_answer(**booking), POOL)
        assert words in status["message"] and "server is being stopped" in status["message"]
        assert status["seconds_left"] == 0.0
        assert status["booking"]["state"] == booking["state"]


def test_no_extension_carries_the_services_reason():
    answer = {**extension_answer(), "minutes": 0, "max_end": None,
              "reason": "Bookings can be at most 2 hours long; this one is 2 hours 15 minutes."}
    assert booked_status(SETTINGS, answer, POOL)["extension"] == {
        "minutes": 0, "max_end": None,
        "reason": "Bookings can be at most 2 hours long; this one is 2 hours 15 minutes.",
    }


def test_a_pool_the_service_does_not_list_is_named_as_the_environment_says():
    assert booked_status(SETTINGS, extension_answer(), None)["share"] == "¼ a100"


def test_unavailable_keeps_the_booking_from_the_environment():
    now = datetime(2030, 1, 7, 11, 50, tzinfo=timezone.utc)
    assert unavailable_status(SETTINGS, now, UNAVAILABLE_MESSAGE) == {
        "booked": True,
        "service": "unavailable",
        "message": UNAVAILABLE_MESSAGE,
        "booking": {"id": 11, "pool": "a100", "state": "active", "start": None,
                    "end": "2030-01-07T12:00:00Z"},
        "share": "¼ a100",
        "now": "2030-01-07T11:50:00Z",
        "seconds_left": 600.0,
        "warn_minutes": [10, 2],
        "poll_seconds": 30.0,
        "extension": {"minutes": 0, "max_end": None, "reason": UNAVAILABLE_MESSAGE},
        "bookings_url": "/services/gpu-booking/",
    }
    later = datetime(2030, 1, 7, 12, 5, tzinfo=timezone.utc)
    past_end = unavailable_status(SETTINGS, later, UNAVAILABLE_MESSAGE)
    assert (past_end["seconds_left"], past_end["booking"]["state"]) == (0.0, "ended")


def test_the_share_is_short_enough_for_a_status_bar():
    names = {model: short_gpu_name({"name": "pool", "gpu_model": model})
             for model in ("NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3", "Tesla T4",
                           "NVIDIA L40S", "A100")}
    assert names == {"NVIDIA A100-SXM4-40GB": "A100", "NVIDIA H100 80GB HBM3": "H100",
                     "Tesla T4": "T4", "NVIDIA L40S": "L40S", "A100": "A100"}
    assert short_gpu_name({"name": "t4", "display_name": "T4 16GB"}) == "T4 16GB"
    shares = [short_share(Fraction(n, d), "A100") for n, d in ((1, 4), (1, 2), (3, 4), (1, 1),
                                                                (2, 1), (1, 5))]
    assert shares == ["¼ A100", "½ A100", "¾ A100", "1 A100", "2 × A100", "0.2 A100"]
