"""Keep the booking pools in step with the cluster's nodes, and flag what no longer fits.

:class:`NodeWatcher` lists and watches nodes with ``kubernetes_asyncio`` (which KubeSpawner
already brings) in an asyncio task of the service. On every change :class:`ClusterInventory`
rebuilds the pools (:mod:`jhub_gpubooking.inventory`), hands them to the BookingStore, and records on each booking
the cluster can no longer hold a ``flagged`` event (``unflagged`` when it fits again), so nothing
is silently dropped: owners see their flags at ``api/flagged``, admins all at
``api/admin/flagged``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import aiohttp
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from .core.clock import Clock
from .core.model import Pool
from .core.timegrid import format_time
from .db.models import BookingEventRow
from .inventory import pools_from_nodes, unplaceable_bookings, with_hami_uuids
from .service.api import APIHandler

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

log = logging.getLogger(__name__)

FLAGGED = "flagged"
UNFLAGGED = "unflagged"
#: Actor recorded on flag events, so the history tells who raised them.
INVENTORY_ACTOR = "cluster-inventory"


@dataclass(frozen=True)
class Flag:
    booking_id: int
    message: str
    at: datetime


class BookingFlags:
    """Flags as ``booking_events`` rows: the newest flagged/unflagged event of a booking wins.

    Events need no schema change and keep the full story in the booking's history.
    """

    def __init__(self, session_factory: sessionmaker[Session], clock: Clock):
        self._session_factory = session_factory
        self._clock = clock

    @staticmethod
    def _current(session: Session) -> dict[int, Flag]:
        rows = session.scalars(
            select(BookingEventRow)
            .where(BookingEventRow.kind.in_((FLAGGED, UNFLAGGED)))
            .order_by(BookingEventRow.id)
        )
        flags: dict[int, Flag] = {}
        for row in rows:
            if row.kind == FLAGGED:
                flags[row.booking_id] = Flag(row.booking_id, row.detail.get("message", ""), row.at)
            else:
                flags.pop(row.booking_id, None)
        return flags

    def current(self) -> dict[int, Flag]:
        with self._session_factory.begin() as session:
            return self._current(session)

    def update(self, reasons: Mapping[int, str], live_ids: set[int]) -> None:
        """Flag ``reasons`` (id → message); unflag live bookings that are no longer in it."""
        at = self._clock.now().replace(microsecond=0)
        with self._session_factory.begin() as session:
            current = self._current(session)
            for booking_id, message in reasons.items():
                if booking_id not in current or current[booking_id].message != message:
                    log.warning("Flagging booking %s: %s", booking_id, message)
                    session.add(BookingEventRow(booking_id=booking_id, at=at, actor=INVENTORY_ACTOR,
                                                kind=FLAGGED, detail={"message": message}))
            for booking_id in (set(current) & live_ids) - set(reasons):
                session.add(BookingEventRow(
                    booking_id=booking_id, at=at, actor=INVENTORY_ACTOR, kind=UNFLAGGED,
                    detail={"message": "The GPUs of this booking are available again."},
                ))


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
        now = self.store.clock.now()
        live = [b for b in self.store.list(start=now) if b.status == "booked"]
        self.flags.update(unplaceable_bookings(live, pools, now), {b.id for b in live})
        self.on_pools(pools)
        return pools


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
        await asyncio.get_running_loop().run_in_executor(
            self.executor, self.on_nodes, list(nodes.values())
        )

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


# --- REST handlers ---------------------------------------------------------------------------


def _flag_json(flag: Flag, booking_model: dict) -> dict:
    return {"booking": booking_model, "message": flag.message, "flagged_at": format_time(flag.at)}


class FlaggedHandler(APIHandler):
    """``api/flagged``: the caller's bookings the cluster can no longer hold, with the reason;
    ``api/admin/flagged``: everyone's (administrators only)."""

    def initialize(self, flags: BookingFlags, everyone: bool, route_template: str = "") -> None:
        super().initialize(route_template)
        self.flags = flags
        self.everyone = everyone

    async def get(self) -> None:
        principal = self.require_admin() if self.everyone else self.require_user()
        flags = await self.run_in_executor(self.flags.current)
        bookings = await self.run_in_executor(
            self.store.list, user=None if self.everyone else principal.name,
            start=self.clock.now(),
        )
        models = [
            _flag_json(flags[b.id], self.booking_model(b))
            for b in bookings if b.id in flags and b.status == "booked"
        ]
        self.write_json({"flagged": models})


def flagged_routes(flags: BookingFlags) -> list[tuple[str, type, dict]]:
    """Route templates (relative to the service prefix), handlers and their arguments."""
    return [
        ("api/flagged", FlaggedHandler, {"flags": flags, "everyone": False}),
        ("api/admin/flagged", FlaggedHandler, {"flags": flags, "everyone": True}),
    ]
