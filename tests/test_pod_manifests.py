"""Pods that KubeSpawner 7.1 builds from each backend's settings are valid Kubernetes Pods.

Every supported Kubernetes version (1.32, the oldest z2jh 4.4 supports, through the newest
schema kubernetes-validate ships) checks each manifest strictly. Manifests are serialised with
kubernetes_asyncio's ApiClient, the client KubeSpawner itself sends pods with: its models are
kubernetes_asyncio models, which the synchronous client would serialise with snake_case keys.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction
from types import SimpleNamespace

import kubernetes_validate
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config import kube_config
from kubernetes_validate.utils import all_versions, latest_version, major_minor
from kubespawner import KubeSpawner
from kubespawner.objects import make_pod
from packaging.version import Version

from jhub_gpubooking.core.model import Booking, Placement, Pool
from jhub_gpubooking.gpu import GpuRequest, booking_pod_settings

OLDEST_SUPPORTED = Version("1.32")
SUPPORTED_VERSIONS = sorted(
    {major_minor(v) for v in all_versions() if Version(v) >= OLDEST_SUPPORTED}, key=Version
)

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
END = NOW + timedelta(hours=3)
GRACE_SECONDS = 300

HAMI = Pool(
    name="a100-hami", nodes={"gpu-b": 2}, slices_per_gpu=4, gpu_memory_mib=81920,
    backend="hami", gpu_uuids={"gpu-b": ("GPU-7f2a", "GPU-91cd")},
    node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
)
POOLS = {
    "whole": Pool(name="v100", nodes={"gpu-a": 4}),
    "hami": HAMI,
    "mig": Pool(name="a100-mig", nodes={"gpu-d": 2}, slices_per_gpu=7, backend="mig",
                resource_name="nvidia.com/mig-1g.10gb"),
    "time-slicing": Pool(name="t4", nodes={"gpu-e": 2}, slices_per_gpu=4,
                         backend="time-slicing"),
    "mps": Pool(name="l4", nodes={"gpu-f": 2}, slices_per_gpu=2, backend="mps",
                resource_name="nvidia.com/gpu.shared"),
    "gpu-manager": Pool(name="p100", nodes={"gpu-g": 2}, slices_per_gpu=4,
                        gpu_memory_mib=16384, backend="gpu-manager"),
    "volcano": Pool(name="a10", nodes={"gpu-h": 2}, slices_per_gpu=2, gpu_memory_mib=24576,
                    backend="volcano"),
}

# backend, amount, booked GPU indices -> the share the notebook container must carry
CASES = {
    "whole-1": ("whole", Fraction(1), (1,), {"nvidia.com/gpu": "1"}),
    "whole-2": ("whole", Fraction(2), (0, 3), {"nvidia.com/gpu": "2"}),
    "hami-1/4": ("hami", Fraction(1, 4), (1,),
                 {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20480",
                  "nvidia.com/gpucores": "25"}),
    "hami-1": ("hami", Fraction(1), (0,),
               {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "81920",
                "nvidia.com/gpucores": "100"}),
    "hami-2": ("hami", Fraction(2), (0, 1),
               {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "81920",
                "nvidia.com/gpucores": "100"}),
    "mig-2/7": ("mig", Fraction(2, 7), (0,), {"nvidia.com/mig-1g.10gb": "2"}),
    "mig-1": ("mig", Fraction(1), (1,), {"nvidia.com/mig-1g.10gb": "7"}),
    "mig-2": ("mig", Fraction(2), (0, 1), {"nvidia.com/mig-1g.10gb": "14"}),
    "time-slicing-3/4": ("time-slicing", Fraction(3, 4), (0,), {"nvidia.com/gpu": "3"}),
    "time-slicing-1": ("time-slicing", Fraction(1), (1,), {"nvidia.com/gpu": "4"}),
    "time-slicing-2": ("time-slicing", Fraction(2), (0, 1), {"nvidia.com/gpu": "8"}),
    "mps-1/2": ("mps", Fraction(1, 2), (1,), {"nvidia.com/gpu.shared": "1"}),
    "mps-1": ("mps", Fraction(1), (0,), {"nvidia.com/gpu.shared": "2"}),
    "mps-2": ("mps", Fraction(2), (0, 1), {"nvidia.com/gpu.shared": "4"}),
    "gpu-manager-1/2": ("gpu-manager", Fraction(1, 2), (0,),
                        {"tencent.com/vcuda-core": "50", "tencent.com/vcuda-memory": "32"}),
    "gpu-manager-1": ("gpu-manager", Fraction(1), (1,),
                      {"tencent.com/vcuda-core": "100", "tencent.com/vcuda-memory": "64"}),
    "gpu-manager-2": ("gpu-manager", Fraction(2), (0, 1),
                      {"tencent.com/vcuda-core": "200", "tencent.com/vcuda-memory": "128"}),
    "volcano-1/2": ("volcano", Fraction(1, 2), (1,),
                    {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "12288",
                     "volcano.sh/vgpu-cores": "50"}),
    "volcano-1": ("volcano", Fraction(1), (0,),
                  {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "24576",
                   "volcano.sh/vgpu-cores": "100"}),
    "volcano-2": ("volcano", Fraction(2), (0, 1),
                  {"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "24576",
                   "volcano.sh/vgpu-cores": "100"}),
}

# how the booked amount reads in the server's environment
AMOUNT_TEXT = {
    Fraction(1, 4): "0.25", Fraction(1, 2): "0.5", Fraction(3, 4): "0.75", Fraction(2, 7): "2/7",
    Fraction(1): "1", Fraction(2): "2",
}

# What a z2jh GPU profile typically already put on the spawner before the booking is applied.
PROFILE_TRAITS = {
    "extra_resource_limits": {"nvidia.com/gpu": "1"},
    "extra_resource_guarantees": {"nvidia.com/gpu": "1"},
    "node_selector": {"hub.jupyter.org/node-purpose": "user"},
    "extra_labels": {"hub.jupyter.org/network-access-hub": "true"},
    "extra_annotations": {"lab.example.org/cost-centre": "ml"},
    "environment": {"OMP_NUM_THREADS": "8"},
    "extra_pod_config": {"enableServiceLinks": False},
    "priority_class_name": "jhub-default-priority",
}


def booked_settings(case: str):
    backend, amount, gpus, _ = CASES[case]
    pool = POOLS[backend]
    node = next(iter(pool.nodes))
    slices = pool.slices_per_gpu if amount >= 1 else int(amount * pool.slices_per_gpu)
    booking = Booking(
        user="ada", pool=pool.name, amount=amount, start=NOW - timedelta(hours=1), end=END,
        placement=Placement(node=node, gpus=gpus, slices=slices), id=1207,
    )
    return booking_pod_settings(
        pool, booking, grace_seconds=GRACE_SECONDS, now=NOW, priority_class_name="gpu-booked"
    )


def build_pod(traits: dict):
    """The pod KubeSpawner 7.1 makes, with z2jh-like defaults next to the booking's traits."""
    return make_pod(
        name="jupyter-ada",
        cmd=["jupyterhub-singleuser"],
        port=8888,
        image="quay.io/jupyter/pytorch-notebook:cuda12-2025-01-06",
        image_pull_policy="IfNotPresent",
        uid=1000,
        fs_gid=100,
        cpu_limit=8.0,
        cpu_guarantee=2.0,
        mem_limit="32G",
        mem_guarantee="16G",
        scheduler_name="jhub-user-scheduler",
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        node_selector=traits["node_selector"],
        labels=traits["extra_labels"],
        annotations=traits["extra_annotations"],
        env=traits["environment"],
        extra_resource_limits=traits["extra_resource_limits"],
        extra_resource_guarantees=traits["extra_resource_guarantees"],
        extra_pod_config=traits["extra_pod_config"],
        priority_class_name=traits["priority_class_name"],
    )


