"""Pods of Hub servers the Hub forgot (a start pending while the Hub restarted): the rule, and the
lifecycle tick deleting them through the simulated API server once their booking is over."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from cluster_service import service_on_cluster
from kubernetes_asyncio.client.exceptions import ApiException
from pod_commands import SLEEPER

from jhub_gpubooking.admission.claims import PodFacts
from jhub_gpubooking.cluster.orphans import LabelledPod, OrphanPods, overdue_pods
from jhub_gpubooking.core.model import Booking
from jhub_gpubooking.gpu import BOOKING_ID_KEY

NOW = datetime(2030, 5, 6, 10, 5, tzinfo=timezone.utc)
MINUTE = timedelta(minutes=1)


def at(hour: int, minute: int = 0, second: int = 0) -> datetime:
    return NOW.replace(hour=hour, minute=minute, second=second)


def booking(id: int, end: datetime, **changes) -> Booking:
    return Booking(user="ada", pool="a100", amount=1, start=at(10), end=end, id=id, **changes)


def test_a_pod_is_overdue_once_its_booking_is_over_for_longer_than_allowed():
    bookings = {1: booking(1, at(10, 30)), 2: booking(2, at(11)),
                3: booking(3, at(11), status="cancelled", updated=at(10, 20)),
                # a grant preempted at 10:29, cut back to 10:15 where the preempting booking starts
                5: booking(5, at(10, 15), release_reason="preempted", updated=at(10, 29))}
    running = PodFacts("Running")
    pods = [LabelledPod("jhub", "ended", 1, running), LabelledPod("jhub", "active", 2, running),
            LabelledPod("jhub", "cancelled", 3), LabelledPod("jhub", "unknown", 4, running),
            LabelledPod("jhub", "preempted", 5, running),
            LabelledPod("jhub", "finished", 1, PodFacts("Succeeded")),
            LabelledPod("jhub", "going", 1, PodFacts("Running", deleting=True))]
    ended, _, cancelled, _, preempted, _, _ = pods
    # the Hub's own stop gets the allowed minute, counted from when the booking became over
    assert overdue_pods(pods, bookings, at(10, 21), MINUTE) == []
    assert overdue_pods(pods, bookings, at(10, 21, 1), MINUTE) == [cancelled]
    assert overdue_pods(pods, bookings, at(10, 30, 1), MINUTE) == [cancelled, preempted]
    assert overdue_pods(pods, bookings, at(10, 31, 1), MINUTE) == [ended, cancelled, preempted]


def test_the_sweep_is_off_without_a_namespace(monkeypatch):
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert OrphanPods().hub_namespace == ""
    monkeypatch.setenv("POD_NAMESPACE", "jhub")  # what z2jh sets in the hub pod
    assert OrphanPods(connector=lambda purpose: None).hub_namespace == "jhub"


def labelled_pod(name: str, booking_id: int | str | None) -> dict:
    labels = {} if booking_id is None else {BOOKING_ID_KEY: str(booking_id)}
    return {"metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "notebook", "image": "jupyter/minimal:1",
                                     "command": SLEEPER,
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


@pytest.fixture
async def cluster_and_service(tmp_path):
    async with service_on_cluster(tmp_path, NOW, ("default", "jhub"), config={
            "Lifecycle": {"end_grace_seconds": 30},
            "OrphanPods": {"hub_namespace": "jhub", "orphan_pod_seconds": 60}},
    ) as core_and_service:
        yield core_and_service


async def pod_names(core) -> set[str]:
    for _ in range(100):
        pods = (await core.list_namespaced_pod("jhub")).items
        if not any(pod.metadata.deletion_timestamp for pod in pods):
            return {pod.metadata.name for pod in pods}
        await asyncio.sleep(0.05)
    raise AssertionError("pods still being deleted")


async def test_the_tick_deletes_the_pods_of_ended_bookings_the_hub_no_longer_stops(
        cluster_and_service):
    core, service = cluster_and_service
    store = service.store
    ended = store.create("ada", "a100", 1, at(10), at(10, 30))
    running = store.create("bob", "a100", 1, at(10), at(11, 30))
    for name, booking_id in (("jupyter-ada", ended.id), ("jupyter-bob", running.id),
                             ("unknown-booking", 999), ("not-a-booking", "x"),
                             ("no-label", None)):
        await core.create_namespaced_pod("jhub", labelled_pod(name, booking_id))
    everything = {"jupyter-ada", "jupyter-bob", "unknown-booking", "not-a-booking", "no-label"}
    # the end, its 30 s grace and the Hub's minute have not all passed
    await service.lifecycle.tick(at(10, 31, 30))
    assert await pod_names(core) == everything
    await service.lifecycle.tick(at(10, 31, 31))
    assert await pod_names(core) == everything - {"jupyter-ada"}
    # pods elsewhere are not the Hub's
    await core.create_namespaced_pod("default", labelled_pod("elsewhere", ended.id))
    assert await service.lifecycle.orphan_pods.sweep(at(10, 40)) == []
    assert (await core.read_namespaced_pod("elsewhere", "default")).metadata.name == "elsewhere"


async def test_without_the_api_the_sweep_logs_once_and_tries_again(cluster_and_service, caplog):
    core, service = cluster_and_service
    api_up = False
    reach_cluster = service.cluster_access.connector("the test")

    async def connect():
        if not api_up:
            raise ApiException(status=503, reason="the API server is restarting")
        return await reach_cluster()

    sweep = OrphanPods(hub_namespace="jhub", store=service.store, executor=service.executor,
                       connector=lambda purpose: connect)
    ended = service.store.create("ada", "a100", 1, at(10), at(10, 30))
    await core.create_namespaced_pod("jhub", labelled_pod("jupyter-ada", ended.id))
    assert await sweep.sweep(at(11)) == []
    assert await sweep.sweep(at(11)) == []
    assert caplog.text.count("Pods of ended bookings not checked") == 1
    api_up = True
    assert [pod.name for pod in await sweep.sweep(at(11))] == ["jupyter-ada"]
    assert await pod_names(core) == set()
