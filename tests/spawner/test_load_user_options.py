"""load_user_options decides at every start: crafted user_options against a fake service."""

from __future__ import annotations

import asyncio
import socket
from datetime import datetime, timedelta, timezone

import pytest
from jupyterhub.utils import format_exception
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from jhub_gpubooking.spawner import SERVICE_UNAVAILABLE_MESSAGE
from jhub_gpubooking.start_refusals import SERVICE_STARTING_MESSAGE
from jhub_gpubooking.start_waits import StartWaits


async def refusal_of(spawner) -> web.HTTPError:
    with pytest.raises(web.HTTPError) as raised:
        await spawner.load_user_options()
    return raised.value


def shown_message(error: web.HTTPError) -> str:
    """What the Hub shows in the progress stream and on the spawn-pending page."""
    message, _html = format_exception(error)
    return message


async def collected(events) -> list[dict]:
    return [event async for event in events]


def has_gpu(spawner) -> bool:
    return any(key.startswith("nvidia.com/") for key in spawner.extra_resource_limits)


def pool_claim(server: str = "", booking: int | None = None, pool: str = "a100") -> tuple:
    """The one request of a GPU start: ada's booking in ``pool`` claimed for ``server``."""
    return (f"/services/gpu-booking/api/pools/{pool}/claim",
            {"user": "ada", "server": server, "booking": booking})


async def test_unknown_profile_is_refused(make_spawner, booking_service):
    spawner = await make_spawner({"profile": "h100-huge"})
    error = await refusal_of(spawner)
    assert error.status_code == 400
    assert shown_message(error) == (
        "There is no server option called 'h100-huge'; choose one on the start page."
    )
    assert booking_service.requests == []


async def test_gpu_profile_without_booking_is_refused(make_spawner, booking_service):
    spawner = await make_spawner({"profile": "a100"})
    error = await refusal_of(spawner)
    assert error.status_code == 403
    assert shown_message(error) == (
        "You have no active A100 booking right now; book one at "
        "/lab/services/gpu-booking/ and start again."
    )
    assert booking_service.claims == [pool_claim()]
    assert not has_gpu(spawner)


async def test_without_a_booking_an_opportunistic_grant_is_used(
    make_spawner, booking_service, make_booking
):
    booking_service.opportunistic = make_booking(7, slices=4, gpus=(0,))
    spawner = await make_spawner({"profile": "a100"})
    await spawner.load_user_options()
    assert booking_service.claims == [pool_claim()]
    assert spawner.extra_labels["gpubooking.jupyter.org/booking-id"] == "7"
    assert spawner.get_state()["gpu_booking_id"] == 7


async def test_without_a_booking_and_nothing_free_the_refusal_says_so(make_spawner, booking_service):
    booking_service.opportunistic = "none free"
    error = await refusal_of(await make_spawner({"profile": "a100"}))
    assert error.status_code == 403
    assert shown_message(error) == (
        "You have no active A100 booking right now and none is free to use without one; "
        "book one at /lab/services/gpu-booking/ and start again."
    )


async def test_a_pool_the_service_does_not_offer_is_refused(make_spawner, booking_service):
    booking_service.pools = [booking_service.pools[1]]  # the service no longer offers a100
    error = await refusal_of(await make_spawner({"profile": "a100"}))
    assert error.status_code == 403
    assert shown_message(error) == (
        "The GPU pool 'a100' of this server option is not offered by the booking service; "
        "please tell your JupyterHub administrator."
    )


async def test_booking_for_another_pool_does_not_count(make_spawner, booking_service, make_booking):
    booking_service.active = [make_booking(3, pool="t4", slices=1, node="t4-node", gpus=(0,))]
    error = await refusal_of(await make_spawner({"profile": "a100"}))
    assert "no active A100 booking" in shown_message(error)
    assert booking_service.active[0]["server"] is None


async def test_booking_that_ended_a_second_ago_is_refused(make_spawner, booking_service, make_booking):
    now = datetime.now(timezone.utc).replace(microsecond=0)
    # the service still lists it (its clock lags); the spawner checks the end itself
    ended = make_booking(4, start=now - timedelta(hours=2), end=now - timedelta(seconds=1))
    ended["state"] = "active"
    booking_service.active = [ended]
    error = await refusal_of(await make_spawner({"profile": "a100"}))
    assert "no active A100 booking" in shown_message(error)
    assert booking_service.active[0]["server"] is None