async def serialised(pod) -> dict:
    async with ApiClient() as api:
        return api.sanitize_for_serialization(pod)


async def booked_manifest(case: str) -> dict:
    return await serialised(build_pod(booked_settings(case).merged_into(PROFILE_TRAITS)))


def test_versions_span_oldest_supported_to_newest_schema():
    assert SUPPORTED_VERSIONS[0] == "1.32"
    assert SUPPORTED_VERSIONS[-1] == major_minor(latest_version())
    assert len(SUPPORTED_VERSIONS) == len(set(SUPPORTED_VERSIONS)) >= 2


def test_cases_cover_every_backend():
    assert {backend for backend, *_ in CASES.values()} == set(POOLS)


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
@pytest.mark.parametrize("case", CASES)
async def test_manifest_is_a_valid_pod(case, version):
    manifest = await booked_manifest(case)
    assert kubernetes_validate.validate(manifest, version, strict=True) == version


@pytest.mark.parametrize("case", CASES)
async def test_manifest_carries_exactly_the_booked_share(case):
    backend, amount, _gpus, share = CASES[case]
    manifest = await booked_manifest(case)
    spec = manifest["spec"]
    (notebook,) = spec["containers"]
    gpu_limits = {k: v for k, v in notebook["resources"]["limits"].items()
                  if k not in ("cpu", "memory")}
    gpu_requests = {k: v for k, v in notebook["resources"]["requests"].items()
                    if k not in ("cpu", "memory")}
    assert gpu_limits == gpu_requests == share
    assert notebook["resources"]["limits"]["cpu"] == 8.0
    assert notebook["resources"]["requests"]["memory"] == "16G"

    pool = POOLS[backend]
    assert spec["nodeSelector"] == {
        "hub.jupyter.org/node-purpose": "user",
        **pool.node_selector,
        "kubernetes.io/hostname": next(iter(pool.nodes)),
    }
    assert spec["activeDeadlineSeconds"] == 3 * 3600 + GRACE_SECONDS
    assert spec["priorityClassName"] == "gpu-booked"
    assert spec["schedulerName"] == ("volcano" if backend == "volcano" else "jhub-user-scheduler")
    assert spec["enableServiceLinks"] is False

    assert manifest["metadata"]["labels"] == {
        "hub.jupyter.org/network-access-hub": "true",
        "gpubooking.jupyter.org/booking-id": "1207",
        "gpubooking.jupyter.org/pool": pool.name,
    }
    annotations = manifest["metadata"]["annotations"]
    assert annotations["gpubooking.jupyter.org/end"] == "2026-03-02T12:00:00Z"
    assert annotations["lab.example.org/cost-centre"] == "ml"
    env = {item["name"]: item["value"] for item in notebook["env"]}
    assert env == {
        "OMP_NUM_THREADS": "8",
        "GPU_BOOKING_ID": "1207",
        "GPU_BOOKING_END": "2026-03-02T12:00:00Z",
        "GPU_BOOKING_POOL": pool.name,
        "GPU_BOOKING_GPUS": AMOUNT_TEXT[amount],
    }


