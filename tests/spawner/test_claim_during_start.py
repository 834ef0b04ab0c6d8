"""KubeSpawner calls its own stop() inside start(): when a pod of the same name is still there
(it deletes it, then creates the pod again) and to clean up before a start fails. Found by the
lifecycle soak: that inner stop() gave the booking back while the pod was still being created on
it, so another server could claim the same booking. The claim must last as long as the start
runs; a start that fails after all gives it back."""

from __future__ import annotations

import pytest
from kubespawner import KubeSpawner


def claim_calls(booking_service) -> list[str]:
    return [path.rsplit("/", 1)[1] for path, _body in booking_service.claims]


def without_kubernetes(monkeypatch, start_body):
    """KubeSpawner's start replaced by ``start_body`` (which runs our load_user_options and
    calls stop() as KubeSpawner does), and its pod deletion by a no-op."""

    async def stop(self, now=False):
        self.stop_calls = getattr(self, "stop_calls", 0) + 1

    monkeypatch.setattr(KubeSpawner, "_start", start_body)
    monkeypatch.setattr(KubeSpawner, "stop", stop)


async def test_a_leftover_pod_cleared_inside_start_keeps_the_claim(
    make_spawner, booking_service, make_booking, monkeypatch
):
    async def start_over_a_leftover_pod(self):
        await self.load_user_options()
        await self.stop(True)  # 409 on create: KubeSpawner deletes the old pod, then retries
        return ("10.0.0.7", 8888)

    without_kubernetes(monkeypatch, start_over_a_leftover_pod)
    booking_service.active = [make_booking(91)]
    spawner = await make_spawner({"profile": "a100"}, server_name="gpu")

    assert await spawner.start() == ("10.0.0.7", 8888)
    assert spawner.stop_calls == 1
    assert claim_calls(booking_service) == ["claim"]
    assert booking_service.active[0]["server"] == "gpu"
    assert spawner.get_state()["gpu_booking_id"] == 91

    # the Hub's stop of the running server gives the booking back
    await spawner.stop()
    assert claim_calls(booking_service) == ["claim", "release"]
    assert booking_service.active[0]["server"] is None


async def test_a_start_that_fails_after_its_cleanup_gives_the_claim_back(
    make_spawner, booking_service, make_booking, monkeypatch
):
    async def start_that_fails(self):
        await self.load_user_options()
        await self.stop(True)  # KubeSpawner's cleanup before it re-raises
        raise RuntimeError("the pod could not be created")

    without_kubernetes(monkeypatch, start_that_fails)
    booking_service.active = [make_booking(92)]
    spawner = await make_spawner({"profile": "a100"})

    with pytest.raises(RuntimeError, match="could not be created"):
        await spawner.start()
    await spawner._release_task
    assert claim_calls(booking_service) == ["claim", "release"]
    assert booking_service.active[0]["server"] is None
    assert "gpu_booking_id" not in spawner.get_state()


async def test_the_claim_is_in_the_hub_database_while_the_start_runs(
    make_spawner, booking_service, make_booking
):
    """A Hub restarted mid-start adopts the pod with the state it last stored; the service
    stops a server at its booking's end only when that state names the booking (found by the
    soak: a Hub restart during a GPU start left the pod running past its booking for good)."""
    booking_service.active = [make_booking(93)]
    spawner = await make_spawner({"profile": "a100"}, server_name="gpu")
    await spawner.load_user_options()  # the start has claimed, the pod is not created yet

    # what a Hub that dies now leaves in its database: only what it has committed
    hub_db = spawner.user.db
    hub_db.rollback()
    hub_db.expire_all()
    assert spawner.orm_spawner.state["gpu_booking_id"] == 93
