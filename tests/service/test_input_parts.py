"""Pure and in-process parts of the input hardening: option defaults, the Hub look-up's
answers when the Hub fails, and the list cursor."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hub_harness import free_port
from tornado import web
from tornado.httpserver import HTTPServer
from traitlets import TraitError

from jhub_gpubooking.core import ilp_solvers
from jhub_gpubooking.core.errors import PolicyViolation
from jhub_gpubooking.core.model import Booking
from jhub_gpubooking.core.policy import SAFE_DEFAULT_POLICY, Policy, check_booking
from jhub_gpubooking.service.api import decode_cursor, encode_cursor
from jhub_gpubooking.service.app import GPUBookingService
from jhub_gpubooking.service.base import RETRY_AFTER_SECONDS, hub_user_model
from jhub_gpubooking.service.pages import ReservationPage

NOW = datetime(2026, 11, 23, 9, 0, tzinfo=timezone.utc)


def test_the_auth_cache_default_is_at_most_30_seconds_and_reaches_huboauth(monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "secret")
    monkeypatch.setenv("JUPYTERHUB_CLIENT_ID", "service-gpu-booking")
    service = GPUBookingService()
    assert service.auth_cache_seconds <= 30
    assert service.make_hub_auth().cache_max_age == service.auth_cache_seconds
    service = GPUBookingService(auth_cache_seconds=3)
    assert service.make_hub_auth().cache_max_age == 3
    with pytest.raises(Exception, match="auth_cache_seconds must be from 0 to 300"):
        GPUBookingService(auth_cache_seconds=3600)


def test_the_exact_move_solver_is_checked_at_start(monkeypatch):
    assert GPUBookingService().exact_move_solver == "auto"
    assert GPUBookingService(exact_move_solver="highs").exact_move_solver == "highs"
    with pytest.raises(TraitError):
        GPUBookingService(exact_move_solver="gurobi")
    with pytest.raises(TraitError):
        GPUBookingService(exact_move_seconds=-1)
    # asked for by name without OR-Tools: the service does not start, and says what to install
    monkeypatch.setattr(ilp_solvers, "cpsat_installed", lambda: False)
    with pytest.raises(ValueError, match=r"pip install 'jhub-gpubooking\[cpsat\]'"):
        GPUBookingService(exact_move_solver="cpsat")
    assert GPUBookingService(exact_move_solver="auto").exact_move_solver == "auto"


def test_the_safe_default_policy_is_the_option_default_and_bounds_length_and_horizon():
    assert GPUBookingService().default_policy == SAFE_DEFAULT_POLICY
    policy = Policy.from_config(SAFE_DEFAULT_POLICY)
    start = NOW + timedelta(days=1)

    def booking(start, days):
        return Booking("ada", "a100", 1, start, start + timedelta(days=days))

    check_booking(policy, booking(start, 7), [], NOW)  # a week is fine
    with pytest.raises(PolicyViolation) as too_long:
        check_booking(policy, booking(start, 365 * 170), [], NOW)
    assert too_long.value.rule == "max_minutes"
    with pytest.raises(PolicyViolation) as too_far:
        check_booking(policy, booking(NOW + timedelta(days=91), 1), [], NOW)
    assert too_far.value.rule == "max_days_ahead"


def test_page_list_size_stays_within_the_api_page_maximum():
    assert ReservationPage().page_list_size == 100
    with pytest.raises(Exception, match="page_list_size must be from 1 to 500"):
        ReservationPage(page_list_size=501)


def test_a_cursor_round_trips_and_a_forged_one_is_refused():
    start = datetime(2026, 11, 23, 9, 0, 0, 123456, tzinfo=timezone.utc)
    assert decode_cursor(encode_cursor(start, 42)) == (start, 42)
    for forged in ("", "x", encode_cursor(start, 42)[:-3], "MjAyNnw0Mg==",
                   # a naive time, an id beyond any row, a time that overflows in UTC
                   "MjAyNi0xMS0yM1QwOTowMDowMHw0Mg==",
                   encode_cursor(start, 2**31), "OTk5OS0xMi0zMVQyMzo1OTowMC0yMzo1OXwx"):
        with pytest.raises(web.HTTPError) as refused:
            decode_cursor(forged)
        assert refused.value.status_code == 400


class FailingHub(web.RequestHandler):
    def get(self, user):
        if user == "gone":
            raise web.HTTPError(404)
        if user == "bad name":
            raise web.HTTPError(400)
        if user == "ada":
            self.finish({"name": "ada", "groups": ["students"]})
            return
        if user == "someone-else":
            self.finish({"name": "ada", "groups": ["students"]})
            return
        raise web.HTTPError(500)


async def test_hub_failures_are_503_with_retry_after_and_unknown_users_none():
    port = free_port()
    server = HTTPServer(web.Application([(r"/hub/api/users/([^/]+)", FailingHub)]))
    server.listen(port, "127.0.0.1")
    api_url = f"http://127.0.0.1:{port}/hub/api"
    try:
        assert (await hub_user_model(api_url, "t", "ada"))["groups"] == ["students"]
        assert await hub_user_model(api_url, "t", "gone") is None
        assert await hub_user_model(api_url, "t", "bad name") is None
        # an answer about anyone else, or a path outside the user's, is no such user
        assert await hub_user_model(api_url, "t", "someone-else") is None
        assert await hub_user_model(api_url, "t", ".") is None
        assert await hub_user_model(api_url, "t", "..") is None
        with pytest.raises(web.HTTPError) as failed:
            await hub_user_model(api_url, "t", "crash")
        assert failed.value.status_code == 503
        assert failed.value.retry_after == RETRY_AFTER_SECONDS
        assert "answered 500" in failed.value.args[0]
    finally:
        server.stop()
    with pytest.raises(web.HTTPError) as unreachable:
        await hub_user_model(f"http://127.0.0.1:{free_port()}/hub/api", "t", "ada")
    assert unreachable.value.status_code == 503
    assert "could not be reached" in unreachable.value.args[0]


def test_a_user_name_with_newlines_still_gives_a_valid_calendar():
    # found by schemathesis: an admin may ask for any user's calendar, e.g. "\ncõ"
    from icalendar import Calendar

    from jhub_gpubooking.service.feeds import bookings_calendar

    calendar = Calendar.from_ical(bookings_calendar("\ncõ\r\tx", [], {}, "gpu-booking", datetime.now(timezone.utc)))
    assert str(calendar["x-wr-calname"]) == "GPU bookings of cõ x"
