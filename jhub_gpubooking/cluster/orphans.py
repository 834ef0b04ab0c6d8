"""Pods of Hub servers the Hub forgot (``c.OrphanPods``): deleted.

The service ends a booking's Hub server through the Hub's API, and a Hub server's pod gets only
the spawner's backstop deadline, never its booking's end (a running pod's
``activeDeadlineSeconds`` cannot be raised when the booking is extended). A server whose start
was still pending when the Hub stopped (an upgrade, a restart, a crash) is not in the Hub's
database when it comes back: its pod runs on, unknown to the Hub, so a stop through the Hub
cannot reach it, the user cannot reach it either (the proxy has no route to it), and it keeps
its GPUs: past its booking, under the GPUs' next user, or (after a restore of the booking
database gave the booking back unclaimed) beside a second pod the webhook admits on the same
booking.

Every lifecycle tick therefore lists the pods of the Hub's namespace that carry a booking id
(the spawner's ``gpubooking.jupyter.org/booking-id`` label) and deletes

- those whose booking has been over for longer than the Hub's own stop may take
  (:func:`overdue_pods`), and
- those of a Hub server the Hub does not have (:func:`forgotten_pods`): asked after the
  listing, so a start under way shows in the Hub's answer, and deleted only if the pod listed
  is still the one of that name (a UID precondition), so a new start is never hit.

The first tick since the service started does this before claims are taken (see
:attr:`OrphanPods.compared`). :class:`OrphanPods` does the I/O with ``kubernetes_asyncio``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from traitlets import Any as AnyTrait
from traitlets import Integer, Unicode, default
from traitlets.config import LoggingConfigurable

from ..admission.claims import PodFacts, delete_pod, pod_facts
from ..admission.review import SERVERNAME_KEY, USERNAME_KEY
from ..core.model import Booking
from ..executor import in_executor
from ..gpu import BOOKING_ID_KEY, labelled_booking

log = logging.getLogger(__name__)

#: ``{user: that user's servers}`` as the Hub's REST API models them.
ServersByUser = Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class LabelledPod:
    """What the sweep needs of a pod carrying a booking id."""

    namespace: str
    name: str
    booking_id: int
    facts: PodFacts = field(default_factory=PodFacts)
    uid: str = ""
    #: the Hub server KubeSpawner made the pod for (its annotations): user and server name
    #: ("" the default server); None for a pod no Hub server made
    server: tuple[str, str] | None = None


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


def hub_server_candidates(pods: Iterable[LabelledPod],
                          bookings: Mapping[int, Booking]) -> list[LabelledPod]:
    """The pods whose Hub server the sweep asks the Hub about: still running, made by
    KubeSpawner for a Hub server, on a booking in ``bookings`` of that server's user (as for
    :func:`overdue_pods`, a booking the database lacks is another service's, or from a database
    set up anew; one of another user is too, since a spawner runs only on its user's)."""
    return [pod for pod in pods
            if not pod.facts.finished and pod.server is not None and pod.booking_id in bookings
            and bookings[pod.booking_id].user == pod.server[0]]


def forgotten_pods(pods: Iterable[LabelledPod], servers_by_user: ServersByUser,
                   namespace: str) -> list[LabelledPod]:
    """The ``pods`` (:func:`hub_server_candidates` of ``namespace``) whose Hub server the Hub
    does not have: not among ``servers_by_user`` (the Hub's active servers, starting and
    stopping ones included, asked after the pods were listed; a user missing has none), and no
    active server's state names the pod (KubeSpawner keeps ``pod_name`` there: a user renamed
    since the start has the pod under the new name)."""
    named = set()
    for servers in servers_by_user.values():
        for model in servers.values():
            state = model.get("state")
            if isinstance(state, Mapping) and state.get("namespace") in (None, namespace):
                named.add(state.get("pod_name"))
    return [pod for pod in pods
            if pod.server is not None and pod.name not in named
            and pod.server[1] not in servers_by_user.get(pod.server[0], {})]


def labelled_pod(pod: Any) -> LabelledPod | None:
    """A ``kubernetes_asyncio`` V1Pod as the sweep sees it (None: its label is no booking id)."""
    booking_id = labelled_booking(pod.metadata.labels)
    if booking_id is None:
        return None
    annotations = pod.metadata.annotations or {}
    user = annotations.get(USERNAME_KEY)
    server = None if user is None else (user, annotations.get(SERVERNAME_KEY, ""))
    return LabelledPod(pod.metadata.namespace, pod.metadata.name, booking_id, pod_facts(pod),
                       pod.metadata.uid or "", server)


