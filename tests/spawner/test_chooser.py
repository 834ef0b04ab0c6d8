"""The server chooser: pure builders by dict equality, then the rendered HTML."""

from __future__ import annotations

import asyncio
import logging
import socket
from datetime import datetime, timedelta, timezone
from importlib.metadata import entry_points

import pytest
from bs4 import BeautifulSoup
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from jhub_gpubooking.chooser import SERVICE_NOT_ANSWERING_NOTE
from jhub_gpubooking.core.choice import claim_order
from jhub_gpubooking.spawner import (
    SERVICE_UNAVAILABLE_MESSAGE,
    GPUBookingSpawner,
    checked_profile,
    chooser_profiles,
)

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)
POOLS = {
    "a100": {"name": "a100", "display_name": "A100 80 GB", "gpu_model": "A100", "slices_per_gpu": 4},
    "t4": {"name": "t4", "display_name": "T4 pool", "gpu_model": "", "slices_per_gpu": 1},
}
PROFILES = [
    {"slug": "cpu", "display_name": "CPU"},
    {"slug": "a100", "display_name": "A100", "gpu_pool": "a100", "default": True},
    {"slug": "t4", "display_name": "T4", "gpu_pool": "t4"},
    {"slug": "h100", "display_name": "H100", "gpu_pool": "h100"},
]


def test_chooser_profiles_describe_each_gpu_profile(make_booking):
    active = [
        make_booking(1, start=NOW - timedelta(hours=1), end=NOW + timedelta(hours=6), now=NOW),
        # ended: the service's list lags behind, the chooser does not offer it
        {**make_booking(2, pool="t4", slices=1, start=NOW - timedelta(hours=2), end=NOW), "state": "active"},
    ]
    upcoming = [
        make_booking(3, pool="t4", slices=2, slices_per_gpu=1,
                     start=NOW + timedelta(days=1), end=NOW + timedelta(days=1, hours=2), now=NOW),
        make_booking(4, pool="t4", slices=1, slices_per_gpu=1,
                     start=NOW + timedelta(hours=3), end=NOW + timedelta(hours=4), now=NOW),
    ]
    shown = chooser_profiles(
        PROFILES, pools=POOLS, active=active, upcoming=upcoming,
        booking_page_url="/lab/services/gpu-booking/", now=NOW,
    )
    assert shown == {
        "a100": {
            "pool": "a100",
            "label": "A100",
            "enabled": True,
            "booking": {"share": "0.5 × A100", "end": "2026-03-02T18:00:00Z"},
            "choices": [],
            "upcoming": None,
            "note": "",
            "booking_page_url": "/lab/services/gpu-booking/",
        },
        "t4": {
            "pool": "t4",
            "label": "T4 pool",
            "enabled": False,
            "booking": None,
            "choices": [],
            "upcoming": {"share": "1 × T4 pool", "start": "2026-03-02T15:00:00Z"},
            "note": "You have no active T4 pool booking right now.",
            "booking_page_url": "/lab/services/gpu-booking/",
        },
        "h100": {
            "pool": "h100",
            "label": "h100",
            "enabled": False,
            "booking": None,
            "choices": [],
            "upcoming": None,
            "note": "The GPU pool 'h100' is not offered by the booking service.",
            "booking_page_url": "/lab/services/gpu-booking/",
        },
    }


def test_chooser_profiles_when_the_service_is_down():
    shown = chooser_profiles(
        PROFILES, pools=None, active=[], upcoming=[], booking_page_url="/b/", now=NOW
    )
    assert set(shown) == {"a100", "t4", "h100"}
    assert shown["a100"] == {
        "pool": "a100",
        "label": "a100",
        "enabled": False,
        "booking": None,
        "choices": [],
        "upcoming": None,
        "note": SERVICE_UNAVAILABLE_MESSAGE,
        "booking_page_url": "/b/",
    }


