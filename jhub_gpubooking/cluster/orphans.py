"""Pods of Hub servers the Hub forgot (``c.OrphanPods``): deleted once their booking is over.

The service ends a booking's Hub server through the Hub's API, and a Hub server's pod gets only
the spawner's backstop deadline, never its booking's end (a running pod's
``activeDeadlineSeconds`` cannot be raised when the booking is extended). A server whose start
was still pending when the Hub stopped (an upgrade, a restart, a crash) is not in the Hub's
database when it comes back: its pod runs on, unknown to the Hub, so a stop through the Hub
cannot reach it, and it keeps its GPU for hours past its booking, under the GPUs' next user.

Every lifecycle tick therefore lists the pods of the Hub's namespace that carry a booking id
(the spawner's ``gpubooking.jupyter.org/booking-id`` label) and deletes those whose booking has
been over for longer than the Hub's own stop may take: :func:`overdue_pods` is the rule,
:class:`OrphanPods` does the I/O with ``kubernetes_asyncio``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from traitlets import Any as AnyTrait
from traitlets import Integer, Unicode, default
from traitlets.config import LoggingConfigurable

from ..admission.claims import PodFacts, delete_pod, pod_facts
from ..core.model import Booking
from ..executor import in_executor
from ..gpu import BOOKING_ID_KEY

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class LabelledPod:
    """What the sweep needs of a pod carrying a booking id."""

    namespace: str
    name: str
    booking_id: int
    facts: PodFacts = field(default_factory=PodFacts)


def over_since(booking: Booking) -> datetime:
    """When ``booking`` stopped covering a pod (in the future while it still does): its end; for
    a booking the service cut short (a preempted grant, a release) the moment it did, which may
    come after the new end (a grant is cut back to where the preempting booking starts); for a
    cancelled one, the cancel."""
    if booking.status == "cancelled":
        return booking.updated or booking.start
    if booking.release_reason is not None and booking.updated is not None:
        return max(booking.end, booking.updated)
    return booking.end


def overdue_pods(pods: Iterable[LabelledPod], bookings: Mapping[int, Booking], now: datetime,
                 allowed: timedelta) -> list[LabelledPod]:
    """The pods to delete at ``now``: still running, and their booking (in ``bookings``; one that
    is not there is left alone) over for more than ``allowed``, the time the Hub's own stop of
    the server may take."""
    return [pod for pod in pods
            if not pod.facts.finished and pod.booking_id in bookings
            and now - over_since(bookings[pod.booking_id]) > allowed]


def labelled_pod(pod: Any) -> LabelledPod | None:
    """A ``kubernetes_asyncio`` V1Pod as the sweep sees it (None: its label is no booking id)."""
    value = (pod.metadata.labels or {}).get(BOOKING_ID_KEY, "")
    if not value.isdigit():
        return None
    return LabelledPod(pod.metadata.namespace, pod.metadata.name, int(value), pod_facts(pod))


class OrphanPods(LoggingConfigurable):
    """Deletes Hub servers' pods that outlive their booking (see the module's docstring)."""

    hub_namespace = Unicode(
        help="Namespace of the Hub's single-user pods, which the lifecycle tick sweeps for pods "
        "of ended bookings (default: $POD_NAMESPACE, which z2jh sets in the hub pod, where "
        "KubeSpawner starts the pods too). Empty turns the sweep off. The service's credentials "
        "(ClusterAccess) need list and delete on pods there: z2jh's hub role has them."
    ).tag(config=True)

    @default("hub_namespace")
    def _default_hub_namespace(self) -> str:
        return os.environ.get("POD_NAMESPACE", "")

    orphan_pod_seconds = Integer(
        60, min=0,
        help="Seconds past the moment its booking was over (its end; for a booking cut short or "
        "cancelled, the moment that happened), plus Lifecycle.end_grace_seconds, that a pod of "
        "a Hub server may still run before the service deletes it: the Hub's own stop comes "
        "first, and a pod still there after this is one the Hub no longer knows.",
    ).tag(config=True)

    store = AnyTrait(help="The service's BookingStore.")
    executor = AnyTrait(help="Executor for database work.")
    connector = AnyTrait(help="ClusterAccess.connector: opens the Kubernetes API client.")
    grace_seconds = Integer(0, help="Lifecycle.end_grace_seconds.")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._connect: Callable | None = None
        if self.hub_namespace:
            # checked now: the service refuses to start without a way to reach the API
            self._connect = self.connector("The sweep for pods the Hub forgot (OrphanPods)")
        self._unavailable_logged = False

    @property
    def allowed(self) -> timedelta:
        return timedelta(seconds=self.grace_seconds + self.orphan_pod_seconds)

    async def sweep(self, now: datetime) -> list[LabelledPod]:
        """Delete the overdue pods of ``hub_namespace``; returns them (none when off)."""
        if self._connect is None:
            return []
        from kubernetes_asyncio.client import CoreV1Api

        try:
            async with await self._connect() as api_client:
                api = CoreV1Api(api_client)
                listed = await api.list_namespaced_pod(self.hub_namespace,
                                                       label_selector=BOOKING_ID_KEY)
                pods = [p for p in map(labelled_pod, listed.items) if p is not None]
                # a pod whose booking is not in the answer is another service's, or from a
                # booking database set up anew: left alone (overdue_pods)
                bookings = await in_executor(self.executor, self.store.get_many, {p.booking_id for p in pods})
                overdue = overdue_pods(pods, bookings, now, self.allowed)
                for pod in overdue:
                    await delete_pod(api, pod.namespace, pod.name)
                    log.warning("Deleted pod %s/%s: its booking %s was over at %s and the Hub "
                                "did not stop it (a start the Hub forgot while it restarted?)",
                                pod.namespace, pod.name, pod.booking_id,
                                over_since(bookings[pod.booking_id]))
        except Exception as error:  # noqa: BLE001 - retried on the next tick
            if not self._unavailable_logged:
                log.warning("Pods of ended bookings not checked (retried every tick): %s", error)
                self._unavailable_logged = True
            return []
        self._unavailable_logged = False
        return overdue
