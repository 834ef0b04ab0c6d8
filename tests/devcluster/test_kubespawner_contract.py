"""Contract test: an unmodified ``kubespawner.KubeSpawner`` starts and stops a real
``jupyterhub-singleuser`` through the devcluster, configured only through ``KUBECONFIG``."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from urllib.parse import urlsplit

import jupyterhub
import pytest
from hub_harness import free_port
from jupyterhub.objects import Hub, Server
from kubernetes_asyncio.config import kube_config
from kubespawner import KubeSpawner
from kubespawner.clients import load_config
from tornado import web
from tornado.httpclient import AsyncHTTPClient
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets
from traitlets.config import Config

from jhub_gpubooking.devcluster import ApiError, DevCluster, gpu_node
from jhub_gpubooking.spawner import GPUBookingSpawner

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


class HubUser:
    """The bits of a Hub ``User`` a spawner reads (KubeSpawner's own tests use a similar mock)."""

    name = "ada"
    id = 7
    url = "/user/ada/"
    escaped_name = "ada"


class HubVersionHandler(web.RequestHandler):
    """``GET /hub/api/``: jupyterhub-singleuser exits unless its Hub answers this at start-up."""

    def get(self) -> None:
        self.set_header("X-JupyterHub-Version", jupyterhub.__version__)
        self.finish({"version": jupyterhub.__version__})


@pytest.fixture
def hub_api():
    """The only Hub endpoint the single-user server needs to start; everything else may 404."""
    sockets = bind_sockets(0, "127.0.0.1", family=socket.AF_INET)
    server = HTTPServer(web.Application([(r"/hub/api/?", HubVersionHandler)]))
    server.add_sockets(sockets)
    yield Hub(ip="127.0.0.1", port=sockets[0].getsockname()[1], base_url="/hub/")
    server.stop()


def make_spawner(port: int, hub: Hub, spawner_class: type[KubeSpawner] = KubeSpawner) -> KubeSpawner:
    config = Config()
    config.KubeSpawner.namespace = "default"
    config.KubeSpawner.port = port
    config.KubeSpawner.start_timeout = 60
    config.KubeSpawner.http_timeout = 60
    spawner = spawner_class(config=config, user=HubUser(), hub=hub, api_token="contract-token",
                            oauth_client_id="jupyterhub-user-ada", _mock=True)
    spawner.server = Server(base_url="/user/ada/")
    return spawner


def process_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
async def kube_env(tmp_path, monkeypatch):
    # reflectors other tests left behind point at their clusters (the spawner tests' at port 9)
    await KubeSpawner._stop_all_reflectors()
    async with DevCluster(tmp_path / "state", [gpu_node("gpu-1", count=1)]) as cluster:
        kubeconfig_path = str(cluster.write_kubeconfig(tmp_path / "kubeconfig"))
        monkeypatch.setenv("KUBECONFIG", kubeconfig_path)
        # kubernetes_asyncio reads $KUBECONFIG once, at import; a Hub process has it set before that
        monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", kubeconfig_path)
        load_config.cache_clear()  # other tests may have loaded another cluster's config in this process
        yield cluster
        await KubeSpawner._stop_all_reflectors()
        load_config.cache_clear()
    for task in asyncio.all_tasks():  # kubespawner's shared-client closers wait for Hub shutdown
        if task.get_coro().__qualname__.endswith("close_client_task"):
            task.cancel()


async def test_kubespawner_start_poll_stop_runs_a_real_singleuser_server(kube_env, hub_api):
    spawner = make_spawner(free_port(), hub_api)
    url = await asyncio.wait_for(spawner.start(), 90)
    # what the Hub does with the URL start() returns
    spawner.server.ip, spawner.server.port = urlsplit(url).hostname, urlsplit(url).port

    pod = kube_env.store.get("pods", "default", spawner.pod_name)
    pod_ip = pod["status"]["podIP"]
    assert url == f"http://{pod_ip}:{spawner.port}"
    assert pod_ip.startswith("127.0.0.") and pod_ip != "127.0.0.1"
    response = await AsyncHTTPClient().fetch(f"{url}/user/ada/api")
    assert "version" in json.loads(response.body)
    assert await spawner.poll() is None
    # same-second events have no defined order, as in Kubernetes
    assert {"Scheduled", "Pulled", "Created", "Started"} <= {event["reason"] for event in spawner.events}

    pid = next(int(line.split()[0]) for line in _processes_in(kube_env, pod))
    await asyncio.wait_for(spawner.stop(), 60)
    assert not process_alive(pid)
    assert await spawner.poll() is not None
    with pytest.raises(ApiError):
        kube_env.store.get("pods", "default", spawner.pod_name)


@pytest.mark.parametrize("spawner_class", [KubeSpawner, GPUBookingSpawner])
async def test_a_reflector_whose_first_caller_was_cancelled_still_loads(
    kube_env, hub_api, spawner_class
):
    """The spawn page's progress stream starts the shared event reflector; a booking refusal
    ends that stream while the first list is on its way. KubeSpawner 7.1 keeps the reflector
    registered but never loaded, so every later start waits on it until its timeout;
    GPUBookingSpawner lets the first load finish (spawner.py, ``_start_reflector``). Should a
    KubeSpawner release fix this, the first case fails and the override can go."""
    spawner = make_spawner(free_port(), hub_api, spawner_class)
    key = spawner._get_reflector_key("events")
    first = asyncio.ensure_future(spawner._start_watching_events())
    while key not in KubeSpawner.reflectors:
        await asyncio.sleep(0)
    # registered, its first list on its way: the stream ends now
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    later = make_spawner(free_port(), hub_api, spawner_class)._start_watching_events()
    if spawner_class is KubeSpawner:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(later, 5)
    else:
        reflector = await asyncio.wait_for(later, 30)
        assert reflector.first_load_future.done() and reflector is KubeSpawner.reflectors[key]


def _processes_in(cluster: DevCluster, pod: dict) -> list[str]:
    """``pid`` lines of processes whose working directory is the pod's folder."""
    workdir = next((cluster.state_dir / "pods").glob(f"default_{pod['metadata']['name']}_*"))
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/cwd") == str(workdir):
                    found.append(entry)
            except OSError:
                continue
    return found
