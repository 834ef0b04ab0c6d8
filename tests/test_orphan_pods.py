"""Pods of Hub servers the Hub forgot (a start pending while the Hub restarted): the rules, and
the lifecycle tick deleting them through the simulated API server, once their booking is over,
or at once when the Hub does not have their server."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from cluster_service import service_on_cluster
from kubernetes_asyncio.client.exceptions import ApiException
from pod_commands import SLEEPER

from jhub_gpubooking.admission.claims import PodFacts, delete_pod
from jhub_gpubooking.admission.review import SERVERNAME_KEY, USERNAME_KEY
from jhub_gpubooking.cluster.orphans import (
    LabelledPod,
    OrphanPods,
    forgotten_pods,
    hub_server_candidates,
    overdue_pods,
)
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


def test_the_pods_asked_about_are_running_hub_server_pods_of_known_bookings():
    bookings = {1: booking(1, at(11))}
    running = PodFacts("Running")
    ada = LabelledPod("jhub", "jupyter-ada", 1, running, "u1", ("ada", ""))
    pods = [ada, LabelledPod("jhub", "job", 1, running, "u2"),  # not made for a Hub server
            LabelledPod("jhub", "jupyter-bob", 2, running, "u3", ("bob", "")),  # unknown booking
            LabelledPod("jhub", "going", 1, PodFacts("Running", True), "u4", ("ada", "x")),
            # another service's pod whose booking id is one of ada's here
            LabelledPod("jhub", "jupyter-eve", 1, running, "u5", ("eve", ""))]
    assert hub_server_candidates(pods, bookings) == [ada]


def test_a_pod_is_forgotten_when_no_active_hub_server_has_it():
    running = PodFacts("Running")
    ada = LabelledPod("jhub", "jupyter-ada", 1, running, "u1", ("ada", ""))
    ada_gpu = LabelledPod("jhub", "jupyter-ada--gpu", 2, running, "u2", ("ada", "gpu"))
    bob = LabelledPod("jhub", "jupyter-bob", 3, running, "u3", ("bob", ""))
    pods = [ada, ada_gpu, bob]
    # nobody has a server: every pod is forgotten
    assert forgotten_pods(pods, {}, "jhub") == pods
    # a server starting (or stopping) counts: the listing came after the pods'
    starting = {"ready": False, "pending": "spawn"}
    assert forgotten_pods(pods, {"ada": {"gpu": starting}}, "jhub") == [ada, bob]
    # bob was renamed to robert since the start: the state of robert's server names the pod
    robert = {"ready": True, "state": {"pod_name": "jupyter-bob", "namespace": "jhub"}}
    assert forgotten_pods(pods, {"robert": {"": robert}}, "jhub") == [ada, ada_gpu]
    elsewhere = {"ready": True, "state": {"pod_name": "jupyter-bob", "namespace": "other"}}
    assert forgotten_pods(pods, {"robert": {"": elsewhere}}, "jhub") == pods
    # a state from before KubeSpawner kept the namespace
    assert forgotten_pods([bob], {"robert": {"": {"state": {"pod_name": "jupyter-bob"}}}},
                          "jhub") == []


def test_the_sweep_is_off_without_a_namespace(monkeypatch):
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert OrphanPods().hub_namespace == ""
    monkeypatch.setenv("POD_NAMESPACE", "jhub")  # what z2jh sets in the hub pod
    assert OrphanPods(connector=lambda purpose: None).hub_namespace == "jhub"


def labelled_pod(name: str, booking_id: int | str | None,
                 hub_server: tuple[str, str] | None = None) -> dict:
    """A pod carrying ``booking_id``; with ``hub_server`` (user, name), KubeSpawner's pod of it."""
    labels = {} if booking_id is None else {BOOKING_ID_KEY: str(booking_id)}
    annotations = {}
    if hub_server is not None:
        annotations[USERNAME_KEY] = hub_server[0]
        if hub_server[1]:
            annotations[SERVERNAME_KEY] = hub_server[1]
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations},
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
    assert caplog.text.count("Pods of ended bookings and forgotten servers not checked") == 1
    api_up = True
    assert [pod.name for pod in await sweep.sweep(at(11))] == ["jupyter-ada"]
    assert await pod_names(core) == set()


