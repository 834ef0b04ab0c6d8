"""Turn a booked GPU share into what goes into the pod: one table row per sharing backend.

Every function here is pure. A backend translates ``(pool, amount, placement)`` into a
:class:`GpuRequest` (extended resources, annotations, scheduler, environment);
:func:`booking_pod_settings` wraps that into :class:`PodSettings`, the exact KubeSpawner trait
values that confine a server to its booking (node, share, end time).

Amounts follow the core's rule: a fraction (< 1) sits on one GPU, more than one GPU is a
whole number of GPUs on one node.
"""

from __future__ import annotations

import math
import pkgutil
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

from .core.errors import InvalidRequest
from .core.lifecycle import made_for_state
from .core.model import Booking, Placement, Pool, amount_rule_broken, format_amount
from .core.timegrid import as_utc, format_time

#: Prefix of the labels and annotations this package puts on pods.
LABEL_PREFIX = "gpubooking.jupyter.org/"
#: The label and annotation naming the booking a pod runs on (the spawner and the webhook write
#: it; the webhook also reads the annotation a pod names its booking with).
BOOKING_ID_KEY = LABEL_PREFIX + "booking-id"
#: Annotation with the GPU indices on its node that the pod was made for (the placement's).
GPU_INDICES_KEY = LABEL_PREFIX + "gpu-indices"
#: Well-known node label that pins a pod to the booked node (its value is the node name).
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: Resource the NVIDIA device plugin (and HAMi) count GPUs in unless a pool renames it.
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
#: GPU-manager counts memory in blocks of this many MiB.
VCUDA_MEMORY_UNIT_MIB = 256

#: Annotations the built-in backends own; a profile must not pre-set them (e.g. pin another GPU).
BACKEND_ANNOTATIONS = frozenset(
    {"nvidia.com/use-gpuuuid", "nvidia.com/nouse-gpuuuid", "tencent.com/vcuda-core-limit"}
)
#: Environment variables describing the booking inside the server.
BOOKING_ENV_PREFIX = "GPU_BOOKING_"

