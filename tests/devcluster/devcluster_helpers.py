"""Helpers shared by the devcluster tests: node sets, pod manifests, process checks."""

from __future__ import annotations

import os

from pod_commands import SLEEPER

from jhub_gpubooking.devcluster import gpu_node, node_manifest


def cluster_nodes() -> list[dict]:
    """Two nodes: one with 2 A100s, one CPU-only; enough to tell the scheduling reasons apart."""
    return [
        gpu_node("gpu-a100", product="NVIDIA-A100-SXM4-40GB", count=2, memory_mib=40960),
        node_manifest("cpu-only", {"node-role/cpu": "true"}, {"cpu": "8", "memory": "16Gi", "pods": "50"}),
    ]


def pod_manifest(name: str, command: list[str] | None = None, **spec) -> dict:
    container = {"name": "notebook", "image": "example/notebook:1", "command": command or SLEEPER}
    container.update(spec.pop("container", {}))
    return {"metadata": {"name": name, "labels": {"component": "singleuser-server"}},
            "spec": {"containers": [container], **spec}}


def process_group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
