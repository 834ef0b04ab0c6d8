"""The soak's chooser check on forms rendered from the spawner's own template: what the service
says a user may start on is what the form must offer, and a form that offers otherwise fails."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from jinja2 import ChoiceLoader, Environment, PackageLoader
from soak_chooser import Offer, agrees, expected_offers, shown_offers

from jhub_gpubooking.chooser import chooser_profiles
from jhub_gpubooking.core.timegrid import format_time

NOW = datetime(2030, 1, 7, 10, 30, 20, tzinfo=timezone.utc)
POOLS = {"a100": {"name": "a100", "gpu_model": "A100", "slices_per_gpu": 4},
         "l4": {"name": "l4", "gpu_model": "L4", "slices_per_gpu": 1}}
PROFILES = [{"slug": "cpu", "display_name": "CPU"},
            {"slug": "a100", "display_name": "A100", "gpu_pool": "a100"},
            {"slug": "l4", "display_name": "L4", "gpu_pool": "l4"}]
NO_OPPORTUNISTIC = {"enabled": False, "pools": []}


def booking(id: int, pool: str = "a100", *, start: int = -30, end: int = 30,
            state: str = "active") -> dict:
    return {"id": id, "user": "u0", "pool": pool, "slices": 1, "server": None, "state": state,
            "start": format_time(NOW + timedelta(minutes=start)),
            "end": format_time(NOW + timedelta(minutes=end))}


def rendered(active: list[dict], opportunistic: dict = NO_OPPORTUNISTIC) -> str:
    """The chooser as the spawner renders it (its template, KubeSpawner's style sheet)."""
    environment = Environment(loader=ChoiceLoader([
        PackageLoader("jhub_gpubooking", "templates/spawner"),
        PackageLoader("kubespawner", "templates")]), autoescape=True)
    gpu = chooser_profiles(PROFILES, pools=POOLS, active=active, upcoming=[],
                           booking_page_url="/b/", now=NOW, opportunistic=opportunistic)
    return environment.get_template("form.html").render(
        profile_list=PROFILES, user_options={}, gpu=gpu, checked=None,
        booking_field_prefix="gpu-booking-")


def test_what_the_service_says_a_start_may_take():
    active = [booking(1), booking(2), booking(3, "l4", end=-1),  # 3 ended, still listed
              booking(4, "l4", start=5, end=60)]  # 4 starts later
    assert expected_offers(active, NO_OPPORTUNISTIC, ["a100", "l4"], NOW) == {
        "a100": Offer(True, frozenset({1, 2})), "l4": Offer(False, frozenset())}
    free_l4 = {"enabled": True, "pools": [{"pool": "l4", "available": True},
                                          {"pool": "a100", "available": False}]}
    assert expected_offers([], free_l4, ["a100", "l4"], NOW) == {
        "a100": Offer(False, frozenset()), "l4": Offer(True, frozenset())}


def test_the_rendered_form_offers_what_the_service_says():
    for active, opportunistic in (
        ([booking(1), booking(2)], NO_OPPORTUNISTIC),  # a choice between two
        ([booking(1), booking(5, "l4")], NO_OPPORTUNISTIC),  # one each
        ([], NO_OPPORTUNISTIC),  # nothing to start on
        ([], {"enabled": True, "pools": [{"pool": "l4", "available": True}]}),
    ):
        wanted = expected_offers(active, opportunistic, ["a100", "l4"], NOW)
        shown, notes = shown_offers(rendered(active, opportunistic), ["a100", "l4"])
        assert all(agrees(wanted[pool], shown[pool]) for pool in wanted), (wanted, shown)
    shown, notes = shown_offers(rendered([booking(1), booking(2)]), ["a100", "l4"])
    assert shown["a100"] == Offer(True, frozenset({1, 2}))
    assert notes == ["Start on which of your bookings?", "You have no active L4 booking right now."]


def test_a_form_that_offers_otherwise_fails_the_check():
    wanted = expected_offers([booking(1), booking(2)], NO_OPPORTUNISTIC, ["a100"], NOW)
    # a form that missed a booking (one shown by its share), or one that offers nothing
    for stale in ([booking(1)], []):
        shown, _notes = shown_offers(rendered(stale), ["a100"])
        assert not agrees(wanted["a100"], shown["a100"])