async def test_booking_used_by_another_server_is_refused(make_spawner, booking_service, make_booking):
    booking_service.active = [make_booking(5, server="training")]
    error = await refusal_of(await make_spawner({"profile": "a100"}, server_name="notebook"))
    assert error.status_code == 409
    assert shown_message(error) == "Your A100 booking is already used by server 'training'."
    assert booking_service.claims == [pool_claim("notebook")]


async def test_booking_used_by_the_default_server_names_it(make_spawner, booking_service, make_booking):
    booking_service.active = [make_booking(5, server="")]
    error = await refusal_of(await make_spawner({"profile": "a100"}, server_name="second"))
    assert shown_message(error) == "Your A100 booking is already used by your default server."


async def test_restart_with_saved_options_after_booking_is_gone(
    make_spawner, booking_service, make_booking, restarted
):
    booking_service.active = [make_booking(6)]
    spawner = await make_spawner({"profile": "a100", "image": "tf"})
    await spawner.load_user_options()
    assert booking_service.active[0]["server"] == ""

    # the booking was cancelled; the Hub restarts the same server with the saved options
    booking_service.active = []
    again = restarted(spawner)
    assert again is not spawner
    assert again.user_options == {"profile": "a100", "image": "tf"}
    error = await refusal_of(again)
    assert "no active A100 booking" in shown_message(error)
    assert not has_gpu(again)


async def test_closed_port_refuses_gpu_profiles(make_spawner, closed_port_url):
    spawner = await make_spawner({"profile": "a100"}, api_url=closed_port_url,
                                 booking_request_retry_timeout=0)
    error = await refusal_of(spawner)
    assert error.status_code == 503
    assert shown_message(error) == SERVICE_UNAVAILABLE_MESSAGE


async def test_a_closed_port_is_asked_again_until_the_retry_time_is_up(
    make_spawner, closed_port_url
):
    """Nothing listening is a service being (re)started: asked again every second."""
    spawner = await make_spawner({"profile": "a100"}, api_url=closed_port_url,
                                 booking_request_retry_timeout=1.5)
    spawner._start_waits = StartWaits()  # as start() makes it
    error = await refusal_of(spawner)
    assert shown_message(error) == SERVICE_UNAVAILABLE_MESSAGE
    # one wait of 1 s (a second would end after 1.5 s): then refused
    assert [event async for event in spawner._start_waits.events(None)] == [
        {"message": "The GPU booking service is not answering (it may be restarting); "
                    "asking again in 1 s."}
    ]


async def test_a_start_waits_for_a_service_that_begins_to_listen(
    make_spawner, booking_service, make_booking
):
    """The Hub restarts a crashed service: the start asked meanwhile gets its booking once the
    service listens again, and the spawn page's progress stream said what it waited for."""
    booking_service.active = [make_booking(1)]
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens on port until the "restarted" service does
    spawner = await make_spawner({"profile": "a100"},
                                 api_url=f"http://127.0.0.1:{port}/services/gpu-booking/")
    spawner.events_enabled = False  # no Kubernetes here: progress is the claim's waits
    spawner._start_waits = StartWaits()
    spawner._start_future = asyncio.ensure_future(spawner.load_user_options())
    progress = asyncio.ensure_future(collected(spawner.progress()))
    await asyncio.sleep(1.2)  # the first attempt was refused, the second too
    server = HTTPServer(booking_service.application())
    server.add_sockets(bind_sockets(port, "127.0.0.1"))
    try:
        await spawner._start_future
        assert spawner._claimed_booking_id == 1
        assert has_gpu(spawner)
        waits = await progress
        assert len(waits) >= 2
        assert all(wait == {"message": "The GPU booking service is not answering (it may be "
                                       "restarting); asking again in 1 s."} for wait in waits)
        assert booking_service.claims == [pool_claim()]
    finally:
        server.stop()
        await server.close_all_connections()