def test_chooser_profiles_offer_gpu_profiles_while_a_start_would_wait_for_the_service():
    shown = chooser_profiles(
        PROFILES, pools=None, active=[], upcoming=[], booking_page_url="/b/", now=NOW,
        start_waits=True,
    )
    assert set(shown) == {"a100", "t4", "h100"}
    assert shown["a100"] == {
        "pool": "a100",
        "label": "a100",
        "enabled": True,
        "booking": None,
        "choices": [],
        "upcoming": None,
        "note": SERVICE_NOT_ANSWERING_NOTE,
        "booking_page_url": "/b/",
    }


@pytest.mark.parametrize(
    "enabled, saved, expected",
    [
        ({"a100"}, None, "a100"),  # the default profile
        ({"a100", "t4"}, "t4", "t4"),  # the saved choice wins
        (set(), "t4", "cpu"),  # nothing startable is pre-selected
        (set(), None, "cpu"),
    ],
)
def test_checked_profile_only_preselects_startable_profiles(enabled, saved, expected):
    gpu = {slug: {"enabled": slug in enabled} for slug in ("a100", "t4", "h100")}
    assert checked_profile(PROFILES, gpu, saved) == expected


def radio(page: BeautifulSoup, slug: str):
    return page.find("input", {"name": "profile", "value": slug})


def card(page: BeautifulSoup, slug: str):
    return page.find("label", {"for": f"profile-item-{slug}"})


async def test_rendered_chooser_shows_bookings_and_links(make_spawner, booking_service, make_booking):
    now = datetime.now(timezone.utc).replace(microsecond=0)
    booking_service.active = [make_booking(1, end=now + timedelta(hours=3))]
    booking_service.upcoming = [
        make_booking(2, pool="t4", slices=1, slices_per_gpu=1, node="t4-node", gpus=(0,),
                     start=now + timedelta(days=1), end=now + timedelta(days=1, hours=1))
    ]
    spawner = await make_spawner({"profile": "a100", "image": "tf"})
    page = BeautifulSoup(await spawner.get_options_form(), "html.parser")

    # CPU profile exactly as KubeSpawner would show it
    assert not radio(page, "cpu").has_attr("disabled")
    assert card(page, "cpu").find(class_="gpu-booking") is None
    assert card(page, "cpu").h3.get_text() == "Small CPU"

    # booked GPU profile: enabled, pre-selected, share and end in UTC for the script
    assert not radio(page, "a100").has_attr("disabled")
    assert radio(page, "a100").has_attr("checked")
    line = card(page, "a100").find(class_="gpu-booking")
    assert line.find(class_="gpu-booking-share").get_text() == "0.5 × A100"
    assert line.time["datetime"] == booking_service.active[0]["end"]
    assert line.time["datetime"].endswith("Z")
    assert "js-local-time" in line.time["class"]
    select = card(page, "a100").find("select")
    assert select["name"] == "profile-option-a100--image"
    assert [o["value"] for o in select.find_all("option")] == ["torch", "tf"]
    assert not select.has_attr("disabled")

    # unbooked GPU profile: disabled, a note, the reservation page, the next booking
    assert radio(page, "t4").has_attr("disabled")
    line = card(page, "t4").find(class_="gpu-booking")
    assert line.find(class_="gpu-booking-note").get_text() == "You have no active T4 booking right now."
    assert line.find("a")["href"] == "/lab/services/gpu-booking/"
    assert "Next: 1 × T4 from" in line.get_text()
    assert line.time["datetime"] == booking_service.upcoming[0]["start"]

    # the localising script is there, and only one radio is checked
    assert "toLocaleString" in page.find("script").string
    assert [r["value"] for r in page.find_all("input", checked=True)] == ["a100"]
    paths = [path.split("?")[0] for _, path, _ in booking_service.requests]
    assert sorted(paths) == [
        "/services/gpu-booking/api/bookings",
        "/services/gpu-booking/api/pools",
        "/services/gpu-booking/api/users/ada/bookings/active",
    ]