class OrphanPods(LoggingConfigurable):
    """Deletes the pods of Hub servers the Hub forgot (see the module's docstring)."""

    hub_namespace = Unicode(
        help="Namespace of the Hub's single-user pods, which the lifecycle tick sweeps for pods "
        "of ended bookings and of servers the Hub does not have (default: $POD_NAMESPACE, which "
        "z2jh sets in the hub pod, where KubeSpawner starts the pods too). Empty turns the "
        "sweep off. The service's credentials (ClusterAccess) need list and delete on pods "
        "there: z2jh's hub role has them."
    ).tag(config=True)

    @default("hub_namespace")
    def _default_hub_namespace(self) -> str:
        return os.environ.get("POD_NAMESPACE", "")

    orphan_pod_seconds = Integer(
        60, min=0,
        help="Seconds past the moment its booking was over (its end; for a booking cut short or "
        "cancelled, the moment that happened), plus Lifecycle.end_grace_seconds, that a pod of "
        "a Hub server may still run before the service deletes it: the Hub's own stop comes "
        "first, and a pod still there after this is one the Hub no longer knows. (The pod of a "
        "server the Hub does not have at all is deleted at the next tick, booking over or not.)",
    ).tag(config=True)

    store = AnyTrait(help="The service's BookingStore.")
    executor = AnyTrait(help="Executor for database work.")
    connector = AnyTrait(help="ClusterAccess.connector: opens the Kubernetes API client.")
    grace_seconds = Integer(0, help="Lifecycle.end_grace_seconds.")
    hub_servers = AnyTrait(
        None,
        help="Asks the Hub which servers it has: an object with async ``active()`` (every "
        "user's active servers) and ``of_user(user)`` (one user's), each None when the Hub "
        "cannot say (the HubServers check). None: only the pods of bookings that are over are "
        "deleted.",
    )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._connect: Callable | None = None
        if self.hub_namespace:
            # checked now: the service refuses to start without a way to reach the API
            self._connect = self.connector("The sweep for pods the Hub forgot (OrphanPods)")
        self._unavailable_logged = False
        self._compared = False

    @property
    def allowed(self) -> timedelta:
        return timedelta(seconds=self.grace_seconds + self.orphan_pod_seconds)

    @property
    def compared(self) -> bool:
        """Whether a sweep since this process started has compared the Hub servers' pods with
        the Hub (True when the sweep is off): until then a pod the Hub forgot may run on a
        booking that looks free."""
        return self._connect is None or self.hub_servers is None or self._compared

    async def sweep(self, now: datetime) -> list[LabelledPod]:
        """Delete the overdue and forgotten pods of ``hub_namespace``; returns them (none when
        off)."""
        if self._connect is None:
            return []
        try:
            async with await self._connect() as api_client:
                # only now: the connector loads the client's modules in a thread, which takes
                # seconds; imported before, they would stop the event loop (the webhook too)
                from kubernetes_asyncio.client import CoreV1Api

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
                rest = [pod for pod in pods if pod not in overdue]
                forgotten = await self._delete_forgotten(
                    api, hub_server_candidates(rest, bookings))
        except Exception as error:  # noqa: BLE001 - retried on the next tick
            if not self._unavailable_logged:
                log.warning("Pods of ended bookings and forgotten servers not checked (retried "
                            "every tick): %s", error)
                self._unavailable_logged = True
            return []
        self._unavailable_logged = False
        return overdue + forgotten

    async def _delete_forgotten(self, api: Any, candidates: list[LabelledPod]) -> list[LabelledPod]:
        """Delete the ``candidates`` (listed before the Hub is asked) the Hub does not have."""
        if self.hub_servers is None:
            return []
        if not candidates:
            self._compared = True
            return []
        listing = await self.hub_servers.active()
        if listing is None:
            return []  # the Hub cannot say: asked again next tick
        deleted = []
        answered = True
        for pod in forgotten_pods(candidates, listing, self.hub_namespace):
            # once more for this user alone: a page of the listing may have shifted under a
            # server that stopped meanwhile, and so missed a user
            user = pod.server[0]
            confirmed = await _confirmed(self.hub_servers.of_user, user, listing)
            if confirmed is None:
                answered = False  # the first check waits for an answer
                continue
            if not forgotten_pods([pod], confirmed, self.hub_namespace):
                continue
            if await delete_pod(api, pod.namespace, pod.name, uid=pod.uid):
                log.warning("Deleted pod %s/%s of server %r of %s on booking %s: the Hub does "
                            "not have that server (a start it forgot while it restarted?), so "
                            "nobody can use the pod and a stop through the Hub cannot reach it",
                            pod.namespace, pod.name, pod.server[1], user, pod.booking_id)
                deleted.append(pod)
        self._compared = self._compared or answered
        return deleted


async def _confirmed(of_user: Callable[[str], Awaitable[Mapping | None]], user: str,
                     listing: ServersByUser) -> dict | None:
    """``listing`` with ``user``'s servers asked again (None: the Hub cannot say)."""
    servers = await of_user(user)
    return None if servers is None else {**listing, user: servers}
