"""The devcluster's "kubelet": each scheduled pod's first container runs as a real local process.

Part of a *contract test of the Kubernetes API calls KubeSpawner makes*, not a cluster: there are no
images, no isolation and no restarts. A pod gets its own loopback address (127.0.0.N) as pod IP, a
working directory (also $HOME) under the state directory, and a process group of its own, so deleting
the pod or stopping the devcluster can kill everything the container started.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import fcntl
import ipaddress
import logging
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from .errors import ApiError
from .scheduler import record_event, set_condition
from .store import Change, ObjectStore, utc_timestamp

log = logging.getLogger(__name__)

POD_NETWORK = ipaddress.ip_network("127.0.0.0/16")
FIRST_POD_IP = ipaddress.ip_address("127.0.0.2")
HOST_IP = "127.0.0.1"
WILDCARD_HOSTS = {"0.0.0.0", "::", ""}
_LABEL_FIELD = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


class ContainerConfigError(Exception):
    """The container cannot be configured (e.g. a missing secret), like kubelet's CreateContainerConfigError."""


@dataclass
class RunningPod:
    namespace: str
    name: str
    pod_ip: str | None = None
    process: asyncio.subprocess.Process | None = None
    deleting: bool = False
    deadline_exceeded: bool = False
    tasks: set = field(default_factory=set)


def bind_inside_pod(value: str, pod_ip: str) -> str:
    """Inside a pod, binding 0.0.0.0 means binding the pod's IP; here it must be said explicitly,
    so a JUPYTERHUB_SERVICE_URL (or ``--ip=``) wildcard host becomes the pod IP."""
    if value.startswith("--ip="):
        return f"--ip={pod_ip}" if value[len("--ip="):] in WILDCARD_HOSTS else value
    parts = urlsplit(value)
    if parts.hostname is None or parts.hostname not in WILDCARD_HOSTS:
        return value
    netloc = f"{pod_ip}:{parts.port}" if parts.port else pod_ip
    return urlunsplit(parts._replace(netloc=netloc))


def container_argv(container: dict, image_entrypoint: list[str], image_cmd: list[str]) -> list[str]:
    """Kubernetes' rules for command/args over the image's ENTRYPOINT/CMD (images are stand-ins here):
    ``command`` replaces the entrypoint and drops CMD, ``args`` replaces CMD."""
    command, args = container.get("command"), container.get("args")
    if command:
        return list(command) + list(args or [])
    return list(image_entrypoint) + list(args if args else image_cmd)


def allow_jupyter_as_root(home: Path) -> None:
    """In the real images the server runs as the unprivileged ``jovyan``; here it runs as whoever runs
    the devcluster, and jupyter-server refuses root unless its config (in $HOME) allows it."""
    config = home / ".jupyter" / "jupyter_server_config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('{"ServerApp": {"allow_root": true}}\n')


def resolve_executable(name: str, search_path: str) -> str:
    """The venv running us comes first, so ``jupyterhub-singleuser`` is the one installed next to it."""
    if "/" in name:
        return name
    beside_python = Path(sys.executable).parent / name
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return str(beside_python)
    found = shutil.which(name, path=search_path)
    if not found:
        raise FileNotFoundError(f'exec: "{name}": executable file not found in $PATH')
    return found