async def test_a_start_waits_out_a_database_outage(make_spawner, booking_service, make_booking):
    """The service answers 503 with Retry-After while its database is down: the start asks
    again after it, and the spawn page says why it waits."""
    booking_service.active = [make_booking(1)]
    booking_service.database_down = 2
    spawner = await make_spawner({"profile": "a100"})
    spawner._start_waits = StartWaits()
    await spawner.load_user_options()
    assert spawner._claimed_booking_id == 1
    assert [event async for event in spawner._start_waits.events(None)] == [
        {"message": "The GPU booking service cannot reach its database or the Hub right now; "
                    "asking again in 0.05 s."}
    ] * 2
    assert [path for path, _body in booking_service.claims] == [pool_claim()[0]] * 3
    # an outage that outlasts the retry time is refused, as an unreachable service is
    booking_service.database_down = 100
    booking_service.requests.clear()
    spawner = await make_spawner({"profile": "a100"}, booking_request_retry_timeout=0.3)
    assert shown_message(await refusal_of(spawner)) == SERVICE_UNAVAILABLE_MESSAGE
    assert 1 < len(booking_service.claims) < 100


async def test_a_start_cancelled_while_it_waits_claims_nothing(
    make_spawner, booking_service, make_booking
):
    """The user stops a start that waits for the service (the spawn page's Cancel): the wait
    ends at once, nothing is claimed later, and the progress stream ends."""
    booking_service.active = [make_booking(1)]
    booking_service.database_down, booking_service.starting_retry_after = 100, "0.2"
    spawner = await make_spawner({"profile": "a100"})
    spawner._start_waits = StartWaits()
    spawner._start_future = asyncio.ensure_future(spawner.load_user_options())
    while not await collected(spawner._start_waits.events(None)):
        await asyncio.sleep(0.05)  # until the first wait began
    spawner._start_future.cancel()
    with pytest.raises(asyncio.CancelledError):
        await spawner._start_future
    asked = len(booking_service.claims)
    booking_service.database_down = 0
    await asyncio.sleep(0.4)  # past the next Retry-After
    assert len(booking_service.claims) == asked
    assert spawner._claimed_booking_id is None
    assert booking_service.active[0]["server"] is None
    assert spawner._start_waits.settled.is_set()
    assert len(await collected(spawner._start_waits.events(spawner._start_future))) == asked


async def test_hanging_service_is_asked_again_until_the_retry_time_is_up(
    make_spawner, hanging_url
):
    """No answer within booking_request_timeout (a service busy starting, or waiting on its
    database) is asked again like a closed port; refused when the retry time is up."""
    spawner = await make_spawner(
        {"profile": "a100"}, api_url=hanging_url, booking_request_timeout=0.3,
        booking_request_retry_timeout=1.5,
    )
    spawner._start_waits = StartWaits()
    error = await refusal_of(spawner)
    assert shown_message(error) == SERVICE_UNAVAILABLE_MESSAGE
    waits = [event async for event in spawner._start_waits.events(None)]
    assert waits and all(wait == {"message": "The GPU booking service is not answering (it may "
                                              "be restarting); asking again in 1 s."}
                         for wait in waits)


async def test_server_errors_count_as_unreachable(make_spawner, booking_service):
    booking_service.pools = None  # the fake then fails with a 500
    error = await refusal_of(await make_spawner({"profile": "a100"}))
    assert shown_message(error) == SERVICE_UNAVAILABLE_MESSAGE
    assert len(booking_service.claims) == 1  # a bug in the service is not asked again


async def test_wrong_token_is_an_operator_problem_not_a_user_one(make_spawner, booking_service):
    error = await refusal_of(await make_spawner({"profile": "a100"}, booking_api_token="stale"))
    assert shown_message(error) == SERVICE_UNAVAILABLE_MESSAGE


async def test_a_start_asks_again_while_the_service_has_just_started(
    make_spawner, booking_service, make_booking
):
    """Right after the service started it answers claims 503 service_starting with a
    Retry-After until its first check is done: the start asks again and gets the booking."""
    booking_service.active = [make_booking(1)]
    booking_service.starting = 2
    spawner = await make_spawner({"profile": "a100"})
    await spawner.load_user_options()
    assert spawner._claimed_booking_id == 1
    assert [path for path, _body in booking_service.claims] == [pool_claim()[0]] * 3


async def test_a_service_still_starting_when_the_wait_is_up_refuses_with_that_reason(
    make_spawner, booking_service, make_booking
):
    booking_service.active = [make_booking(1)]
    booking_service.starting = 100
    spawner = await make_spawner({"profile": "a100"}, booking_request_retry_timeout=0.3)
    error = await refusal_of(spawner)
    assert (error.status_code, shown_message(error)) == (503, SERVICE_STARTING_MESSAGE)
    assert len(booking_service.claims) < 100  # it stopped asking
    assert not has_gpu(spawner)
    # 0: refused at the first such answer
    booking_service.requests.clear()
    spawner = await make_spawner({"profile": "a100"}, booking_request_retry_timeout=0)
    assert shown_message(await refusal_of(spawner)) == SERVICE_STARTING_MESSAGE
    assert len(booking_service.claims) == 1


