"""Scheduling: node selection, GPU capacity, API-server validation of extended resources."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest
from devcluster_helpers import pod_manifest
from kubernetes_asyncio.client.exceptions import ApiException

from jhub_gpubooking.devcluster import gpu_node, node_from_config, node_manifest
from jhub_gpubooking.devcluster.scheduler import failed_scheduling_message, unfit_reasons

A100_SELECTOR = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}


def gpu_limits(amount: str) -> dict:
    return {"container": {"resources": {"limits": {"nvidia.com/gpu": amount}}}}


async def wait_for(predicate, what: str, attempts: int = 200):
    for _ in range(attempts):
        result = predicate()
        if result:
            return result
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def test_gpu_node_builder():
    assert gpu_node("n1", product="NVIDIA-L4", count=2, memory_mib=23034, cpu="16", memory="64Gi") == {
        "metadata": {"name": "n1", "labels": {
            "kubernetes.io/hostname": "n1", "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-L4",
            "nvidia.com/gpu.count": "2", "nvidia.com/gpu.memory": "23034"}},
        "spec": {"taints": []},
        "status": {
            "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "2"},
            "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "2"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": "n1"}],
            "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "devcluster://local-processes",
                         "kernelVersion": "", "kubeProxyVersion": "v1.31.0-devcluster",
                         "kubeletVersion": "v1.31.0-devcluster", "machineID": "", "operatingSystem": "linux",
                         "osImage": "devcluster", "systemUUID": ""},
        },
    }


def test_hami_node_advertises_vgpus_memory_and_cores():
    node = node_from_config({"name": "hami-1", "gpu": {"count": 2, "memory_mib": 40960, "hami_splits": 10}})
    allocatable = node["status"]["allocatable"]
    assert {key: allocatable[key] for key in allocatable if key.startswith("nvidia.com/")} == {
        "nvidia.com/gpu": "20", "nvidia.com/gpumem": "81920", "nvidia.com/gpucores": "200"}


def test_failed_scheduling_message_reads_like_kube_scheduler():
    message = failed_scheduling_message(2, [["node(s) didn't match Pod's node affinity/selector"],
                                            ["Insufficient nvidia.com/gpu"]])
    assert message == ("0/2 nodes are available: 1 Insufficient nvidia.com/gpu, "
                       "1 node(s) didn't match Pod's node affinity/selector.")


def test_taints_need_tolerations():
    node = node_manifest("tainted", {}, {"cpu": "4", "pods": "10"},
                         taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    pod = pod_manifest("p")
    assert unfit_reasons(pod, node, Counter()) == ["node(s) had untolerated taint {nvidia.com/gpu: present}"]
    pod["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert unfit_reasons(pod, node, Counter()) == []


async def test_gpu_pod_lands_on_the_gpu_node(cluster, core):
    await core.create_namespaced_pod("default", pod_manifest("one-gpu", nodeSelector=A100_SELECTOR, **gpu_limits("1")))
    pod = await wait_for(lambda: cluster.store.get("pods", "default", "one-gpu")["spec"].get("nodeName"),
                         "pod bound")
    assert pod == "gpu-a100"
    stored = cluster.store.get("pods", "default", "one-gpu")
    assert {c["type"]: c["status"] for c in stored["status"]["conditions"]}["PodScheduled"] == "True"


async def test_required_node_affinity_in_notin_exists(cluster, core):
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.count", "operator": "Exists"},
                              {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["cpu-only"]},
                              {"key": "nvidia.com/gpu.product", "operator": "In",
                               "values": ["NVIDIA-A100-SXM4-40GB", "NVIDIA-H100-80GB-HBM3"]}]}]}}}
    await core.create_namespaced_pod("default", pod_manifest("affine", affinity=affinity))
    assert await wait_for(lambda: cluster.store.get("pods", "default", "affine")["spec"].get("nodeName"),
                          "pod bound") == "gpu-a100"


async def test_unschedulable_pod_stays_pending_with_the_real_message(cluster, core):
    await core.create_namespaced_pod("default", pod_manifest("too-big", **gpu_limits("3")))

    def failed_scheduling():
        events = [e for e in cluster.store.objects("events") if e["involvedObject"]["name"] == "too-big"]
        return [e for e in events if e["reason"] == "FailedScheduling"]

    events = await wait_for(failed_scheduling, "FailedScheduling event")
    message = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    assert [(e["type"], e["message"]) for e in events] == [("Warning", message)]
    pod = cluster.store.get("pods", "default", "too-big")
    assert pod["status"]["phase"] == "Pending" and "nodeName" not in pod["spec"]
    scheduled = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (scheduled["status"], scheduled["reason"], scheduled["message"]) == ("False", "Unschedulable", message)


async def test_mixed_reasons_and_retry_after_the_gpus_are_freed(cluster, core):
    await core.create_namespaced_pod("default", pod_manifest("first", nodeSelector=A100_SELECTOR, **gpu_limits("2")))
    await wait_for(lambda: cluster.store.get("pods", "default", "first")["status"]["phase"] == "Running", "first runs")
    await core.create_namespaced_pod("default", pod_manifest("second", nodeSelector=A100_SELECTOR, **gpu_limits("1")))
    second = await wait_for(lambda: next((c for c in cluster.store.get("pods", "default", "second")["status"]
                                          .get("conditions", []) if c.get("reason") == "Unschedulable"), None),
                            "second unschedulable")
    assert second["message"] == ("0/2 nodes are available: 1 Insufficient nvidia.com/gpu, "
                                 "1 node(s) didn't match Pod's node affinity/selector.")
    await core.delete_namespaced_pod("first", "default", grace_period_seconds=0)
    assert await wait_for(lambda: cluster.store.get("pods", "default", "second")["spec"].get("nodeName"),
                          "second bound after first is gone") == "gpu-a100"


async def test_unknown_scheduler_name_leaves_the_pod_pending_silently(cluster, core):
    await core.create_namespaced_pod("default", pod_manifest("hami-pod", schedulerName="hami-scheduler"))
    await core.create_namespaced_pod("default", pod_manifest("marker"))  # scheduled after hami-pod was seen
    await wait_for(lambda: cluster.store.get("pods", "default", "marker")["spec"].get("nodeName"), "marker bound")
    pod = cluster.store.get("pods", "default", "hami-pod")
    assert "nodeName" not in pod["spec"] and "conditions" not in pod["status"]
    assert not [e for e in cluster.store.objects("events") if e["involvedObject"]["name"] == "hami-pod"]


async def test_adding_a_node_schedules_waiting_pods(cluster, core):
    selector = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    await core.create_namespaced_pod("default", pod_manifest("wants-h100", nodeSelector=selector, **gpu_limits("1")))
    await wait_for(lambda: any(e["reason"] == "FailedScheduling" for e in cluster.store.objects("events")),
                   "FailedScheduling")
    await core.create_node(gpu_node("h100-1", product="NVIDIA-H100-80GB-HBM3", count=8, memory_mib=81559))
    assert await wait_for(lambda: cluster.store.get("pods", "default", "wants-h100")["spec"].get("nodeName"),
                          "bound to the new node") == "h100-1"


@pytest.mark.parametrize(("resources", "cause"), [
    ({"limits": {"nvidia.com/gpu": "500m"}},
     'spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "500m": must be an integer'),
    ({"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}},
     ('spec.containers[0].resources.requests[nvidia.com/gpu]: Invalid value: "1": '
     "must be equal to nvidia.com/gpu limit of 2")),
    ({"requests": {"nvidia.com/gpumem": "4000"}},
     ("spec.containers[0].resources.limits[nvidia.com/gpumem]: Required value: "
     "Limit must be set for non overcommitable resources")),
])
async def test_bad_extended_resources_are_rejected_422(core, resources, cause):
    with pytest.raises(ApiException) as raised:
        await core.create_namespaced_pod("default", pod_manifest("bad", container={"resources": resources}))
    status = json.loads(raised.value.body)
    assert (raised.value.status, status["reason"]) == (422, "Invalid")
    assert status["message"] == f'Pod "bad" is invalid: {cause}'


def test_quantities_sent_as_numbers_are_stored_as_canonical_strings():
    from jhub_gpubooking.devcluster.scheduler import canonical_quantity

    assert [canonical_quantity(v) for v in (8.0, 0.5, 1073741824, 2, "4Gi", 0.0005)] == [
        "8", "500m", "1073741824", "2", "4Gi", "0.0005",
    ]
