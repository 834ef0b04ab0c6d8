"""The booking service's own webhook in front of the simulated API server, for the tests of
the webhook's claims through real pods (``webhook_cluster`` is an async context manager)."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime

from hub_harness import free_port
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from traitlets.config import Config

from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.devcluster import DevCluster, gpu_node
from jhub_gpubooking.service.app import GPUBookingService


@contextlib.asynccontextmanager
async def webhook_cluster(folder, now: datetime):
    """``(CoreV1Api, service)``: a cluster with one 2-GPU node and the namespaces ``default``
    and ``alice-jobs`` (owned by alice), the service's clock a ManualClock at ``now``."""
    port = free_port()
    nodes = [gpu_node("gpu-a100", count=2)]
    async with DevCluster(folder / "cluster", nodes, namespaces=("default", "alice-jobs"),
                          admission_webhooks=[f"http://127.0.0.1:{port}/mutate",
                                              f"http://127.0.0.1:{port}/validate"],
                          max_grace_seconds=1) as cluster:
        service = GPUBookingService(
            db_url=f"sqlite:///{folder / 'bookings.sqlite'}", upgrade_db=True,
            pools=[{"name": "a100", "nodes": {"gpu-a100": 2}}],
            hub_api_url="http://127.0.0.1:9/hub/api", api_token="service-token",
            clock=ManualClock(now),
            config=Config(
                Lifecycle={"no_show_minutes": 15, "stopped_release_minutes": 30,
                           "end_grace_seconds": 60},
                AdmissionWebhook={"webhook_port": port,
                                  "webhook_address": "127.0.0.1",
                                  "namespace_owners": {"alice-jobs": "alice"}},
                ClusterAccess={
                    "kubeconfig": str(cluster.write_kubeconfig(folder / "kubeconfig"))},
            ),
        )
        service.setup()
        service.webhook.start()
        configuration = cluster.client_configuration()  # HTTPS, trusting the devcluster's CA
        try:
            async with client.ApiClient(configuration) as api:
                yield client.CoreV1Api(api), service
        finally:
            service.webhook.stop()
            await service.webhook.server.close_all_connections()
            service.executor.shutdown(wait=True)


async def phase(core, name: str) -> str | None:
    try:
        return (await core.read_namespaced_pod(name, "alice-jobs")).status.phase
    except ApiException as error:
        if error.status == 404:
            return None
        raise


async def wait_for_phase(core, name: str, wanted: set) -> str | None:
    for _ in range(200):
        current = await phase(core, name)
        if current in wanted:
            return current
        await asyncio.sleep(0.05)
    raise AssertionError(f"pod {name} never reached {wanted} (last: {current})")
