"""Pure GPU inventory: Kubernetes nodes → booking pools, and bookings the nodes can no longer hold.

Nodes are plain v1 Node dicts. What a node offers comes from the labels of NVIDIA's GPU Feature
Discovery (``nvidia.com/gpu.product``, ``.count``, ``.memory``, ``.replicas``, MIG
``nvidia.com/mig-<profile>.count``), capped by the node's allocatable extended resources (the
device plugin stops counting a GPU that failed) and, on HAMi nodes, by the healthy devices of the
``hami.io/node-nvidia-register`` annotation, which also gives the GPU UUIDs for pinning.

Admins map each GPU product to a pool template: a pool config dict without ``nodes``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from .core.model import Booking, Pool
from .quantity import parse_quantity

PRODUCT_LABEL = "nvidia.com/gpu.product"
COUNT_LABEL = "nvidia.com/gpu.count"
MEMORY_LABEL = "nvidia.com/gpu.memory"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
HAMI_REGISTER_ANNOTATION = "hami.io/node-nvidia-register"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
#: Keys a template may not set: discovery decides them.
DISCOVERED_KEYS = frozenset({"nodes", "gpu_uuids"})


@dataclass(frozen=True)
class NodeGpus:
    """What discovery found on one node for one pool."""

    count: int
    uuids: tuple[str, ...] = ()


def _int(value: Any) -> int | None:
    try:
        return int(parse_quantity(value))
    except (TypeError, ValueError):
        return None


def node_is_usable(node: Mapping) -> bool:
    """Ready and not cordoned: only then can a booked pod start there."""
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def hami_devices(annotation: str) -> list[tuple[str, bool]]:
    """``(uuid, healthy)`` per device of HAMi's register annotation.

    HAMi wrote ``uuid,split,memory,cores,type,numa,healthy`` entries joined by ``:`` and now
    writes a JSON list of objects with ``id`` and ``health``; both are read.
    """
    text = annotation.strip()
    if text.startswith(("[", "{")):
        try:
            entries = json.loads(text)
        except ValueError:
            return []
        if not isinstance(entries, list):
            return []
        entries = [e for e in entries if isinstance(e, dict) and e.get("id")]
        # GPU i of a placement is the device of index i, whatever order HAMi listed them in
        if all(isinstance(e.get("index"), int) for e in entries):
            entries.sort(key=lambda e: e["index"])
        return [(str(e["id"]), bool(e.get("health", True))) for e in entries]
    devices = []
    for entry in filter(None, text.split(":")):
        fields = entry.split(",")
        if fields[0]:
            healthy = len(fields) < 7 or fields[6].strip().lower() == "true"
            devices.append((fields[0], healthy))
    return devices


def _allocatable_gpus(node: Mapping, template: Mapping[str, Any]) -> int | None:
    """GPUs the device plugin still reports, in whole GPUs, or None if it cannot be told."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    backend = template.get("backend", "whole")
    slices = template.get("slices_per_gpu", 1)
    resource = template.get("resource_name") or DEFAULT_GPU_RESOURCE
    if backend == "gpu-manager":
        cores = _int(allocatable.get("tencent.com/vcuda-core"))
        return None if cores is None else cores // 100
    if backend in ("hami", "volcano"):
        return None  # counts virtual devices; HAMi's register annotation is used instead
    count = _int(allocatable.get(resource))
    if count is None:
        return None
    if backend in ("mig", "time-slicing", "mps"):
        labels = (node.get("metadata") or {}).get("labels") or {}
        per_gpu = _int(labels.get(REPLICAS_LABEL)) if backend != "mig" else None
        return count // (per_gpu or slices)
    return count


def _labelled_gpus(labels: Mapping[str, str], template: Mapping[str, Any]) -> int | None:
    resource = template.get("resource_name") or ""
    if template.get("backend") == "mig" and resource.startswith(MIG_RESOURCE_PREFIX):
        instances = _int(labels.get(f"{resource}.count"))
        return None if instances is None else instances // template.get("slices_per_gpu", 1)
    return _int(labels.get(COUNT_LABEL))


def node_gpus(node: Mapping, template: Mapping[str, Any]) -> NodeGpus:
    """GPUs a node gives a pool of ``template``: the fewest any source reports."""
    if not node_is_usable(node):
        return NodeGpus(0)
    metadata = node.get("metadata") or {}
    candidates = [n for n in (_labelled_gpus(metadata.get("labels") or {}, template),
                              _allocatable_gpus(node, template)) if n is not None]
    uuids: tuple[str, ...] = ()
    register = (metadata.get("annotations") or {}).get(HAMI_REGISTER_ANNOTATION)
    if register and template.get("backend") == "hami":
        devices = hami_devices(register)
        uuids = tuple(uuid for uuid, healthy in devices if healthy)
        candidates.append(len(uuids))
    count = max(0, min(candidates)) if candidates else 0
    return NodeGpus(count, uuids if len(uuids) == count else ())


