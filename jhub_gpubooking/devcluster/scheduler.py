"""Nodes and a small scheduler for the devcluster.

The devcluster is a *contract test of the Kubernetes API calls KubeSpawner makes*, not a cluster. This
scheduler checks what a GPU booking depends on: nodeSelector, required node affinity, taints against
tolerations and resource requests against allocatable (extended resources summed per node, so HAMi's
per-device packing is approximated by totals). It neither preempts nor scores: the first fitting node wins.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from decimal import Decimal

from ..quantity import parse_quantity
from .errors import ApiError
from .store import SIMULATED_VERSION, Change, ObjectStore, utc_timestamp

log = logging.getLogger(__name__)

DEFAULT_SCHEDULER = "default-scheduler"
# Resources the API server lets pods overcommit; every other one (nvidia.com/*) is "extended".
STANDARD_RESOURCES = {"cpu", "memory", "ephemeral-storage", "pods"}
TERMINAL_PHASES = {"Succeeded", "Failed"}
AFFINITY_MISMATCH = "node(s) didn't match Pod's node affinity/selector"


def gpu_node(name: str, product: str = "NVIDIA-A100-SXM4-40GB", count: int = 4, memory_mib: int = 40960,
             hami_splits: int = 0, cpu: str = "32", memory: str = "256Gi", pods: int = 110,
             labels: dict | None = None, taints: list | None = None) -> dict:
    """A v1 Node carrying GPU Feature Discovery labels and the GPU extended resources.

    ``hami_splits > 0`` describes a HAMi node: ``nvidia.com/gpu`` counts virtual GPUs (``splits`` per
    card) and ``nvidia.com/gpumem`` (MiB) / ``nvidia.com/gpucores`` (percent) are advertised too.
    """
    allocatable = {"cpu": str(cpu), "memory": str(memory), "pods": str(pods)}
    if hami_splits:
        allocatable["nvidia.com/gpu"] = str(count * hami_splits)
        allocatable["nvidia.com/gpumem"] = str(count * memory_mib)
        allocatable["nvidia.com/gpucores"] = str(count * 100)
    else:
        allocatable["nvidia.com/gpu"] = str(count)
    gfd_labels = {
        "kubernetes.io/hostname": name,
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.memory": str(memory_mib),
    }
    return node_manifest(name, {**gfd_labels, **(labels or {})}, allocatable, taints)


# what `kubectl get nodes -o wide` shows (this "kubelet" runs containers as local processes); every
# field is set, since strict clients (kubernetes_asyncio) refuse a nodeInfo that lacks one
NODE_INFO = {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "devcluster://local-processes",
             "kernelVersion": "", "kubeProxyVersion": SIMULATED_VERSION, "kubeletVersion": SIMULATED_VERSION,
             "machineID": "", "operatingSystem": "linux", "osImage": "devcluster", "systemUUID": ""}


def node_manifest(name: str, labels: dict, allocatable: dict, taints: list | None = None) -> dict:
    """A plain v1 Node that reports Ready with the given allocatable resources."""
    labels = {"kubernetes.io/hostname": name, **labels}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": list(taints or [])},
        "status": {
            "capacity": dict(allocatable),
            "allocatable": dict(allocatable),
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                          {"type": "Hostname", "address": name}],
            "nodeInfo": dict(NODE_INFO),
        },
    }


def node_from_config(entry: dict) -> dict:
    """One entry of nodes.yaml: ``{name, gpu: {product, count, memory_mib, hami_splits}, ...}``
    builds a GPU node; ``{name, labels, allocatable, taints}`` a plain one."""
    entry = dict(entry)
    name = entry.pop("name")
    if "gpu" in entry:
        gpu = entry.pop("gpu")
        return gpu_node(name, **gpu, **entry)
    return node_manifest(name, entry.get("labels", {}), entry.get("allocatable", {}), entry.get("taints"))


def container_requests(container: dict) -> dict[str, Decimal]:
    """Effective requests: the API server defaults a missing request to the limit."""
    resources = container.get("resources") or {}
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: parse_quantity(value) for name, value in merged.items()}


def pod_requests(pod: dict) -> Counter:
    total: Counter = Counter()
    for container in pod["spec"].get("containers", []):
        total.update(container_requests(container))
    total["pods"] += 1
    return total


def canonical_quantity(value) -> str:
    """Quantities come back from kube-apiserver as strings, whatever the client sent: KubeSpawner
    sends ``cpu: 0.5`` and ``memory: 1073741824`` as JSON numbers, and strict clients (the official
    ``kubernetes`` package) refuse numbers when they read the pod back."""
    if isinstance(value, str):
        return value
    amount = Decimal(str(value))
    if amount == amount.to_integral_value():
        return str(int(amount))
    millis = amount * 1000
    return f"{int(millis)}m" if millis == millis.to_integral_value() else str(amount)


def _canonical_resources(container: dict) -> None:
    resources = container.get("resources") or {}
    for field in ("requests", "limits"):
        if resources.get(field):
            resources[field] = {name: canonical_quantity(v) for name, v in resources[field].items()}


def admit_pod(pod: dict) -> None:
    """Default a new pod's fields as kube-apiserver does, then refuse what it refuses: no containers,
    or extended resources that are not whole numbers with request equal to limit (422 Invalid)."""
    name = pod["metadata"]["name"]
    spec = pod.setdefault("spec", {})
    containers = spec.get("containers") or []
    if not containers:
        raise ApiError.invalid("Pod", name, ["spec.containers: Required value"])
    spec.setdefault("schedulerName", DEFAULT_SCHEDULER)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("priority", 0)
    pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    if spec.get("nodeName"):  # bound by the client itself, so no scheduler takes part
        set_condition(pod, "PodScheduled", "True")
    causes = []
    for index, container in enumerate(containers):
        _canonical_resources(container)
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        path = f"spec.containers[{index}].resources"
        for resource in sorted(set(requests) | set(limits)):
            if resource in STANDARD_RESOURCES or "/" not in resource:
                continue
            for field, values in (("requests", requests), ("limits", limits)):
                if resource in values and parse_quantity(values[resource]) % 1 != 0:
                    causes.append(f'{path}.{field}[{resource}]: Invalid value: "{values[resource]}": '
                                  "must be an integer")
            if resource in requests and resource not in limits:
                causes.append(f"{path}.limits[{resource}]: Required value: "
                              "Limit must be set for non overcommitable resources")
            elif resource in requests and parse_quantity(requests[resource]) != parse_quantity(limits[resource]):
                causes.append(f'{path}.requests[{resource}]: Invalid value: "{requests[resource]}": '
                              f"must be equal to {resource} limit of {limits[resource]}")
    if causes:
        raise ApiError.invalid("Pod", name, causes)


def _expression_matches(expression: dict, labels: dict) -> bool:
    key, operator = expression["key"], expression["operator"]
    values = expression.get("values") or []
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt") and key in labels:
        difference = int(labels[key]) - int(values[0])
        return difference > 0 if operator == "Gt" else difference < 0
    return False


def matches_node_selection(pod: dict, node: dict) -> bool:
    """nodeSelector and requiredDuringScheduling node affinity (terms OR-ed, expressions AND-ed)."""
    labels = node["metadata"].get("labels") or {}
    spec = pod["spec"]
    if any(labels.get(key) != value for key, value in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if not required:
        return True
    return any(
        all(_expression_matches(expression, labels) for expression in term.get("matchExpressions") or [])
        for term in required.get("nodeSelectorTerms") or []
    )


def _tolerates(toleration: dict, taint: dict) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint["key"]
    return toleration.get("key") == taint["key"] and toleration.get("value", "") == taint.get("value", "")


def untolerated_taint(pod: dict, node: dict) -> dict | None:
    tolerations = pod["spec"].get("tolerations") or []
    for taint in node["spec"].get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
            _tolerates(toleration, taint) for toleration in tolerations
        ):
            return taint
    return None


def unfit_reasons(pod: dict, node: dict, used: Counter) -> list[str]:
    """Why ``pod`` cannot go on ``node``, in the real scheduler's filter order and wording."""
    taint = untolerated_taint(pod, node)
    if taint:
        return [f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"]
    if not matches_node_selection(pod, node):
        return [AFFINITY_MISMATCH]
    allocatable = {name: parse_quantity(value) for name, value in node["status"]["allocatable"].items()}
    reasons = []
    for resource, amount in sorted(pod_requests(pod).items()):
        if amount and used[resource] + amount > allocatable.get(resource, Decimal(0)):
            reasons.append("Too many pods" if resource == "pods" else f"Insufficient {resource}")
    return reasons


def failed_scheduling_message(node_count: int, reasons_per_node: list[list[str]]) -> str:
    """"0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match ...", sorted
    like kube-scheduler's FitError."""
    histogram = Counter(reason for reasons in reasons_per_node for reason in reasons)
    parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
    message = f"0/{node_count} nodes are available"
    return message + (": " + ", ".join(parts) + "." if parts else ".")


class Scheduler:
    """Binds pending pods of the configured scheduler names to nodes, retrying on every pod or node
    change; an unschedulable pod keeps PodScheduled=False and gets one FailedScheduling event per
    distinct message."""

    def __init__(self, store: ObjectStore, scheduler_names: tuple[str, ...] = (DEFAULT_SCHEDULER,)):
        self.store = store
        self.scheduler_names = set(scheduler_names)
        self._pending_pass: asyncio.Task | None = None
        store.add_listener(self._on_change)

    def _on_change(self, change: Change) -> None:
        if change.resource == "nodes":
            relevant = True
        elif change.resource == "pods":
            # new pending pods need a node; deleted or finished pods free capacity for others
            relevant = (change.type == "DELETED" or not change.obj["spec"].get("nodeName")
                        or change.obj["status"].get("phase") in TERMINAL_PHASES)
        else:
            relevant = False
        if relevant and (self._pending_pass is None or self._pending_pass.done()):
            self._pending_pass = asyncio.get_running_loop().create_task(self._schedule_soon())

    async def _schedule_soon(self) -> None:
        await asyncio.sleep(0)  # let the API handler answer before pods move on
        self.schedule_pending()

    async def stop(self) -> None:
        if self._pending_pass and not self._pending_pass.done():
            self._pending_pass.cancel()

    def _usage_by_node(self) -> dict[str, Counter]:
        usage: dict[str, Counter] = {}
        for pod in self.store.objects("pods"):
            node_name = pod["spec"].get("nodeName")
            if node_name and pod["status"].get("phase") not in TERMINAL_PHASES:
                usage.setdefault(node_name, Counter()).update(pod_requests(pod))
        return usage

    def schedule_pending(self) -> None:
        pending = [
            pod for pod in self.store.objects("pods")
            if not pod["spec"].get("nodeName")
            and pod["spec"].get("schedulerName", DEFAULT_SCHEDULER) in self.scheduler_names
            and "deletionTimestamp" not in pod["metadata"]
        ]
        pending.sort(key=lambda pod: (-(pod["spec"].get("priority") or 0), pod["metadata"]["creationTimestamp"]))
        nodes = self.store.objects("nodes")
        usage = self._usage_by_node()
        for pod in pending:
            reasons_per_node = []
            for node in nodes:
                used = usage.setdefault(node["metadata"]["name"], Counter())
                reasons = unfit_reasons(pod, node, used)
                if not reasons:
                    used.update(pod_requests(pod))
                    self._bind(pod, node["metadata"]["name"])
                    break
                reasons_per_node.append(reasons)
            else:
                self._mark_unschedulable(pod, failed_scheduling_message(len(nodes), reasons_per_node))

    def _bind(self, pod: dict, node_name: str) -> None:
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]

        def bind(obj: dict) -> None:
            obj["spec"]["nodeName"] = node_name
            set_condition(obj, "PodScheduled", "True")

        self.store.update("pods", namespace, name, bind)
        record_event(self.store, pod, "Scheduled", f"Successfully assigned {namespace}/{name} to {node_name}",
                     source="default-scheduler")

    def _mark_unschedulable(self, pod: dict, message: str) -> None:
        previous = condition(pod, "PodScheduled") or {}
        if previous.get("message") == message:
            return

        def mark(obj: dict) -> None:
            set_condition(obj, "PodScheduled", "False", reason="Unschedulable", message=message)

        self.store.update("pods", pod["metadata"]["namespace"], pod["metadata"]["name"], mark)
        record_event(self.store, pod, "FailedScheduling", message, event_type="Warning",
                     source="default-scheduler")


