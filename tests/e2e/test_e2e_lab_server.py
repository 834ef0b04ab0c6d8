"""End to end: a booked GPU server's own single-user process serves the booking's status to
JupyterLab through the booking service, with the server's token; a CPU server's does not.

Real processes throughout: the Hub, the proxy, the booking service, and jupyterhub-singleuser
pods (with this package's server extension enabled, as `pip install jhub-gpubooking[lab]`
enables it) run by the simulated cluster's kubelet.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import httpx
import pytest

from jhub_gpubooking.core.timegrid import format_time

pytestmark = pytest.mark.e2e


def parse_utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def user_client(driver, user: str) -> httpx.Client:
    """What the user's browser is to the Hub and their servers: their own Hub token."""
    response = driver.hub.post(f"users/{user}/tokens", json={"note": "lab e2e"})
    assert response.status_code == 201, response.text
    return httpx.Client(base_url=driver.demo.hub_url, timeout=60,
                        headers={"Authorization": f"token {response.json()['token']}"})


def started(driver, user: str, profile: str) -> httpx.Client:
    """``user``'s server on ``profile``, ready; a client as the user."""
    response = driver.start_server(user, profile)
    assert response.status_code in (201, 202), response.text
    driver.wait_ready(user)
    return user_client(driver, user)


def service_answer_to_server_token(driver, user: str) -> httpx.Response:
    """The booking service's answer to the token the Hub gave ``user``'s running server."""
    env = driver.pods()[f"jupyter-{user}"]["spec"]["containers"][0]["env"]
    token = {item["name"]: item.get("value") for item in env}["JUPYTERHUB_API_TOKEN"]
    return httpx.get(f"{driver.demo.hub_url}/services/gpu-booking/api/pools",
                     headers={"Authorization": f"token {token}"})


def test_a_booked_gpu_server_shows_and_extends_its_booking_in_jupyterlab(driver):
    booking = driver.book("lena", "a100", 0.25, minutes=30)
    lena = started(driver, "lena", "a100")
    try:
        status = lena.get("/user/lena/gpu-booking/status")
        assert status.status_code == 200, status.text
        status = status.json()
        assert (status["booked"], status["service"], status["message"]) == (True, "ok", None)
        assert status["booking"] == {key: booking[key] for key in ("id", "pool", "state",
                                                                     "start", "end")}
        assert status["share"] == "¼ A100"
        assert status["bookings_url"] == "/services/gpu-booking/"
        # the default warnings, and the poll interval tests/e2e/hub_config.py sets
        assert (status["warn_minutes"], status["poll_seconds"]) == ([10, 2], 2.0)
        assert 0 < status["seconds_left"] <= 30 * 60
        assert status["extension"]["minutes"] > 0 and status["extension"]["reason"] is None

        extended = lena.post("/user/lena/gpu-booking/extend", json={"minutes": 15})
        assert extended.status_code == 200, extended.text
        new_end = format_time(parse_utc(booking["end"]) + timedelta(minutes=15))
        assert extended.json()["booking"]["end"] == new_end
        assert driver.get_booking(booking["id"])["end"] == new_end
        # the extension is the running server's: it keeps running on the same booking
        assert driver.server_model("lena")["ready"]
        assert driver.get_booking(booking["id"])["server"] == ""

        # the server's own token reaches the booking service: it was granted for this booking
        pools = service_answer_to_server_token(driver, "lena")
        assert pools.status_code == 200, pools.text
    finally:
        driver.stop_server("lena")

    # the Hub's "server not running" page says how to get a GPU again
    page = lena.get("/hub/user/lena/", headers={"Accept": "text/html"})
    assert page.status_code == 424, page.text[:500]
    assert 'href="/services/gpu-booking/">Book again</a>' in page.text
    lena.close()


def test_a_cpu_server_is_not_booked_and_its_token_cannot_reach_the_service(driver):
    omar = started(driver, "omar", "cpu")
    try:
        status = omar.get("/user/omar/gpu-booking/status")
        assert (status.status_code, status.json()) == (200, {"booked": False})
        pools = service_answer_to_server_token(driver, "omar")
        assert pools.status_code == 403, pools.text
    finally:
        driver.stop_server("omar")
        omar.close()
