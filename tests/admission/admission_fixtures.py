"""Shared values for the admission tests: a fixed clock, pools, bookings and GPU pods."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction

import pytest
from pod_commands import SLEEPER

from jhub_gpubooking.core.model import Booking, Placement, Pool

NOW = datetime(2030, 5, 6, 10, 5, tzinfo=timezone.utc)
BOOKING_END = datetime(2030, 5, 6, 12, 0, tzinfo=timezone.utc)


@pytest.fixture
def pools() -> dict[str, Pool]:
    return {
        "a100-hami": Pool(name="a100-hami", nodes={"gpu-1": 2}, slices_per_gpu=4, backend="hami",
                          gpu_memory_mib=40960, gpu_uuids={"gpu-1": ("GPU-aaa", "GPU-bbb")}),
        "l40s": Pool(name="l40s", nodes={"gpu-2": 4}, backend="whole"),
        "v100-vcuda": Pool(name="v100-vcuda", nodes={"gpu-3": 2}, slices_per_gpu=2,
                           backend="gpu-manager", gpu_memory_mib=32768),
    }


def booking(user: str = "alice", pool: str = "a100-hami", amount=Fraction(1, 4), *,
            node: str = "gpu-1", gpus=(1,), slices: int = 1, booking_id: int = 7,
            server: str | None = None) -> Booking:
    return Booking(user=user, pool=pool, amount=Fraction(amount),
                   start=NOW - timedelta(minutes=5), end=BOOKING_END,
                   placement=Placement(node, tuple(gpus), slices), id=booking_id, server=server)


def gpu_pod(resources: dict[str, str], *, name: str = "trainer", annotations: dict | None = None,
            labels: dict | None = None, requests: dict | None = None,
            command: list[str] | None = None, **spec) -> dict:
    metadata: dict = {"name": name}
    if annotations is not None:
        metadata["annotations"] = annotations
    if labels is not None:
        metadata["labels"] = labels
    container = {"name": "main", "image": "python:3.12",
                 "resources": {"limits": dict(resources),
                               **({"requests": requests} if requests is not None else {})}}
    if command is not None:
        container["command"] = command
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"containers": [container], **spec}}


def running_gpu_pod(name: str, gpus: str = "1", command: list[str] = SLEEPER, **more) -> dict:
    """A pod asking for whole GPUs that the simulated cluster runs (``command``), never
    restarted; ``more``: :func:`gpu_pod`'s other arguments."""
    return gpu_pod({"nvidia.com/gpu": gpus}, name=name, command=command, restartPolicy="Never",
                   **more)
