"""Pools follow the simulated cluster's nodes through a real list+watch with
``kubernetes_asyncio``; bookings on a node that disappears are flagged, and unflagged when it
comes back."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime, timezone

import pytest
from kubernetes_asyncio import config

from jhub_gpubooking.cluster.nodes import ClusterInventory, NodeWatcher
from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.db.flags import BookingFlags
from jhub_gpubooking.db.session import make_engine, make_session_factory, upgrade
from jhub_gpubooking.db.store import BookingStore
from jhub_gpubooking.devcluster import DevCluster, gpu_node

NOW = datetime(2030, 5, 6, 10, 5, tzinfo=timezone.utc)
START = datetime(2030, 5, 6, 10, 0, tzinfo=timezone.utc)
END = datetime(2030, 5, 6, 12, 0, tzinfo=timezone.utc)
TEMPLATES = {"NVIDIA-A100-SXM4-40GB": {"name": "a100", "backend": "whole"}}


async def eventually(condition, what: str, attempts: int = 200):
    """Wait (without blocking the simulated API server) until ``condition()`` holds."""
    for _ in range(attempts):
        if condition():
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"never happened: {what}")


@pytest.fixture
def session_factory(tmp_path):
    url = f"sqlite:///{tmp_path / 'bookings.sqlite'}"
    upgrade(url)
    return make_session_factory(make_engine(url))


@pytest.fixture
async def synced(tmp_path, session_factory):
    clock = ManualClock(NOW)
    store = BookingStore(session_factory, {}, clock=clock)
    flags = BookingFlags(store)
    seen_pools = []
    inventory = ClusterInventory(store, TEMPLATES, flags, on_pools=seen_pools.append)
    nodes = [gpu_node("a100-1", count=2), gpu_node("a100-2", count=2),
             gpu_node("t4-1", product="Tesla-T4", count=1)]
    async with DevCluster(tmp_path / "cluster", nodes, bookmark_seconds=0.5) as cluster:
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        watcher = NodeWatcher(lambda: config.new_client_from_config(config_file=str(kubeconfig)),
                              inventory.apply, watch_seconds=1, retry_seconds=0.2)
        watcher.start()
        try:
            yield cluster, store, flags, seen_pools
        finally:
            with contextlib.suppress(asyncio.CancelledError):
                await watcher.stop()


async def test_pools_follow_nodes_and_lost_bookings_are_flagged(synced):
    cluster, store, flags, seen_pools = synced
    # on_pools is the last step of applying a snapshot: the store has its pools before that
    await eventually(lambda: seen_pools and "a100" in seen_pools[-1], "pool a100 discovered")
    assert store.pools["a100"].nodes == {"a100-1": 2, "a100-2": 2}
    assert seen_pools[-1] == store.pools

    first = store.create("alice", "a100", 2, START, END)
    second = store.create("bob", "a100", 2, START, END)
    assert {first.placement.node, second.placement.node} == {"a100-1", "a100-2"}
    lost, kept = sorted([first, second], key=lambda b: b.placement.node != "a100-1")

    cluster.delete("nodes", None, "a100-1")
    await eventually(lambda: lost.id in flags.current(), "booking on the removed node flagged")
    assert store.pools["a100"].nodes == {"a100-1": 0, "a100-2": 2}
    flag = flags.current()[lost.id]
    assert flag.message == (
        f"Node a100-1 of pool a100 has no usable GPU any more (it left the cluster, is not "
        f"ready or lost its GPUs), so booking {lost.id} cannot be used."
    )
    assert kept.id not in flags.current()
    # the booking is kept, with the flag in its history
    assert store.get(lost.id).status == "booked"
    assert [e.kind for e in store.history(lost.id)][-1] == "flagged"

    cluster.store.create("nodes", None, gpu_node("a100-1", count=2))
    await eventually(lambda: lost.id not in flags.current(), "flag cleared when the node is back")
    assert store.pools["a100"].nodes == {"a100-1": 2, "a100-2": 2}
    assert [e.kind for e in store.history(lost.id)][-2:] == ["flagged", "unflagged"]


async def test_a_gpu_failing_on_a_node_shrinks_the_pool(synced):
    cluster, store, flags, seen_pools = synced
    await eventually(lambda: seen_pools and "a100" in seen_pools[-1], "pool a100 discovered")
    held = store.create("alice", "a100", 2, START, END)

    def lose_a_gpu(node: dict) -> None:
        node["status"]["allocatable"]["nvidia.com/gpu"] = "1"

    cluster.store.update("nodes", None, held.placement.node, lose_a_gpu)
    await eventually(lambda: held.id in flags.current(), "booking on the shrunk node flagged")
    assert store.pools["a100"].nodes[held.placement.node] == 1
    assert "now reports 1 GPU(s)" in flags.current()[held.id].message


def test_configured_hami_pools_are_pinned_from_hamis_node_annotation(session_factory):
    """gpu_uuids_from_nodes: a configured HAMi pool without UUIDs takes them from the nodes, so
    its bookings get nvidia.com/use-gpuuuid."""
    from jhub_gpubooking.core.model import Pool
    from jhub_gpubooking.gpu import gpu_request

    lab = Pool(name="lab", nodes={"a100-1": 2, "a100-2": 2}, slices_per_gpu=4, backend="hami",
               gpu_memory_mib=40960)
    clock = ManualClock(NOW)
    store = BookingStore(session_factory, {"lab": lab}, clock=clock)
    store.sync_pools()
    seen = []
    inventory = ClusterInventory(store, {}, BookingFlags(store),
                                 on_pools=seen.append, configured_uuids=True)
    annotated = gpu_node("a100-1", count=2, hami_splits=10)
    annotated["metadata"]["annotations"] = {
        "hami.io/node-nvidia-register": '[{"id": "GPU-2", "index": 1}, {"id": "GPU-1", "index": 0}]'}
    pools = inventory.apply([annotated, gpu_node("a100-2", count=2, hami_splits=10)])
    assert pools["lab"].gpu_uuids == {"a100-1": ("GPU-1", "GPU-2")}
    assert store.pools["lab"] == pools["lab"] == seen[-1]["lab"]
    booking = store.create("ada", "lab", "1", START, END)
    request = gpu_request(store.pools["lab"], booking.amount, booking.placement)
    expected = {"a100-1": "GPU-1", "a100-2": None}[booking.placement.node]
    assert request.annotations.get("nvidia.com/use-gpuuuid") == expected


def test_the_service_warns_at_start_about_pools_it_cannot_pin(tmp_path, caplog):
    from jhub_gpubooking.service.app import GPUBookingService

    service = GPUBookingService(
        db_url=f"sqlite:///{tmp_path / 'bookings.sqlite'}", upgrade_db=True,
        pools=[{"name": "lab", "nodes": {"n1": 2}, "slices_per_gpu": 4, "backend": "hami",
                "gpu_memory_mib": 40960},
               {"name": "pinned", "nodes": {"n2": 1}, "slices_per_gpu": 4, "backend": "hami",
                "gpu_memory_mib": 40960, "gpu_uuids": {"n2": ["GPU-9"]}}],
        hub_api_url="http://127.0.0.1:9/hub/api", api_token="t",
    )
    service.log.addHandler(caplog.handler)  # the Application's logger does not propagate
    with caplog.at_level("WARNING"):
        service.setup()
    service.log.removeHandler(caplog.handler)
    try:
        warnings = [r.getMessage() for r in caplog.records if "GPU UUIDs" in r.getMessage()]
        assert warnings == [(
            "Pool lab (HAMi) has no GPU UUIDs for node(s) n1, so HAMi may place a booked share "
            "on another GPU than the booking holds and a booked whole GPU may stay Pending; set "
            "the pool's gpu_uuids, or turn on inventory_from_nodes or gpu_uuids_from_nodes to "
            "read them from HAMi's node annotation.")]
    finally:
        service.executor.shutdown(wait=True)