def field_ref_value(pod: dict, field_path: str) -> str:
    if match := _LABEL_FIELD.match(field_path):
        return (pod["metadata"].get(match.group(1)) or {}).get(match.group(2), "")
    value: object = pod
    for step in field_path.split("."):
        value = value.get(step) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def _port_free(ip: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((ip, port))
        except OSError:
            return False
    return True


class IpLeases:
    """Pod IPs leased machine-wide: one lock file per address, ``flock``-ed while a pod uses it.

    Every devcluster on the machine (parallel test runs, the demo) shares 127.0.0.0/16; probing that a
    port is free leaves a window until the container binds it, so two kubelets could hand out the same
    address. The lock closes that window and goes with the process, however it ends."""

    def __init__(self, directory: Path | None = None):
        self.directory = directory or Path(tempfile.gettempdir()) / "jhub-gpubooking-devcluster-ips"
        self._held: dict[str, int] = {}

    def __contains__(self, ip: str) -> bool:
        return ip in self._held

    def acquire(self, ip: str) -> bool:
        """Lease ``ip`` unless this or another kubelet holds it."""
        if not self.directory.is_dir():
            self.directory.mkdir(parents=True, exist_ok=True)
            self.directory.chmod(0o1777)  # shared by every user's devclusters, like /tmp
        try:
            fd = os.open(self.directory / f"{ip}.lock", os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._held[ip] = fd  # not inherited by pod processes (PEP 446)
        return True

    def release(self, ip: str | None) -> None:
        fd = self._held.pop(ip, None) if ip else None
        if fd is not None:
            os.close(fd)

    def release_all(self) -> None:
        for ip in list(self._held):
            self.release(ip)


class Kubelet:
    """Runs, probes and kills the processes of every pod bound to a node."""

    def __init__(self, store: ObjectStore, state_dir: Path, max_grace_seconds: float = 3.0,
                 probe_interval: float = 0.2, image_entrypoint: tuple[str, ...] = (),
                 image_cmd: tuple[str, ...] = ("jupyterhub-singleuser",)):
        self.store = store
        self.image_entrypoint = list(image_entrypoint)
        self.image_cmd = list(image_cmd)
        self.pods_dir = Path(state_dir) / "pods"
        self.max_grace_seconds = max_grace_seconds
        self.probe_interval = probe_interval
        self._running: dict[str, RunningPod] = {}
        self.ip_leases = IpLeases()
        store.add_listener(self._on_change)
        atexit.register(self.kill_all_now)

    # -- reacting to the store --------------------------------------------------------------

    def _on_change(self, change: Change) -> None:
        if change.resource != "pods" or change.type == "DELETED":
            return
        pod, uid = change.obj, change.obj["metadata"]["uid"]
        running = self._running.get(uid)
        if "deletionTimestamp" in pod["metadata"]:
            if running is None:
                asyncio.get_running_loop().call_soon(self._remove, pod["metadata"])
            elif not running.deleting:
                running.deleting = True
                grace = pod["metadata"].get("deletionGracePeriodSeconds", 30)
                self._spawn(running, self._kill(running, grace, "Killing", "Stopping container"))
        elif pod["spec"].get("nodeName") and pod["status"].get("phase") == "Pending" and running is None:
            running = self._running[uid] = RunningPod(pod["metadata"]["namespace"], pod["metadata"]["name"])
            self._spawn(running, self._run(running, pod))

    def _spawn(self, running: RunningPod, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        running.tasks.add(task)
        task.add_done_callback(running.tasks.discard)

    def _remove(self, metadata: dict) -> None:
        try:
            self.store.remove("pods", metadata["namespace"], metadata["name"])
        except ApiError:
            pass  # already removed

    def _update(self, running: RunningPod, mutate) -> dict | None:
        try:
            return self.store.update("pods", running.namespace, running.name, mutate)
        except ApiError:
            return None  # the pod was removed meanwhile

    # -- the container lifecycle --------------------------------------------------------------

    async def _run(self, running: RunningPod, pod: dict) -> None:
        uid = pod["metadata"]["uid"]
        container = pod["spec"]["containers"][0]
        ports = [port["containerPort"] for port in container.get("ports") or []]
        try:
            running.pod_ip = self._allocate_ip(ports)
            argv, env, workdir = self._prepare(pod, container, running.pod_ip)
            record_event(self.store, pod, "Pulled",
                         f'Container image "{container.get("image", "")}" already present on machine')
            record_event(self.store, pod, "Created", f"Created container {container['name']}")
            with open(self.log_path(pod), "ab") as log_file:
                running.process = await asyncio.create_subprocess_exec(
                    *argv, cwd=workdir, env=env, stdin=asyncio.subprocess.DEVNULL,
                    stdout=log_file, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        except (ContainerConfigError, OSError) as error:
            self._fail_to_start(running, pod, container, error)
            return
        if running.deleting:  # deleted while the process was being created
            self._spawn(running, self._kill(running, 0))
        started_at = utc_timestamp()
        self._update(running, lambda obj: self._mark_started(obj, container, running.pod_ip, started_at))
        record_event(self.store, pod, "Started", f"Started container {container['name']}")
        deadline = pod["spec"].get("activeDeadlineSeconds")
        if deadline is not None:
            self._spawn(running, self._enforce_deadline(running, pod, deadline))
        self._spawn(running, self._probe_readiness(running, ports))
        exit_code = await running.process.wait()
        self._kill_group(running, signal.SIGKILL)  # children left in the group die with the container
        self.ip_leases.release(running.pod_ip)
        if running.deleting:
            self._running.pop(uid, None)
            self._remove(pod["metadata"])
        else:
            self._update(running, lambda obj: self._mark_terminated(obj, container, exit_code, started_at,
                                                                   running.deadline_exceeded))
            self._running.pop(uid, None)

    def _allocate_ip(self, ports: list[int]) -> str:
        """The lowest free 127.0.0.N (N >= 2) where the container ports can be bound: addresses are
        reused after deletion, and skipped when another program (e.g. another devcluster) holds them."""
        for candidate in POD_NETWORK.hosts():
            ip = str(candidate)
            if candidate < FIRST_POD_IP or ip in self.ip_leases:
                continue
            if self.ip_leases.acquire(ip):
                if all(_port_free(ip, port) for port in ports):
                    return ip
                self.ip_leases.release(ip)  # a program outside any devcluster holds a port there
        raise ContainerConfigError("no free pod IP left in 127.0.0.0/16")

    def pod_dir(self, pod: dict) -> Path:
        """The pod's working directory (its container's cwd and HOME)."""
        metadata = pod["metadata"]
        return self.pods_dir / f"{metadata['namespace']}_{metadata['name']}_{metadata['uid'][:8]}"

    def log_path(self, pod: dict) -> Path:
        """Where the container's stdout and stderr go (``kubectl logs`` reads it)."""
        return self.pod_dir(pod) / "container.log"

    def _prepare(self, pod: dict, container: dict, pod_ip: str) -> tuple[list[str], dict, Path]:
        metadata = pod["metadata"]
        workdir = self.pod_dir(pod)
        workdir.mkdir(parents=True, exist_ok=True)
        search_path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        env = {"PATH": search_path, "HOME": str(workdir), "HOSTNAME": metadata["name"], "LANG": "C.UTF-8",
               # a pod owns its IP's ports: a taken port must fail the container, not move the server
               # to another port its pod does not advertise (jupyter-server would try 50 more)
               "JUPYTER_PORT_RETRIES": "0"}
        pod_view = {**pod, "status": {**pod["status"], "podIP": pod_ip, "hostIP": HOST_IP}}
        for variable in container.get("env") or []:
            env[variable["name"]] = self._env_value(pod_view, variable)
        if "JUPYTERHUB_SERVICE_URL" in env:
            env["JUPYTERHUB_SERVICE_URL"] = bind_inside_pod(env["JUPYTERHUB_SERVICE_URL"], pod_ip)
        argv = container_argv(container, self.image_entrypoint, self.image_cmd)
        if not argv:
            raise ContainerConfigError("no command specified and the stand-in image has none")
        if os.geteuid() == 0:
            allow_jupyter_as_root(workdir)
        argv = [resolve_executable(argv[0], search_path)] + [bind_inside_pod(arg, pod_ip) for arg in argv[1:]]
        return argv, env, workdir

    def _env_value(self, pod: dict, variable: dict) -> str:
        if "valueFrom" not in variable:
            return str(variable.get("value", ""))
        source = variable["valueFrom"]
        if "fieldRef" in source:
            return field_ref_value(pod, source["fieldRef"]["fieldPath"])
        for ref_name, resource, decode in (("secretKeyRef", "secrets", True),
                                           ("configMapKeyRef", "configmaps", False)):
            if ref_name in source:
                ref = source[ref_name]
                try:
                    data = self.store.get(resource, pod["metadata"]["namespace"], ref["name"]).get("data") or {}
                except ApiError:
                    data = None
                if data is None or ref["key"] not in data:
                    if ref.get("optional"):
                        return ""
                    where = f'{resource[:-1]} {pod["metadata"]["namespace"]}/{ref["name"]}'
                    missing = f'{resource[:-1]} "{ref["name"]}" not found' if data is None else \
                        f'couldn\'t find key {ref["key"]} in {where}'
                    raise ContainerConfigError(missing)
                value = data[ref["key"]]
                return base64.b64decode(value).decode() if decode else value
        raise ContainerConfigError(f"unsupported valueFrom for {variable['name']}")

    def _fail_to_start(self, running: RunningPod, pod: dict, container: dict, error: Exception) -> None:
        config_error = isinstance(error, ContainerConfigError)
        reason = "CreateContainerConfigError" if config_error else "StartError"
        self.ip_leases.release(running.pod_ip)
        record_event(self.store, pod, "Failed", f"Error: {error}", event_type="Warning")

        def mark(obj: dict) -> None:
            state = ({"waiting": {"reason": reason, "message": str(error)}} if config_error else
                     {"terminated": {"exitCode": 128, "reason": reason, "message": str(error)}})
            obj["status"]["containerStatuses"] = [self._container_status(container, state, ready=False)]
            if not config_error:
                obj["status"]["phase"] = "Failed"

        self._update(running, mark)
        if running.deleting or not config_error:
            self._running.pop(pod["metadata"]["uid"], None)
        if running.deleting:
            self._remove(pod["metadata"])

    @staticmethod
    def _container_status(container: dict, state: dict, ready: bool) -> dict:
        return {"name": container["name"], "image": container.get("image", ""), "imageID": "",
                "containerID": "", "ready": ready, "started": "running" in state, "restartCount": 0,
                "state": state}

    def _mark_started(self, pod: dict, container: dict, pod_ip: str, started_at: str) -> None:
        status = pod["status"]
        status.update(phase="Running", podIP=pod_ip, podIPs=[{"ip": pod_ip}], hostIP=HOST_IP,
                      startTime=started_at)
        status["containerStatuses"] = [
            self._container_status(container, {"running": {"startedAt": started_at}}, ready=False)]
        set_condition(pod, "Initialized", "True")
        for condition_type in ("ContainersReady", "Ready"):
            set_condition(pod, condition_type, "False", reason="ContainersNotReady",
                          message=f"containers with unready status: [{container['name']}]")

    def _mark_terminated(self, pod: dict, container: dict, exit_code: int, started_at: str,
                         deadline_exceeded: bool) -> None:
        status = pod["status"]
        if deadline_exceeded:
            status.update(phase="Failed", reason="DeadlineExceeded",
                          message="Pod was active on the node longer than the specified deadline")
        else:
            status["phase"] = "Succeeded" if exit_code == 0 else "Failed"
        # a signal death reads like the container runtime's 128+signal
        code = 128 - exit_code if exit_code < 0 else exit_code
        terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                      "startedAt": started_at, "finishedAt": utc_timestamp()}
        status["containerStatuses"] = [self._container_status(container, {"terminated": terminated}, False)]
        for condition_type in ("ContainersReady", "Ready"):
            set_condition(pod, condition_type, "False", reason="PodCompleted")

    async def _probe_readiness(self, running: RunningPod, ports: list[int]) -> None:
        """Ready once the first container port accepts TCP connections (at once without ports)."""
        while ports and running.process.returncode is None:
            try:
                _, writer = await asyncio.open_connection(running.pod_ip, ports[0])
            except OSError:
                await asyncio.sleep(self.probe_interval)
                continue
            writer.close()
            break
        if running.process.returncode is not None or running.deleting:
            return

        def mark_ready(obj: dict) -> None:
            obj["status"]["containerStatuses"][0]["ready"] = True
            for condition_type in ("ContainersReady", "Ready"):
                set_condition(obj, condition_type, "True")

        self._update(running, mark_ready)

    async def _enforce_deadline(self, running: RunningPod, pod: dict, deadline_seconds: int) -> None:
        await asyncio.sleep(deadline_seconds)
        if running.process.returncode is None and not running.deleting:
            running.deadline_exceeded = True
            record_event(self.store, pod, "DeadlineExceeded",
                         "Pod was active on the node longer than the specified deadline")
            await self._kill(running, pod["spec"].get("terminationGracePeriodSeconds", 30))

    # -- killing ------------------------------------------------------------------------------

    def _kill_group(self, running: RunningPod, sig: int) -> None:
        if running.process is None:
            return
        try:
            os.killpg(running.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    async def _kill(self, running: RunningPod, grace_seconds: float, reason: str | None = None,
                    message: str | None = None) -> None:
        """SIGTERM the process group, SIGKILL it after the (capped) grace period."""
        if reason:
            try:
                pod = self.store.get("pods", running.namespace, running.name)
                record_event(self.store, pod, reason, f"{message} {pod['spec']['containers'][0]['name']}")
            except ApiError:
                pass
        if running.process is None:
            return  # never started; _run or _fail_to_start finishes the deletion
        self._kill_group(running, signal.SIGTERM)
        try:
            await asyncio.wait_for(running.process.wait(), min(grace_seconds, self.max_grace_seconds))
        except asyncio.TimeoutError:
            self._kill_group(running, signal.SIGKILL)
            await running.process.wait()

    async def shutdown(self) -> None:
        """Stop every container (bounded by the grace cap) and wait for the lifecycle tasks."""
        for running in list(self._running.values()):
            running.deleting = True
        await asyncio.gather(*(self._kill(running, self.max_grace_seconds) for running in self._running.values()),
                             return_exceptions=True)
        tasks = [task for running in self._running.values() for task in running.tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.kill_all_now()
        self.ip_leases.release_all()
        atexit.unregister(self.kill_all_now)

    def kill_all_now(self) -> None:
        """SIGKILL every pod's process group, synchronously (for atexit and signal handlers)."""
        for running in self._running.values():
            self._kill_group(running, signal.SIGKILL)
