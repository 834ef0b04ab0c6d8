"""Start the demo: the simulated Kubernetes API, then a real JupyterHub with the booking service.

Used by ``scripts/demo`` (foreground until Ctrl-C) and by the end-to-end tests (as a library, on free
ports). Stopping it stops the Hub first (which stops every server, so pods are deleted and their
processes killed), then the simulated cluster; nothing is left running.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from jhub_gpubooking.devcluster import KubeconfigAccess

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def free_ports(count: int) -> list[int]:
    """``count`` different TCP ports nobody listens on right now. Bound together: ports taken
    one after another may come back the same once the first socket is closed (seen when two
    test runs shared the machine: a Hub's public and internal port were one port)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _check_alive(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is not None:
        raise RuntimeError(f"{proc.args[:3]} exited with status {proc.returncode} during start-up")


def wait_for_file(path: Path, timeout: float, proc: subprocess.Popen | None = None) -> None:
    """Wait until ``path`` exists; fail early if ``proc`` died."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        _check_alive(proc)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} was not written within {timeout:.0f} s")
        time.sleep(0.1)


def wait_for_http(url: str, timeout: float, proc: subprocess.Popen | None = None,
                  context: ssl.SSLContext | None = None) -> None:
    """Poll ``url`` until it answers any HTTP status; fail early if ``proc`` died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _check_alive(proc)
        try:
            urllib.request.urlopen(url, timeout=2, context=context).close()
            return
        except urllib.error.HTTPError as error:
            # 404/502/503 come from the proxy while the route is missing; anything else is the app
            if error.code not in (404, 502, 503):
                return
            time.sleep(0.25)
        except OSError:
            time.sleep(0.25)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s")


def _die_with_parent() -> None:
    """Runs in the child before exec: if the launcher dies (even by SIGKILL), the child gets SIGTERM,
    so no demo process outlives it. Linux only; elsewhere a no-op."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def stop_orphaned_proxy(pid_file: Path) -> None:
    """JupyterHub runs configurable-http-proxy in its own session and stops it on a clean exit;
    a Hub that died (e.g. during start-up) leaves it running, found through its pid file."""
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return  # no proxy recorded, or it is gone
    if b"configurable-http-proxy" in cmdline:
        os.kill(pid, signal.SIGTERM)


def _stop_process_group(proc: subprocess.Popen | None, timeout: float) -> None:
    """Stop every process of ``proc``'s group, even when ``proc`` itself already exited: a Hub
    that died during start-up leaves its proxy behind in the same group."""
    if proc is None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return  # nobody is left in the group
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader so it does not count as alive
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(5)


@dataclass
class Demo:
    """One demo instance: its state folder, ports and the two process groups it owns."""

    state_dir: Path
    port: int = 8000
    k8s_port: int = 6443
    admin_token: str | None = None
    hub_config: Path = HERE / "jupyterhub_config.py"
    nodes_file: Path = HERE / "nodes.yaml"
    namespace: str = "jhub-demo"
    #: more namespaces to create at start (e.g. gated ones for pods made outside the Hub)
    extra_namespaces: tuple[str, ...] = ()
    #: URLs the simulated API server calls with an AdmissionReview on every pod create
    admission_webhooks: tuple[str, ...] = ()
    extra_env: dict[str, str] = field(default_factory=dict)
    log_dir: Path | None = None  # None: inherit the terminal

    cluster: subprocess.Popen | None = None
    hub: subprocess.Popen | None = None

    @property
    def hub_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def k8s_url(self) -> str:
        """The simulated API, served over HTTPS with a CA made at every start (in the kubeconfig)."""
        return f"https://127.0.0.1:{self.k8s_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    def service_token(self) -> str:
        """The booking service's API token, generated once and kept with the demo's state."""
        path = self.state_dir / "service-token"
        if not path.exists():
            path.write_text(secrets.token_hex(32))
            path.chmod(0o600)
        return path.read_text().strip()

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        bin_dir = str(Path(sys.executable).parent)
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
        env.update(
            KUBECONFIG=str(self.kubeconfig),
            DEMO_STATE_DIR=str(self.state_dir),
            DEMO_PORT=str(self.port),
            DEMO_SERVICE_TOKEN=self.service_token(),
            DEMO_NAMESPACE=self.namespace,
        )
        if self.admin_token:
            env["DEMO_ADMIN_TOKEN"] = self.admin_token
        env.update(self.extra_env)
        return env

    def _output(self, name: str):
        if self.log_dir is None:
            return None
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return open(self.log_dir / f"{name}.log", "ab")

    def start_cluster(self) -> None:
        self.kubeconfig.unlink(missing_ok=True)  # the last run's CA and token are void
        self.cluster = subprocess.Popen(
            [
                sys.executable, "-m", "jhub_gpubooking.devcluster",
                "--port", str(self.k8s_port),
                "--state", str(self.state_dir / "cluster"),
                "--nodes", str(self.nodes_file),
                "--write-kubeconfig", str(self.kubeconfig),
                "--namespace", self.namespace,
                *(f"--namespace={name}" for name in self.extra_namespaces),
                *(f"--admission-webhook={url}" for url in self.admission_webhooks),
            ],
            env=self.env(), stdout=self._output("cluster"), stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_die_with_parent,
        )
        # written once the API listens; it holds the CA that makes the server's certificate trusted
        wait_for_file(self.kubeconfig, 30, self.cluster)
        context = KubeconfigAccess.read(self.kubeconfig).ssl_context()
        wait_for_http(self.k8s_url + "/version", 30, self.cluster, context=context)

    def start_hub(self) -> None:
        self.hub = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(self.hub_config)],
            cwd=self.state_dir, env=self.env(), stdout=self._output("hub"),
            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent,
        )
        wait_for_http(self.hub_url + "/hub/api", 60, self.hub)
        # the booking service starts with the Hub; the demo is usable once it answers
        wait_for_http(self.hub_url + "/services/gpu-booking/api/pools", 60, self.hub)

    def stop_hub(self) -> None:
        """Stop the Hub, its proxy and the booking service; the cluster (and, unless the Hub's
        config has cleanup_servers, every server's pod) keeps running."""
        _stop_process_group(self.hub, timeout=60)
        stop_orphaned_proxy(self.state_dir / "proxy.pid")

    def restart_hub(self) -> None:
        """What an upgrade or a crashed hub pod does: the Hub (with its proxy and the booking
        service) stops and starts again on the same database and cluster."""
        self.stop_hub()
        self.start_hub()

    def start(self) -> Demo:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.start_cluster()
            self.start_hub()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        # the Hub first: with cleanup_servers it stops every server, deleting their pods
        try:
            self.stop_hub()
        finally:
            _stop_process_group(self.cluster, timeout=30)

    def __enter__(self) -> Demo:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", default=os.environ.get("DEMO_STATE_DIR", str(REPO / ".demo")))
    args = parser.parse_args(argv)
    demo = Demo(
        state_dir=Path(args.state_dir).resolve(),
        port=int(os.environ.get("DEMO_PORT", "8000")),
        k8s_port=int(os.environ.get("DEMO_K8S_PORT", "6443")),
        admin_token=os.environ.get("DEMO_ADMIN_TOKEN") or None,
    )

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    try:
        demo.start()
        print(
            f"""
  jhub-gpubooking demo is running.

  Open        {demo.hub_url}/  and log in as alice, bob or admin (password: demo).
  Book a GPU  {demo.hub_url}/services/gpu-booking/  (also in the Hub's Services menu)
  Cluster     kubectl --kubeconfig {demo.kubeconfig} get pods -A   ({demo.k8s_url})
  State       {demo.state_dir}

  Press Ctrl-C to stop (every server and pod process is stopped with it).
""",
            flush=True,
        )
        while demo.hub.poll() is None and demo.cluster.poll() is None:
            time.sleep(0.5)
        print("a demo process exited on its own; stopping the rest", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping the demo...", flush=True)
        return 0
    finally:
        # a second Ctrl-C must not cut the clean-up short and leave the cluster running
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        demo.stop()


if __name__ == "__main__":
    sys.exit(main())
