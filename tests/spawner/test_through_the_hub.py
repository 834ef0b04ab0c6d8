"""What the Hub itself shows: its spawn page, REST API and progress stream around the gate.

The Hub is pytest-jupyterhub's in-process MockHub (see conftest.py); no pod is ever created, so
every start here is one the gate refuses before KubeSpawner talks to Kubernetes. The same
sentences must reach the user on JupyterHub 5.5 (an HTTPError) and 6.x (a SpawnException).
"""

from __future__ import annotations

import json

import pytest
from bs4 import BeautifulSoup
from jupyterhub.tests.utils import api_request, async_requests, get_page, public_url
from tornado.httputil import url_concat

NOT_BOOKED = (
    "You have no active A100 booking right now; book one at /lab/services/gpu-booking/ and start again."
)

# the real proxy in front of the Hub; no cluster here: KubeSpawner's clean-up after a refused
# start gives up at once
HUB = {"with_proxy": True, "k8s_api_request_timeout": 1, "k8s_api_request_retry_timeout": 1}


async def post_spawn_form(app, cookies, form: dict):
    url = url_concat(public_url(app, path="hub/spawn/ada"), {"_xsrf": cookies["_xsrf"]})
    return await async_requests.post(url, cookies=cookies, data=form)


async def progress_events(app, server_path: list[str]) -> list[dict]:
    response = await api_request(app, "users", "ada", *server_path, "progress", name="ada", stream=True)
    assert response.status_code == 200
    return [json.loads(line[len("data:"):]) for line in response.text.splitlines() if line.startswith("data:")]


async def servers_of_ada(app) -> dict:
    response = await api_request(app, "users", "ada", name="ada")
    return response.json()["servers"]


async def test_spawn_page_shows_the_chooser_and_the_refusal(mock_hub, booking_service, make_booking):
    booking_service.active = [make_booking(12, server="training")]
    app = await mock_hub(**HUB)
    cookies = await app.login_user("ada")

    # parsed from bytes: the page declares UTF-8 in a meta tag, not in its Content-Type
    page = BeautifulSoup((await get_page("spawn", app, cookies=cookies)).content, "html.parser")
    form = page.find("form", id="spawn_form")
    # the chooser inside the Hub's own page: the booked A100 can be picked, the T4 cannot
    assert not form.find("input", {"name": "profile", "value": "a100"}).has_attr("disabled")
    assert form.find("input", {"name": "profile", "value": "t4"}).has_attr("disabled")
    assert form.find(class_="gpu-booking-share").get_text() == "0.5 × A100"

    # the form names the booking; the Hub's form parsing hands it to the gate
    response = await post_spawn_form(app, cookies, {"profile": "a100", "gpu-booking-a100": "12"})
    assert response.status_code == 409
    page = BeautifulSoup(response.content, "html.parser")
    assert page.find(class_="spawn-error-msg").get_text() == (
        "Error: Your A100 booking is already used by server 'training'."
    )
    # the form is offered again, and nothing runs
    assert page.find("form", id="spawn_form").find("input", {"name": "profile", "value": "a100"})
    assert booking_service.claims == [
        ("/services/gpu-booking/api/pools/a100/claim", {"user": "ada", "server": "", "booking": 12})
    ]
    assert await servers_of_ada(app) == {}


@pytest.mark.parametrize(
    "server_path, active, status, message",
    [
        (["server"], [], 403, NOT_BOOKED),
        (["servers", "gpu"], [{"id": 5, "server": ""}], 409,
         "Your A100 booking is already used by your default server."),
    ],
    ids=["not-booked", "in-use"],
)
async def test_rest_api_start_is_refused_with_the_sentence(
    mock_hub, booking_service, make_booking, server_path, active, status, message
):
    booking_service.active = [make_booking(b["id"], server=b["server"]) for b in active]
    app = await mock_hub(**HUB)
    response = await api_request(
        app, "users", "ada", *server_path, method="post", name="ada", data=json.dumps({"profile": "a100"})
    )
    assert (response.status_code, response.json()["message"]) == (status, message)
    # the progress stream of the failed start ends on the same sentence
    assert await progress_events(app, server_path) == [
        {"progress": 100, "failed": True, "message": f"Spawn failed: {message}"}
    ]
    assert await servers_of_ada(app) == {}
    # a refused claim holds nothing, so nothing is released
    assert [path.rsplit("/", 1)[1] for path, _ in booking_service.claims] == ["claim"]


async def test_rest_api_unknown_profile_is_refused_before_asking_the_service(mock_hub, booking_service):
    app = await mock_hub(**HUB)
    response = await api_request(
        app, "users", "ada", "server", method="post", name="ada", data=json.dumps({"profile": "h100-huge"})
    )
    assert (response.status_code, response.json()["message"]) == (
        400, "There is no server option called 'h100-huge'; choose one on the start page."
    )
    assert booking_service.requests == []
