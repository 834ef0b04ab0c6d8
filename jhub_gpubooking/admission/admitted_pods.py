"""Pods the webhook admitted, compared with the bookings they run on (``check_admitted_pods``).

The webhook's claims are reconciled from the database's side (:mod:`.claims`): every ``pod:``
claim is looked up in the cluster. That cannot see a pod whose claim the database no longer
has. After a restore of the booking database (or a database set up anew), a pod admitted on a
booking made since the backup runs on a booking that is gone, and one admitted on a booking
made before it runs on a booking that is back unclaimed: the database counts that pod's GPUs
as free, so the next booking gets them while the pod still holds them (until its
``activeDeadlineSeconds``, the booking's end as it was at admission), and the unclaimed
booking is released as a no-show under the running pod. A booking that moved and started since
the backup is back unclaimed where it was placed before: the pod holds other GPUs than the
database counts, and is deleted rather than claimed.

So every lifecycle tick, before the no-show rule, the service also looks from the cluster's
side: it lists the GPU pods of the gated namespaces that carry the webhook's booking-id label
and compares each with its booking (:func:`check_pod` is the rule, :class:`AdmittedPods` the
I/O). Only pods asking for GPUs count: the webhook replaces the owned labels of every GPU pod
it admits, so their label is its own, while a pod without GPUs may carry any label and holds
nothing. Pods of Hub servers (KubeSpawner annotates each with ``hub.jupyter.org/username``;
the ``servername`` annotation only a named server's) are left to ``c.HubServers`` and
``c.OrphanPods``, which ask the Hub: claimed here for the pod, a server's booking would look
held by another holder to them, and the server be stopped.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..core.errors import Conflict
from ..core.model import Booking, BookingState, where_text
from ..core.timegrid import parse_time
from ..executor import in_executor
from ..gpu import BOOKING_ID_KEY, labelled_booking, pod_placement
from .claims import PodFacts, delete_pod
from .review import (
    POD_HOLDER_PREFIX,
    SERVERNAME_KEY,
    USERNAME_KEY,
    AdmissionSettings,
    holder_pod,
    pod_holder,
    wants_gpus,
)

log = logging.getLogger(__name__)

#: How far the API server's clock (a pod's creationTimestamp) may be behind the service's (a
#: booking's ``created``): a pod is admitted on a booking that exists, so it is created after it.
CLOCK_SKEW = timedelta(seconds=60)


class PodFinding(str, enum.Enum):
    """What is wrong with an admitted pod's booking, and so what to do."""

    GONE = "gone"  # no such booking in the database: delete the pod
    OTHER_BOOKING = "other_booking"  # the id is a booking made after the pod: delete
    NOT_ACTIVE = "not_active"  # cancelled, not started, or ended past the grace: delete
    UNCLAIMED = "unclaimed"  # active and nobody holds it: record the pod's claim again
    OTHER_PLACEMENT = "other_placement"  # active, unclaimed, placed elsewhere: delete

    @property
    def deletes(self) -> bool:
        return self is not PodFinding.UNCLAIMED

    def describe(self, pod: AdmittedPod, booking: Booking | None, now: datetime) -> str:
        if self is PodFinding.GONE:
            return (f"booking {pod.booking_id} is not in the booking database (taken away by "
                    "a restore, or a database set up anew)")
        assert booking is not None
        if self is PodFinding.OTHER_BOOKING:
            return (f"booking {booking.id} was made after the pod, so the pod was admitted on "
                    "another booking of that id (in a database set up anew)")
        if self is PodFinding.UNCLAIMED:
            return f"booking {booking.id} had no claim (given back by a restore?)"
        if self is PodFinding.OTHER_PLACEMENT:
            return (f"booking {booking.id} is placed on "
                    f"{booking.placement and booking.placement.where()}, the pod was made for "
                    f"{where_text(pod.node, pod.gpus)} (a restore gave back its placement from "
                    "before it moved)")
        return f"booking {booking.id} is {booking.state(now).value}"


@dataclass(frozen=True)
class AdmittedPod:
    """A running GPU pod carrying the webhook's booking-id label."""

    namespace: str
    name: str
    booking_id: int
    created: datetime | None = None  # the API server's creationTimestamp
    # the placement it was made for (gpu.pod_placement; None: not known)
    node: str | None = None
    gpus: tuple[int, ...] | None = None

    @property
    def holder(self) -> str:
        return pod_holder(self.namespace, self.name)


def admitted_pod(pod: Mapping[str, Any], settings: AdmissionSettings) -> AdmittedPod | None:
    """``pod`` (the API's JSON) as the check sees it; None for a pod it leaves alone: one
    without the label or GPUs, a Hub server's, or one finished or being deleted (the claims'
    reconcile releases those)."""
    metadata = pod.get("metadata") or {}
    booking_id = labelled_booking(metadata.get("labels"))
    annotations = metadata.get("annotations") or {}
    if booking_id is None or USERNAME_KEY in annotations or SERVERNAME_KEY in annotations:
        return None
    facts = PodFacts(phase=(pod.get("status") or {}).get("phase") or "Pending",
                     deleting=bool(metadata.get("deletionTimestamp")))
    if facts.finished:
        return None
    if not wants_gpus(pod, settings):
        return None
    created = metadata.get("creationTimestamp")
    return AdmittedPod(metadata.get("namespace", ""), metadata.get("name", ""), booking_id,
                       parse_time(created) if created else None, *pod_placement(pod))