async def test_rendered_chooser_with_the_service_down(make_spawner, closed_port_url):
    """GPU starts would not wait (retry time 0): GPU profiles are disabled."""
    spawner = await make_spawner({"profile": "a100"}, api_url=closed_port_url,
                                 booking_request_retry_timeout=0)
    page = BeautifulSoup(await spawner.get_options_form(), "html.parser")
    for slug in ("a100", "t4"):
        assert radio(page, slug).has_attr("disabled")
        note = card(page, slug).find(class_="gpu-booking-note").get_text()
        assert note == SERVICE_UNAVAILABLE_MESSAGE
    assert card(page, "a100").find("select").has_attr("disabled")
    # the saved GPU choice cannot start, so the CPU profile is pre-selected
    assert [r["value"] for r in page.find_all("input", checked=True)] == ["cpu"]


async def test_rendered_chooser_waits_briefly_then_offers_gpu_starts_that_will_wait(
    make_spawner, closed_port_url, caplog
):
    """Nothing listens (the service is being restarted): the chooser asks again for
    booking_chooser_retry_timeout, then lets the user start, since the start waits too."""
    spawner = await make_spawner({"profile": "a100"}, api_url=closed_port_url,
                                 booking_chooser_retry_timeout=1.5)
    with caplog.at_level(logging.INFO):
        page = BeautifulSoup(await spawner.get_options_form(), "html.parser")
    for slug in ("a100", "t4"):
        assert not radio(page, slug).has_attr("disabled")
        note = card(page, slug).find(class_="gpu-booking-note").get_text()
        assert note == SERVICE_NOT_ANSWERING_NOTE
    assert not card(page, "a100").find("select").has_attr("disabled")
    # the saved choice can start again
    assert [r["value"] for r in page.find_all("input", checked=True)] == ["a100"]
    waits = [r.getMessage() for r in caplog.records if "waits 1 s for the booking service" in r.getMessage()]
    assert len(waits) == 1 and waits[0].startswith("Chooser for ada waits 1 s")


async def test_rendered_chooser_shows_bookings_of_a_service_that_begins_to_listen(
    make_spawner, booking_service, make_booking
):
    booking_service.active = [make_booking(1)]
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens on port until the "restarted" service does
    spawner = await make_spawner(api_url=f"http://127.0.0.1:{port}/services/gpu-booking/")
    form = asyncio.ensure_future(spawner.get_options_form())
    await asyncio.sleep(1.2)  # the first attempt was refused, the second too
    server = HTTPServer(booking_service.application())
    server.add_sockets(bind_sockets(port, "127.0.0.1"))
    try:
        page = BeautifulSoup(await form, "html.parser")
    finally:
        server.stop()
        await server.close_all_connections()
    assert not radio(page, "a100").has_attr("disabled")
    assert card(page, "a100").find(class_="gpu-booking-share").get_text() == "0.5 × A100"
    assert radio(page, "t4").has_attr("disabled")


async def test_rendered_chooser_does_not_wait_for_a_refused_token(make_spawner, booking_service):
    """A refused read is an operator problem waiting will not mend: disabled at once."""
    spawner = await make_spawner(booking_api_token="wrong")
    page = BeautifulSoup(await spawner.get_options_form(), "html.parser")
    assert radio(page, "a100").has_attr("disabled")
    assert card(page, "a100").find(class_="gpu-booking-note").get_text() == SERVICE_UNAVAILABLE_MESSAGE
    assert [path.split("?")[0] for _method, path, _body in booking_service.requests].count(
        "/services/gpu-booking/api/pools") == 1


async def test_chooser_without_gpu_profiles_does_not_call_the_service(
    make_spawner, booking_service
):
    spawner = await make_spawner(profile_list=[{"display_name": "CPU only", "slug": "cpu"}])
    page = BeautifulSoup(await spawner.get_options_form(), "html.parser")
    assert radio(page, "cpu").has_attr("checked")
    assert booking_service.requests == []


