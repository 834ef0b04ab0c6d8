"""Governance of GPU requests and booking coverage (pure rules)."""

from __future__ import annotations

import pytest
from admission_fixtures import gpu_pod

from jhub_gpubooking.admission.rules import RuleBroken, coverage_gap, pod_gpu_demand
from jhub_gpubooking.core.model import Pool


def test_pod_without_gpus_demands_nothing():
    pod = gpu_pod({"cpu": "2", "memory": "1Gi"})
    assert pod_gpu_demand(pod) == {}


def test_demand_sums_app_containers_and_takes_the_largest_init_container():
    pod = gpu_pod({"nvidia.com/gpu": "1"})
    pod["spec"]["containers"].append(
        {"name": "side", "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "1"}}})
    pod["spec"]["initContainers"] = [
        {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "4"}}},
        {"name": "fetch", "resources": {"limits": {"nvidia.com/gpumem": "100"}}},
    ]
    assert pod_gpu_demand(pod) == {"nvidia.com/gpu": 4, "nvidia.com/gpumem": 100}


def test_renamed_pool_resources_count_as_gpus():
    pod = gpu_pod({"example.org/accelerator": "1"})
    assert pod_gpu_demand(pod) == {}
    assert pod_gpu_demand(pod, {"example.org/accelerator"}) == {"example.org/accelerator": 1}


@pytest.mark.parametrize(
    ("limits", "requests", "message"),
    [
        ({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "2"},
         ("Container main requests 2 but limits 1 of nvidia.com/gpu; GPU requests must equal "
         "their limits.")),
        ({"cpu": "1"}, {"nvidia.com/gpu": "1"},
         ("Container main requests nvidia.com/gpu without a limit; GPU requests must equal "
         "their limits.")),
        ({"nvidia.com/gpu": "0.5"}, None,
         ("Container main asks for 0.5 of nvidia.com/gpu; extended resources must be whole "
         "numbers.")),
        ({"nvidia.com/gpu": "500m"}, None,
         ("Container main asks for 500m of nvidia.com/gpu; extended resources must be whole "
         "numbers.")),
        ({"nvidia.com/gpu": "lots"}, None,
         "Container main asks for 'lots' of nvidia.com/gpu, which is not a quantity."),
        ({"tencent.com/vcuda-core": "150", "tencent.com/vcuda-memory": "10"}, None,
         ("Container main asks for 150 tencent.com/vcuda-core; gpu-manager takes less than 100 "
         "(a share of one GPU) or a multiple of 100 (whole GPUs).")),
        ({"tencent.com/vcuda-core": "50"}, None,
         ("Container main asks for tencent.com/vcuda-core without tencent.com/vcuda-memory; "
         "gpu-manager needs both.")),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000",
          "nvidia.com/gpumem-percentage": "20"}, None,
         ("Container main sets both nvidia.com/gpumem and nvidia.com/gpumem-percentage; "
         "HAMi takes only one of them.")),
    ],
)
def test_malformed_gpu_requests_name_the_broken_rule(limits, requests, message):
    with pytest.raises(RuleBroken) as refusal:
        pod_gpu_demand(gpu_pod(limits, requests=requests))
    assert str(refusal.value) == message


@pytest.mark.parametrize(
    "limits",
    [
        {"tencent.com/vcuda-core": "50", "tencent.com/vcuda-memory": "20"},
        {"tencent.com/vcuda-core": "200", "tencent.com/vcuda-memory": "128"},
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "25"},
        {"nvidia.com/gpu": "2"},
    ],
)
def test_well_formed_gpu_requests_pass(limits):
    pod = gpu_pod(limits, requests=dict(limits))
    assert pod_gpu_demand(pod) == {name: int(count) for name, count in limits.items()}


HAMI = Pool(name="hami", nodes={"n": 1}, slices_per_gpu=4, backend="hami", gpu_memory_mib=40000)
QUARTER = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 10000, "nvidia.com/gpucores": 25}


@pytest.mark.parametrize(
    ("demand", "gap"),
    [
        (QUARTER, None),
        ({**QUARTER, "nvidia.com/gpumem": 5000}, None),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 25, "nvidia.com/gpucores": 25},
         None),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 26, "nvidia.com/gpucores": 25},
         "the pod asks for 10400 nvidia.com/gpumem but the booking gives 10000"),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 25},
         "the pod must also ask for nvidia.com/gpumem, or its share is not limited"),
        ({**QUARTER, "nvidia.com/mig-1g.10gb": 1}, "the booking gives no nvidia.com/mig-1g.10gb"),
        ({**QUARTER, "nvidia.com/gpucores": 50},
         "the pod asks for 50 nvidia.com/gpucores but the booking gives 25"),
    ],
)
def test_coverage_compares_with_what_the_booking_yields(demand, gap):
    assert coverage_gap(HAMI, QUARTER, demand) == gap
