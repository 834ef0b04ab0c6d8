"""GPUs reached by other routes than a GPU resource, in gated namespaces: DRA claims,
NVIDIA_VISIBLE_DEVICES, privileged containers, hostPath /dev/nvidia*, CDI annotations, init and
ephemeral containers. Each is refused with a sentence unless a booking holds every GPU it
reaches (table-driven)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from admission_fixtures import NOW, booking

from jhub_gpubooking.admission.review import (
    AdmissionSettings,
    review_ephemeral_containers,
    review_pod,
)
from jhub_gpubooking.admission.routes import device_routes


@pytest.fixture
def settings(pools) -> AdmissionSettings:
    return AdmissionSettings(pools=pools, namespace_owners={"alice-jobs": "alice"})


def pod(container: dict | None = None, *, kind: str = "containers", volumes=None,
        annotations=None, **spec) -> dict:
    containers = {"containers": [{"name": "main", "image": "python:3.12"}]}
    if container is not None:
        entry = {"name": "side", "image": "python:3.12", **container}
        if kind == "containers":
            containers["containers"].append(entry)
        else:
            containers[kind] = [entry]
    metadata = {"name": "tool", **({"annotations": annotations} if annotations else {})}
    return {"metadata": metadata,
            "spec": {**containers, **({"volumes": volumes} if volumes else {}), **spec}}


DEV_VOLUME = [{"name": "dev", "hostPath": {"path": "/dev/nvidia0"}}]
MOUNT = {"volumeMounts": [{"name": "dev", "mountPath": "/dev/nvidia0"}]}

# (id, pod, sentence of the route)
ROUTES = [
    ("privileged", pod({"securityContext": {"privileged": True}}),
     "container side is privileged, which exposes every GPU of its node"),
    ("privileged-init", pod({"securityContext": {"privileged": True}}, kind="initContainers"),
     "init container side is privileged, which exposes every GPU of its node"),
    ("visible-all", pod({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}),
     "container side sets NVIDIA_VISIBLE_DEVICES=all, which may name every GPU of its node"),
    ("visible-index", pod({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0,1"}]},
                          kind="initContainers"),
     "init container side sets NVIDIA_VISIBLE_DEVICES=0,1, which may name every GPU of its node"),
    ("visible-ref", pod({"env": [{"name": "NVIDIA_VISIBLE_DEVICES",
                                  "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]}),
     ("container side sets NVIDIA_VISIBLE_DEVICES from a reference, which may name every GPU "
      "of its node")),
    ("visible-uuid", pod({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "GPU-bbb"}]}),
     "container side sets NVIDIA_VISIBLE_DEVICES=GPU-bbb"),
    ("host-dev-nvidia", pod(MOUNT, volumes=DEV_VOLUME),
     "container side mounts the host's /dev/nvidia0, which exposes every GPU of its node"),
    ("host-dev", pod(MOUNT, volumes=[{"name": "dev", "hostPath": {"path": "/dev/"}}]),
     "container side mounts the host's /dev/, which exposes every GPU of its node"),
    ("cdi", pod(annotations={"cdi.k8s.io/gpu": "nvidia.com/gpu=all"}),
     ("the pod's annotation cdi.k8s.io/gpu injects devices through CDI, which may name every "
      "GPU of its node")),
]


def review(spec, bookings=(), settings=None):
    return review_pod(spec, "alice-jobs", "alice", settings, list(bookings), NOW)


@pytest.mark.parametrize(("case", "spec", "sentence"), ROUTES, ids=[r[0] for r in ROUTES])
def test_each_route_needs_a_booking(case, spec, sentence, settings):
    verdict = review(spec, settings=settings)
    assert not verdict.allowed
    assert verdict.message == (
        f"GPU pods need an active GPU booking and user alice has none now ({sentence}); "
        "book GPUs first."
    )


@pytest.mark.parametrize(("case", "spec", "sentence"), ROUTES, ids=[r[0] for r in ROUTES])
def test_a_fractional_booking_never_covers_a_route(case, spec, sentence, settings):
    verdict = review(spec, bookings=[booking()], settings=settings)
    assert verdict.message == (
        f"No active booking of user alice covers this pod's GPUs ({sentence}): a booking of "
        f"0.25 GPU in pool a100-hami: {sentence}, but a booking of 0.25 GPU holds no whole GPU."
    )


@pytest.mark.parametrize(("case", "spec", "sentence"), ROUTES, ids=[r[0] for r in ROUTES])
def test_a_booking_of_every_gpu_of_the_node_covers_every_route(case, spec, sentence, settings):
    whole_node = booking(amount=2, gpus=(0, 1), slices=4)
    verdict = review(spec, bookings=[whole_node], settings=settings)
    assert verdict.allowed and verdict.claim == "pod:alice-jobs/tool"
    assert {"op": "add", "path": "/spec/nodeSelector",
            "value": {"kubernetes.io/hostname": "gpu-1"}} in verdict.patch


def test_part_of_a_node_covers_only_the_uuids_it_holds(settings):
    one_gpu = booking(amount=1, gpus=(1,), slices=4)
    own = pod({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "GPU-bbb"}]})
    assert review(own, bookings=[one_gpu], settings=settings).allowed
    other = pod({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "GPU-bbb,GPU-aaa"}]})
    assert review(other, bookings=[one_gpu], settings=settings).message.endswith(
        "a booking of 1 GPU in pool a100-hami: container side sets "
        "NVIDIA_VISIBLE_DEVICES=GPU-bbb,GPU-aaa, but the booking does not hold GPU GPU-aaa.")
    everything = pod({"securityContext": {"privileged": True}})
    assert review(everything, bookings=[one_gpu], settings=settings).message.endswith(
        "container side is privileged, which exposes every GPU of its node, but the booking "
        "holds 1 of the 2 GPUs of its node.")


def test_dynamic_resource_allocation_is_refused_even_with_a_booking(settings):
    claims = pod(resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
    verdict = review(claims, bookings=[booking(amount=2, gpus=(0, 1), slices=4)],
                     settings=settings)
    assert verdict.message == (
        "In this namespace the pod asks for devices through spec.resourceClaims (dynamic "
        "resource allocation) cannot be allowed: a GPU booking cannot limit such a claim, so ask "
        "for GPUs as resources such as nvidia.com/gpu."
    )


@pytest.mark.parametrize("value", ["void", "none", "", " NONE "])
def test_visible_devices_naming_no_gpu_is_no_route(value, settings):
    spec = pod({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": value}]})
    assert device_routes(spec) == []
    assert review(spec, settings=settings).allowed


def test_harmless_host_paths_and_unprivileged_contexts_are_no_route():
    spec = pod({"securityContext": {"privileged": False},
                "volumeMounts": [{"name": "logs", "mountPath": "/logs"}]},
               volumes=[{"name": "logs", "hostPath": {"path": "/var/log"}},
                        {"name": "devnull", "hostPath": {"path": "/dev/null"}}])
    assert device_routes(spec) == []


def test_routes_add_to_a_gpu_resource_request(settings):
    spec = pod({"securityContext": {"privileged": True}})
    spec["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    verdict = review(spec, bookings=[booking(pool="l40s", amount=1, node="gpu-2", gpus=(0,))],
                     settings=settings)
    assert verdict.message.endswith(
        "a booking of 1 GPU in pool l40s: container side is privileged, which exposes every GPU "
        "of its node, but the booking holds 1 of the 4 GPUs of its node.")
    verdict = review(spec, bookings=[booking(pool="l40s", amount=4, node="gpu-2",
                                             gpus=(0, 1, 2, 3))], settings=settings)
    assert verdict.allowed and verdict.booking.amount == 4


def test_ephemeral_containers_reach_gpus_only_through_the_pods_own_booking(settings):
    running = pod({"securityContext": {"privileged": True}}, kind="ephemeralContainers")
    holder = "pod:alice-jobs/tool"
    whole_node = booking(amount=Fraction(2), gpus=(0, 1), slices=4, server=holder)

    def check(bookings):
        return review_ephemeral_containers(running, "alice-jobs", "alice", settings,
                                           bookings, NOW)

    assert check([whole_node]).allowed
    refused = check([booking(server=holder)])
    assert refused.message == (
        "Ephemeral container side is privileged, which exposes every GPU of its node: an "
        "ephemeral container may reach GPUs only in a pod holding an active booking of every "
        "GPU it reaches.")
    # a booking the pod does not hold does not help
    assert not check([whole_node.with_changes(server="pod:alice-jobs/other")]).allowed
    quiet = pod({"env": [{"name": "DEBUG", "value": "1"}]}, kind="ephemeralContainers")
    assert review_ephemeral_containers(quiet, "alice-jobs", "alice", settings, [], NOW).allowed
