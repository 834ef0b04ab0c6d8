"""Pure admission decisions for pods: who owns the pod, which booking covers it, the verdict.

The webhook handler gathers the facts (active bookings, group members) and calls
:func:`review_pod`; this module never does I/O, so every rule is tested with plain dicts.
"""

from __future__ import annotations

import base64
import fnmatch
import functools
import json
import secrets
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..core.model import Booking, BookingState, Pool, format_amount
from ..gpu import BOOKING_ID_KEY, BackendFunc, booking_pod_settings, gpu_request
from ..inventory import unplaceable_bookings
from .patch import booking_patch
from .routes import DeviceRoute, describe_routes, device_routes, route_gap
from .rules import RuleBroken, coverage_gap, format_resources, pod_gpu_demand

USERNAME_KEY = "hub.jupyter.org/username"
SERVERNAME_KEY = "hub.jupyter.org/servername"
GROUP_PREFIX = "group:"
#: Holder names of bookings claimed by the webhook: ``pod:<namespace>/<name>``. The Hub's
#: server names never contain ":" after this prefix's form, and the lifecycle leaves these
#: holders to the webhook's own reconcile (:mod:`.claims`).
POD_HOLDER_PREFIX = "pod:"
# the API server's own generateName suffix: 5 characters without vowels or look-alikes
_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_NAME_SUFFIX_LENGTH = 5


@dataclass(frozen=True)
class Owner:
    """Whose bookings may back a pod: one user, or any member of a Hub group."""

    user: str | None = None
    group: str | None = None
    from_hub: bool = False  # named by the Hub's own pod annotations (trusted creator)

    def describe(self) -> str:
        return f"user {self.user}" if self.user else f"group {self.group}"


@dataclass(frozen=True)
class AdmissionSettings:
    """Configuration the decisions depend on (built from the service's traits)."""

    pools: Mapping[str, Pool]
    namespace_owners: Mapping[str, str] = field(default_factory=dict)
    namespaces: Collection[str] = ()  # gated namespaces; empty: all
    hub_service_accounts: Collection[str] = ()
    grace_seconds: int = 0
    backends: Mapping[str, BackendFunc | str] | None = None
    booking_page_url: str = ""

    def gpu_resource_names(self) -> set[str]:
        """Renamed resources of configured pools count as GPU resources too."""
        return {pool.resource_name for pool in self.pools.values() if pool.resource_name}


@dataclass(frozen=True)
class Verdict:
    """An admission answer. ``claim`` is the holder name the webhook must claim ``booking``
    for before the pod may be created (None: nothing to claim, e.g. a Hub server's pod)."""

    allowed: bool
    message: str = ""
    patch: list[dict[str, Any]] = field(default_factory=list)
    booking: Booking | None = None
    claim: str | None = None


def pod_holder(namespace: str, name: str) -> str:
    return f"{POD_HOLDER_PREFIX}{namespace}/{name}"


def holder_pod(holder: str | None) -> tuple[str, str] | None:
    """``(namespace, name)`` of a ``pod:`` holder; None for Hub servers and unclaimed."""
    if not holder or not holder.startswith(POD_HOLDER_PREFIX):
        return None
    namespace, _, name = holder[len(POD_HOLDER_PREFIX):].partition("/")
    return (namespace, name) if namespace and name else None


def describe_holder(holder: str) -> str:
    pod = holder_pod(holder)
    return f"pod {pod[0]}/{pod[1]}" if pod else "a notebook server"


def pod_name(pod: Mapping) -> tuple[str, list[dict[str, Any]]]:
    """The pod's name, and the patch naming it when it only has a ``generateName``.

    The API server generates the name only after admission, but the webhook must know it to
    record whose claim a booking is; it names the pod itself, the same way the API server would.
    """
    metadata = _metadata(pod)
    name = metadata.get("name")
    if name:
        return str(name), []
    suffix = "".join(secrets.choice(_NAME_SUFFIX_ALPHABET) for _ in range(_NAME_SUFFIX_LENGTH))
    name = f"{metadata.get('generateName') or 'pod-'}{suffix}"
    return name, [{"op": "add", "path": "/metadata/name", "value": name}]


