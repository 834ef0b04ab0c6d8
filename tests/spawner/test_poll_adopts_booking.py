"""A start still pending when the Hub stopped leaves no state: the Hub saves a server's state
only once its start is done. Back, the Hub polls the spawner and finds the pod running (CI's
latest walk: then a second server of the user claimed the same booking, since the service could
not see which booking the first one ran on). The spawner takes the booking and the placement
from its pod's label and annotation, so its state names them as after any start."""

from __future__ import annotations

from kubespawner import KubeSpawner

from jhub_gpubooking.core.lifecycle import SERVER_STATE_BOOKING_KEY, SERVER_STATE_PLACEMENT_KEY
from jhub_gpubooking.gpu import BOOKING_ID_KEY, GPU_INDICES_KEY, HOSTNAME_LABEL
from jhub_gpubooking.spawner import GPUBookingSpawner


class Reflector:
    def __init__(self, pods: dict[str, dict]):
        self.pods = pods


def booked_pod(booking_id: str) -> dict:
    return {"metadata": {"name": "jupyter-ada", "labels": {BOOKING_ID_KEY: booking_id},
                         "annotations": {GPU_INDICES_KEY: "1"}},
            "spec": {"nodeSelector": {HOSTNAME_LABEL: "gpu-a100-2"}},
            "status": {"phase": "Running"}}


async def test_a_server_the_hub_finds_running_again_names_its_pods_booking(
        make_spawner, monkeypatch):
    pods: dict[str, dict] = {}
    running: list[int | None] = [None]

    async def poll(self):
        return running[0]

    monkeypatch.setattr(KubeSpawner, "poll", poll)
    monkeypatch.setattr(GPUBookingSpawner, "pod_reflector", property(lambda self: Reflector(pods)))
    spawner = await make_spawner()
    key = f"{spawner.namespace}/{spawner.pod_name}"

    pods[key] = booked_pod("42")
    assert await spawner.poll() is None
    state = spawner.get_state()
    assert (state[SERVER_STATE_BOOKING_KEY], state[SERVER_STATE_PLACEMENT_KEY]) == (
        42, {"node": "gpu-a100-2", "gpus": [1]})

    # a state that names a booking is kept; a pod without a booking label names none
    pods[key] = booked_pod("7")
    assert await spawner.poll() is None
    assert spawner.get_state()[SERVER_STATE_BOOKING_KEY] == 42
    spawner.clear_state()
    pods[key] = booked_pod("")
    assert await spawner.poll() is None
    assert SERVER_STATE_BOOKING_KEY not in spawner.get_state()
    pods[key]["metadata"]["labels"] = None  # as a client may write an empty map
    assert await spawner.poll() is None
    assert SERVER_STATE_BOOKING_KEY not in spawner.get_state()
    # a server that stopped adopts nothing
    pods[key], running[0] = booked_pod("42"), 1
    assert await spawner.poll() == 1
    assert SERVER_STATE_BOOKING_KEY not in spawner.get_state()
