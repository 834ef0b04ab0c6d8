"""The kubelet: real processes, pod IPs, readiness, exits, deadlines, deletion and shutdown."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from pathlib import Path

import pytest
from devcluster_helpers import pod_manifest
from kubernetes_asyncio.client.exceptions import ApiException
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from jhub_gpubooking.devcluster import ApiError, DevCluster, gpu_node
from jhub_gpubooking.devcluster.kubelet import IpLeases, bind_inside_pod, container_argv

# Starts a child (same process group) and writes both pids, then waits forever.
FAMILY = [sys.executable, "-c",
          ("import os, subprocess, time\n"
          "child = subprocess.Popen(['sleep', '600'])\n"
          "open('pids.tmp', 'w').write(f'{os.getpid()} {child.pid}')\n"
          "os.rename('pids.tmp', 'pids')\n"
          "time.sleep(600)")]


def process_alive(pid: int) -> bool:
    """True unless the process is gone or a zombie waiting for a reaper (it no longer runs)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def wait_for(predicate, what: str, attempts: int = 300):
    for _ in range(attempts):
        result = predicate()
        if result:
            return result
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


def pod_or_none(cluster: DevCluster, name: str) -> dict | None:
    try:
        return cluster.store.get("pods", "default", name)
    except ApiError:
        return None


def pod_dir(cluster: DevCluster, name: str) -> Path:
    return next((cluster.state_dir / "pods").glob(f"default_{name}_*"))


async def family_pids(cluster: DevCluster, name: str) -> list[int]:
    pids_file = await wait_for(lambda: next((cluster.state_dir / "pods").glob(f"default_{name}_*/pids"), None),
                               "pids written")
    return [int(pid) for pid in pids_file.read_text().split()]


def reasons(cluster: DevCluster, name: str) -> list[str]:
    return [e["reason"] for e in cluster.store.objects("events") if e["involvedObject"]["name"] == name]


def test_wildcard_bind_becomes_the_pod_ip():
    assert bind_inside_pod("http://0.0.0.0:8888/user/ada/", "127.0.0.5") == "http://127.0.0.5:8888/user/ada/"
    assert bind_inside_pod("--ip=0.0.0.0", "127.0.0.5") == "--ip=127.0.0.5"
    assert bind_inside_pod("http://10.1.2.3:8888/", "127.0.0.5") == "http://10.1.2.3:8888/"


def test_command_and_args_over_the_image_defaults():
    entrypoint, cmd = ["tini", "--"], ["jupyterhub-singleuser"]
    assert container_argv({}, entrypoint, cmd) == ["tini", "--", "jupyterhub-singleuser"]
    assert container_argv({"args": ["jupyter", "lab"]}, entrypoint, cmd) == ["tini", "--", "jupyter", "lab"]
    assert container_argv({"command": ["sh"], "args": ["-c", "true"]}, entrypoint, cmd) == ["sh", "-c", "true"]
    assert container_argv({"command": ["sh"]}, entrypoint, cmd) == ["sh"]


async def test_pod_runs_with_env_pod_ip_and_home(cluster, core):
    await core.create_namespaced_secret("default", {"metadata": {"name": "creds"},
                                                    "data": {"token": base64.b64encode(b"t0ken").decode()}})
    script = ("import json, os; json.dump({k: os.environ.get(k) for k in "
              "['TOKEN', 'POD_IP', 'POD_NAME', 'NS', 'NODE', 'PLAIN', 'HOME']} | {'cwd': os.getcwd()}, "
              "open('env.json', 'w'))")
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
           {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
           {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
           {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
           {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
           {"name": "PLAIN", "value": "yes"}]
    await core.create_namespaced_pod("default", pod_manifest("envy", [sys.executable, "-c", script],
                                                             container={"env": env}))
    pod = await wait_for(lambda: (p := pod_or_none(cluster, "envy")) and p["status"]["phase"] == "Succeeded" and p,
                         "pod succeeded")
    workdir = pod_dir(cluster, "envy")
    seen = json.loads((workdir / "env.json").read_text())
    assert seen == {"TOKEN": "t0ken", "POD_IP": pod["status"]["podIP"], "POD_NAME": "envy", "NS": "default",
                    "NODE": pod["spec"]["nodeName"], "PLAIN": "yes", "HOME": str(workdir), "cwd": str(workdir)}
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
    assert {"Scheduled", "Pulled", "Created", "Started"} <= set(reasons(cluster, "envy"))


async def test_missing_secret_is_a_container_config_error(cluster, core):
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "token"}}}]
    await core.create_namespaced_pod("default", pod_manifest("no-secret", container={"env": env}))
    state = await wait_for(lambda: (pod_or_none(cluster, "no-secret")["status"].get("containerStatuses") or
                                    [{}])[0].get("state"), "container status")
    assert state == {"waiting": {"reason": "CreateContainerConfigError", "message": 'secret "absent" not found'}}


