"""A webhook server on a free port over a real SQLite store, for the HTTP-level tests."""

from __future__ import annotations

import asyncio
import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

from jhub_gpubooking.admission.review import AdmissionSettings
from jhub_gpubooking.admission.server import start_webhook_server, webhook_app
from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.core.model import Pool
from jhub_gpubooking.db.session import make_engine, make_session_factory, upgrade
from jhub_gpubooking.db.store import BookingStore

NOW = datetime(2030, 5, 6, 10, 5, tzinfo=timezone.utc)
POOL = Pool(name="a100", nodes={"gpu-a100": 2}, backend="whole")


def make_store(directory) -> BookingStore:
    url = f"sqlite:///{directory / 'bookings.sqlite'}"
    upgrade(url)
    store = BookingStore(make_session_factory(make_engine(url)), {"a100": POOL},
                         clock=ManualClock(NOW))
    store.sync_pools()
    return store


class RunningWebhook:
    """``start()`` inside the test's event loop; ``url`` is http(s)://127.0.0.1:PORT."""

    def __init__(self, store, *, certfile="", keyfile="", client_ca_file="", client_names=(),
                 slots: asyncio.Semaphore | None = None, owners=None):
        self.store = store
        self.executor = ThreadPoolExecutor(2)
        self.settings = AdmissionSettings(
            pools=store.pools, namespace_owners=owners or {"alice-jobs": "alice"},
            hub_service_accounts=["system:serviceaccount:jhub:hub"], grace_seconds=30)
        self.options = {"certfile": certfile, "keyfile": keyfile,
                        "client_ca_file": client_ca_file}
        self.client_names = client_names
        self.slots = slots

    async def start(self) -> RunningWebhook:
        async def no_groups(group: str) -> set[str]:
            return set()

        app = webhook_app(store=self.store, executor=self.executor, clock=self.store.clock,
                          admission_settings=lambda: self.settings, group_members=no_groups,
                          review_slots=self.slots or asyncio.Semaphore(4),
                          client_names=self.client_names)
        self.server, port, _ = start_webhook_server(app, 0, "127.0.0.1", **self.options)
        scheme = "https" if self.options["certfile"] else "http"
        self.url = f"{scheme}://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        self.server.stop()
        await self.server.close_all_connections()
        self.executor.shutdown()


def review_body(pod: dict, namespace: str = "alice-jobs", creator: str = "alice",
                operation: str = "CREATE", **request) -> bytes:
    return json.dumps({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "namespace": namespace, "operation": operation,
                    "userInfo": {"username": creator}, "object": pod, **request},
    }).encode()


def gpu_pod(name: str = "train", gpus: str = "1", **metadata) -> dict:
    return {"metadata": {"name": name, **metadata},
            "spec": {"containers": [{"name": "main", "image": "python:3.12",
                                     "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}
