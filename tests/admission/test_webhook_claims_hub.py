"""Issue 13 item 5 on the real Hub: the booking service started by JupyterHub serves the webhook
to the simulated API server. Book 1 GPU, create 8 one-GPU pods in a gated namespace: one is
admitted and claims the booking, seven are refused with a sentence; the no-show rule leaves the
booking alone while the pod runs; when the booking ends the service deletes the pod and
releases the claim."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from datetime import datetime, timedelta, timezone

import pytest
from admission_fixtures import running_gpu_pod
from hub_harness import free_port, start_booking_hub
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from jhub_gpubooking.core.timegrid import ceil_to_grid, floor_to_grid, format_time
from jhub_gpubooking.devcluster import DevCluster, gpu_node

# waits out a booking's no-show time and its end (tests/one_set.py: the wall-clock lane)
pytestmark = [pytest.mark.e2e, pytest.mark.wall_clock]


async def until(condition, what: str, seconds: float = 120):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if await condition():
            return
        await asyncio.sleep(0.5)
    pytest.fail(f"never happened: {what}")


async def test_one_booking_admits_one_pod_on_the_real_hub(tmp_path):
    port = free_port()
    nodes = [gpu_node("node-a", count=2), gpu_node("node-b", count=2)]
    async with DevCluster(tmp_path / "cluster", nodes, namespaces=("default", "ada-jobs"),
                          admission_webhooks=[f"http://127.0.0.1:{port}/mutate",
                                              f"http://127.0.0.1:{port}/validate"],
                          max_grace_seconds=1) as cluster:
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        service_config = f"""
            c.GPUBookingService.slot_minutes = 1
            c.Lifecycle.lifecycle_interval_seconds = 1
            c.Lifecycle.end_grace_seconds = 0
            c.Lifecycle.no_show_minutes = 1
            c.AdmissionWebhook.webhook_port = {port}
            c.AdmissionWebhook.webhook_address = "127.0.0.1"
            c.AdmissionWebhook.namespace_owners = {{"ada-jobs": "ada"}}
            c.ClusterAccess.kubeconfig = {str(kubeconfig)!r}
        """
        with contextlib.ExitStack() as stack:
            # the Hub starts in a thread: the simulated API server runs on this event loop
            hub = await asyncio.to_thread(stack.enter_context, start_booking_hub(
                tmp_path / "hub", extra_service_config=service_config))
            api_client = await config.new_client_from_config(config_file=str(kubeconfig))
            async with api_client:
                core = client.CoreV1Api(api_client)
                await check_one_pod_per_booking(hub, core)


def booking_of(hub, booking_id: int) -> dict:
    with hub.api(hub.user_token("ada")) as ada:
        reply = ada.get(f"api/bookings/{booking_id}")
        reply.raise_for_status()
        return reply.json()


async def check_one_pod_per_booking(hub, core) -> None:
    now = datetime.now(timezone.utc)
    start, end = floor_to_grid(now, 1), ceil_to_grid(now + timedelta(seconds=70), 1)
    with hub.api(hub.user_token("ada")) as ada:
        created = ada.post("api/bookings", json={"pool": "a100", "gpus": 1,
                                                 "start": format_time(start),
                                                 "end": format_time(end)})
        assert created.status_code == 201, created.text
        booking_id = created.json()["id"]

    results = await asyncio.gather(
        *(core.create_namespaced_pod("ada-jobs", running_gpu_pod(f"train-{i}")) for i in range(8)),
        return_exceptions=True)
    admitted = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, ApiException)]
    assert (len(admitted), len(refused)) == (1, 7), [getattr(r, "body", r) for r in results]
    name = admitted[0].metadata.name
    for refusal in refused:
        assert refusal.status == 403
        assert json.loads(refusal.body)["message"].endswith(
            f"a booking of 1 GPU in pool a100 is in use by pod ada-jobs/{name}, and one booking "
            "admits one pod at a time.")
    assert booking_of(hub, booking_id)["server"] == f"pod:ada-jobs/{name}"

    # past the no-show time (start + 1 minute, ticks every second) the booking is untouched
    await asyncio.sleep(max(0.0, (start + timedelta(minutes=1, seconds=3)
                                  - datetime.now(timezone.utc)).total_seconds()))
    current = booking_of(hub, booking_id)
    assert (current["end"], current["server"]) == (format_time(end), f"pod:ada-jobs/{name}")
    assert (await core.read_namespaced_pod(name, "ada-jobs")).status.phase == "Running"

    # at the end the service deletes the pod and releases the claim
    async def pod_gone() -> bool:
        try:
            await core.read_namespaced_pod(name, "ada-jobs")
        except ApiException as error:
            return error.status == 404
        return False

    await until(pod_gone, "the service deleted the pod when the booking ended",
                seconds=(end - datetime.now(timezone.utc)).total_seconds() + 60)
    assert datetime.now(timezone.utc) >= end

    async def released() -> bool:
        return booking_of(hub, booking_id)["server"] is None

    await until(released, "the claim was released")