def condition(pod: dict, condition_type: str) -> dict | None:
    return next((c for c in pod["status"].get("conditions") or [] if c["type"] == condition_type), None)


def set_condition(pod: dict, condition_type: str, status: str, reason: str | None = None,
                  message: str | None = None) -> None:
    """Add or update one pod condition, touching lastTransitionTime only when the status flips."""
    conditions = pod["status"].setdefault("conditions", [])
    existing = condition(pod, condition_type)
    entry = {"type": condition_type, "status": status, "lastProbeTime": None,
             "lastTransitionTime": utc_timestamp()}
    if existing and existing["status"] == status:
        entry["lastTransitionTime"] = existing["lastTransitionTime"]
    if reason:
        entry["reason"] = reason
    if message:
        entry["message"] = message
    if existing:
        conditions[conditions.index(existing)] = entry
    else:
        conditions.append(entry)


def record_event(store: ObjectStore, pod: dict, reason: str, message: str, event_type: str = "Normal",
                 source: str = "kubelet") -> None:
    """A core/v1 Event about ``pod`` (both lastTimestamp and eventTime keys, as KubeSpawner reads them)."""
    now = utc_timestamp()
    metadata = pod["metadata"]
    event = {
        "metadata": {"generateName": f"{metadata['name']}."},
        "involvedObject": {"kind": "Pod", "apiVersion": "v1", "namespace": metadata["namespace"],
                           "name": metadata["name"], "uid": metadata.get("uid"),
                           "resourceVersion": metadata.get("resourceVersion")},
        "reason": reason,
        "message": message,
        "type": event_type,
        "source": {"component": source},
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "eventTime": None,
        "reportingComponent": source,
    }
    try:
        store.create("events", metadata["namespace"], event)
    except ApiError as error:  # the namespace may be gone by now; events are best effort
        log.debug("dropped event %s for %s: %s", reason, metadata["name"], error.message)
