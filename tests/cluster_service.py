"""The booking service with Kubernetes credentials for the simulated API server, for the tests
of its cluster components through real pods (``service_on_cluster``, an async context manager),
and the pod phase helpers those tests wait with."""

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
async def service_on_cluster(folder, now: datetime, namespaces: tuple[str, ...],
                             config: dict, webhook: bool = False):
    """``(CoreV1Api, service)``: a cluster of one 2-GPU node and ``namespaces``, and the
    service (pool ``a100`` on that node, a ManualClock at ``now``, ``config``'s sections) that
    reaches it; with ``webhook``, the service's own admission webhook in front of the API."""
    port = free_port()
    hooks = [f"http://127.0.0.1:{port}/mutate", f"http://127.0.0.1:{port}/validate"]
    async with DevCluster(folder / "cluster", [gpu_node("gpu-a100", count=2)],
                          namespaces=namespaces, admission_webhooks=hooks if webhook else [],
                          max_grace_seconds=1) as cluster:
        sections = {**config, "ClusterAccess": {
            "kubeconfig": str(cluster.write_kubeconfig(folder / "kubeconfig"))}}
        if webhook:
            sections["AdmissionWebhook"] = {"webhook_port": port, "webhook_address": "127.0.0.1",
                                            **config.get("AdmissionWebhook", {})}
        service = GPUBookingService(
            db_url=f"sqlite:///{folder / 'bookings.sqlite'}", upgrade_db=True,
            pools=[{"name": "a100", "nodes": {"gpu-a100": 2}}],
            hub_api_url="http://127.0.0.1:9/hub/api", api_token="service-token",
            clock=ManualClock(now), config=Config(sections),
        )
        service.setup()
        if webhook:
            # as GPUBookingService.serve starts it (the lifecycle's loop only where a test starts it)
            service.webhook.start(first_check=service.lifecycle.after_first_check)
        try:
            # HTTPS, trusting the devcluster's CA
            async with client.ApiClient(cluster.client_configuration()) as api:
                yield client.CoreV1Api(api), service
        finally:
            if webhook:
                service.webhook.stop()
                await service.webhook.server.close_all_connections()
            service.executor.shutdown(wait=True)


@contextlib.asynccontextmanager
async def webhook_cluster(folder, now: datetime):
    """The webhook's tests: namespaces ``default`` and ``alice-jobs`` (owned by alice)."""
    async with service_on_cluster(
        folder, now, ("default", "alice-jobs"), webhook=True, config={
            "Lifecycle": {"no_show_minutes": 15, "stopped_release_minutes": 30,
                          "end_grace_seconds": 60},
            "AdmissionWebhook": {"namespace_owners": {"alice-jobs": "alice"}},
        }) as core_and_service:
        yield core_and_service


async def phase(core, name: str, namespace: str = "alice-jobs") -> str | None:
    """The pod's phase, None once it is gone."""
    try:
        return (await core.read_namespaced_pod(name, namespace)).status.phase
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