async def test_cpu_profile_starts_while_service_is_down(make_spawner, closed_port_url):
    spawner = await make_spawner({"profile": "cpu"}, api_url=closed_port_url)
    await spawner.load_user_options()
    assert spawner.cpu_limit == 2.0
    assert spawner.extra_labels == {"size": "small"}
    assert spawner.extra_resource_limits == {}
    assert "activeDeadlineSeconds" not in spawner.extra_pod_config


async def test_by_default_a_gpu_pod_has_no_deadline_to_outlive_an_extension(
    make_spawner, booking_service, make_booking
):
    """Kubernetes cannot raise a running pod's deadline, so the booking's end is not one."""
    booking_service.active = [make_booking(11)]
    spawner = await make_spawner({"profile": "a100"})
    await spawner.load_user_options()
    assert has_gpu(spawner)
    assert "activeDeadlineSeconds" not in spawner.extra_pod_config


async def test_booked_share_lands_exactly_in_the_pod_traits(make_spawner, booking_service, make_booking):
    booking_service.active = [make_booking(11)]
    spawner = await make_spawner(
        {"profile": "a100", "image": "tf", "gpus": 4, "pool": "t4"},  # extra keys are ignored
        server_name="gpu",
        pod_deadline_seconds=2**40,  # far beyond what Kubernetes accepts: capped
        booked_priority_class_name="gpu-booked",
    )
    await spawner.load_user_options()

    share = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40960", "nvidia.com/gpucores": "50"}
    assert spawner.extra_resource_limits == share  # the profile's "2" GPUs are dropped
    assert spawner.extra_resource_guarantees == share
    assert spawner.node_selector == {"gpu-type": "a100", "kubernetes.io/hostname": "gpu-node-1"}
    assert spawner.image == "tensorflow:1"
    assert spawner.priority_class_name == "gpu-booked"
    end = booking_service.active[0]["end"]
    assert spawner.extra_labels == {
        "gpu-profile": "yes",
        "gpubooking.jupyter.org/booking-id": "11",
        "gpubooking.jupyter.org/pool": "a100",
    }
    assert spawner.extra_annotations == {
        "lab.example.org/cost-centre": "physics",
        "nvidia.com/use-gpuuuid": "GPU-aaaa-1",
        "gpubooking.jupyter.org/booking-id": "11",
        "gpubooking.jupyter.org/pool": "a100",
        "gpubooking.jupyter.org/gpus": "0.5",
        "gpubooking.jupyter.org/end": end,
        "gpubooking.jupyter.org/gpu-indices": "1",
    }
    assert spawner.environment == {
        "GPU_BOOKING_ID": "11",
        "GPU_BOOKING_END": end,
        "GPU_BOOKING_POOL": "a100",
        "GPU_BOOKING_GPUS": "0.5",
        # for the JupyterLab extension (this mock Hub has no service URL to give)
        "GPU_BOOKING_SERVICE_URL": "",
        "GPU_BOOKING_PAGE_URL": "/lab/services/gpu-booking/",
        "GPU_BOOKING_WARN_MINUTES": "10,2",
        "GPU_BOOKING_POLL_SECONDS": "30",
    }
    # a far backstop, not the booking's end: an extension must never be cut short by it
    assert spawner.extra_pod_config == {"activeDeadlineSeconds": 2**31 - 1}
    assert booking_service.claims == [pool_claim("gpu")]
    assert spawner.get_state()["gpu_booking_id"] == 11

    pod = await spawner.get_pod_manifest()
    labels = pod.metadata.labels
    assert labels["gpubooking.jupyter.org/booking-id"] == "11"
    assert labels["gpu-profile"] == "yes"
    # KubeSpawner's own labels are still there
    assert labels["hub.jupyter.org/username"] == "ada"
    assert labels["component"] == "singleuser-server"
    assert labels["hub.jupyter.org/servername"] == "gpu"
    assert pod.metadata.annotations["nvidia.com/use-gpuuuid"] == "GPU-aaaa-1"
    assert pod.spec.containers[0].resources.limits["nvidia.com/gpumem"] == "40960"
    assert pod.spec.node_selector["kubernetes.io/hostname"] == "gpu-node-1"


