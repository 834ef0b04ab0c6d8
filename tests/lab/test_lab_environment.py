"""The variables of a booked server's JupyterLab: written by the Hub, read by the server."""

from __future__ import annotations

from jhub_gpubooking.lab.environment import LabSettings, lab_environment


def test_the_builder_writes_every_variable_as_text():
    assert lab_environment("http://hub:10101/services/gpu-booking/", "/services/gpu-booking/",
                           [10, 2], 30) == {
        "GPU_BOOKING_SERVICE_URL": "http://hub:10101/services/gpu-booking/",
        "GPU_BOOKING_PAGE_URL": "/services/gpu-booking/",
        "GPU_BOOKING_WARN_MINUTES": "10,2",
        "GPU_BOOKING_POLL_SECONDS": "30",
    }
    assert lab_environment("u", "p", [5], 2.5)["GPU_BOOKING_POLL_SECONDS"] == "2.5"


def test_what_the_builder_writes_reads_back_with_the_booking():
    environ = {
        **lab_environment("http://svc/services/gpu-booking", "/services/gpu-booking/", [2, 10], 3),
        "GPU_BOOKING_ID": "11",
        "GPU_BOOKING_END": "2030-01-07T12:00:00Z",
        "GPU_BOOKING_POOL": "a100",
        "GPU_BOOKING_GPUS": "0.25",
    }
    assert LabSettings.from_environ(environ) == LabSettings(
        booking_id=11,
        end="2030-01-07T12:00:00Z",
        pool="a100",
        gpus="0.25",
        service_url="http://svc/services/gpu-booking/",  # the prefix's slash is added
        page_url="/services/gpu-booking/",
        warn_minutes=(10, 2),  # latest warning first
        poll_seconds=3.0,
    )


def test_a_server_without_a_booking_reads_as_not_booked():
    assert LabSettings.from_environ({}) == LabSettings(booking_id=None)
    assert LabSettings.from_environ({"GPU_BOOKING_ID": "eleven"}).booking_id is None


def test_malformed_warnings_and_poll_fall_back_to_the_defaults():
    for warn, poll in (("soon", "often"), ("0,-5", "0"), ("", "")):
        settings = LabSettings.from_environ(
            {"GPU_BOOKING_ID": "1", "GPU_BOOKING_WARN_MINUTES": warn,
             "GPU_BOOKING_POLL_SECONDS": poll}
        )
        assert (settings.warn_minutes, settings.poll_seconds) == ((10, 2), 30.0)