def _metadata(pod: Mapping) -> Mapping:
    return pod.get("metadata") or {}


def is_hub_creator(creator: str, hub_service_accounts: Collection[str]) -> bool:
    return any(fnmatch.fnmatchcase(creator, pattern) for pattern in hub_service_accounts)


def pod_owner(pod: Mapping, namespace: str, creator: str,
              settings: AdmissionSettings) -> Owner | None:
    """The owner of a pod, or None when it cannot be told.

    The ``hub.jupyter.org/username`` annotation (unescaped; the label of the same name is
    KubeSpawner-escaped and only a fallback) is trusted only on pods the Hub itself creates:
    anyone else could write any name there. Other pods belong to their namespace's owner.
    """
    if is_hub_creator(creator, settings.hub_service_accounts):
        metadata = _metadata(pod)
        name = (metadata.get("annotations") or {}).get(USERNAME_KEY) or (
            metadata.get("labels") or {}
        ).get(USERNAME_KEY)
        if name:
            return Owner(user=name, from_hub=True)
    owner = settings.namespace_owners.get(namespace)
    if not owner:
        return None
    if owner.startswith(GROUP_PREFIX):
        return Owner(group=owner[len(GROUP_PREFIX):])
    return Owner(user=owner)


def _named_booking_id(pod: Mapping) -> int | None:
    raw = (_metadata(pod).get("annotations") or {}).get(BOOKING_ID_KEY)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise RuleBroken(f"The annotation {BOOKING_ID_KEY}={raw!r} is not a booking id.") from None


def _hub_server_of(pod: Mapping) -> str:
    return (_metadata(pod).get("annotations") or {}).get(SERVERNAME_KEY, "")


def wants_gpus(pod: Mapping, settings: AdmissionSettings) -> bool:
    """Does the pod need a booking? (A malformed GPU request is refused without one.)"""
    try:
        demand = pod_gpu_demand(pod, settings.gpu_resource_names())
    except RuleBroken:
        return False
    return bool(demand) or bool(device_routes(pod))


def _refuse(message: str) -> Verdict:
    return Verdict(allowed=False, message=message)


def review_pod(
    pod: Mapping,
    namespace: str,
    creator: str,
    settings: AdmissionSettings,
    owner_bookings: list[Booking],
    now: datetime,
) -> Verdict:
    """Allow a pod without GPUs; allow a GPU pod only on an active booking of its owner that
    covers it and that no other pod or server holds, with the patch pinning it to that booking
    and the holder name to claim it for.

    ``owner_bookings`` are the bookings of the pod's owner (or of the owner group's members)
    that were active when fetched; only GPU pods need them (see :func:`wants_gpus`).
    Refusals name the rule and the owner's bookings only by pool and amount: booking ids,
    nodes and ends never leave the service in a reply.
    """
    if settings.namespaces and namespace not in settings.namespaces:
        return Verdict(allowed=True)
    try:
        demand = pod_gpu_demand(pod, settings.gpu_resource_names())
        named_id = _named_booking_id(pod)
    except RuleBroken as error:
        return _refuse(str(error))
    routes = device_routes(pod)
    unbounded = [route for route in routes if not route.bounded]
    if unbounded:
        return _refuse(
            f"In this namespace {unbounded[0].description} cannot be allowed: a GPU booking "
            "cannot limit such a claim, so ask for GPUs as resources such as nvidia.com/gpu."
        )
    if not demand and not routes:
        return Verdict(allowed=True)
    wanted = format_resources(demand) if demand else describe_routes(routes)

    owner = pod_owner(pod, namespace, creator, settings)
    if owner is None:
        return _refuse(
            f"This pod asks for GPUs ({wanted}) but namespace {namespace} has no GPU owner "
            "configured, so no booking can cover it; ask an administrator."
        )
    bookings = [b for b in owner_bookings if b.state(now) is BookingState.ACTIVE]
    if named_id is not None:
        bookings = [b for b in bookings if b.id == named_id]
        if not bookings:
            return _refuse(
                f"Booking {named_id} named by this pod is not an active booking of "
                f"{owner.describe()}."
            )
    if not bookings:
        where = f" at {settings.booking_page_url}" if settings.booking_page_url else ""
        return _refuse(
            f"GPU pods need an active GPU booking and {owner.describe()} has none now"
            f"{'' if demand else f' ({wanted})'}; book GPUs{where} first."
        )
    return _choose(pod, namespace, demand, routes, owner, bookings, settings, now)


