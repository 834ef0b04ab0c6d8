"""The node inventory component (``c.NodeInventory``): keep the booking pools in step with the
cluster's nodes, and flag what no longer fits.

:class:`NodeWatcher` lists and watches nodes with ``kubernetes_asyncio`` (which KubeSpawner
already brings) in an asyncio task of the service. On every change :class:`ClusterInventory`
rebuilds the pools (:mod:`jhub_gpubooking.inventory`), hands them to the BookingStore, and
records on each booking the cluster can no longer hold a ``flagged`` event (``unflagged`` when
it fits again, see :mod:`jhub_gpubooking.db.flags`), so nothing is silently dropped.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

import aiohttp
from traitlets import Any as AnyTrait
from traitlets import Bool, Dict, Unicode
from traitlets.config import LoggingConfigurable

from ..core.model import Pool
from ..db.flags import BookingFlags
from ..executor import in_executor
from ..gpu import pinning_gap
from ..inventory import pools_from_nodes, unplaceable_bookings, with_hami_uuids

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

log = logging.getLogger(__name__)


class ClusterInventory:
    """Applies a node snapshot: new pools into the store, flags onto bookings that lost GPUs."""

    def __init__(self, store: Any, templates: Mapping[str, Mapping[str, Any]],
                 flags: BookingFlags, on_pools: Callable[[dict[str, Pool]], None] = lambda p: None,
                 configured_uuids: bool = False):
        self.store = store
        # configured HAMi pools take their GPU UUIDs from HAMi's node annotation too
        self.configured_uuids = configured_uuids
        self.templates = dict(templates)
        self.flags = flags
        self.on_pools = on_pools
        # pools of the config file that discovery does not build stay as configured
        self.configured = dict(store.pools)
        pools_from_nodes([], self.templates)  # refuse bad templates at start, not at first node

    def apply(self, nodes: list[dict]) -> dict[str, Pool]:
        discovered = pools_from_nodes(nodes, self.templates, previous=self.store.pools)
        configured = self.configured
        if self.configured_uuids:
            configured = {name: with_hami_uuids(pool, nodes) for name, pool in configured.items()}
        pools = {**configured, **discovered}
        # one reference swap: readers in other threads see the old or the new pools, never a mix
        self.store.pools = pools
        self.store.sync_pools()
        flag_unplaceable(self.store, self.flags)
        self.on_pools(pools)
        return pools


def flag_unplaceable(store: Any, flags: BookingFlags) -> None:
    """Flag the bookings not over yet that the store's pools can no longer hold (their pool is
    gone, their node or GPUs are), and take the flag off those they hold again."""
    now = store.clock.now()
    live = [b for b in store.list(start=now) if b.status == "booked"]
    flags.update(unplaceable_bookings(live, store.pools, now), {b.id for b in live})


def _is_transient(error: Exception) -> bool:
    """An API or network failure (or a credential not readable yet): retried, not a bug."""
    from kubernetes_asyncio.client.exceptions import ApiException
    from kubernetes_asyncio.config import ConfigException

    return isinstance(error, (ApiException, ConfigException, aiohttp.ClientError,
                              asyncio.TimeoutError, OSError, ValueError))


class NodeWatcher:
    """List, then watch nodes in an asyncio task; relist when the watch expires (410) or fails.

    ``connect`` opens the ``kubernetes_asyncio`` API client, in the task: loading the client
    takes seconds, and the service must answer the Hub first. ``on_nodes`` is synchronous (it writes to the
    database) and runs in ``executor``, so the service keeps answering while it does.
    """

    def __init__(self, connect: Callable[[], Awaitable[ApiClient]],
                 on_nodes: Callable[[list[dict]], Any], label_selector: str = "",
                 watch_seconds: int = 300, retry_seconds: float = 5.0,
                 executor: Executor | None = None):
        self.connect = connect
        self.on_nodes = on_nodes
        self.label_selector = label_selector
        self.watch_seconds = watch_seconds
        self.retry_seconds = retry_seconds
        self.executor = executor
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Start watching (call inside the running event loop)."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="gpubooking-nodes")

    def stop(self) -> asyncio.Task | None:
        """Cancel the watch; await the returned task to wait until the connection is closed."""
        if self._task is not None:
            self._task.cancel()
        return self._task

    async def _run(self) -> None:
        api_client = None
        try:
            while True:
                try:
                    if api_client is None:
                        api_client = await self.connect()
                    await self._list_and_watch(api_client)
                except Exception as error:
                    if _is_transient(error):
                        log.warning("Node watch failed (%s); listing nodes again in %ss",
                                    error, self.retry_seconds)
                    else:  # a bug must not end inventory sync for the service's lifetime
                        log.exception("Applying the node inventory failed")
                await asyncio.sleep(self.retry_seconds)
        finally:
            if api_client is not None:
                await api_client.close()

    async def _apply(self, nodes: dict[str, dict]) -> None:
        await in_executor(self.executor, self.on_nodes, list(nodes.values()))

    async def _list_and_watch(self, api_client: ApiClient) -> None:
        from kubernetes_asyncio import watch
        from kubernetes_asyncio.client import CoreV1Api

        api = CoreV1Api(api_client)
        reply = await api.list_node(label_selector=self.label_selector, _preload_content=False)
        async with reply:
            listing = json.loads(await reply.read())
        nodes = {n["metadata"]["name"]: n for n in listing.get("items") or []}
        await self._apply(nodes)
        version = listing["metadata"]["resourceVersion"]
        while True:
            # "object": hand over the plain dicts, no model classes (pools are built from dicts)
            async with watch.Watch(return_type="object") as stream:
                async for event in stream.stream(
                    api.list_node, label_selector=self.label_selector, resource_version=version,
                    timeout_seconds=self.watch_seconds, allow_watch_bookmarks=True,
                ):
                    # ERROR events (410 Gone: the version expired) raise ApiException: relist
                    node = event["raw_object"]
                    version = node["metadata"]["resourceVersion"]
                    if event["type"] == "BOOKMARK":
                        continue
                    if event["type"] == "DELETED":
                        nodes.pop(node["metadata"]["name"], None)
                    else:
                        nodes[node["metadata"]["name"]] = node
                    await self._apply(nodes)


class NodeInventory(LoggingConfigurable):
    """Pools from the cluster's nodes, GPU UUIDs of configured HAMi pools, flags on bookings
    the pools can no longer hold, and the warnings about pools whose bookings cannot be pinned
    to their GPU."""

    inventory_from_nodes = Bool(
        False,
        help="Build pools from the cluster's nodes (GPU Feature Discovery labels, allocatable "
        "resources, HAMi annotations) and keep them in sync; configured pools with other names "
        "stay as configured.",
    ).tag(config=True)
    gpu_uuids_from_nodes = Bool(
        False,
        help="Watch the nodes of configured HAMi pools and take their GPU UUIDs from HAMi's "
        "node annotation (hami.io/node-nvidia-register) where the pool lists none, so a booked "
        "share is pinned to its GPU (nvidia.com/use-gpuuuid). Discovered pools "
        "(inventory_from_nodes) always do. Needs the node watch's rights.",
    ).tag(config=True)
    inventory_pool_templates = Dict(
        Dict(),
        help="GPU product (the nvidia.com/gpu.product node label) → pool template: a pool dict "
        "without 'nodes' and 'gpu_uuids', e.g. {'NVIDIA-A100-SXM4-40GB': {'name': 'a100', "
        "'backend': 'hami', 'slices_per_gpu': 4}}.",
    ).tag(config=True)
    inventory_node_selector = Unicode(
        "", help="Label selector limiting the watched nodes (e.g. nvidia.com/gpu.present=true)."
    ).tag(config=True)

    store = AnyTrait(help="The service's BookingStore; its pools are replaced on every change.")
    flags = AnyTrait(help="The BookingFlags (on the service's store) to update.")
    executor = AnyTrait(help="Executor the database work of every node change runs in.")
    connector = AnyTrait(help="ClusterAccess.connector: opens the Kubernetes API client.")
    on_pools = AnyTrait(help="Called with the new pools after every change.")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._pinning_warned: set[str] = set()
        self.warn_unpinned_pools(self.store.pools)
        self.node_watcher: NodeWatcher | None = None
        if not (self.inventory_from_nodes or self.gpu_uuids_from_nodes):
            # the pools are the config file's alone: once, at start, flag what an edit of it
            # left without GPUs (a pool removed or renamed, a node or GPUs taken out), so the
            # users see it instead of a server that cannot start; a watch does this on every
            # change of the nodes
            flag_unplaceable(self.store, self.flags)
            return
        templates = self.inventory_pool_templates if self.inventory_from_nodes else {}
        inventory = ClusterInventory(self.store, templates, self.flags, on_pools=self._use_pools,
                                     configured_uuids=self.gpu_uuids_from_nodes)
        purpose = "inventory_from_nodes" if self.inventory_from_nodes else "gpu_uuids_from_nodes"
        # checked now, so missing credentials stop the service at start in one sentence
        self.node_watcher = NodeWatcher(self.connector(purpose), inventory.apply,
                                        label_selector=self.inventory_node_selector,
                                        executor=self.executor)

    def _use_pools(self, pools: dict[str, Pool]) -> None:
        self.warn_unpinned_pools(pools)
        if self.on_pools is not None:
            self.on_pools(pools)

    def warn_unpinned_pools(self, pools: Mapping[str, Pool]) -> list[str]:
        """Log, once per distinct message, each pool whose bookings cannot be pinned to the GPU
        their placement holds (see :func:`jhub_gpubooking.gpu.pinning_gap`)."""
        gaps = [gap for gap in map(pinning_gap, pools.values()) if gap]
        for gap in gaps:
            if gap not in self._pinning_warned:
                self.log.warning("%s", gap)
        self._pinning_warned = set(gaps)
        return gaps

    def start(self) -> None:
        """Start the node watch, if on (inside the running event loop)."""
        if self.node_watcher is not None:
            self.node_watcher.start()

    def stop(self) -> None:
        if self.node_watcher is not None:
            # the task closes its connection when cancelled (at the latest when the loop ends)
            self.node_watcher.stop()
