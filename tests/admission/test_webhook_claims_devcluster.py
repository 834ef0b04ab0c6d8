"""Issue 13 item 5 through the simulated API server: the booking service's own webhook and
lifecycle tick, a ManualClock, real pods. One booking admits one pod; the claim is recorded like
a Hub claim, so the no-show rule leaves the booking alone while the pod runs; the claim is
released when the pod ends; the pod is deleted when its booking is over."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import datetime, timedelta, timezone

import pytest
from admission_fixtures import running_gpu_pod
from cluster_service import phase, wait_for_phase, webhook_cluster

NOW = datetime(2030, 5, 6, 10, 5, tzinfo=timezone.utc)
QUICK = [sys.executable, "-c", "pass"]


def at(hour: int, minute: int = 0) -> datetime:
    return NOW.replace(hour=hour, minute=minute)


@pytest.fixture
async def cluster_and_service(tmp_path):
    async with webhook_cluster(tmp_path, NOW) as core_and_service:
        yield core_and_service


async def test_one_booking_admits_one_pod_until_it_ends(cluster_and_service):
    core, service = cluster_and_service
    store = service.store
    booking = store.create("alice", "a100", 1, at(10), at(11))

    results = await asyncio.gather(
        *(core.create_namespaced_pod("alice-jobs", running_gpu_pod(f"train-{i}")) for i in range(8)),
        return_exceptions=True)
    admitted = [r for r in results if not isinstance(r, Exception)]
    refused = [r for r in results if isinstance(r, Exception)]
    assert len(admitted) == 1 and len(refused) == 7
    holder = f"pod:alice-jobs/{admitted[0].metadata.name}"
    assert store.get(booking.id).server == holder
    for refusal in refused:
        assert refusal.status == 403
        assert json.loads(refusal.body)["message"].endswith(
            f"a booking of 1 GPU in pool a100 is in use by pod {holder[4:]}, and one booking "
            "admits one pod at a time.")
    assert admitted[0].spec.node_selector == {"kubernetes.io/hostname": "gpu-a100"}

    # the no-show rule sees the webhook's claim: nothing is released while the pod runs
    await wait_for_phase(core, admitted[0].metadata.name, {"Running"})
    assert await service.lifecycle.tick(at(10, 30)) == []
    assert store.get(booking.id).end == at(11)
    assert store.get(booking.id).server == holder

    # the pod ends: the next tick releases the claim, and another pod may use the booking
    await core.delete_namespaced_pod(admitted[0].metadata.name, "alice-jobs")
    await wait_for_phase(core, admitted[0].metadata.name, {None})
    await service.lifecycle.tick(at(10, 31))
    assert store.get(booking.id).server is None
    assert [e.kind for e in store.history(booking.id)] == ["created", "claimed", "released"]

    quick = await core.create_namespaced_pod("alice-jobs", running_gpu_pod("quick", command=QUICK))
    assert store.get(booking.id).server == "pod:alice-jobs/quick"
    assert await wait_for_phase(core, quick.metadata.name, {"Succeeded"}) == "Succeeded"
    await service.lifecycle.tick(at(10, 32))  # a finished pod stays, but holds nothing
    assert store.get(booking.id).server is None


async def test_a_pod_outliving_its_booking_is_deleted_and_its_claim_released(cluster_and_service):
    core, service = cluster_and_service
    store = service.store
    booking = store.create("alice", "a100", 1, at(10), at(11))
    await core.create_namespaced_pod("alice-jobs", running_gpu_pod("long"))
    await wait_for_phase(core, "long", {"Running"})
    assert await service.lifecycle.tick(at(11, 0)) == []
    assert await phase(core, "long") == "Running"  # within the grace

    await service.lifecycle.tick(at(11, 1))  # end + 60 s grace: the stop rule deletes the pod
    await wait_for_phase(core, "long", {None})
    await service.lifecycle.tick(at(11, 2))
    assert store.get(booking.id).server is None
    assert "server_stop_requested" in [e.kind for e in store.history(booking.id)]


async def test_a_claim_whose_pod_never_appeared_is_released_after_the_create_window(
        cluster_and_service):
    _core, service = cluster_and_service
    store = service.store
    booking = store.create("alice", "a100", 1, at(10), at(11))
    store.claim(booking.id, "pod:alice-jobs/refused-later")  # as if a later webhook refused it
    await service.lifecycle.tick(at(10, 5))
    assert store.get(booking.id).server == "pod:alice-jobs/refused-later"
    await service.lifecycle.tick(at(10, 6) + timedelta(seconds=1))
    assert store.get(booking.id).server is None


async def test_the_reconcile_lists_claimed_pods_and_reads_only_those_not_listed(
        cluster_and_service, monkeypatch):
    """One listing per namespace holding claims instead of a read per claimed pod; a claimed
    pod missing from it is read: gone (released) or its label taken off (still running, kept)."""
    from kubernetes_asyncio.client import CoreV1Api

    core, service = cluster_and_service
    store = service.store
    # no Hub here: with its check off, the tick reconciles the claims once, at its end
    service.lifecycle.hub_servers.check_interval_minutes = 0
    reads = []
    read = CoreV1Api.read_namespaced_pod

    async def counted_read(api, name, namespace, **kwargs):
        reads.append(name)
        return await read(api, name, namespace, **kwargs)

    first = store.create("alice", "a100", 1, at(10), at(11))
    second = store.create("alice", "a100", 1, at(10), at(11))
    for name in ("one", "two"):
        await core.create_namespaced_pod("alice-jobs", running_gpu_pod(name))
        await wait_for_phase(core, name, {"Running"})
    booking_of = {store.get(b.id).server: b.id for b in (first, second)}
    assert set(booking_of) == {"pod:alice-jobs/one", "pod:alice-jobs/two"}
    monkeypatch.setattr(CoreV1Api, "read_namespaced_pod", counted_read)

    await service.lifecycle.tick(at(10, 30))
    assert reads == []  # both listed: nothing read, nothing released
    assert all(store.get(b).server == holder for holder, b in booking_of.items())

    await core.patch_namespaced_pod(
        "one", "alice-jobs", {"metadata": {"labels": {"gpubooking.jupyter.org/booking-id": None}}})
    await core.delete_namespaced_pod("two", "alice-jobs")
    await wait_for_phase(core, "two", {None})
    reads.clear()
    await service.lifecycle.tick(at(10, 31))
    assert sorted(reads) == ["one", "two"]
    assert store.get(booking_of["pod:alice-jobs/one"]).server == "pod:alice-jobs/one"
    assert store.get(booking_of["pod:alice-jobs/two"]).server is None


async def test_without_list_on_pods_the_reconcile_reads_each_claimed_pod(
        cluster_and_service, monkeypatch):
    """A service account granted only reads (pod-claims-rbac.yaml before 0.2.0) keeps working."""
    from kubernetes_asyncio.client import CoreV1Api
    from kubernetes_asyncio.client.exceptions import ApiException

    core, service = cluster_and_service
    store = service.store
    service.lifecycle.hub_servers.check_interval_minutes = 0  # no Hub: one reconcile a tick
    booking = store.create("alice", "a100", 1, at(10), at(11))
    await core.create_namespaced_pod("alice-jobs", running_gpu_pod("only"))
    await wait_for_phase(core, "only", {"Running"})
    reads = []
    read = CoreV1Api.read_namespaced_pod

    async def counted_read(api, name, namespace, **kwargs):
        reads.append(name)
        return await read(api, name, namespace, **kwargs)

    async def forbidden(api, namespace, **kwargs):
        raise ApiException(status=403, reason="Forbidden")

    monkeypatch.setattr(CoreV1Api, "read_namespaced_pod", counted_read)
    monkeypatch.setattr(CoreV1Api, "list_namespaced_pod", forbidden)
    await service.lifecycle.tick(at(10, 30))
    assert reads == ["only"] and store.get(booking.id).server == "pod:alice-jobs/only"
    await core.delete_namespaced_pod("only", "alice-jobs")
    await wait_for_phase(core, "only", {None})
    await service.lifecycle.tick(at(10, 31))
    assert store.get(booking.id).server is None


async def test_claims_wait_for_the_first_check_after_the_service_starts(tmp_path):
    """After a restore a booking a pod runs on is back unclaimed until the first tick's check
    of the admitted pods records its claim: until then a Hub server's claim is told to ask
    again, and a new pod's review is refused, so neither runs beside the pod on its GPUs."""
    async with webhook_cluster(tmp_path, datetime.now(timezone.utc)) as (core, service):
        await _claims_wait_for_the_first_check(core, service)