async def test_admin_template_and_page_url_are_honoured(make_spawner, booking_service):
    spawner = await make_spawner(
        profile_form_template=(
            "{% for p in profile_list %}{{ p.slug }}={{ gpu.get(p.slug, {}).enabled }};{% endfor %}"
        ),
        booking_page_url="https://book.example.org/",
    )
    assert await spawner.get_options_form() == "cpu=;a100=False;t4=False;"
    assert spawner.booking_page_url == "https://book.example.org/"


async def test_empty_profile_list_means_no_form(make_spawner):
    assert (await make_spawner(profile_list=[])).options_form == ""


@pytest.mark.parametrize(
    "traits, expected",
    [
        ({}, "/lab/services/gpu-booking/"),
        ({"booking_service_name": "reserve"}, "/lab/services/reserve/"),
    ],
)
async def test_booking_page_follows_the_hub_base_url(make_spawner, traits, expected):
    spawner = await make_spawner(**traits)
    assert spawner.hub.base_url == "/lab/hub/"
    assert spawner.booking_page_url == expected


def test_entry_point_resolves():
    (entry,) = [e for e in entry_points(group="jupyterhub.spawners") if e.name == "gpubooking"]
    assert entry.load() is GPUBookingSpawner


def test_every_own_option_has_help():
    own = set(GPUBookingSpawner.class_own_traits(config=True))
    assert own == {
        "booking_api_url", "booking_api_token", "booking_page_url", "booking_service_name",
        "booking_request_timeout", "booking_connect_timeout", "booking_request_retry_timeout",
        "booking_chooser_retry_timeout",
        "pod_deadline_seconds",
        "booked_priority_class_name", "opportunistic_priority_class_name", "gpu_backends",
    }
    for name in own:
        assert len(GPUBookingSpawner.class_traits()[name].help.split()) >= 5, name


async def test_chooser_without_upcoming_bookings_still_shows_active_ones(
    make_spawner, booking_service, make_booking
):
    booking_service.active = [make_booking(1)]
    booking_service.upcoming = None  # the service refuses the list to the spawner
    page = BeautifulSoup(await (await make_spawner()).get_options_form(), "html.parser")
    assert not radio(page, "a100").has_attr("disabled")
    assert card(page, "a100").find(class_="gpu-booking-share").get_text() == "0.5 × A100"
    t4_line = card(page, "t4").find(class_="gpu-booking")
    assert radio(page, "t4").has_attr("disabled")
    assert "Next:" not in t4_line.get_text()
    assert t4_line.find("a")["href"] == "/lab/services/gpu-booking/"


def test_several_active_bookings_are_offered_longest_then_largest_first(make_booking):
    short = make_booking(1, start=NOW - timedelta(hours=1), end=NOW + timedelta(hours=1), now=NOW)
    long_small = make_booking(2, slices=1, end=NOW + timedelta(hours=3), now=NOW)
    long_large = make_booking(3, slices=2, end=NOW + timedelta(hours=3), now=NOW)
    elsewhere = make_booking(4, end=NOW + timedelta(hours=5), server="other", now=NOW)
    active = [short, long_small, long_large, elsewhere]
    assert [b["id"] for b in claim_order(active, "")] == [3, 2, 1, 4]
    assert [b["id"] for b in claim_order(active, "other")] == [4, 3, 2, 1]
    assert [b["id"] for b in claim_order(active, "", chosen=1)] == [1]
    # a choice that is no longer active (a saved option): the default order
    assert [b["id"] for b in claim_order(active, "", chosen=99)] == [3, 2, 1, 4]

    shown = chooser_profiles(
        PROFILES, pools=POOLS, active=active, upcoming=[],
        booking_page_url="/lab/services/gpu-booking/", now=NOW,
    )["a100"]
    assert shown["booking"] == {"share": "0.5 × A100", "end": long_large["end"]}
    assert [(c["id"], c["share"], c["server"]) for c in shown["choices"]] == [
        (3, "0.5 × A100", None), (2, "0.25 × A100", None), (1, "0.5 × A100", None),
        (4, "0.5 × A100", "other"),
    ]