async def test_whole_gpu_pool_and_default_priority(make_spawner, booking_service, make_booking):
    booking_service.active = [
        make_booking(21, pool="t4", slices=2, node="t4-node", gpus=(0, 1), slices_per_gpu=1)
    ]
    spawner = await make_spawner({"profile": "t4"})
    await spawner.load_user_options()
    assert spawner.extra_resource_limits == {"nvidia.com/gpu": "2"}
    assert spawner.priority_class_name == ""


async def test_claim_prefers_the_booking_this_server_holds(make_spawner, booking_service, make_booking):
    booking_service.active = [make_booking(31), make_booking(32, server="gpu"), make_booking(33, server="x")]
    spawner = await make_spawner({"profile": "a100"}, server_name="gpu")
    await spawner.load_user_options()
    assert booking_service.claims == [pool_claim("gpu")]
    assert spawner.extra_labels["gpubooking.jupyter.org/booking-id"] == "32"
    assert spawner.get_state()["gpu_booking_id"] == 32


async def test_claim_falls_through_to_an_unused_booking(make_spawner, booking_service, make_booking):
    booking_service.active = [make_booking(41, server="other"), make_booking(42)]
    spawner = await make_spawner({"profile": "a100"}, server_name="gpu")
    await spawner.load_user_options()
    assert booking_service.claims == [pool_claim("gpu")]
    assert [b["server"] for b in booking_service.active] == ["other", "gpu"]
    assert spawner.extra_labels["gpubooking.jupyter.org/booking-id"] == "42"


async def test_failure_after_claim_releases_the_booking(make_spawner, booking_service, make_booking):
    def broken_backend(pool, amount, placement):
        raise ValueError("the device plugin config is broken")

    booking_service.active = [make_booking(51)]
    spawner = await make_spawner({"profile": "a100"}, gpu_backends={"hami": broken_backend})
    error = await refusal_of(spawner)
    assert shown_message(error) == (
        "The A100 GPU pool is misconfigured, so its servers cannot start; "
        "please tell your JupyterHub administrator."
    )
    assert booking_service.claims == [
        pool_claim(),
        ("/services/gpu-booking/api/bookings/51/release", {"user": "ada", "server": ""}),
    ]
    assert booking_service.active[0]["server"] is None
    assert "gpu_booking_id" not in spawner.get_state()


async def test_async_callable_profile_list_is_wrapped(make_spawner, booking_service, make_booking):
    calls = []

    async def profiles_for(spawner):
        calls.append(spawner.user.name)
        return [
            {"display_name": "CPU", "slug": "cpu", "default": True},
            {"display_name": "A100", "slug": "gpu", "gpu_pool": "a100"},
        ]

    booking_service.active = [make_booking(61)]
    spawner = await make_spawner({"profile": "gpu"}, profile_list=profiles_for)
    await spawner.load_user_options()
    assert calls == ["ada"]
    assert spawner.extra_resource_limits["nvidia.com/gpu"] == "1"


async def test_default_profile_is_checked_too(make_spawner, booking_service):
    profiles = [{"display_name": "A100", "slug": "gpu", "gpu_pool": "a100", "default": True}]
    spawner = await make_spawner({}, profile_list=profiles)  # REST API start without options
    error = await refusal_of(spawner)
    assert "no active A100 booking" in shown_message(error)


async def test_state_survives_a_hub_restart(make_spawner, booking_service, make_booking, restarted):
    booking_service.active = [make_booking(71)]
    spawner = await make_spawner({"profile": "a100"})
    await spawner.load_user_options()
    reloaded = restarted(spawner)
    assert reloaded is not spawner
    # the booking, and the placement the pod was made for (c.HubServers compares it with the
    # booking's after a restore of the booking database)
    assert reloaded.get_state()["gpu_booking_id"] == 71
    assert reloaded.get_state()["gpu_booking_placement"] == {"node": "gpu-node-1", "gpus": [1]}
    reloaded.clear_state()
    assert not {"gpu_booking_id", "gpu_booking_placement"} & reloaded.get_state().keys()


async def test_refusal_reaches_the_progress_stream(make_spawner, booking_service):
    spawner = await make_spawner({"profile": "a100"}, events_enabled=False)
    # what KubeSpawner.start() does, minus the pod: the start future runs load_user_options
    spawner._start_future = asyncio.ensure_future(spawner.load_user_options())
    events = [event async for event in spawner.progress()]
    with pytest.raises(web.HTTPError):
        await spawner._start_future
    assert events == [
        {
            "progress": 100,
            "failed": True,
            "message": "You have no active A100 booking right now; book one at "
            "/lab/services/gpu-booking/ and start again.",
        }
    ]


