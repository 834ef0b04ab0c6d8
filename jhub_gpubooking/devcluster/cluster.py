"""``DevCluster``: the simulated API server, scheduler and kubelet in one process, plus kubeconfig output.

This is a *contract test of the Kubernetes API calls KubeSpawner makes*, not a cluster. Objects live in
memory; the state directory holds only the pods' working directories and logs, and the TLS pair the API
is served with (a CA generated at every start, handed to clients in the kubeconfig).
"""

from __future__ import annotations

import base64
import os
import secrets
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes_asyncio import client
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from .api import make_app
from .errors import ApiError
from .kubelet import Kubelet
from .scheduler import DEFAULT_SCHEDULER, TERMINAL_PHASES, Scheduler, admit_pod
from .selectors import make_filter
from .store import RESOURCES, Change, ObjectStore
from .tls import issue_certificate

_EVERYTHING = make_filter("pods", None, None)


def kubeconfig(server_url: str, token: str, namespace: str = "default", name: str = "devcluster",
               ca_pem: bytes | None = None) -> dict:
    """An ordinary kubeconfig: one cluster (trusting ``ca_pem`` when given), one token user, one context."""
    cluster = {"server": server_url}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": f"{name}-admin", "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": f"{name}-admin",
                                                "namespace": namespace}}],
        "current-context": name,
        "preferences": {},
    }