def _covers(pool: Pool, booking: Booking, demand: Mapping[str, int],
            routes: list[DeviceRoute], settings: AdmissionSettings) -> str | None:
    """Why ``booking`` does not cover the pod's resources and device routes, or None."""
    if demand:
        offered = gpu_request(pool, booking.amount, booking.placement, settings.backends)
        gap = coverage_gap(pool, offered.resources, demand)
        if gap:
            return gap
    for route in routes:
        gap = route_gap(pool, booking, route)
        if gap:
            return gap
    return None


def _choose(pod: Mapping, namespace: str, demand: Mapping[str, int], routes: list[DeviceRoute],
            owner: Owner, bookings: list[Booking], settings: AdmissionSettings,
            now: datetime) -> Verdict:
    name, naming = pod_name(pod)
    holder = pod_holder(namespace, name)
    reasons = []
    # the pod's own claim first (a re-invoked or validating review), then free bookings
    order = sorted(bookings, key=lambda b: (b.server != holder, b.server is not None, b.end,
                                            b.id or 0))
    for booking in order:
        pool = settings.pools.get(booking.pool)
        amount = format_amount(booking.amount)
        if pool is None:
            reasons.append(f"a booking in pool {booking.pool}, which is no longer configured")
            continue
        if unplaceable_bookings([booking], settings.pools, now):
            # pinned to a node or GPUs the pool no longer has, the pod would wait forever
            reasons.append(
                f"a booking of {amount} GPU in pool {pool.name} is on GPUs the pool no longer "
                "has (end or cancel it and book other GPUs)"
            )
            continue
        hub_spawn = (booking.server is not None and owner.from_hub
                     and _hub_server_of(pod) == booking.server)
        if booking.server is not None and booking.server != holder and not hub_spawn:
            reasons.append(
                f"a booking of {amount} GPU in pool {pool.name} is in use by "
                f"{describe_holder(booking.server)}, and one booking admits one pod at a time"
            )
            continue
        gap = _covers(pool, booking, demand, routes, settings)
        if gap:
            reasons.append(f"a booking of {amount} GPU in pool {pool.name}: {gap}")
            continue
        if hub_spawn:
            # the Hub's spawner already claimed this booking and configured the pod itself
            return Verdict(allowed=True, booking=booking)
        pod_settings = booking_pod_settings(
            pool, booking, grace_seconds=settings.grace_seconds, now=now,
            backends=settings.backends,
        )
        return Verdict(allowed=True, patch=naming + booking_patch(pod, pod_settings),
                       booking=booking, claim=holder)
    return _refuse(
        f"No active booking of {owner.describe()} covers this pod's GPUs "
        f"({format_resources(demand) if demand else describe_routes(routes)}): "
        f"{'; '.join(reasons)}."
    )


def review_ephemeral_containers(pod: Mapping, namespace: str, creator: str,
                                settings: AdmissionSettings, owner_bookings: list[Booking],
                                now: datetime) -> Verdict:
    """Ephemeral containers are added to a running pod (``pods/ephemeralcontainers``); one that
    reaches GPUs is allowed only when the pod holds an active booking of every GPU it reaches."""
    if settings.namespaces and namespace not in settings.namespaces:
        return Verdict(allowed=True)
    routes = device_routes(pod, kinds=("ephemeralContainers",))
    if not routes:
        return Verdict(allowed=True)
    holder = pod_holder(namespace, str(_metadata(pod).get("name") or ""))
    owner = pod_owner(pod, namespace, creator, settings)
    held = [b for b in owner_bookings if b.state(now) is BookingState.ACTIVE
            and b.server is not None
            and (b.server == holder or (owner is not None and owner.from_hub
                                        and _hub_server_of(pod) == b.server))]
    for booking in held:
        pool = settings.pools.get(booking.pool)
        if pool is not None and not _covers(pool, booking, {}, routes, settings):
            return Verdict(allowed=True, booking=booking)
    return _refuse(
        f"{describe_routes(routes)[:1].upper()}{describe_routes(routes)[1:]}: an ephemeral "
        "container may reach GPUs only in a pod holding an active booking of every GPU it reaches."
    )