#: GPU resources of the usual device plugins (the names of every built-in backend): a pod asking
#: for one needs a booking, and the booking is the only source of a GPU amount, so a profile's own
#: GPU request is dropped instead of being added on top of the booked share.
GPU_RESOURCE_PATTERN = re.compile(
    r"^(nvidia\.com/|amd\.com/gpu|gpu\.intel\.com/|tencent\.com/vcuda-|volcano\.sh/vgpu-)"
)
# An extended resource name is a DNS-subdomain prefix and a qualified name.
_RESOURCE_NAME_RE = re.compile(
    r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


@dataclass(frozen=True)
class GpuRequest:
    """What one backend yields for a booking.

    ``resources`` are extended resources with integer counts, used as both requests and
    limits (Kubernetes requires that for extended resources).
    """

    resources: dict[str, int]
    annotations: dict[str, str] = field(default_factory=dict)
    scheduler_name: str | None = None
    env: dict[str, str] = field(default_factory=dict)


BackendFunc = Callable[[Pool, Fraction, Placement | None], GpuRequest]


# --- amounts -----------------------------------------------------------------------------


def _checked_amount(amount: Fraction) -> Fraction:
    """``amount`` if it follows the core's amount rule; ValueError (a misconfiguration here: the
    service placed the booking) otherwise."""
    broken = amount_rule_broken(amount)
    if broken:
        raise ValueError(f"{broken}.")
    return Fraction(amount)


def _gpus_touched(amount: Fraction) -> int:
    """Number of devices the pod sees: one for a fraction, N for N whole GPUs."""
    amount = _checked_amount(amount)
    return 1 if amount < 1 else int(amount)


def _share_of_each_gpu(amount: Fraction) -> Fraction:
    """Part of every touched device the pod may use: the fraction itself, or all of it."""
    amount = _checked_amount(amount)
    return amount if amount < 1 else Fraction(1)


def _slices(pool: Pool, amount: Fraction) -> int:
    """Slices held in total (``amount`` × ``slices_per_gpu``); refuses amounts between slices."""
    try:
        return pool.slices_of(amount)
    except InvalidRequest as off_grid:
        raise ValueError(off_grid.message) from None


def _required_memory(pool: Pool) -> int:
    if pool.gpu_memory_mib <= 0:
        raise ValueError(
            f"Pool {pool.name} uses the {pool.backend} backend, which limits GPU memory: "
            "set 'gpu_memory_mib' to the memory of one GPU."
        )
    return pool.gpu_memory_mib


def _booked_uuids(pool: Pool, placement: Placement | None) -> tuple[str, ...]:
    """UUIDs of the booked GPUs, or () when the pool does not list UUIDs for that node."""
    if placement is None or not pool.gpu_uuids.get(placement.node):
        return ()
    uuids = pool.gpu_uuids[placement.node]
    unknown = [index for index in placement.gpus if not 0 <= index < len(uuids)]
    if unknown:
        raise ValueError(
            f"Pool {pool.name} has no GPU {unknown[0]} on node {placement.node}; "
            "the booking's placement does not match the pool."
        )
    return tuple(uuids[index] for index in placement.gpus)


# --- backends ----------------------------------------------------------------------------


def whole_gpus(pool: Pool, amount: Fraction, placement: Placement | None) -> GpuRequest:
    """Whole GPUs of a device plugin: one extended resource counted in GPUs, no sharing."""
    amount = _checked_amount(amount)
    if amount.denominator != 1:
        raise ValueError(
            f"Pool {pool.name} hands out whole GPUs only, so {format_amount(amount)} GPU "
            "cannot be given to a pod."
        )
    return GpuRequest(resources={pool.resource_name or DEFAULT_GPU_RESOURCE: int(amount)})


def hami(pool: Pool, amount: Fraction, placement: Placement | None) -> GpuRequest:
    """HAMi expects a device count plus, per device, memory in MiB and a core percentage.

    The ``nvidia.com/use-gpuuuid`` annotation pins the booked devices when the pool knows
    their UUIDs, so two bookings sharing a node never land on the same GPU by accident.
    """
    share = _share_of_each_gpu(amount)
    resources = {
        pool.resource_name or DEFAULT_GPU_RESOURCE: _gpus_touched(amount),
        "nvidia.com/gpumem": math.floor(_required_memory(pool) * share),
        "nvidia.com/gpucores": math.floor(100 * share),
    }
    uuids = _booked_uuids(pool, placement)
    annotations = {"nvidia.com/use-gpuuuid": ",".join(uuids)} if uuids else {}
    return GpuRequest(resources=resources, annotations=annotations)


def mig(pool: Pool, amount: Fraction, placement: Placement | None) -> GpuRequest:
    """MIG expects one resource per MIG profile; a pool is one profile, a slice one instance."""
    if not pool.resource_name:
        raise ValueError(
            f"Pool {pool.name} uses MIG and needs 'resource_name' set to its MIG profile "
            "resource, such as nvidia.com/mig-1g.10gb."
        )
    return GpuRequest(resources={pool.resource_name: _slices(pool, amount)})


def device_plugin_replicas(pool: Pool, amount: Fraction, placement: Placement | None) -> GpuRequest:
    """Time-slicing and MPS expect a count of device-plugin replicas (one per slice).

    ``slices_per_gpu`` must equal the plugin's ``replicas``; the plugin must not refuse
    requests for more than one replica, or only single-slice bookings can start.
    """
    return GpuRequest(resources={pool.resource_name or DEFAULT_GPU_RESOURCE: _slices(pool, amount)})


def gpu_manager(pool: Pool, amount: Fraction, placement: Placement | None) -> GpuRequest:
    """GPU-manager expects vcuda cores (100 per GPU) and vcuda memory in 256 MiB blocks.

    The ``tencent.com/vcuda-core-limit`` annotation turns the core share into a hard cap
    rather than a soft one that may borrow idle cycles from other tenants.
    """
    amount = _checked_amount(amount)
    cores = math.floor(100 * amount)
    memory_blocks = max(1, math.floor(_required_memory(pool) * amount / VCUDA_MEMORY_UNIT_MIB))
    return GpuRequest(
        resources={"tencent.com/vcuda-core": cores, "tencent.com/vcuda-memory": memory_blocks},
        annotations={"tencent.com/vcuda-core-limit": str(cores)},
    )


def volcano_vgpu(pool: Pool, amount: Fraction, placement: Placement | None) -> GpuRequest:
    """Volcano vGPU expects a device count, memory in MiB and core percent per device.

    Only the Volcano scheduler understands these resources, hence ``schedulerName``.
    """
    share = _share_of_each_gpu(amount)
    return GpuRequest(
        resources={
            "volcano.sh/vgpu-number": _gpus_touched(amount),
            "volcano.sh/vgpu-memory": math.floor(_required_memory(pool) * share),
            "volcano.sh/vgpu-cores": math.floor(100 * share),
        },
        scheduler_name="volcano",
    )


#: Backend name (a pool's ``backend``) -> translation function.
BACKENDS: dict[str, BackendFunc] = {
    "whole": whole_gpus,
    "hami": hami,
    "mig": mig,
    "time-slicing": device_plugin_replicas,
    "mps": device_plugin_replicas,
    "gpu-manager": gpu_manager,
    "volcano": volcano_vgpu,
}


def register_backend(name: str, func: BackendFunc) -> None:
    """Add (or replace) a backend in the module-wide table."""
    if not isinstance(name, str) or not name:
        raise ValueError("A GPU backend needs a non-empty name.")
    if not callable(func):
        raise ValueError(f"GPU backend {name!r} must be a function, not {func!r}.")
    BACKENDS[name] = func


def resolve_backends(config: Mapping[str, BackendFunc | str] | None) -> dict[str, BackendFunc]:
    """Backends from config: each value a callable or an import string ``"pkg.mod:func"``."""
    resolved: dict[str, BackendFunc] = {}
    for name, target in (config or {}).items():
        func = target
        if isinstance(target, str):
            try:
                func = pkgutil.resolve_name(target)
            except (ImportError, AttributeError, ValueError) as error:
                raise ValueError(
                    f"GPU backend {name!r}: cannot import {target!r} ({error})."
                ) from error
        if not callable(func):
            raise ValueError(f"GPU backend {name!r} must be a function, not {func!r}.")
        resolved[name] = func
    return resolved


def _check_request(pool: Pool, request: Any) -> GpuRequest:
    """Refuse backend output Kubernetes would reject or that would not limit the pod."""
    source = f"GPU backend {pool.backend!r} (pool {pool.name})"
    if not isinstance(request, GpuRequest):
        raise ValueError(f"{source} must return a GpuRequest, not {type(request).__name__}.")
    if not isinstance(request.resources, Mapping) or not request.resources:
        raise ValueError(f"{source} requested no resource, so the pod would get no GPU.")
    for name, count in request.resources.items():
        if not isinstance(name, str) or not _RESOURCE_NAME_RE.match(name):
            raise ValueError(
                f"{source} gave {name!r}, which is not an extended resource name "
                "such as nvidia.com/gpu."
            )
        if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
            raise ValueError(
                f"{source} asked for {count!r} of {name}; resource amounts must be whole "
                "numbers greater than zero."
            )
    for what, mapping in (("annotations", request.annotations), ("env", request.env)):
        if not isinstance(mapping, Mapping) or not all(
            isinstance(key, str) and key and isinstance(value, str)
            for key, value in mapping.items()
        ):
            raise ValueError(f"{source} must give its {what} as text keys and text values.")
    if request.scheduler_name is not None and (
        not isinstance(request.scheduler_name, str) or not request.scheduler_name
    ):
        raise ValueError(f"{source} gave an empty or non-text scheduler name.")
    return request


def gpu_request(
    pool: Pool,
    amount: Fraction,
    placement: Placement | None,
    backends: Mapping[str, BackendFunc | str] | None = None,
) -> GpuRequest:
    """Translate ``amount`` GPUs of ``pool`` with its backend; ``backends`` extend the table."""
    table = {**BACKENDS, **resolve_backends(backends)}
    translate = table.get(pool.backend)
    if translate is None:
        raise ValueError(
            f"Pool {pool.name} uses GPU backend {pool.backend!r}, which is not known "
            f"(known: {', '.join(sorted(table))})."
        )
    return _check_request(pool, translate(pool, Fraction(amount), placement))


#: Backends that cannot be told which GPU of a node to use: the device plugin or scheduler
#: picks one, so shares of one booked GPU may be spread over several.
_UNPINNED_BACKENDS = frozenset({"time-slicing", "mps", "gpu-manager", "volcano"})


def pinning_gap(pool: Pool) -> str | None:
    """Why bookings of ``pool`` may not land on the GPU their placement names, or None.

    Placement books each share on one GPU; unless the pod is pinned to that GPU, the sharing
    backend may put two quarters on different GPUs, and a booked whole GPU then finds none
    free and stays Pending. Whole GPUs and MIG instances need no pinning.
    """
    if pool.slices_per_gpu <= 1 or pool.backend in ("whole", "mig"):
        return None
    if pool.backend == "hami":
        missing = sorted(node for node, count in pool.nodes.items()
                         if count and len(pool.gpu_uuids.get(node) or ()) != count)
        if not missing:
            return None
        return (
            f"Pool {pool.name} (HAMi) has no GPU UUIDs for node(s) {', '.join(missing)}, so HAMi "
            "may place a booked share on another GPU than the booking holds and a booked whole "
            "GPU may stay Pending; set the pool's gpu_uuids, or turn on inventory_from_nodes or "
            "gpu_uuids_from_nodes to read them from HAMi's node annotation."
        )
    if pool.backend in _UNPINNED_BACKENDS:
        return (
            f"Pool {pool.name} ({pool.backend}) cannot pin a share to the GPU its booking holds, "
            "so shares may spread over a node's GPUs and a booked whole GPU may stay Pending; "
            "book whole GPUs from it only, or use HAMi with GPU UUIDs."
        )
    return None


def check_pool_backend(
    pool: Pool, backends: Mapping[str, BackendFunc | str] | None = None
) -> None:
    """Translate the smallest and a whole share once, so a misconfigured pool fails at start."""
    gpu_request(pool, Fraction(1, pool.slices_per_gpu), None, backends)
    if max(pool.nodes.values()) >= 1:
        gpu_request(pool, Fraction(1), None, backends)


# --- pod settings ------------------------------------------------------------------------


def _template_safe(value: Any) -> Any:
    # KubeSpawner formats string trait values as templates ("{username}"), so a literal brace
    # coming from a booking (e.g. a JSON annotation of a custom backend) must be doubled.
    if isinstance(value, str):
        return value.replace("{", "{{").replace("}", "}}")
    return value


def _without(mapping: Mapping[str, Any] | None, drop: Callable[[str], bool]) -> dict[str, Any]:
    return {key: value for key, value in (mapping or {}).items() if not drop(key)}


def _owned_label(key: str) -> bool:
    return key.startswith(LABEL_PREFIX)


def _owned_annotation(key: str) -> bool:
    return key.startswith(LABEL_PREFIX) or key in BACKEND_ANNOTATIONS


def _owned_env(key: str) -> bool:
    return key.startswith(BOOKING_ENV_PREFIX)


def is_gpu_resource(name: str, extra_names: Iterable[str] = ()) -> bool:
    """Whether ``name`` counts GPUs: a device plugin's resource or a pool's own (``extra_names``)."""
    return bool(GPU_RESOURCE_PATTERN.match(name)) or name in set(extra_names)


@dataclass(frozen=True)
class PodSettings:
    """KubeSpawner trait values that confine a server to one booking.

    Resource quantities are strings, as in KubeSpawner's own examples; limits always equal
    guarantees because Kubernetes refuses extended resources that differ.
    """

    extra_resource_limits: dict[str, str]
    extra_resource_guarantees: dict[str, str]
    node_selector: dict[str, str]
    extra_labels: dict[str, str]
    extra_annotations: dict[str, str]
    environment: dict[str, str]
    extra_pod_config: dict[str, Any]
    priority_class_name: str | None = None

    def __post_init__(self) -> None:
        if self.extra_resource_limits != self.extra_resource_guarantees:
            raise ValueError("GPU resource limits and guarantees must be equal.")

    def merged_into(self, existing: Mapping[str, Any]) -> dict[str, Any]:
        """The trait values to set, given the spawner's current ones (trait name -> value).

        Everything the spawner already has is kept, except what only a booking may decide:
        GPU resources, this package's labels/annotations/``GPU_BOOKING_*`` variables and the
        backends' pinning annotations. Booking values win where keys collide.
        """

        def current(name: str) -> Mapping[str, Any]:
            return existing.get(name) or {}

        def ours(values: Mapping[str, Any]) -> dict[str, Any]:
            return {key: _template_safe(value) for key, value in values.items()}

        priority = self.priority_class_name
        if priority is None:
            priority = existing.get("priority_class_name", "")
        return {
            "extra_resource_limits": {
                **_without(current("extra_resource_limits"), is_gpu_resource),
                **self.extra_resource_limits,
            },
            "extra_resource_guarantees": {
                **_without(current("extra_resource_guarantees"), is_gpu_resource),
                **self.extra_resource_guarantees,
            },
            "node_selector": {**current("node_selector"), **self.node_selector},
            "extra_labels": {
                **_without(current("extra_labels"), _owned_label),
                **ours(self.extra_labels),
            },
            "extra_annotations": {
                **_without(current("extra_annotations"), _owned_annotation),
                **ours(self.extra_annotations),
            },
            "environment": {
                **_without(current("environment"), _owned_env),
                **ours(self.environment),
            },
            "extra_pod_config": {**current("extra_pod_config"), **ours(self.extra_pod_config)},
            "priority_class_name": priority,
        }

    def apply_to(self, spawner: Any) -> None:
        """Merge into a KubeSpawner's traits (see :meth:`merged_into`)."""
        existing = {name: getattr(spawner, name) for name in _TRAIT_NAMES}
        for name, value in self.merged_into(existing).items():
            setattr(spawner, name, value)


_TRAIT_NAMES = tuple(PodSettings.__dataclass_fields__)


#: Largest ``activeDeadlineSeconds`` Kubernetes accepts (a 32-bit signed integer field).
MAX_ACTIVE_DEADLINE_SECONDS = 2**31 - 1


def active_deadline_seconds(end: datetime, grace_seconds: int, now: datetime) -> int:
    """Seconds a pod started ``now`` may run: until ``end`` plus grace, at least 1, and at most
    :data:`MAX_ACTIVE_DEADLINE_SECONDS` (a far end would otherwise make Kubernetes refuse the pod).

    Kubernetes counts from the pod's start, which is a little after ``now``, so the pod
    may outlive the grace by its own start-up time but never stops before it.
    """
    remaining = as_utc(end) + timedelta(seconds=grace_seconds) - as_utc(now)
    return min(MAX_ACTIVE_DEADLINE_SECONDS, max(1, math.ceil(remaining / timedelta(seconds=1))))


def backstop_deadline_seconds(seconds: int | None) -> int | None:
    """The far-backstop ``activeDeadlineSeconds`` of a spawned server: ``seconds`` (capped at
    :data:`MAX_ACTIVE_DEADLINE_SECONDS`), or None (no deadline) for None or 0.

    It does not follow the booking's end on purpose: Kubernetes cannot raise a running pod's
    deadline, so a deadline at the end would kill the server of a booking extended later. The
    booking service's stop at the end is the enforcement (docs/explanation/enforcement.md).
    """
    if not seconds:
        return None
    if seconds < 0:
        raise ValueError(f"A pod deadline must be seconds >= 0, not {seconds!r}.")
    return min(int(seconds), MAX_ACTIVE_DEADLINE_SECONDS)


def booking_pod_settings(
    pool: Pool,
    booking: Booking,
    *,
    grace_seconds: int | None,
    now: datetime,
    priority_class_name: str | None = None,
    backends: Mapping[str, BackendFunc | str] | None = None,
    deadline_seconds: int | None = None,
) -> PodSettings:
    """Everything a server of ``booking`` needs: its GPU share, node, deadline and labels.

    The deadline is ``deadline_seconds`` when given (see :func:`backstop_deadline_seconds`),
    else the booking's end plus ``grace_seconds`` (pods admitted by the webhook), else none
    (``grace_seconds`` None).
    """
    if booking.pool != pool.name:
        raise ValueError(f"Booking {booking.id} is for pool {booking.pool}, not {pool.name}.")
    if booking.id is None:
        raise ValueError("Only a stored booking (one with an id) can configure a server.")
    if booking.placement is None:
        raise ValueError(
            f"Booking {booking.id} has no GPU placement, so its server cannot be pinned to a node."
        )
    if grace_seconds is not None and (
        isinstance(grace_seconds, bool) or not isinstance(grace_seconds, int) or grace_seconds < 0
    ):
        raise ValueError(f"The deadline grace must be whole seconds >= 0, not {grace_seconds!r}.")

    request = gpu_request(pool, booking.amount, booking.placement, backends)
    quantities = {name: str(count) for name, count in request.resources.items()}
    booking_id = str(booking.id)
    end = format_time(booking.end)
    gpus = format_amount(booking.amount)

    deadline = None
    if deadline_seconds is not None:
        deadline = backstop_deadline_seconds(deadline_seconds)
    elif grace_seconds is not None:
        deadline = active_deadline_seconds(booking.end, grace_seconds, now)
    pod_config: dict[str, Any] = {} if deadline is None else {"activeDeadlineSeconds": deadline}
    if request.scheduler_name:
        # set through extra_pod_config because it is applied last, after KubeSpawner's own
        # scheduler_name (z2jh's user scheduler), which cannot place these resources
        pod_config["schedulerName"] = request.scheduler_name

    return PodSettings(
        extra_resource_limits=quantities,
        extra_resource_guarantees=dict(quantities),
        node_selector={**pool.node_selector, HOSTNAME_LABEL: booking.placement.node},
        extra_labels={BOOKING_ID_KEY: booking_id, LABEL_PREFIX + "pool": pool.name},
        extra_annotations={
            **request.annotations,
            BOOKING_ID_KEY: booking_id,
            LABEL_PREFIX + "pool": pool.name,
            LABEL_PREFIX + "gpus": gpus,
            LABEL_PREFIX + "end": end,
            GPU_INDICES_KEY: ",".join(str(gpu) for gpu in booking.placement.gpus),
        },
        environment={
            **request.env,
            "GPU_BOOKING_ID": booking_id,
            "GPU_BOOKING_END": end,
            "GPU_BOOKING_POOL": pool.name,
            "GPU_BOOKING_GPUS": gpus,
        },
        extra_pod_config=pod_config,
        priority_class_name=priority_class_name,
    )


def pod_placement(pod: Mapping[str, Any]) -> tuple[str | None, tuple[int, ...] | None]:
    """The node and GPU indices a pod (the API's JSON) was made for: the node it runs on, else
    the one it is pinned to, and the indices :func:`booking_pod_settings` annotates (None for
    what the pod does not say, as for one made before 0.2.0)."""
    spec = pod.get("spec") or {}
    node = spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(HOSTNAME_LABEL)
    written = ((pod.get("metadata") or {}).get("annotations") or {}).get(GPU_INDICES_KEY)
    try:
        gpus = tuple(int(index) for index in written.split(",")) if written else None
    except ValueError:
        gpus = None
    return node, gpus


def labelled_booking(labels: Mapping[str, Any] | None) -> int | None:
    """The booking id a pod's labels (either the API's JSON or a client object's dict) name
    with :data:`BOOKING_ID_KEY`; None when they name none (no label, or a value that is not a
    booking id). The spawner, the webhook's check of admitted pods and the orphan sweep all
    read the label through this one rule."""
    value = str((labels or {}).get(BOOKING_ID_KEY, ""))
    return int(value) if value.isascii() and value.isdigit() else None


def pod_booking(pod: Mapping[str, Any] | None) -> tuple[int | None, dict[str, Any] | None]:
    """The booking a pod (the API's JSON) was made for, from the spawner's label, and the state
    JSON of the node and GPU indices it was made for (None for what it does not say)."""
    booking_id = labelled_booking(((pod or {}).get("metadata") or {}).get("labels"))
    if booking_id is None:
        return None, None
    node, gpus = pod_placement(pod)
    return booking_id, (None if node is None or gpus is None else made_for_state(node, gpus))