async def test_failing_process_marks_the_pod_failed(cluster, core):
    await core.create_namespaced_pod("default", pod_manifest("crash", [sys.executable, "-c", "raise SystemExit(3)"]))
    pod = await wait_for(lambda: (p := pod_or_none(cluster, "crash")) and p["status"]["phase"] == "Failed" and p,
                         "pod failed")
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3


async def test_ready_only_once_the_port_accepts_connections(cluster, core):
    server = ("import socket, time, os\n"
              "time.sleep(1)\n"
              "s = socket.socket(); s.bind((os.environ['POD_IP'], 18765)); s.listen(); time.sleep(600)")
    env = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    await core.create_namespaced_pod("default", pod_manifest(
        "listener", [sys.executable, "-c", server],
        container={"env": env, "ports": [{"name": "notebook-port", "containerPort": 18765}]}))
    running = await wait_for(lambda: (p := pod_or_none(cluster, "listener")) and p["status"]["phase"] == "Running"
                             and p, "running")
    assert running["status"]["containerStatuses"][0]["ready"] is False  # still sleeping before listen()
    ready = await wait_for(lambda: pod_or_none(cluster, "listener")["status"]["containerStatuses"][0]["ready"],
                           "ready")
    assert ready is True
    conditions = {c["type"]: c["status"] for c in pod_or_none(cluster, "listener")["status"]["conditions"]}
    assert conditions == {"PodScheduled": "True", "Initialized": "True", "ContainersReady": "True", "Ready": "True"}


async def test_pod_ips_are_distinct_and_reused(cluster, core, tmp_path):
    # Leases of its own: the other test set's devclusters run side by side and may take the freed
    # address machine-wide in the moment between the delete and the next create.
    cluster.kubelet.ip_leases = IpLeases(tmp_path / "leases")
    for name in ("ip-a", "ip-b"):
        await core.create_namespaced_pod("default", pod_manifest(name))
    ips = [await wait_for(lambda n=name: pod_or_none(cluster, n)["status"].get("podIP"), "ip")
           for name in ("ip-a", "ip-b")]
    assert len(set(ips)) == 2 and all(ip.startswith("127.0.") for ip in ips)
    await core.delete_namespaced_pod("ip-a", "default", grace_period_seconds=0)
    await wait_for(lambda: pod_or_none(cluster, "ip-a") is None, "ip-a gone")
    await core.create_namespaced_pod("default", pod_manifest("ip-c"))
    assert await wait_for(lambda: pod_or_none(cluster, "ip-c")["status"].get("podIP"), "ip") == ips[0]


async def test_delete_kills_the_whole_process_group(cluster, core):
    await core.create_namespaced_pod("default", pod_manifest("family", FAMILY))
    leader, child = await family_pids(cluster, "family")
    assert process_alive(leader) and process_alive(child)
    deleting = await core.delete_namespaced_pod("family", "default")
    assert deleting.metadata.deletion_timestamp is not None
    await wait_for(lambda: pod_or_none(cluster, "family") is None, "pod removed")
    await wait_for(lambda: not process_alive(leader) and not process_alive(child), "family gone")
    assert "Killing" in reasons(cluster, "family")


async def test_active_deadline_fails_the_pod_and_kills_it(cluster, core):
    await core.create_namespaced_pod("default", pod_manifest("deadline", FAMILY, activeDeadlineSeconds=1))
    leader, child = await family_pids(cluster, "deadline")
    pod = await wait_for(lambda: (p := pod_or_none(cluster, "deadline")) and p["status"]["phase"] == "Failed" and p,
                         "deadline exceeded")
    assert pod["status"]["reason"] == "DeadlineExceeded"
    await wait_for(lambda: not process_alive(leader) and not process_alive(child), "family gone")
    assert "DeadlineExceeded" in reasons(cluster, "deadline")