async def test_hami_manifest_pins_the_booked_gpus():
    manifest = await booked_manifest("hami-2")
    assert manifest["metadata"]["annotations"]["nvidia.com/use-gpuuuid"] == "GPU-7f2a,GPU-91cd"


async def test_gpu_manager_manifest_caps_cores():
    manifest = await booked_manifest("gpu-manager-1/2")
    assert manifest["metadata"]["annotations"]["tencent.com/vcuda-core-limit"] == "50"


@pytest.mark.parametrize(
    "break_it",
    [
        lambda manifest: manifest["spec"].update(activeDeadlineSeconds="at the end"),
        lambda manifest: manifest["spec"]["containers"][0].update(gpus=1),
        lambda manifest: manifest["metadata"]["annotations"].update({"count": 1}),
    ],
    ids=["deadline-not-a-number", "unknown-container-field", "annotation-not-text"],
)
async def test_strict_validation_would_catch_a_broken_pod(break_it):
    manifest = await booked_manifest("hami-1/4")
    break_it(manifest)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(manifest, SUPPORTED_VERSIONS[-1], strict=True)


@pytest.fixture
def offline_kubeconfig(tmp_path, monkeypatch):
    """KubeSpawner loads a kube config when created: give it one naming a cluster that is
    never contacted, and put the client's process-wide default configuration back after."""
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: offline, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: nobody, user: {token: unused}}]\n"
        "contexts: [{name: offline, context: {cluster: offline, user: nobody}}]\n"
        "current-context: offline\n"
    )
    # read once at import, so the KUBECONFIG variable would come too late
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(config))
    # setting the current value makes monkeypatch restore it when the test ends
    monkeypatch.setattr(Configuration, "_default", Configuration._default)


async def test_kubespawner_builds_the_booked_pod(offline_kubeconfig):
    spawner = KubeSpawner(
        user=SimpleNamespace(name="ada", id=3, url="/user/ada/"),
        hub=SimpleNamespace(
            public_host="", url="http://hub:8081/hub/", base_url="/hub/",
            api_url="http://hub:8081/hub/api",
        ),
        image="quay.io/jupyter/pytorch-notebook:cuda12-2025-01-06",
        scheduler_name="jhub-user-scheduler",
    )
    for name, value in PROFILE_TRAITS.items():
        setattr(spawner, name, value)

    def json_annotating_backend(pool, amount, placement):
        # a custom backend whose annotation contains braces KubeSpawner would otherwise expand
        return GpuRequest({"example.org/gpu": 1}, annotations={"example.org/spec": '{"cores": 50}'})

    pool = Pool(name="lab", nodes={"gpu-x": 1}, slices_per_gpu=2, backend="lab")
    booking = Booking(
        user="ada", pool="lab", amount=Fraction(1, 2), start=NOW, end=END,
        placement=Placement(node="gpu-x", gpus=(0,), slices=1), id=88,
    )
    booking_pod_settings(
        pool, booking, grace_seconds=0, now=NOW, backends={"lab": json_annotating_backend}
    ).apply_to(spawner)

    manifest = await serialised(await spawner.get_pod_manifest())
    assert kubernetes_validate.validate(manifest, SUPPORTED_VERSIONS[-1], strict=True)
    resources = manifest["spec"]["containers"][0]["resources"]
    # the profile's whole GPU is gone: the pod gets the booked share only
    assert resources["limits"] == resources["requests"] == {"example.org/gpu": "1"}
    assert manifest["metadata"]["annotations"]["example.org/spec"] == '{"cores": 50}'
    assert manifest["metadata"]["labels"]["gpubooking.jupyter.org/booking-id"] == "88"
    assert manifest["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "gpu-x"
    assert manifest["spec"]["activeDeadlineSeconds"] == 3 * 3600
    assert manifest["spec"]["priorityClassName"] == "jhub-default-priority"
