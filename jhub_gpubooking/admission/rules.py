"""Pure rules about the GPU resources a pod asks for: governance and booking coverage.

Nothing here does I/O. A pod is a plain ``dict`` as it arrives in an AdmissionReview.
Every refusal is a :class:`RuleBroken` whose message is one sentence naming the rule.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from fractions import Fraction

from ..core.model import Pool

# a pod asking for any GPU resource of gpu.py's backends needs a booking; pools may rename their
# resource, and those names are passed in at run time
from ..gpu import is_gpu_resource
from ..quantity import parse_quantity

VCUDA_CORE = "tencent.com/vcuda-core"
VCUDA_MEMORY = "tencent.com/vcuda-memory"
HAMI_MEMORY = "nvidia.com/gpumem"
HAMI_MEMORY_PERCENT = "nvidia.com/gpumem-percentage"


class RuleBroken(ValueError):
    """A pod breaks an admission rule; ``str(error)`` is the sentence the user sees."""


def _containers(pod: Mapping) -> list[tuple[str, Mapping]]:
    spec = pod.get("spec") or {}
    return [
        (kind, container)
        for kind in ("initContainers", "containers")
        for container in spec.get(kind) or []
    ]


def _whole_count(container: str, name: str, quantity: object) -> int:
    try:
        value = parse_quantity(quantity)
    except (ValueError, TypeError):
        raise RuleBroken(
            f"Container {container} asks for {quantity!r} of {name}, which is not a quantity."
        ) from None
    if value != value.to_integral_value() or value < 0:
        raise RuleBroken(
            f"Container {container} asks for {quantity} of {name}; extended resources must be "
            "whole numbers."
        )
    return int(value)


def container_gpu_resources(
    pod: Mapping, extra_names: Iterable[str] = ()
) -> list[tuple[str, str, dict[str, int]]]:
    """``(kind, container name, {GPU resource: count})`` of every container asking for a GPU.

    Enforces the rules Kubernetes and the sharing backends rely on: whole numbers, a limit on
    every GPU resource and requests equal to limits.
    """
    extra_names = set(extra_names)
    found = []
    for kind, container in _containers(pod):
        name = container.get("name", "?")
        resources = container.get("resources") or {}
        limits = {k: v for k, v in (resources.get("limits") or {}).items()
                  if is_gpu_resource(k, extra_names)}
        requests = {k: v for k, v in (resources.get("requests") or {}).items()
                    if is_gpu_resource(k, extra_names)}
        counts: dict[str, int] = {}
        for resource in sorted(set(limits) | set(requests)):
            if resource not in limits:
                raise RuleBroken(
                    f"Container {name} requests {resource} without a limit; GPU requests must "
                    "equal their limits."
                )
            limit = _whole_count(name, resource, limits[resource])
            if resource in requests and _whole_count(name, resource, requests[resource]) != limit:
                raise RuleBroken(
                    f"Container {name} requests {requests[resource]} but limits {limits[resource]} "
                    f"of {resource}; GPU requests must equal their limits."
                )
            counts[resource] = limit
        if any(counts.values()):
            found.append((kind, name, {k: v for k, v in counts.items() if v}))
    return found


def check_backend_rules(container: str, counts: Mapping[str, int]) -> None:
    """The sharing backends' own rules, so a malformed share is refused before it schedules."""
    if VCUDA_CORE in counts or VCUDA_MEMORY in counts:
        cores = counts.get(VCUDA_CORE, 0)
        if cores >= 100 and cores % 100:
            raise RuleBroken(
                f"Container {container} asks for {cores} tencent.com/vcuda-core; gpu-manager "
                "takes less than 100 (a share of one GPU) or a multiple of 100 (whole GPUs)."
            )
        if VCUDA_MEMORY not in counts:
            raise RuleBroken(
                f"Container {container} asks for tencent.com/vcuda-core without "
                "tencent.com/vcuda-memory; gpu-manager needs both."
            )
    if HAMI_MEMORY in counts and HAMI_MEMORY_PERCENT in counts:
        raise RuleBroken(
            f"Container {container} sets both nvidia.com/gpumem and nvidia.com/gpumem-percentage; "
            "HAMi takes only one of them."
        )


def pod_gpu_demand(pod: Mapping, extra_names: Iterable[str] = ()) -> dict[str, int]:
    """What the pod holds while it runs, the way the scheduler counts it: the sum over the app
    containers, or the largest init container if that is more (init containers run one by one).
    Raises :class:`RuleBroken` for a malformed request."""
    total: dict[str, int] = {}
    largest_init: dict[str, int] = {}
    for kind, name, counts in container_gpu_resources(pod, extra_names):
        check_backend_rules(name, counts)
        for resource, count in counts.items():
            if kind == "initContainers":
                largest_init[resource] = max(largest_init.get(resource, 0), count)
            else:
                total[resource] = total.get(resource, 0) + count
    for resource, count in largest_init.items():
        total[resource] = max(total.get(resource, 0), count)
    return total


def format_resources(resources: Mapping[str, int]) -> str:
    return ", ".join(f"{name}: {count}" for name, count in sorted(resources.items())) or "nothing"


def _in_offered_units(pool: Pool, demand: Mapping[str, int]) -> dict[str, int]:
    """HAMi memory as a percentage is compared as MiB of the pool's GPU."""
    if HAMI_MEMORY_PERCENT not in demand:
        return dict(demand)
    converted = {k: v for k, v in demand.items() if k != HAMI_MEMORY_PERCENT}
    percent = Fraction(demand[HAMI_MEMORY_PERCENT], 100)
    converted[HAMI_MEMORY] = math.ceil(percent * pool.gpu_memory_mib)
    return converted


def coverage_gap(pool: Pool, offered: Mapping[str, int], demand: Mapping[str, int]) -> str | None:
    """Why a booking offering ``offered`` (what ``gpu_request`` yields) does not cover the pod's
    ``demand``, or None when it does.

    The pod must ask for exactly the booking's resources (a missing memory or core resource
    would leave the share unlimited) and at most the booked counts.
    """
    wanted = _in_offered_units(pool, demand)
    missing = sorted(set(offered) - set(wanted))
    if missing:
        return f"the pod must also ask for {', '.join(missing)}, or its share is not limited"
    foreign = sorted(set(wanted) - set(offered))
    if foreign:
        return f"the booking gives no {', '.join(foreign)}"
    too_much = sorted(name for name in wanted if wanted[name] > offered[name])
    if too_much:
        name = too_much[0]
        return f"the pod asks for {wanted[name]} {name} but the booking gives {offered[name]}"
    return None
