"""Pure JSONPatch builder: what an admitted GPU pod gets from its booking.

The pod keeps everything it carries; the patch only adds (or overrides) single keys, so other
tools' annotations, labels and node selectors survive. A map is created only when absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..gpu import PodSettings


def pointer_token(key: str) -> str:
    """Escape a map key for a JSON Pointer (RFC 6901): ``~`` → ``~0``, ``/`` → ``~1``."""
    return key.replace("~", "~0").replace("/", "~1")


def _merge_map(path: str, current: Mapping[str, Any] | None, wanted: Mapping[str, str]) -> list:
    if not wanted:
        return []
    if current is None:
        return [{"op": "add", "path": path, "value": dict(wanted)}]
    # "add" on an existing member replaces it (RFC 6902), so one op per key is enough
    return [
        {"op": "add", "path": f"{path}/{pointer_token(key)}", "value": value}
        for key, value in sorted(wanted.items())
        if current.get(key) != value
    ]


def booking_patch(pod: Mapping[str, Any], settings: PodSettings) -> list[dict[str, Any]]:
    """JSONPatch operations giving ``pod`` the booking's annotations, labels, node pinning,
    deadline and (for backends that need one) scheduler."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    patch: list[dict[str, Any]] = []
    if "metadata" not in pod:
        patch.append({"op": "add", "path": "/metadata", "value": {}})
    patch += _merge_map("/metadata/annotations", metadata.get("annotations"),
                        settings.extra_annotations)
    patch += _merge_map("/metadata/labels", metadata.get("labels"), settings.extra_labels)
    patch += _merge_map("/spec/nodeSelector", spec.get("nodeSelector"), settings.node_selector)

    deadline = settings.extra_pod_config.get("activeDeadlineSeconds")
    current_deadline = spec.get("activeDeadlineSeconds")
    # a shorter deadline the pod already has is stricter than the booking's: keep it
    if deadline is not None and (current_deadline is None or current_deadline > deadline):
        patch.append({"op": "add", "path": "/spec/activeDeadlineSeconds", "value": deadline})

    scheduler = settings.extra_pod_config.get("schedulerName")
    if scheduler and spec.get("schedulerName") != scheduler:
        patch.append({"op": "add", "path": "/spec/schedulerName", "value": scheduler})
    return patch
