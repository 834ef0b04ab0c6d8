"""Seeded random walks of a student's and an admin's actions on the reservation page, checked
against the API after every step (see page_walk.py, page_walk_admin.py). ``PAGE_WALK_SEED``
runs that one seed instead of 1-3; ``PAGE_WALK_ACTIONS`` (80) sets the steps of each walk.
Each walk has a Hub of its own, so the tables hold only its bookings (one page of them)."""

from __future__ import annotations

import os

import pytest
from page_browser import open_page, start_page_hub
from page_walk import STUDENT, StudentWalk
from page_walk_admin import ADMIN, AdminWalk

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

# seed 1 runs in both dependency sets, seeds 2 and 3 one each (pytest.mark.one_set, tests/one_set.py)
SEEDS = [int(os.environ["PAGE_WALK_SEED"])] if "PAGE_WALK_SEED" in os.environ else [
    1, pytest.param(2, marks=pytest.mark.one_set("pins")), pytest.param(3, marks=pytest.mark.one_set("latest"))]
ACTIONS = int(os.environ.get("PAGE_WALK_ACTIONS", "80"))


WALKS = {"student": (STUDENT, StudentWalk), "admin": (ADMIN, AdminWalk)}


@pytest.fixture
def hub(tmp_path):
    refresh = "c.ReservationPage.page_refresh_seconds = 1\n"
    with start_page_hub(tmp_path, refresh, refresh=True) as running:
        yield running


@pytest.mark.parametrize("who", list(WALKS))
@pytest.mark.parametrize("seed", SEEDS)
def test_what_the_page_shows_agrees_with_the_api_after_every_step(hub, context, seed, who):
    user, walk_class = WALKS[who]
    walk = walk_class(hub, open_page(context, hub, user), seed, print)
    walk.check()
    walk.run(ACTIONS)
