"""Node discovery from inside the hub pod, the way JupyterHub really starts the service.

Kubernetes sets KUBERNETES_SERVICE_HOST/PORT (and z2jh POD_NAMESPACE) for the hub container, but
JupyterHub starts a managed service with only its ``env_keep`` plus the service's
``environment``. Here the Hub runs with those variables (and nothing passes them on by itself);
the Hub's own service spawner starts the booking service; the service reaches the simulated
cluster through the real in-cluster config: HTTPS to KUBERNETES_SERVICE_HOST:PORT with the
service account's token, checked against its CA (only the token's and CA's folder differs from
a pod: see hub_pod_service.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from pathlib import Path

import httpx
import pytest
from hub_harness import start_booking_hub

from jhub_gpubooking.devcluster import DevCluster, gpu_node

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
TEMPLATES = {"NVIDIA-A100-SXM4-40GB": {"name": "discovered-a100", "backend": "whole"}}
ONE_LINE_REFUSAL = (
    "Configuration error: inventory_from_nodes needs the Kubernetes API, but "
    "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set in the service's environment"
)


@contextlib.asynccontextmanager
async def hub_pod(tmp_path: Path, monkeypatch, *, pass_environment: bool):
    """A cluster with one A100 node behind HTTPS, and a Hub whose process has the hub pod's
    variables; yields the running Hub (not waited for: the caller says what "up" means)."""
    async with DevCluster(tmp_path / "cluster", [gpu_node("a100-1", count=2)],
                          bookmark_seconds=0.5) as cluster:  # HTTPS, with its own CA
        account = tmp_path / "serviceaccount"
        account.mkdir()
        (account / "token").write_text(cluster.token)
        (account / "ca.crt").write_bytes(cluster.ca_file.read_bytes())
        # set for the Hub's process only, as Kubernetes and z2jh set them in the hub container
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(cluster.port))
        monkeypatch.setenv("POD_NAMESPACE", "jhub-test")
        command = [sys.executable, str(HERE / "hub_pod_service.py"), str(account),
                   "--config", str(tmp_path / "hub" / "gpubooking_service_config.py")]
        passing = "" if pass_environment else ", pass_environment=()"
        stack = contextlib.ExitStack()
        hub = await asyncio.to_thread(stack.enter_context, start_booking_hub(
            tmp_path / "hub",
            extra_service_config=f"""
                c.GPUBookingService.upgrade_db = True
                c.NodeInventory.inventory_from_nodes = True
                c.NodeInventory.inventory_pool_templates = {TEMPLATES!r}
            """,
            extra_hub_config=f"""
                import jhub_gpubooking
                jhub_gpubooking.configure(c, command={command!r}{passing})
            """,
            wait=False,
        ))
        try:
            yield hub
        finally:
            await asyncio.to_thread(stack.close)


async def test_the_service_discovers_the_nodes_with_the_hub_pods_environment(tmp_path, monkeypatch):
    async with hub_pod(tmp_path, monkeypatch, pass_environment=True) as hub:
        pools: dict = {}
        deadline = time.monotonic() + 120
        async with httpx.AsyncClient(headers={"Authorization": f"token {hub.service_token}"},
                                     timeout=10) as client:
            while "discovered-a100" not in pools and time.monotonic() < deadline:
                assert hub.process.poll() is None, hub.service_log()[-4000:]
                with contextlib.suppress(httpx.HTTPError):
                    response = await client.get(hub.service_url + "api/pools")
                    if response.status_code == 200:
                        pools = {pool["name"]: pool for pool in response.json()}
                await asyncio.sleep(0.5)
        assert "discovered-a100" in pools, hub.service_log()[-4000:]
        assert pools["discovered-a100"]["nodes"] == {"a100-1": 2}
        assert ONE_LINE_REFUSAL not in hub.service_log()


async def test_without_the_variables_the_service_refuses_in_one_line(tmp_path, monkeypatch):
    """What every hub-managed service got before configure passed the variables on."""
    async with hub_pod(tmp_path, monkeypatch, pass_environment=False) as hub:
        deadline = time.monotonic() + 120
        while ONE_LINE_REFUSAL not in hub.service_log() and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        log = hub.service_log()
    assert ONE_LINE_REFUSAL in log, log[-4000:]
    [line] = {line[line.index("Configuration error"):] for line in log.splitlines()
              if "Configuration error" in line}
    assert "jhub_gpubooking.configure(c) passes them on" in line
    # one sentence, not the kubernetes client's traceback
    assert "kubernetes_asyncio" not in log and "ConfigException" not in log