async def _claims_wait_for_the_first_check(core, service) -> None:
    from jhub_gpubooking.admission.server import STARTING
    from jhub_gpubooking.service.claims import IN_USE, PoolClaimRefused, claim_in_pool
    from jhub_gpubooking.service.claims import STARTING as STARTING_CLAIM

    store = service.store
    # the clock is the API server's here: the check compares the pod's creation with the booking's
    now = service.clock.now().replace(second=0, microsecond=0)
    start = now - timedelta(minutes=now.minute % 15)
    booking = store.create("alice", "a100", 2, start, start + timedelta(hours=1))
    await core.create_namespaced_pod("alice-jobs", running_gpu_pod("kept", gpus="2"))
    await wait_for_phase(core, "kept", {"Running"})
    store.release(booking.id, "pod:alice-jobs/kept")  # as a restore gives it back unclaimed

    # the first tick is slow to reach the Hub, as just after a restart (there is no Hub here:
    # its servers' check, turned off, waits for the test to let it answer with none)
    hub_answers = asyncio.Event()
    service.lifecycle.hub_servers.check_interval_minutes = 0
    check_servers = service.lifecycle.hub_servers.check

    async def slow_check(now):
        await hub_answers.wait()
        return await check_servers(now)

    service.lifecycle.hub_servers.check = slow_check
    service.lifecycle.start()
    try:
        # a Hub server's claim meanwhile is told to ask again (the spawner does), not claimed
        with pytest.raises(PoolClaimRefused) as starting:
            await claim_in_pool(service, "alice", service.pool_objects["a100"], "gpu")
        assert (starting.value.status, starting.value.reason) == (503, STARTING_CLAIM)
        assert store.get(booking.id).server is None
        with pytest.raises(Exception) as refused:
            await core.create_namespaced_pod("alice-jobs", running_gpu_pod("second", gpus="2"))
        assert json.loads(refused.value.body)["message"].endswith(STARTING)

        hub_answers.set()  # the check records the running pod's claim; then claims go on
        assert await service.lifecycle.after_first_check(10)
        with pytest.raises(PoolClaimRefused) as in_use:
            await claim_in_pool(service, "alice", service.pool_objects["a100"], "gpu")
        assert in_use.value.reason == IN_USE
        assert store.get(booking.id).server == "pod:alice-jobs/kept"
    finally:
        service.lifecycle.stop()