def check_pod(pod: AdmittedPod, booking: Booking | None, now: datetime,
              grace: timedelta) -> PodFinding | None:
    """What is wrong with ``pod`` running on ``booking`` (None: not in the database) at ``now``.

    A booking the pod holds is the claims' reconcile's (it deletes the pod after the end); one
    another holder uses is left alone: the database counts its GPUs as booked, and the pod
    stops at its deadline."""
    if booking is None:
        return PodFinding.GONE
    if booking.server == pod.holder:
        return None
    if (pod.created is not None and booking.created is not None
            and pod.created < booking.created - CLOCK_SKEW):
        return PodFinding.OTHER_BOOKING
    state = booking.state(now)
    if state is BookingState.ACTIVE:
        if booking.server is not None:
            return None
        if booking.placement is not None and not booking.placement.holds(pod.node, pod.gpus):
            return PodFinding.OTHER_PLACEMENT
        return PodFinding.UNCLAIMED
    if state is BookingState.ENDED and now < booking.end + grace:
        return None
    return PodFinding.NOT_ACTIVE


class AdmittedPods:
    """Lists the gated namespaces' admitted GPU pods and puts each right with its booking.

    The namespaces are the gated ones (``AdmissionWebhook.webhook_namespaces``), else those
    with an owner (``namespace_owners``), plus those of the pods holding a claim now."""

    def __init__(self, store: Any, connect: Callable[[], Awaitable[Any]], executor: Executor,
                 grace: timedelta, settings: Callable[[], AdmissionSettings],
                 metrics: Any = None):
        self.store = store
        self._connect = connect
        self.executor = executor
        self.grace = grace
        self.settings = settings
        self.metrics = metrics
        self._logged: set[str | None] = set()
        #: a round has listed the pods (every namespace it could) since this process started
        self.compared = False

    def _namespaces(self, settings: AdmissionSettings, claimed: Collection[str]) -> list[str]:
        named = set(settings.namespaces) or set(settings.namespace_owners)
        return sorted(named | set(claimed))

    async def check(self, now: datetime) -> list[tuple[AdmittedPod, PodFinding]]:
        """One round at ``now``: what was found and acted on."""
        settings = self.settings()
        held = await in_executor(self.executor, self.store.held_by_prefix, POD_HOLDER_PREFIX)
        claimed = {pod[0] for booking, _ in held if (pod := holder_pod(booking.server))}
        namespaces = self._namespaces(settings, claimed)
        if not namespaces:
            self.compared = True  # no pod can run on a booking: nothing to compare
            return []
        try:
            async with await self._connect() as api_client:
                # only now: the connector loads the client's modules in a thread (see
                # OrphanPods.sweep)
                from kubernetes_asyncio.client import CoreV1Api

                api = CoreV1Api(api_client)
                pods = []
                for namespace in namespaces:
                    pods += await self._listed(api_client, api, namespace, settings)
                self._logged.discard(None)
                acted = await self._act_on(api, pods, now)
                self.compared = True
                return acted
        except Exception as error:  # noqa: BLE001 - retried on the next tick
            self._warn_once(None, "Admitted pods not compared with their bookings (retried "
                            f"every tick): {error}")
            return []

    async def _listed(self, api_client: Any, api: Any, namespace: str,
                      settings: AdmissionSettings) -> list[AdmittedPod]:
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            listed = await api.list_namespaced_pod(namespace, label_selector=BOOKING_ID_KEY)
        except ApiException as error:
            # one namespace the service may not list must not hide the others' pods
            hint = (": the hub's service account needs list on pods there, which "
                    "pod-claims-rbac.yaml grants since 0.2.0 (apply it again)"
                    if error.status == 403 else "")
            self._warn_once(namespace, f"Admitted pods of namespace {namespace} not compared "
                            f"with their bookings (retried every tick): {error.status} "
                            f"{error.reason}{hint}")
            return []
        self._logged.discard(namespace)
        return [found for item in listed.items
                if (found := admitted_pod(api_client.sanitize_for_serialization(item), settings))]

    def _warn_once(self, key: str | None, message: str) -> None:
        """Warn once until it works again (``key``: the namespace, None for the cluster)."""
        if key not in self._logged:
            log.warning(message)
            self._logged.add(key)

    async def _act_on(self, api: Any, pods: list[AdmittedPod],
                      now: datetime) -> list[tuple[AdmittedPod, PodFinding]]:
        bookings = await in_executor(self.executor, self.store.get_many,
                                     {pod.booking_id for pod in pods})
        acted = []
        for pod in pods:
            booking = bookings.get(pod.booking_id)
            finding = check_pod(pod, booking, now, self.grace)
            if finding is None:
                continue
            if self.metrics is not None:
                self.metrics.admitted_pod_mismatches.labels(finding.value).inc()
            why = finding.describe(pod, booking, now)
            if finding.deletes:
                # a pod that ended meanwhile is a 404, which delete_pod takes as done
                await delete_pod(api, pod.namespace, pod.name)
                log.warning("Deleted pod %s/%s: %s", pod.namespace, pod.name, why)
            else:
                try:
                    await in_executor(self.executor, self.store.claim, booking.id, pod.holder)
                except Conflict as error:  # claimed or ended since the read: next round
                    log.info("Claim of booking %s for pod %s/%s not recorded: %s",
                             booking.id, pod.namespace, pod.name, error)
                    continue
                log.warning("Recorded the claim of pod %s/%s: %s", pod.namespace, pod.name, why)
            acted.append((pod, finding))
        return acted