async def test_refusal_on_jupyterhub_5(make_spawner, booking_service, monkeypatch):
    """Without SpawnException (JupyterHub 5.5) the refusal is an HTTPError the Hub shows as is."""
    monkeypatch.setattr("jhub_gpubooking.start_refusals.SpawnException", None)
    booking_service.pools[0] = {**booking_service.pools[0], "gpu_model": "A100 100%"}
    error = await refusal_of(await make_spawner({"profile": "a100"}))
    assert type(error) is web.HTTPError
    assert error.status_code == 403
    expected = (
        "You have no active A100 100% booking right now; book one at "
        "/lab/services/gpu-booking/ and start again."
    )
    # 5.5's error page and REST API show log_message % args; its progress stream and
    # spawn-pending page show jupyterhub_message
    assert error.log_message % error.args == expected
    assert shown_message(error) == expected


async def test_failed_start_gives_the_claim_back(make_spawner, booking_service, make_booking):
    booking_service.active = [make_booking(81)]
    spawner = await make_spawner({"profile": "a100"}, server_name="gpu")
    await spawner.load_user_options()
    failed_start = asyncio.get_running_loop().create_future()
    failed_start.set_exception(TimeoutError("pod never became ready"))
    spawner._release_after_failed_start(failed_start)
    await spawner._release_task
    assert booking_service.claims[-1] == (
        "/services/gpu-booking/api/bookings/81/release", {"user": "ada", "server": "gpu"}
    )
    assert booking_service.active[0]["server"] is None


async def test_a_later_cpu_start_inherits_nothing_from_the_last_booking(
    make_spawner, booking_service, make_booking
):
    """JupyterHub keeps one spawner object across stop/start: what a booking set must not
    outlive it, or a CPU restart would get a GPU (and the booked node and deadline) for free."""
    spawner = await make_spawner({"profile": "a100"}, pod_deadline_seconds=7 * 24 * 3600)
    before = {
        "node_selector": dict(spawner.node_selector),
        "extra_pod_config": dict(spawner.extra_pod_config),
        "environment": dict(spawner.environment),
    }
    booking_service.active = [make_booking(11)]
    await spawner.load_user_options()
    assert has_gpu(spawner) and "activeDeadlineSeconds" in spawner.extra_pod_config

    booking_service.active = []
    spawner.user_options = {"profile": "cpu"}
    await spawner.load_user_options()
    assert not has_gpu(spawner)
    assert not any(key.startswith("nvidia.com/") for key in spawner.extra_resource_guarantees)
    assert spawner.node_selector == before["node_selector"]
    assert spawner.extra_pod_config == before["extra_pod_config"]
    assert not any(key.startswith("GPU_BOOKING_") for key in spawner.environment)
    assert not any(key.startswith("gpubooking.jupyter.org/") for key in spawner.extra_annotations)

    # and a GPU restart whose booking is gone is refused, not started on the old share
    spawner.user_options = {"profile": "a100"}
    error = await refusal_of(spawner)
    assert "no active A100 booking" in shown_message(error)
    assert not has_gpu(spawner)


async def test_the_booking_chosen_in_the_form_is_the_one_claimed(make_spawner, booking_service, make_booking):
    booking_service.active = [make_booking(11), make_booking(12, slices=1)]
    spawner = await make_spawner({})
    spawner.user_options = spawner._options_from_form(
        {"profile": ["a100"], "gpu-booking-a100": ["12"], "gpu-booking-t4": ["99"]}
    )
    assert spawner.user_options == {"profile": "a100", "gpu_booking": "12"}
    await spawner.load_user_options()
    assert booking_service.claims == [pool_claim(booking=12)]
    assert [b["server"] for b in booking_service.active] == [None, ""]
    assert spawner.get_state()["gpu_booking_id"] == 12


async def test_a_chosen_booking_that_is_not_a_number_is_refused(make_spawner, booking_service, make_booking):
    booking_service.active = [make_booking(11)]
    error = await refusal_of(await make_spawner({"profile": "a100", "gpu_booking": "soon"}))
    assert shown_message(error) == "'gpu_booking' must be the number of one of your bookings."