async def test_a_server_on_a_booking_restored_held_by_a_gone_pod_keeps_running(
        cluster_and_service, monkeypatch):
    """After a restore a booking may be back held by a pod that ended since, while the Hub
    server that claimed it next runs on it: the tick releases the gone pod's claim before it
    compares the Hub's servers, so the server gets its claim back instead of being stopped
    for a booking "in use by a pod"."""
    from jhub_gpubooking.service import hub_servers

    _core, service = cluster_and_service
    store = service.store
    booking = store.create("alice", "a100", 1, at(10), at(11))
    store.claim(booking.id, "pod:alice-jobs/gone")  # the backup's claim; that pod ended since
    running = {"alice": {"gpu": {"ready": True, "pending": None,
                                 "state": {"gpu_booking_id": booking.id}}}}
    stopped = []

    async def listing(api_url, token):
        return running

    async def servers_of(api_url, token, user):
        return running.get(user, {})

    async def stop(api_url, token, user, server, why):
        stopped.append((user, server, why))
        return True

    monkeypatch.setattr(hub_servers, "active_servers", listing)
    monkeypatch.setattr(hub_servers, "user_servers", servers_of)
    monkeypatch.setattr(hub_servers, "stop_hub_server", stop)
    await service.lifecycle.tick(at(10, 30))
    assert stopped == [] and store.get(booking.id).server == "gpu"
