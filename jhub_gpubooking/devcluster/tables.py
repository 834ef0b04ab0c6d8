"""Server-side printing: ``meta.k8s.io/v1`` Tables, as the API server answers kubectl's ``get``.

kubectl asks for ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` and prints the columns the
server chose (``-o wide`` adds the priority-1 columns, ``-A`` the namespace taken from each row's object).
The columns and cells follow the API server's printers (``pkg/printers/internalversion``) for the
resources the devcluster serves, reduced to the fields the devcluster's objects carry; resources without
their own printer get the server's default table (Name, Created At). Everything here is pure.

Part of the devcluster, a *contract test of the Kubernetes API calls KubeSpawner makes*, not a cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone

from .store import RESOURCES

TABLE_GROUP = "meta.k8s.io"
TABLE_VERSIONS = ("v1", "v1beta1")
INCLUDE_OBJECT = ("None", "Metadata", "Object")


def human_duration(seconds: float) -> str:
    """apimachinery's ``duration.HumanDuration``: "45s", "3m20s", "2h5m", "3d4h", "2y10d"."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        return f"{minutes}m" if whole % 60 == 0 else f"{minutes}m{whole % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return f"{days}d" if hours % 24 == 0 else f"{days}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    if hours < 24 * 365 * 8:
        return f"{days // 365}y" if days % 365 == 0 else f"{days // 365}y{days % 365}d"
    return f"{days // 365}y"


def since(timestamp: str | None, now: datetime) -> str:
    """The age of an RFC 3339 timestamp as kubectl shows it; ``<unknown>`` when there is none."""
    if not timestamp:
        return "<unknown>"
    moment = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    return human_duration((now - moment).total_seconds())


def _column(name: str, description: str, priority: int = 0, type_: str = "string", format_: str = "") -> dict:
    return {"name": name, "type": type_, "format": format_, "description": description, "priority": priority}


NAME = _column("Name", "Name must be unique within a namespace.", format_="name")
AGE = _column("Age", "CreationTimestamp is a timestamp representing the server time when this object was "
                     "created.")


# -- one printer per resource: (columns, cells(obj, now)) -------------------------------------------

