"""Pure inventory discovery: GPU Feature Discovery labels, allocatable resources and HAMi's
register annotation → pools; bookings the nodes can no longer hold."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction

import pytest

from jhub_gpubooking.core.model import Booking, Placement, Pool
from jhub_gpubooking.devcluster import gpu_node
from jhub_gpubooking.inventory import (
    hami_devices,
    node_gpus,
    pools_from_nodes,
    unplaceable_bookings,
    with_hami_uuids,
)

NOW = datetime(2030, 5, 6, 10, 0, tzinfo=timezone.utc)
A100 = "NVIDIA-A100-SXM4-40GB"
H100 = "NVIDIA-H100-80GB-HBM3"
TEMPLATES = {
    A100: {"name": "a100-hami", "backend": "hami", "slices_per_gpu": 4},
    H100: {"name": "h100-mig", "backend": "mig", "slices_per_gpu": 2,
           "resource_name": "nvidia.com/mig-3g.40gb"},
    "Tesla-T4": {"name": "t4", "backend": "time-slicing", "slices_per_gpu": 4,
                 "resource_name": "nvidia.com/gpu.shared"},
}
REGISTER_OLD = ("GPU-aa,10,40960,100,NVIDIA-A100,0,true:GPU-bb,10,40960,100,NVIDIA-A100,0,false:"
                "GPU-cc,10,40960,100,NVIDIA-A100,0,true:")


def hami_node(name: str, register: str | None = None, count: int = 3) -> dict:
    node = gpu_node(name, product=A100, count=count, memory_mib=40960, hami_splits=10)
    if register is not None:
        node["metadata"]["annotations"] = {"hami.io/node-nvidia-register": register}
    return node


def mig_node(name: str, instances: int) -> dict:
    node = gpu_node(name, product=H100, count=8, memory_mib=81920,
                    labels={"nvidia.com/mig-3g.40gb.count": str(instances),
                            "nvidia.com/mig.strategy": "mixed"})
    node["status"]["allocatable"]["nvidia.com/mig-3g.40gb"] = str(instances)
    return node


def test_hami_register_annotation_in_both_formats():
    assert hami_devices(REGISTER_OLD) == [("GPU-aa", True), ("GPU-bb", False), ("GPU-cc", True)]
    assert hami_devices('[{"id": "GPU-aa", "count": 10, "health": true},'
                        ' {"id": "GPU-bb", "health": false}]') == [("GPU-aa", True),
                                                                   ("GPU-bb", False)]
    assert hami_devices("[broken") == []


def test_pools_from_labelled_nodes():
    t4 = gpu_node("t4-1", product="Tesla-T4", count=2, memory_mib=15360,
                  labels={"nvidia.com/gpu.replicas": "4"})
    t4["status"]["allocatable"]["nvidia.com/gpu.shared"] = "8"
    nodes = [hami_node("a100-1", REGISTER_OLD), mig_node("h100-1", 16), t4,
             gpu_node("other", product="Quadro", count=1)]
    pools = pools_from_nodes(nodes, TEMPLATES)
    assert pools == {
        # one of the three HAMi devices is unhealthy: two GPUs, pinned by their UUIDs
        "a100-hami": Pool(name="a100-hami", nodes={"a100-1": 2}, slices_per_gpu=4, backend="hami",
                          gpu_model=A100, gpu_memory_mib=40960,
                          gpu_uuids={"a100-1": ("GPU-aa", "GPU-cc")}),
        "h100-mig": Pool(name="h100-mig", nodes={"h100-1": 8}, slices_per_gpu=2, backend="mig",
                         resource_name="nvidia.com/mig-3g.40gb", gpu_model=H100,
                         gpu_memory_mib=81920),
        "t4": Pool(name="t4", nodes={"t4-1": 2}, slices_per_gpu=4, backend="time-slicing",
                   resource_name="nvidia.com/gpu.shared", gpu_model="Tesla-T4",
                   gpu_memory_mib=15360),
    }


def test_allocatable_caps_the_labelled_count_when_a_gpu_fails():
    node = gpu_node("l40s-1", product="L40S", count=4)
    node["status"]["allocatable"]["nvidia.com/gpu"] = "3"
    assert node_gpus(node, {"name": "l40s"}).count == 3
    assert node_gpus(mig_node("h100-1", 15), TEMPLATES[H100]).count == 7


@pytest.mark.parametrize("change", ["cordon", "not-ready"])
def test_cordoned_or_unready_nodes_give_no_gpus(change):
    node = gpu_node("l40s-1", product="L40S", count=4)
    if change == "cordon":
        node["spec"]["unschedulable"] = True
    else:
        node["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    assert node_gpus(node, {"name": "l40s"}).count == 0


def test_vanished_nodes_stay_with_zero_gpus():
    before = pools_from_nodes([hami_node("a100-1"), hami_node("a100-2")], TEMPLATES)
    after = pools_from_nodes([hami_node("a100-2")], TEMPLATES, previous=before)
    assert after["a100-hami"].nodes == {"a100-1": 0, "a100-2": 3}
    assert pools_from_nodes([], TEMPLATES, previous=after)["a100-hami"].nodes == {
        "a100-1": 0, "a100-2": 0}


@pytest.mark.parametrize(
    ("templates", "message"),
    [
        ({A100: {"backend": "hami"}}, "The pool template for GPU product"),
        ({A100: {"name": "x", "nodes": {"n": 1}}}, "which discovery fills in"),
        ({A100: {"name": "x"}, H100: {"name": "x", "backend": "mig"}}, "one identical template"),
    ],
)
def test_bad_templates_are_refused(templates, message):
    with pytest.raises(ValueError, match=message):
        pools_from_nodes([], templates)


def held(booking_id: int, node: str, gpus: tuple[int, ...], end: datetime = NOW + timedelta(hours=1),
         pool: str = "l40s") -> Booking:
    return Booking(user="alice", pool=pool, amount=Fraction(len(gpus)), start=NOW, end=end,
                   placement=Placement(node, gpus, 1), id=booking_id)


def test_unplaceable_bookings_are_named_with_the_reason():
    pools = {"l40s": Pool(name="l40s", nodes={"n1": 0, "n2": 2})}
    bookings = [held(1, "n1", (0,)), held(2, "n2", (1,)), held(3, "n2", (2, 3)),
                held(4, "n1", (0,), end=NOW), held(5, "n2", (0,), pool="gone")]
    assert unplaceable_bookings(bookings, pools, NOW + timedelta(minutes=1)) == {
        1: "Node n1 of pool l40s has no usable GPU any more (it left the cluster, is not ready "
           "or lost its GPUs), so booking 1 cannot be used.",
        3: "Node n2 of pool l40s now reports 2 GPU(s) and booking 3 holds GPU 3 there, so it "
           "cannot be used.",
        5: "GPU pool gone no longer exists, so booking 5 cannot be used.",
    }


def test_hami_devices_follow_their_index_not_the_listing_order():
    register = ('[{"id": "GPU-cc", "index": 2, "health": true},'
                ' {"id": "GPU-aa", "index": 0, "health": true},'
                ' {"id": "GPU-bb", "index": 1, "health": true}]')
    assert [uuid for uuid, _ in hami_devices(register)] == ["GPU-aa", "GPU-bb", "GPU-cc"]
    assert hami_devices('{"id": "GPU-aa"}') == []  # JSON, but not a list of devices


def test_configured_hami_pools_take_uuids_from_hamis_node_annotation():
    configured = Pool(name="lab", nodes={"a100-1": 3, "a100-2": 2, "a100-3": 2},
                      slices_per_gpu=4, backend="hami", gpu_memory_mib=40960,
                      gpu_uuids={"a100-3": ("GPU-x", "GPU-y")})
    nodes = [hami_node("a100-1", REGISTER_OLD),  # all three devices, one unhealthy
             hami_node("a100-2", REGISTER_OLD),  # three devices for two configured GPUs
             hami_node("a100-3", REGISTER_OLD)]  # configured UUIDs win
    filled = with_hami_uuids(configured, nodes)
    assert filled.gpu_uuids == {"a100-1": ("GPU-aa", "GPU-bb", "GPU-cc"),
                                "a100-3": ("GPU-x", "GPU-y")}
    assert with_hami_uuids(filled, nodes) == filled
    whole = Pool(name="whole", nodes={"a100-1": 3})
    assert with_hami_uuids(whole, nodes) is whole