def write_kubeconfig(path: str | Path, server_url: str, token: str = "", namespace: str = "default",
                     ca_pem: bytes | None = None) -> Path:
    """Write a kubeconfig that ``KUBECONFIG=path`` makes kubectl and KubeSpawner's ``load_config()`` use.

    The file appears whole (written aside, then renamed), so a process waiting for it never reads half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.unlink(missing_ok=True)
    partial.touch(mode=0o600)  # it holds a token
    partial.write_text(yaml.safe_dump(kubeconfig(server_url, token, namespace, ca_pem=ca_pem), sort_keys=False))
    os.replace(partial, path)
    return path


def trusting(ca_pem: bytes | None) -> ssl.SSLContext:
    """A client SSL context that trusts exactly ``ca_pem`` (the system's CAs when it is None)."""
    if ca_pem is None:
        return ssl.create_default_context()
    return ssl.create_default_context(cadata=ca_pem.decode())


@dataclass(frozen=True)
class KubeconfigAccess:
    """What a client needs from a devcluster kubeconfig: the server URL, the token and the CA."""

    server: str
    token: str
    ca_pem: bytes | None

    @classmethod
    def read(cls, path: str | Path) -> KubeconfigAccess:
        """The current context's cluster and user of the kubeconfig at ``path``."""
        config = yaml.safe_load(Path(path).read_text())
        context = next(entry["context"] for entry in config["contexts"]
                       if entry["name"] == config["current-context"])
        cluster = next(entry["cluster"] for entry in config["clusters"] if entry["name"] == context["cluster"])
        user = next(entry["user"] for entry in config["users"] if entry["name"] == context["user"])
        ca_data = cluster.get("certificate-authority-data")
        return cls(cluster["server"], user.get("token", ""), base64.b64decode(ca_data) if ca_data else None)

    def ssl_context(self) -> ssl.SSLContext:
        """A client context that trusts exactly the kubeconfig's CA (the system's CAs when it has none)."""
        return trusting(self.ca_pem)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


def load_nodes_file(path: str | Path) -> list[dict]:
    """Node entries from YAML: a list, or a mapping with a ``nodes:`` list."""
    data = yaml.safe_load(Path(path).read_text()) or []
    return list(data.get("nodes", []) if isinstance(data, dict) else data)


class DevCluster:
    """Serve the simulated Kubernetes API over HTTPS on 127.0.0.1 with a scheduler and a process-running kubelet.

    ``nodes`` are v1 Node manifests (see ``scheduler.gpu_node`` / ``scheduler.node_from_config``).
    Use ``async with DevCluster(...) as cluster`` or ``await start()`` / ``await stop()``.
    Images are never pulled: a container with neither ``command`` nor ``args`` runs ``image_cmd``
    (standing in for the image's CMD, ``jupyterhub-singleuser`` as in the JupyterHub images).

    Every start generates a new CA and a server certificate for ``host`` (and ``localhost``); clients
    trust the CA through the kubeconfig's ``certificate-authority-data`` (``write_kubeconfig``), or
    ``ca_file`` / ``client_ssl_context()`` in tests. client-go sends no bearer token over plain HTTP,
    so HTTPS is what lets kubectl use the same kubeconfig as KubeSpawner.
    """

    def __init__(self, state_dir: str | Path, nodes: list[dict] = (), port: int = 0, host: str = "127.0.0.1",
                 token: str | None = None, namespaces: tuple[str, ...] = ("default",),
                 scheduler_names: tuple[str, ...] = (DEFAULT_SCHEDULER,), admission_webhooks: list[str] = (),
                 watch_history: int = 1000, max_grace_seconds: float = 3.0, bookmark_seconds: float = 5.0,
                 image_cmd: tuple[str, ...] = ("jupyterhub-singleuser",)):
        self.state_dir = Path(state_dir)
        self.host = host
        self.requested_port = port
        self.token = token if token is not None else secrets.token_hex(16)
        self.admission_webhooks = list(admission_webhooks)
        self.bookmark_seconds = bookmark_seconds
        self.store = ObjectStore(history_limit=watch_history)
        self.store.add_admission("pods", admit_pod)
        self.store.add_listener(self._collect_garbage)
        self._initial_namespaces = namespaces
        self._initial_nodes = list(nodes)
        self._scheduler_names = scheduler_names
        self._max_grace_seconds = max_grace_seconds
        self._image_cmd = image_cmd
        self.scheduler: Scheduler | None = None
        self.kubelet: Kubelet | None = None
        self._server: HTTPServer | None = None
        self.port: int | None = None
        self.ca_pem: bytes | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("the devcluster is not started")
        return f"https://{self.host}:{self.port}"

    @property
    def ca_file(self) -> Path:
        """The PEM file of this start's CA (what the kubeconfig embeds)."""
        return self.state_dir / "tls" / "ca.pem"

    def client_ssl_context(self) -> ssl.SSLContext:
        """An SSL context for clients of this devcluster: trusts its CA and nothing else."""
        if self.ca_pem is None:
            raise RuntimeError("the devcluster is not started")
        return trusting(self.ca_pem)

    def client_configuration(self) -> client.Configuration:
        """A kubernetes_asyncio ``Configuration`` with what the kubeconfig holds: URL, token and CA."""
        configuration = client.Configuration(host=self.url, api_key={"BearerToken": self.token},
                                             api_key_prefix={"BearerToken": "Bearer"})
        configuration.ssl_ca_cert = str(self.ca_file)
        return configuration

    def _server_ssl_context(self) -> ssl.SSLContext:
        hosts = tuple(dict.fromkeys((self.host, "127.0.0.1", "localhost")))
        certificates = issue_certificate("devcluster", hosts)
        _ca, cert_file, key_file = certificates.write(self.state_dir / "tls")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert_file, key_file)
        self.ca_pem = certificates.ca_pem
        return context

    async def start(self) -> DevCluster:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.scheduler = Scheduler(self.store, self._scheduler_names)
        self.kubelet = Kubelet(self.store, self.state_dir, max_grace_seconds=self._max_grace_seconds,
                               image_cmd=self._image_cmd)
        for namespace in ("kube-system", *self._initial_namespaces):
            if namespace not in {ns["metadata"]["name"] for ns in self.store.objects("namespaces")}:
                self.store.create("namespaces", None, {"metadata": {"name": namespace},
                                                       "status": {"phase": "Active"}})
        for node in self._initial_nodes:
            self.store.create("nodes", None, node)
        sockets = bind_sockets(self.requested_port, self.host, family=socket.AF_INET)
        self.port = sockets[0].getsockname()[1]
        self._server = HTTPServer(make_app(self), idle_connection_timeout=3600,
                                  ssl_options=self._server_ssl_context())
        self._server.add_sockets(sockets)
        return self

    async def stop(self) -> None:
        """Stop serving, then kill every pod's process group; no process is left behind."""
        if self._server is not None:
            self._server.stop()
            await self._server.close_all_connections()
            self._server = None
        if self.scheduler is not None:
            await self.scheduler.stop()
        if self.kubelet is not None:
            await self.kubelet.shutdown()

    async def __aenter__(self) -> DevCluster:
        return await self.start()

    async def __aexit__(self, *exc_info) -> None:
        await self.stop()

    def write_kubeconfig(self, path: str | Path, namespace: str = "default") -> Path:
        return write_kubeconfig(path, self.url, self.token, namespace, ca_pem=self.ca_pem)

    # -- deletion semantics shared by the API and the garbage collector -----------------------

    def delete(self, resource: str, namespace: str | None, name: str, grace_seconds: int | None = None,
               preconditions: dict | None = None) -> dict:
        """Delete like the API server: a running pod only gets a deletionTimestamp and the kubelet
        removes it once its process group is gone; everything else goes at once. ``preconditions``
        (DeleteOptions') name the uid and resourceVersion the object must still have (409 if not)."""
        obj = self.store.get(resource, namespace, name)
        for key, field in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            wanted = (preconditions or {}).get(key)
            if wanted is not None and wanted != obj["metadata"].get(key):
                raise ApiError(409, "Conflict", f"Precondition failed: {field} in precondition: {wanted}, "
                                                f"{field} in object meta: {obj['metadata'].get(key)}",
                               {"name": name, "kind": resource})
        if resource == "pods" and obj["spec"].get("nodeName") and obj["status"].get("phase") not in TERMINAL_PHASES:
            if grace_seconds is None:
                grace_seconds = obj["spec"].get("terminationGracePeriodSeconds", 30)
            return self.store.mark_deleting(resource, namespace, name, grace_seconds)
        if resource == "namespaces":
            self._empty_namespace(name)
        return self.store.remove(resource, namespace, name)

    def _empty_namespace(self, namespace: str) -> None:
        for resource, (_, namespaced) in RESOURCES.items():
            if namespaced:
                for obj in self.store.list(resource, namespace, _EVERYTHING)[0]:
                    self._delete_quietly(resource, namespace, obj["metadata"]["name"])

    def _delete_quietly(self, resource: str, namespace: str | None, name: str) -> None:
        try:
            self.delete(resource, namespace, name)
        except ApiError:
            pass  # already gone

    def _collect_garbage(self, change: Change) -> None:
        """Objects owned by a deleted object (ownerReferences uid) are deleted too, like the
        garbage collector does for KubeSpawner's per-pod secrets and services."""
        if change.type != "DELETED":
            return
        owner_uid = change.obj["metadata"]["uid"]
        namespace = change.obj["metadata"].get("namespace")
        for resource, (_, namespaced) in RESOURCES.items():
            if not namespaced or namespace is None or resource == "events":
                continue
            for obj in self.store.objects(resource):
                metadata = obj["metadata"]
                if metadata.get("namespace") == namespace and any(
                    ref.get("uid") == owner_uid for ref in metadata.get("ownerReferences") or []
                ):
                    self._delete_quietly(resource, namespace, metadata["name"])