def pod_status(pod: dict) -> tuple[str, int, int, str | None]:
    """(STATUS, ready containers, restarts, when the last restarted container finished) as the API
    server's ``printPod`` computes them."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or ""
    ready = restarts = 0
    last_restart = None
    has_running = False
    for container in reversed(status.get("containerStatuses") or []):
        restarts += container.get("restartCount", 0)
        finished = ((container.get("lastState") or {}).get("terminated") or {}).get("finishedAt")
        if finished and (last_restart is None or finished > last_restart):
            last_restart = finished
        state = container.get("state") or {}
        waiting, terminated = state.get("waiting"), state.get("terminated")
        if waiting and waiting.get("reason"):
            reason = waiting["reason"]
        elif terminated and terminated.get("reason"):
            reason = terminated["reason"]
        elif terminated:
            signal = terminated.get("signal")
            reason = f"Signal:{signal}" if signal else f"ExitCode:{terminated.get('exitCode', 0)}"
        elif container.get("ready") and state.get("running") is not None:
            has_running = True
            ready += 1
    if reason == "Completed" and has_running:
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        reason = "Running" if conditions.get("Ready") == "True" else "NotReady"
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason, ready, restarts, last_restart


def _pod_cells(pod: dict, now: datetime) -> list:
    reason, ready, restarts, last_restart = pod_status(pod)
    if last_restart is not None:
        restarts = f"{restarts} ({since(last_restart, now)} ago)"
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    return [pod["metadata"]["name"], f"{ready}/{len(spec.get('containers') or [])}", reason, str(restarts),
            since(pod["metadata"].get("creationTimestamp"), now), status.get("podIP") or "<none>",
            spec.get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>",
            _readiness_gates(pod)]


def _readiness_gates(pod: dict) -> str:
    gates = (pod.get("spec") or {}).get("readinessGates") or []
    if not gates:
        return "<none>"
    conditions = {c.get("type"): c.get("status") for c in (pod.get("status") or {}).get("conditions") or []}
    met = sum(1 for gate in gates if conditions.get(gate.get("conditionType")) == "True")
    return f"{met}/{len(gates)}"


POD_COLUMNS = [
    NAME,
    _column("Ready", "The aggregate readiness state of this pod for accepting traffic."),
    _column("Status", "The aggregate status of the containers in this pod."),
    _column("Restarts", "The number of times the containers in this pod have been restarted and when the "
                        "last container in this pod has restarted."),
    AGE,
    _column("IP", "IP address allocated to the pod. Routable at least within the cluster.", priority=1),
    _column("Node", "NodeName indicates in which node this pod is scheduled.", priority=1),
    _column("Nominated Node", "nominatedNodeName is set when this pod preempts other pods on the node.",
            priority=1),
    _column("Readiness Gates", "If specified, all readiness gates will be evaluated for pod readiness.",
            priority=1),
]


def _node_status(node: dict) -> str:
    conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    status = {"True": "Ready", None: "Unknown"}.get(conditions.get("Ready"), "NotReady")
    if (node.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    return status


def _node_roles(node: dict) -> str:
    labels = node["metadata"].get("labels") or {}
    roles = {key.split("/", 1)[1] for key in labels if key.startswith("node-role.kubernetes.io/")}
    if labels.get("kubernetes.io/role"):
        roles.add(labels["kubernetes.io/role"])
    return ",".join(sorted(role for role in roles if role)) or "<none>"


def _node_cells(node: dict, now: datetime) -> list:
    status = node.get("status") or {}
    info = status.get("nodeInfo") or {}
    addresses = {entry.get("type"): entry.get("address") for entry in status.get("addresses") or []}
    return [node["metadata"]["name"], _node_status(node), _node_roles(node),
            since(node["metadata"].get("creationTimestamp"), now), info.get("kubeletVersion") or "",
            addresses.get("InternalIP") or "<none>", addresses.get("ExternalIP") or "<none>",
            info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
            info.get("containerRuntimeVersion") or "<unknown>"]


NODE_COLUMNS = [
    NAME,
    _column("Status", "The status of the node"),
    _column("Roles", "The roles of the node"),
    AGE,
    _column("Version", "Kubelet Version reported by the node."),
    _column("Internal-IP", "List of addresses reachable to the node.", priority=1),
    _column("External-IP", "List of addresses reachable to the node.", priority=1),
    _column("OS-Image", "OS Image reported by the node from /etc/os-release.", priority=1),
    _column("Kernel-Version", "Kernel Version reported by the node from 'uname -r'.", priority=1),
    _column("Container-Runtime", "ContainerRuntime Version reported by the node.", priority=1),
]


def _event_cells(event: dict, now: datetime) -> list:
    involved = event.get("involvedObject") or {}
    source = event.get("source") or {}
    component = source.get("component") or event.get("reportingComponent") or ""
    host = source.get("host") or ""
    first = event.get("firstTimestamp") or event.get("eventTime")
    last = event.get("lastTimestamp") or first
    return [since(last, now), event.get("type", ""), event.get("reason", ""),
            f"{(involved.get('kind') or '').lower()}/{involved.get('name', '')}", involved.get("fieldPath", ""),
            f"{component}, {host}" if host else component, (event.get("message") or "").strip(),
            since(first, now), event.get("count") or 1, event["metadata"]["name"]]


EVENT_COLUMNS = [
    _column("Last Seen", "The time the event was last seen"),
    _column("Type", "Type of this event (Normal, Warning), new types could be added in the future."),
    _column("Reason", "This should be a short, machine understandable string that gives the reason for "
                      "this event being generated."),
    _column("Object", "The object this Event is about."),
    _column("Subobject", "The subobject this Event is about.", priority=1),
    _column("Source", "The component reporting this event.", priority=1),
    _column("Message", "A human-readable description of the status of this operation."),
    _column("First Seen", "The time the event was first seen", priority=1),
    _column("Count", "The number of times this event has occurred.", priority=1),
    _column("Name", "Name must be unique within a namespace.", priority=1),
]


def _namespace_cells(namespace: dict, now: datetime) -> list:
    return [namespace["metadata"]["name"], (namespace.get("status") or {}).get("phase", ""),
            since(namespace["metadata"].get("creationTimestamp"), now)]


NAMESPACE_COLUMNS = [NAME, _column("Status", "The status of the namespace"), AGE]


def _default_cells(obj: dict, now: datetime) -> list:
    return [obj["metadata"]["name"], obj["metadata"].get("creationTimestamp")]


DEFAULT_COLUMNS = [NAME, _column("Created At", "CreationTimestamp is a timestamp representing the server "
                                               "time when this object was created.", type_="date")]

PRINTERS: dict[str, tuple[list[dict], Callable[[dict, datetime], list]]] = {
    "pods": (POD_COLUMNS, _pod_cells),
    "nodes": (NODE_COLUMNS, _node_cells),
    "events": (EVENT_COLUMNS, _event_cells),
    "namespaces": (NAMESPACE_COLUMNS, _namespace_cells),
}


# -- the Table -------------------------------------------------------------------------------------

def requested_table_version(accept: str | None) -> str | None:
    """The Table version to answer with, or None for plain JSON: the first acceptable media type of
    ``Accept`` wins, as in the API server's content negotiation (kubectl lists Table first)."""
    for entry in (accept or "").split(","):
        media_type, *raw_params = (part.strip() for part in entry.split(";"))
        params = dict(param.partition("=")[::2] for param in raw_params if "=" in param)
        if media_type not in ("application/json", "application/*", "*/*", ""):
            continue
        if "as" not in params:
            return None
        if params["as"] == "Table" and params.get("g") == TABLE_GROUP and params.get("v") in TABLE_VERSIONS:
            return params["v"]
    return None


def _row_object(obj: dict, include_object: str, version: str) -> dict | None:
    if include_object == "None":
        return None
    if include_object == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": f"{TABLE_GROUP}/{version}", "metadata": obj["metadata"]}


def to_table(resource: str, objects: list[dict], resource_version: int | str, now: datetime,
             version: str = "v1", include_object: str = "Metadata") -> dict:
    """The ``Table`` of ``objects`` (all of one ``resource``); ``include_object`` as the query parameter
    ``includeObject`` (None, Metadata — the default — or Object)."""
    if resource not in RESOURCES:
        raise KeyError(resource)
    columns, cells = PRINTERS.get(resource, (DEFAULT_COLUMNS, _default_cells))
    rows = []
    for obj in objects:
        row = {"cells": cells(obj, now)}
        embedded = _row_object(obj, include_object, version)
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    return {"kind": "Table", "apiVersion": f"{TABLE_GROUP}/{version}",
            "metadata": {"resourceVersion": str(resource_version)}, "columnDefinitions": columns, "rows": rows}
