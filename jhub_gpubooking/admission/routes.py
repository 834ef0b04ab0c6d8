"""Pure rules about the ways a pod can reach GPUs *without* asking for a GPU resource.

A device plugin hands out GPUs through extended resources (see :mod:`.rules`), but a container
can also get them from the node directly: dynamic resource allocation (``spec.resourceClaims``),
the ``NVIDIA_VISIBLE_DEVICES`` variable where the NVIDIA runtime is the default, a privileged
security context, a hostPath mount of ``/dev/nvidia*``, or a CDI device annotation. Each is a
:class:`DeviceRoute`; the webhook admits such a pod only on a booking that already holds every
GPU the route reaches (:func:`route_gap`), and never with a DRA claim, whose devices no booking
can bound.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..core.model import Booking, Pool, format_amount

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
#: Values of NVIDIA_VISIBLE_DEVICES that expose no GPU (the NVIDIA container toolkit's own words).
NO_DEVICES = frozenset({"", "void", "none"})
#: Container kinds of a pod spec; init and ephemeral containers reach devices like the others.
CONTAINER_KINDS = ("initContainers", "containers", "ephemeralContainers")
#: Pod annotations that inject devices through the Container Device Interface (containerd, CRI-O).
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"
_KIND_NAMES = {"initContainers": "init container", "containers": "container",
               "ephemeralContainers": "ephemeral container"}


@dataclass(frozen=True)
class DeviceRoute:
    """One way the pod reaches GPUs. ``uuids`` None: every GPU of the node it runs on."""

    description: str  # "container main is privileged, which exposes every GPU of its node"
    uuids: tuple[str, ...] | None = None
    bounded: bool = True  # False: no booking can limit it (dynamic resource allocation)


def _reaches_gpu_devices(path: object) -> bool:
    if not isinstance(path, str) or not path.startswith("/"):
        return False
    path = posixpath.normpath(path)
    return path in ("/", "//", "/dev") or path.startswith("/dev/nvidia")


def _visible_devices_route(where: str, variable: Mapping) -> DeviceRoute | None:
    if "value" not in variable and variable.get("valueFrom") is not None:
        return DeviceRoute(f"{where} sets {VISIBLE_DEVICES} from a reference, which may name "
                           "every GPU of its node")
    value = str(variable.get("value") or "").strip()
    if value.lower() in NO_DEVICES:
        return None
    entries = tuple(entry.strip() for entry in value.split(",") if entry.strip())
    if all(entry.startswith("GPU-") for entry in entries):
        return DeviceRoute(f"{where} sets {VISIBLE_DEVICES}={value}", uuids=entries)
    return DeviceRoute(f"{where} sets {VISIBLE_DEVICES}={value}, which may name every GPU of "
                       "its node")


def _container_routes(kind: str, container: Mapping,
                      device_volumes: Mapping[str, str]) -> Iterable[DeviceRoute]:
    where = f"{_KIND_NAMES[kind]} {container.get('name', '?')}"
    if ((container.get("securityContext") or {}).get("privileged")) is True:
        yield DeviceRoute(f"{where} is privileged, which exposes every GPU of its node")
    for variable in container.get("env") or ():
        if isinstance(variable, Mapping) and variable.get("name") == VISIBLE_DEVICES:
            route = _visible_devices_route(where, variable)
            if route is not None:
                yield route
    for mount in container.get("volumeMounts") or ():
        path = device_volumes.get((mount or {}).get("name"))
        if path is not None:
            yield DeviceRoute(f"{where} mounts the host's {path}, which exposes every GPU of "
                              "its node")


def device_routes(pod: Mapping, kinds: Iterable[str] = CONTAINER_KINDS) -> list[DeviceRoute]:
    """Every way ``pod`` reaches GPUs other than a GPU resource request, in spec order."""
    spec = pod.get("spec") or {}
    routes: list[DeviceRoute] = []
    if spec.get("resourceClaims"):
        routes.append(DeviceRoute("the pod asks for devices through spec.resourceClaims "
                                  "(dynamic resource allocation)", bounded=False))
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    routes += [DeviceRoute(f"the pod's annotation {key} injects devices through CDI, which may "
                           "name every GPU of its node")
               for key in sorted(annotations) if key.startswith(CDI_ANNOTATION_PREFIX)]
    device_volumes = {
        volume.get("name"): volume["hostPath"].get("path")
        for volume in spec.get("volumes") or ()
        if isinstance(volume, Mapping) and isinstance(volume.get("hostPath"), Mapping)
        and _reaches_gpu_devices(volume["hostPath"].get("path"))
    }
    for kind in kinds:
        for container in spec.get(kind) or ():
            if isinstance(container, Mapping):
                routes += _container_routes(kind, container, device_volumes)
    return routes


def describe_routes(routes: Iterable[DeviceRoute]) -> str:
    return "; ".join(route.description for route in routes)


def route_gap(pool: Pool, booking: Booking, route: DeviceRoute) -> str | None:
    """Why ``booking`` does not cover ``route``, or None when it holds every GPU reached.

    Only whole GPUs can cover a route: none of these ways honours a share of a GPU.
    """
    if not route.bounded:
        return f"{route.description}, which no booking can limit"
    placement = booking.placement
    amount = format_amount(booking.amount)
    if placement is None or booking.amount < 1:
        return f"{route.description}, but a booking of {amount} GPU holds no whole GPU"
    if route.uuids is None:
        on_node = pool.nodes.get(placement.node, 0)
        if len(placement.gpus) < on_node:
            return (f"{route.description}, but the booking holds {amount} of the {on_node} GPUs "
                    "of its node")
        return None
    booked = {pool.gpu_uuid(placement.node, index) for index in placement.gpus}
    foreign = sorted(set(route.uuids) - booked)
    if foreign:
        return f"{route.description}, but the booking does not hold GPU {foreign[0]}"
    return None
