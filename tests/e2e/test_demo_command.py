"""README's first command, as a user runs it: ``./scripts/demo`` comes up, serves a server, and
Ctrl-C leaves no process behind (Hub, proxy, service, simulated cluster, pod processes)."""

from __future__ import annotations

import os
import re
import secrets
import shlex
import signal
import subprocess
import time

import httpx
import pytest
from e2e_harness import REPO, free_ports
from hub_harness import descendant_pids, pid_alive

pytestmark = pytest.mark.e2e


@pytest.mark.kubectl
def test_demo_command_serves_and_ctrl_c_leaves_no_process(tmp_path, kubectl):
    port, k8s, hub, proxy_api, service = free_ports(5)
    token = secrets.token_hex(16)
    env = dict(
        os.environ,
        DEMO_PORT=str(port), DEMO_K8S_PORT=str(k8s), DEMO_HUB_PORT=str(hub),
        DEMO_PROXY_API_PORT=str(proxy_api), DEMO_SERVICE_PORT=str(service),
        DEMO_ADMIN_TOKEN=token, DEMO_STATE_DIR=str(tmp_path / "state"),
    )
    demo = subprocess.Popen(
        [str(REPO / "scripts" / "demo")], cwd=REPO, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        banner = []
        deadline = time.monotonic() + 600  # the first run may install the 'latest' environment
        for line in demo.stdout:
            banner.append(line)
            if "Press Ctrl-C to stop" in line or time.monotonic() > deadline:
                break
        text = "".join(banner)
        assert f"http://127.0.0.1:{port}/" in text and "password: demo" in text, text[-3000:]

        hub_api = httpx.Client(
            base_url=f"http://127.0.0.1:{port}/hub/api/",
            headers={"Authorization": f"token {token}"}, timeout=60,
        )
        assert hub_api.post("users/alice/server", json={"profile": "cpu"}).status_code in (201, 202)
        for _ in range(120):
            if hub_api.get("users/alice").json()["servers"].get("", {}).get("ready"):
                break
            time.sleep(0.5)
        else:
            pytest.fail("alice's CPU server did not become ready")
        check_printed_kubectl_command(text, tmp_path, k8s)

        started = descendant_pids(demo.pid)
        assert len(started) >= 4  # cluster, hub, proxy, service, pod process...

        demo.send_signal(signal.SIGINT)  # what Ctrl-C does
        assert demo.wait(timeout=120) == 0
        time.sleep(1)
        left = sorted(pid for pid in started if pid_alive(pid))
        assert left == [], f"processes left behind: {left}"
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
        demo.stdout.close()


def check_printed_kubectl_command(banner: str, home, k8s_port: int) -> None:
    """The kubectl command the demo prints works as printed (it lists alice's running pod), and the
    same kubeconfig serves get nodes, describe pod and get events against the running demo."""
    line = next(line for line in banner.splitlines() if "kubectl --kubeconfig" in line)
    assert f"(https://127.0.0.1:{k8s_port})" in line
    command = shlex.split(line.split("Cluster", 1)[1].split("(", 1)[0])
    assert command[0] == "kubectl" and command[-3:] == ["get", "pods", "-A"]

    def run(args: list[str]) -> str:
        done = subprocess.run(args, env=dict(os.environ, HOME=str(home)), capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, f"{args}: {done.stderr}"
        return done.stdout

    header, *rows = run(command).splitlines()
    assert re.split(r"\s{2,}", header)[:6] == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert any(re.split(r"\s+", row)[:4] == ["jhub-demo", "jupyter-alice", "1/1", "Running"] for row in rows), rows

    kubectl = command[:-3]  # kubectl --kubeconfig <the demo's kubeconfig>
    nodes = [re.split(r"\s+", row)[:2] for row in run([*kubectl, "get", "nodes"]).splitlines()[1:]]
    assert nodes == [["cpu-1", "Ready"], ["gpu-a100-1", "Ready"], ["gpu-a100-2", "Ready"], ["gpu-l4-1", "Ready"]]
    described = run([*kubectl, "describe", "pod", "jupyter-alice"])
    assert re.search(r"^Status:\s+Running$", described, re.MULTILINE), described
    assert re.search(r"Normal\s+Scheduled\s+.*Successfully assigned jhub-demo/jupyter-alice to ", described)
    events = run([*kubectl, "get", "events", "-n", "jhub-demo"])
    assert re.search(r"Normal\s+Started\s+pod/jupyter-alice\s", events), events


def test_a_hub_that_dies_during_start_up_leaves_no_proxy_behind(tmp_path):
    """The launcher stops the Hub's whole process group, even when the Hub itself is gone."""
    broken = tmp_path / "jupyterhub_config.py"
    # the proxy starts, then the Hub fails on a service it cannot start
    broken.write_text(
        (REPO / "demo" / "jupyterhub_config.py").read_text()
        + "\nc.JupyterHub.services[0]['command'] = ['/bin/false']\n"
    )
    from e2e_harness import launch

    port, k8s, hub, proxy_api, service = free_ports(5)
    demo = launch.Demo(
        state_dir=tmp_path / "state", port=port, k8s_port=k8s, hub_config=broken,
        log_dir=tmp_path / "logs",
        extra_env={"DEMO_HUB_PORT": str(hub), "DEMO_PROXY_API_PORT": str(proxy_api),
                   "DEMO_SERVICE_PORT": str(service)},
    )
    with pytest.raises((RuntimeError, TimeoutError)):
        demo.start()  # start() stops what it started when it fails
    proxy = int((tmp_path / "state" / "proxy.pid").read_text())  # the proxy did start
    deadline = time.monotonic() + 10
    while pid_alive(proxy) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(proxy)
    assert demo.hub.poll() is not None and demo.cluster.poll() is not None