# --- AdmissionReview v1 ---------------------------------------------------------------------


def review_response(uid: str, verdict: Verdict, with_patch: bool) -> dict[str, Any]:
    """The AdmissionReview the API server expects back; a denial carries a 403 Status."""
    response: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": verdict.message}
    elif with_patch and verdict.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(verdict.patch).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


_TEXT = {"type": "string"}
_TEXT_MAP = {"type": "object", "additionalProperties": _TEXT}
_QUANTITIES = {"type": "object", "additionalProperties": {"type": ["string", "number"]}}
_CONTAINERS = {"type": "array", "items": {"type": "object", "properties": {
    "name": _TEXT,
    "resources": {"type": "object",
                  "properties": {"limits": _QUANTITIES, "requests": _QUANTITIES}},
    "env": {"type": "array", "items": {"type": "object", "required": ["name"],
                                       "properties": {"name": _TEXT, "value": _TEXT}}},
    "securityContext": {"type": "object", "properties": {"privileged": {"type": "boolean"}}},
    "volumeMounts": {"type": "array", "items": {"type": "object", "properties": {"name": _TEXT}}},
}}}
#: The parts of an AdmissionReview request and of a pod the webhook reads, with their types.
#: The API server only sends decoded objects, so anything else is a crafted body: it is refused
#: as a whole instead of being judged field by field.
REQUEST_SHAPE = {"type": "object", "required": ["uid"], "properties": {
    "uid": {"type": "string", "minLength": 1},
    "kind": {"type": "object", "properties": {"kind": _TEXT}},
    "namespace": _TEXT, "name": _TEXT, "operation": _TEXT, "subResource": _TEXT,
    "userInfo": {"type": "object", "properties": {"username": _TEXT}},
    "dryRun": {"type": "boolean"},
}}
POD_SHAPE = {"type": "object", "properties": {
    "metadata": {"type": "object", "properties": {
        "name": _TEXT, "generateName": _TEXT, "annotations": _TEXT_MAP, "labels": _TEXT_MAP}},
    "spec": {"type": "object", "properties": {
        "containers": _CONTAINERS, "initContainers": _CONTAINERS,
        "ephemeralContainers": _CONTAINERS,
        "volumes": {"type": "array", "items": {"type": "object", "properties": {
            "name": _TEXT,
            "hostPath": {"type": "object", "properties": {"path": _TEXT}}}}},
        "resourceClaims": {"type": "array"},
        "nodeSelector": _TEXT_MAP,
        "activeDeadlineSeconds": {"type": "integer"},
        "schedulerName": _TEXT,
    }},
}}


@functools.cache
def _validator(shape: str) -> Any:
    from jsonschema import Draft7Validator  # imported late, like the kubernetes client

    return Draft7Validator({"request": REQUEST_SHAPE, "pod": POD_SHAPE}[shape])


def _shape_error(shape: str, value: Any, what: str) -> str | None:
    error = next(iter(_validator(shape).iter_errors(value)), None)
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path) or "the top level"
    return f"{what} is malformed at {where}."


def pod_shape_error(pod: Any) -> str | None:
    """Why ``pod`` is not shaped like a decoded Pod (in the parts the webhook reads), or None."""
    return _shape_error("pod", pod, "The pod")


def parse_review(body: bytes) -> dict[str, Any]:
    """The ``request`` of an AdmissionReview v1, or ValueError naming what is wrong."""
    try:
        review = json.loads(body)
    except ValueError as error:
        raise ValueError(f"The body is not JSON: {error}.") from None
    if not isinstance(review, dict) or review.get("apiVersion") != "admission.k8s.io/v1" or \
            review.get("kind") != "AdmissionReview":
        raise ValueError("The body is not an admission.k8s.io/v1 AdmissionReview.")
    request = review.get("request")
    if not isinstance(request, dict) or not request.get("uid"):
        raise ValueError("The AdmissionReview has no request with a uid.")
    error = _shape_error("request", request, "The AdmissionReview's request")
    if error:
        raise ValueError(error)
    return request