def with_hami_uuids(pool: Pool, nodes: Iterable[Mapping]) -> Pool:
    """A configured HAMi pool with GPU UUIDs from HAMi's register annotation on each of its
    nodes that has none, so its bookings are pinned to their GPU (``nvidia.com/use-gpuuuid``).

    A node whose annotation does not list exactly the configured number of GPUs gets none: its
    booking indices could not be mapped to devices (the start-up warning names it).
    """
    if pool.backend != "hami":
        return pool
    annotations = {
        (node.get("metadata") or {}).get("name"):
        ((node.get("metadata") or {}).get("annotations") or {}).get(HAMI_REGISTER_ANNOTATION, "")
        for node in nodes
    }
    uuids = dict(pool.gpu_uuids)
    for node, count in pool.nodes.items():
        devices = [uuid for uuid, _healthy in hami_devices(annotations.get(node) or "")]
        if not uuids.get(node) and count and len(devices) == count:
            uuids[node] = tuple(devices)
    return pool if uuids == dict(pool.gpu_uuids) else replace(pool, gpu_uuids=uuids)


def _check_templates(templates: Mapping[str, Mapping[str, Any]]) -> None:
    by_name: dict[str, Mapping[str, Any]] = {}
    for product, template in templates.items():
        if "name" not in template:
            raise ValueError(f"The pool template for GPU product {product!r} needs a 'name'.")
        fixed = DISCOVERED_KEYS & set(template)
        if fixed:
            raise ValueError(
                f"The pool template for {product!r} sets {sorted(fixed)}, which discovery fills in."
            )
        other = by_name.setdefault(template["name"], template)
        if other != template:
            raise ValueError(
                f"Products mapped to pool {template['name']!r} must share one identical template."
            )


def pools_from_nodes(
    nodes: Iterable[Mapping],
    templates: Mapping[str, Mapping[str, Any]],
    previous: Mapping[str, Pool] | None = None,
) -> dict[str, Pool]:
    """Pools built from the nodes whose GPU product has a template.

    A node of a ``previous`` pool that is gone or lost its product stays in the pool with 0 GPUs,
    so bookings placed on it keep a valid pool and can be flagged rather than dropped.
    """
    _check_templates(templates)
    found: dict[str, dict[str, NodeGpus]] = {}
    memory: dict[str, list[int]] = {}
    product_of: dict[str, str] = {}
    for node in nodes:
        metadata = node.get("metadata") or {}
        labels = metadata.get("labels") or {}
        template = templates.get(labels.get(PRODUCT_LABEL, ""))
        if template is None:
            continue
        name = template["name"]
        found.setdefault(name, {})[metadata["name"]] = node_gpus(node, template)
        product_of.setdefault(name, labels[PRODUCT_LABEL])
        node_memory = _int(labels.get(MEMORY_LABEL))
        if node_memory:
            memory.setdefault(name, []).append(node_memory)
    for pool in (previous or {}).values():
        if any(t["name"] == pool.name for t in templates.values()):
            for node in pool.nodes:
                found.setdefault(pool.name, {}).setdefault(node, NodeGpus(0))

    pools: dict[str, Pool] = {}
    template_of = {t["name"]: t for t in templates.values()}
    for name, per_node in sorted(found.items()):
        config: dict[str, Any] = {
            "gpu_model": product_of.get(name, ""),
            "gpu_memory_mib": min(memory.get(name, [0])),
            **template_of[name],
            "nodes": {node: gpus.count for node, gpus in sorted(per_node.items())},
        }
        uuids = {node: gpus.uuids for node, gpus in per_node.items() if gpus.uuids}
        if uuids:
            config["gpu_uuids"] = uuids
        pools[name] = Pool.from_config(config)
    return pools


def unplaceable_bookings(
    bookings: Iterable[Booking], pools: Mapping[str, Pool], now: datetime
) -> dict[int, str]:
    """Booking id → why the cluster can no longer hold it, for bookings not yet over."""
    reasons: dict[int, str] = {}
    for booking in bookings:
        if booking.id is None or booking.placement is None:
            continue
        if not booking.not_over(now):
            continue
        pool = pools.get(booking.pool)
        node = booking.placement.node
        if pool is None:
            reasons[booking.id] = (
                f"GPU pool {booking.pool} no longer exists, so booking {booking.id} cannot be used."
            )
            continue
        present = pool.nodes.get(node, 0)
        if present == 0:
            reasons[booking.id] = (
                f"Node {node} of pool {pool.name} has no usable GPU any more (it left the cluster, "
                f"is not ready or lost its GPUs), so booking {booking.id} cannot be used."
            )
        elif max(booking.placement.gpus) >= present:
            reasons[booking.id] = (
                f"Node {node} of pool {pool.name} now reports {present} GPU(s) and booking "
                f"{booking.id} holds GPU {max(booking.placement.gpus)} there, so it cannot be used."
            )
    return reasons