async def test_owned_objects_are_garbage_collected_with_their_pod(cluster, core):
    pod = await core.create_namespaced_pod("default", pod_manifest("owner"))
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "owner", "uid": pod.metadata.uid}
    await core.create_namespaced_secret("default", {"metadata": {"name": "owned", "ownerReferences": [owner]}})
    await core.delete_namespaced_pod("owner", "default", grace_period_seconds=0)
    await wait_for(lambda: pod_or_none(cluster, "owner") is None, "owner gone")
    with pytest.raises(ApiError):
        cluster.store.get("secrets", "default", "owned")


async def test_stop_leaves_no_process_behind(tmp_path):
    cluster = DevCluster(tmp_path / "state", [gpu_node("gpu-1", count=1)], max_grace_seconds=1)
    await cluster.start()
    pids = []
    try:
        for name in ("s1", "s2"):
            cluster.store.create("pods", "default", pod_manifest(name, FAMILY))
            pids += await family_pids(cluster, name)
        assert all(process_alive(pid) for pid in pids)
    finally:
        await cluster.stop()
    # stop() has SIGKILLed every group; the kernel finishes each death when it next runs the
    # process, which on a loaded machine is a moment after the signal
    await wait_for(lambda: not any(process_alive(pid) for pid in pids), "every process gone")


class AdmissionHandler(web.RequestHandler):
    """Denies pods labelled ``deny``; adds a label to every other pod with a JSONPatch."""

    def post(self) -> None:
        request = json.loads(self.request.body)["request"]
        labels = request["object"]["metadata"].get("labels") or {}
        response = {"uid": request["uid"], "allowed": "deny" not in labels}
        if response["allowed"]:
            patch = [{"op": "add", "path": "/metadata/labels/admitted", "value": "yes"}]
            response.update(patchType="JSONPatch", patch=base64.b64encode(json.dumps(patch).encode()).decode())
        else:
            response["status"] = {"code": 403, "message": "no booking for this GPU"}
        self.finish({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})


async def test_admission_webhook_denies_and_patches(tmp_path):
    sockets = bind_sockets(0, "127.0.0.1")
    webhook = HTTPServer(web.Application([(r"/admit", AdmissionHandler)]))
    webhook.add_sockets(sockets)
    url = f"http://127.0.0.1:{sockets[0].getsockname()[1]}/admit"
    try:
        async with DevCluster(tmp_path / "state", [gpu_node("gpu-1")], admission_webhooks=[url]) as cluster:
            from kubernetes_asyncio import client

            configuration = cluster.client_configuration()
            async with client.ApiClient(configuration) as api:
                core = client.CoreV1Api(api)
                admitted = await core.create_namespaced_pod("default", pod_manifest("ok", [sys.executable, "-c", ""]))
                assert admitted.metadata.labels["admitted"] == "yes"
                denied = pod_manifest("nope")
                denied["metadata"]["labels"]["deny"] = "1"
                with pytest.raises(ApiException) as raised:
                    await core.create_namespaced_pod("default", denied)
                assert raised.value.status == 403
                assert json.loads(raised.value.body)["message"] == (
                    f'admission webhook "{url}" denied the request: no booking for this GPU')
    finally:
        webhook.stop()


async def test_two_devclusters_never_hand_out_the_same_pod_ip(tmp_path):
    """Pod IPs are leased machine-wide, so parallel devclusters (test runs, the demo) cannot collide
    in the moment between one kubelet's free-port probe and its container binding the port."""
    first = DevCluster(tmp_path / "one", [gpu_node("gpu-1")])
    second = DevCluster(tmp_path / "two", [gpu_node("gpu-1")])
    async with first, second:
        manifest = pod_manifest("sleeper", container={"ports": [{"containerPort": 8888}]})
        first.store.create("pods", "default", manifest)
        second.store.create("pods", "default", manifest)

        def ips():
            found = [cluster.store.get("pods", "default", "sleeper")["status"].get("podIP")
                     for cluster in (first, second)]
            return found if all(found) else None

        one, two = await wait_for(ips, "both pods have an IP")
        assert one != two
    assert one not in first.kubelet.ip_leases and two not in second.kubelet.ip_leases  # released at stop
