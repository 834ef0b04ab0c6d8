"""The rule of the check of admitted pods (admission/admitted_pods.py): which listed pods it
looks at, and what it does about each one's booking."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta
from types import SimpleNamespace

import kubernetes_asyncio.client
import pytest
from admission_fixtures import BOOKING_END, NOW, booking, gpu_pod
from kubernetes_asyncio.client.exceptions import ApiException

from jhub_gpubooking.admission.admitted_pods import (
    AdmittedPod,
    AdmittedPods,
    PodFinding,
    admitted_pod,
    check_pod,
)
from jhub_gpubooking.admission.review import AdmissionSettings

GRACE = timedelta(seconds=60)
CREATED = "2030-05-06T10:01:00Z"


def listed(labels=None, annotations=None, resources=None, phase="Running", **metadata) -> dict:
    """A pod as the API lists it: namespace, creation time and status included."""
    pod = gpu_pod(resources if resources is not None else {"nvidia.com/gpu": "1"},
                  name="train", annotations=annotations,
                  labels=labels if labels is not None else {"gpubooking.jupyter.org/booking-id": "7"})
    pod["metadata"].update(namespace="alice-jobs", creationTimestamp=CREATED, **metadata)
    pod["status"] = {"phase": phase}
    return pod


@pytest.fixture
def settings(pools) -> AdmissionSettings:
    return AdmissionSettings(pools=pools, namespace_owners={"alice-jobs": "alice"})


def test_a_running_gpu_pod_with_the_label_is_looked_at(settings):
    assert admitted_pod(listed(), settings) == AdmittedPod(
        "alice-jobs", "train", 7, NOW.replace(minute=1))
    assert admitted_pod(listed(), settings).holder == "pod:alice-jobs/train"
    assert admitted_pod(listed(phase="Pending"), settings) is not None
    # what it was made for: the node it runs on, else the one it is pinned to while pending,
    # and the GPU indices the webhook annotated
    bound = listed(annotations={"gpubooking.jupyter.org/gpu-indices": "0,2"})
    bound["spec"].update(nodeName="gpu-2", nodeSelector={"kubernetes.io/hostname": "gpu-3"})
    assert (admitted_pod(bound, settings).node, admitted_pod(bound, settings).gpus) == (
        "gpu-2", (0, 2))
    pinned = listed(phase="Pending", annotations={"gpubooking.jupyter.org/gpu-indices": "x"})
    pinned["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "gpu-3"}
    assert (admitted_pod(pinned, settings).node, admitted_pod(pinned, settings).gpus) == (
        "gpu-3", None)


@pytest.mark.parametrize("pod", [
    listed(labels={}),
    listed(labels={"gpubooking.jupyter.org/booking-id": "seven"}),
    # a pod without GPUs holds none, and may carry any label: the webhook patches GPU pods only
    listed(resources={"cpu": "1"}),
    # a Hub server's pod is c.HubServers' and c.OrphanPods': KubeSpawner annotates each with
    # its user, and a named server's with its name too
    listed(annotations={"hub.jupyter.org/username": "alice"}),
    listed(annotations={"hub.jupyter.org/username": "alice", "hub.jupyter.org/servername": "gpu"}),
    listed(annotations={"hub.jupyter.org/servername": "gpu"}),
    listed(phase="Succeeded"),
    listed(phase="Failed"),
    listed(deletionTimestamp="2030-05-06T10:04:00Z"),
], ids=["no label", "not an id", "no GPUs", "hub default server", "hub named server",
        "servername only", "succeeded", "failed", "deleting"])
def test_pods_the_check_leaves_alone(settings, pod):
    assert admitted_pod(pod, settings) is None


POD = AdmittedPod("alice-jobs", "train", 7, NOW.replace(minute=1))
HOLDER = "pod:alice-jobs/train"
MADE = NOW - timedelta(minutes=10)


@pytest.mark.parametrize(("the_booking", "at", "expected"), [
    (None, NOW, PodFinding.GONE),
    (booking(server=HOLDER), NOW, None),  # the claims' reconcile's
    (booking(server=HOLDER), BOOKING_END + timedelta(hours=1), None),
    (booking(), NOW, PodFinding.UNCLAIMED),
    (booking(server="pod:alice-jobs/other"), NOW, None),
    (booking(server=""), NOW, None),  # a Hub server holds it: its GPUs count as booked
    (booking(), BOOKING_END + GRACE - timedelta(seconds=1), None),
    (booking(), BOOKING_END + GRACE, PodFinding.NOT_ACTIVE),
    (replace(booking(), status="cancelled"), NOW, PodFinding.NOT_ACTIVE),
    (replace(booking(), start=NOW + timedelta(hours=1)), NOW, PodFinding.NOT_ACTIVE),
    # made within the clocks' skew before the pod: the pod's own
    (replace(booking(), created=POD.created + timedelta(seconds=59)), NOW,
     PodFinding.UNCLAIMED),
    # made after the pod: another booking of that id (a database set up anew)
    (replace(booking(), created=POD.created + timedelta(minutes=2)), NOW,
     PodFinding.OTHER_BOOKING),
    (replace(booking(server=HOLDER), created=POD.created + timedelta(minutes=2)), NOW, None),
    # placed where the pod runs, or elsewhere (a restore gave back where it was before it moved)
    (booking(node="gpu-1"), NOW, PodFinding.UNCLAIMED),
    (booking(node="gpu-2"), NOW, PodFinding.OTHER_PLACEMENT),
    (booking(gpus=(0,)), NOW, PodFinding.OTHER_PLACEMENT),
    (booking(node="gpu-2", server=HOLDER), NOW, None),
], ids=["gone", "held by it", "held by it, ended", "unclaimed", "held by another pod",
        "held by a hub server", "ended within the grace", "ended", "cancelled", "upcoming",
        "made just before", "made after the pod", "made after but held by it",
        "where it was placed", "on another node", "on other GPUs", "elsewhere, held by it"])
def test_what_is_done_about_a_pods_booking(the_booking, at, expected):
    if the_booking is not None and the_booking.created is None:
        the_booking = replace(the_booking, created=MADE)
    assert check_pod(replace(POD, node="gpu-1", gpus=(1,)), the_booking, at, GRACE) == expected
    if expected is not PodFinding.OTHER_PLACEMENT:  # a pod that does not say where it runs
        assert check_pod(POD, the_booking, at, GRACE) == expected


def test_the_log_says_why():
    unclaimed = replace(booking(), created=MADE)
    assert PodFinding.GONE.describe(POD, None, NOW) == (
        "booking 7 is not in the booking database (taken away by a restore, or a database set "
        "up anew)")
    assert PodFinding.UNCLAIMED.describe(POD, unclaimed, NOW) == (
        "booking 7 had no claim (given back by a restore?)")
    assert PodFinding.NOT_ACTIVE.describe(POD, replace(unclaimed, status="cancelled"), NOW) == (
        "booking 7 is cancelled")
    assert PodFinding.OTHER_PLACEMENT.describe(replace(POD, node="gpu-2", gpus=(0,)), unclaimed,
                                               NOW) == (
        "booking 7 is placed on gpu-1 GPU 1, the pod was made for gpu-2 GPU 0 (a restore gave "
        "back its placement from before it moved)")
    assert [finding.deletes for finding in PodFinding] == [True, True, True, False, True]


class FakeCluster:
    """The API calls the check makes: a namespace it may not list answers 403."""

    def __init__(self, pods: dict[str, list[dict]], forbidden: set[str]):
        self.pods, self.forbidden, self.deleted = pods, forbidden, []

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False

    def sanitize_for_serialization(self, item):
        return item

    async def list_namespaced_pod(self, namespace, label_selector):
        assert label_selector == "gpubooking.jupyter.org/booking-id"
        if namespace in self.forbidden:
            raise ApiException(status=403, reason="Forbidden")
        return SimpleNamespace(items=self.pods.get(namespace, []))

    async def delete_namespaced_pod(self, name, namespace):
        self.deleted.append(f"{namespace}/{name}")


class NoBookings:
    def held_by_prefix(self, prefix):
        return []

    def get_many(self, ids):
        return {}


async def test_a_namespace_the_service_may_not_list_is_named_once_and_hides_no_other(
        pools, monkeypatch, caplog):
    pod = listed()
    pod["metadata"]["namespace"] = "bob-jobs"
    cluster = FakeCluster({"bob-jobs": [pod]}, forbidden={"alice-jobs"})
    monkeypatch.setattr(kubernetes_asyncio.client, "CoreV1Api", lambda api_client: api_client)

    async def connect():
        return cluster

    settings = AdmissionSettings(pools=pools, namespaces=("alice-jobs", "bob-jobs"))
    with ThreadPoolExecutor(1) as executor:
        check = AdmittedPods(NoBookings(), connect, executor, GRACE, lambda: settings)
        found = await check.check(NOW)
        assert [(pod.holder, finding) for pod, finding in found] == [
            ("pod:bob-jobs/train", PodFinding.GONE)]
        assert cluster.deleted == ["bob-jobs/train"]
        await check.check(NOW)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"
                and "not compared" in r.getMessage()]
    assert warnings == [
        "Admitted pods of namespace alice-jobs not compared with their bookings (retried every "
        "tick): 403 Forbidden: the hub's service account needs list on pods there, which "
        "pod-claims-rbac.yaml grants since 0.2.0 (apply it again)"]


async def test_a_round_that_could_not_reach_the_cluster_has_compared_nothing(pools, monkeypatch):
    """Claims wait for the first round that compared (service/lifecycle.py): one the cluster
    did not answer has not, a round without a namespace to look at has nothing to compare."""
    cluster = FakeCluster({}, forbidden=set())
    reachable = False
    monkeypatch.setattr(kubernetes_asyncio.client, "CoreV1Api", lambda api_client: api_client)

    async def connect():
        if not reachable:
            raise OSError("Connection refused")
        return cluster

    settings = AdmissionSettings(pools=pools, namespaces=("alice-jobs",))
    with ThreadPoolExecutor(1) as executor:
        check = AdmittedPods(NoBookings(), connect, executor, GRACE, lambda: settings)
        assert await check.check(NOW) == [] and not check.compared
        reachable = True
        assert await check.check(NOW) == [] and check.compared
        nowhere = AdmittedPods(NoBookings(), connect, executor, GRACE,
                               lambda: AdmissionSettings(pools=pools))
        reachable = False
        assert await nowhere.check(NOW) == [] and nowhere.compared