class FakeHub:
    """The Hub's servers as OrphanPods asks for them; ``up`` False: the Hub cannot say."""

    def __init__(self, servers: dict[str, dict]):
        self.servers = servers
        self.up = True
        self.listings = 0
        self.after_listing = None  # called between the listing and a user's servers

    async def active(self):
        self.listings += 1
        return {user: dict(servers) for user, servers in self.servers.items()} if self.up else None

    async def of_user(self, user):
        if self.after_listing is not None:
            self.after_listing()
        return dict(self.servers.get(user, {})) if self.up else None


async def test_the_tick_deletes_the_pods_of_servers_the_hub_does_not_have(cluster_and_service,
                                                                           caplog):
    core, service = cluster_and_service
    store = service.store
    sweep = service.lifecycle.orphan_pods
    hub = sweep.hub_servers = FakeHub({"bob": {"": {"ready": False, "pending": "spawn"}}})
    ada, bob = (store.create(user, "a100", "1", at(10), at(11)) for user in ("ada", "bob"))
    carol = store.create("carol", "a100", "1", at(11), at(12))
    await core.create_namespaced_pod("jhub", labelled_pod("jupyter-ada", ada.id, ("ada", "")))
    await core.create_namespaced_pod("jhub", labelled_pod("jupyter-bob", bob.id, ("bob", "")))
    # a pod on carol's booking no Hub server made (a job in the Hub's namespace)
    await core.create_namespaced_pod("jhub", labelled_pod("carol-job", carol.id))
    assert not sweep.compared
    await service.lifecycle.tick(at(10, 10))
    assert await pod_names(core) == {"jupyter-bob", "carol-job"}
    assert sweep.compared
    assert (f"Deleted pod jhub/jupyter-ada of server '' of ada on booking {ada.id}: the Hub does "
            "not have that server") in caplog.text
    # bob's server is up now; its pod is a named server's
    hub.servers["bob"] = {"gpu": {"ready": True, "pending": None}}
    await service.lifecycle.tick(at(10, 11))
    assert await pod_names(core) == {"carol-job"}


async def test_a_pod_is_left_alone_while_the_hub_cannot_say_or_has_its_server_after_all(
        cluster_and_service):
    core, service = cluster_and_service
    sweep = service.lifecycle.orphan_pods
    hub = sweep.hub_servers = FakeHub({})
    ada = service.store.create("ada", "a100", "1", at(10), at(11))
    await core.create_namespaced_pod("jhub", labelled_pod("jupyter-ada", ada.id, ("ada", "")))
    hub.up = False
    assert await sweep.sweep(at(10, 10)) == []
    assert not sweep.compared  # the first check waits on
    hub.up = True

    # the listing came, the question about ada alone did not
    def hub_gone():
        hub.up = False

    hub.after_listing = hub_gone
    assert await sweep.sweep(at(10, 10)) == []
    assert not sweep.compared
    hub.up = True

    # the listing missed ada (a page shifted), her own servers have it
    def started():
        hub.servers["ada"] = {"": {"ready": True}}

    hub.after_listing = started
    assert await sweep.sweep(at(10, 10)) == []
    assert sweep.compared
    assert await pod_names(core) == {"jupyter-ada"}


async def test_no_pod_to_ask_about_asks_the_hub_nothing(cluster_and_service):
    core, service = cluster_and_service
    sweep = service.lifecycle.orphan_pods
    hub = sweep.hub_servers = FakeHub({})
    await core.create_namespaced_pod("jhub", labelled_pod("unknown-booking", 999, ("ada", "")))
    assert await sweep.sweep(at(10, 10)) == []
    assert hub.listings == 0 and sweep.compared


async def test_a_pod_made_since_under_the_name_is_not_deleted(cluster_and_service):
    """The sweep deletes the pod it listed, by UID: a server that stopped and started again
    meanwhile has a new pod of the same name."""
    core, _service = cluster_and_service
    old = await core.create_namespaced_pod("jhub", labelled_pod("jupyter-ada", 1))
    await core.delete_namespaced_pod("jupyter-ada", "jhub", grace_period_seconds=0)
    await pod_names(core)
    new = await core.create_namespaced_pod("jhub", labelled_pod("jupyter-ada", 1))
    assert not await delete_pod(core, "jhub", "jupyter-ada", uid=old.metadata.uid)
    assert (await core.read_namespaced_pod("jupyter-ada", "jhub")).metadata.uid == new.metadata.uid
    assert await delete_pod(core, "jhub", "jupyter-ada", uid=new.metadata.uid)
    assert await pod_names(core) == set()
