"""Bookings the webhook claimed for pods: released when the pod ends, the pod removed when its
booking is over.

The mutating webhook claims a booking for the first pod it admits on it, with the holder name
``pod:<namespace>/<name>`` (:func:`.review.pod_holder`), so the lifecycle rules see the booking
in use exactly as when a Hub server claims it. A pod's end is not an admission event (a finished
pod stays until someone deletes it), so the service reconciles these claims against the cluster
in every lifecycle tick, from one listing of the labelled pods of each namespace holding claims
(a claimed pod missing from it is read): :func:`decide_claim` is the pure rule,
:class:`PodClaims` does the I/O with ``kubernetes_asyncio`` (the store's calls run in the
service's executor).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..core.model import Booking
from ..executor import in_executor
from ..gpu import BOOKING_ID_KEY
from .review import POD_HOLDER_PREFIX, holder_pod

log = logging.getLogger(__name__)

#: A claim whose pod the cluster does not show yet is kept this long: the claim is made during
#: admission, before the API server stores the pod (and a later webhook may still refuse it).
POD_CREATE_WINDOW = timedelta(seconds=60)
#: Phases of a pod that will not run again (restartPolicy is applied inside Running).
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


class ClaimAction(str, enum.Enum):
    RELEASE = "release"  # the pod is gone or finished: give the booking back to its owner
    DELETE_POD = "delete_pod"  # the booking is over (plus grace) and the pod still runs


@dataclass(frozen=True)
class PodFacts:
    """What the cluster says about a claiming pod."""

    phase: str = "Pending"
    deleting: bool = False

    @property
    def finished(self) -> bool:
        return self.deleting or self.phase in FINISHED_PHASES


def decide_claim(booking: Booking, claimed_at: datetime, pod: PodFacts | None, now: datetime,
                 grace: timedelta, settled: bool = False) -> ClaimAction | None:
    """What to do about ``booking``'s pod claim at ``now`` (``pod`` None: no such pod).

    ``settled``: the claim is older than the service process, whose start took longer than the
    API server needs to store an admitted pod, so a pod missing is gone at once (after a
    restore, a claim from the backup names a pod that may have ended long since).
    A cancelled booking is over at once: its pod is deleted without the end's grace."""
    if pod is None:
        return (ClaimAction.RELEASE if settled or now - claimed_at >= POD_CREATE_WINDOW
                else None)
    if pod.finished:
        return ClaimAction.RELEASE
    if booking.status == "cancelled" or now >= booking.end + grace:
        return ClaimAction.DELETE_POD
    return None


def pod_facts(pod: Any) -> PodFacts:
    """Facts from a ``kubernetes_asyncio`` client V1Pod."""
    return PodFacts(phase=(pod.status.phase if pod.status else None) or "Pending",
                    deleting=pod.metadata.deletion_timestamp is not None)


async def delete_pod(api: Any, namespace: str, name: str, uid: str = "") -> bool:
    """Delete a pod through a ``kubernetes_asyncio`` CoreV1Api; one already gone is fine. With
    ``uid``, only that pod (a UID precondition): one made since under the same name is left
    alone. True when the pod was there to delete."""
    from kubernetes_asyncio.client import V1DeleteOptions, V1Preconditions
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        if uid:
            options = V1DeleteOptions(preconditions=V1Preconditions(uid=uid))
            await api.delete_namespaced_pod(name, namespace, body=options)
        else:
            await api.delete_namespaced_pod(name, namespace)
    except ApiException as error:
        # 409 with a UID: the precondition failed, the name is another pod's now
        if error.status == 404 or (uid and error.status == 409):
            return False
        raise
    return True


class PodClaims:
    """Reconcile the store's ``pod:`` claims with the cluster's pods.

    ``connect`` opens a ``kubernetes_asyncio`` API client, once per reconcile (closed after it):
    outside a cluster the service runs without one, and the reconcile then logs once and waits.
    """

    def __init__(self, store: Any, connect: Callable[[], Awaitable[Any]], executor: Executor,
                 grace: timedelta):
        self.store = store
        self._connect = connect
        self.executor = executor
        self.grace = grace
        self._unavailable_logged = False

    @staticmethod
    async def _read_pod(api: Any, namespace: str, name: str) -> PodFacts | None:
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            return pod_facts(await api.read_namespaced_pod(name, namespace))
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    async def _list_namespace(self, api: Any, namespace: str) -> dict[str, PodFacts] | None:
        """The facts of ``namespace``'s pods carrying the booking-id label, by name (the
        webhook labels every pod it claims a booking for); None when the service may not list
        pods there (an RBAC grant from before 0.2.0 allowed only reads): then each claimed pod
        is read."""
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            pods = await api.list_namespaced_pod(namespace, label_selector=BOOKING_ID_KEY)
        except ApiException as error:
            log.debug("Pods of namespace %s not listed (%s %s): reading each claimed pod",
                      namespace, error.status, error.reason)
            return None
        return {pod.metadata.name: pod_facts(pod) for pod in pods.items}

    async def _core_api(self, api_client: Any) -> Any:
        from kubernetes_asyncio.client import CoreV1Api

        return CoreV1Api(api_client)

    async def reconcile(self, now: datetime, delete_pods: bool = True,
                        settled_before: datetime | None = None,
                        ) -> list[tuple[int, ClaimAction]]:
        """Release claims of ended pods, delete pods of ended bookings (unless not
        ``delete_pods``: then a pod's booking ended is left to a later call); returns what was
        done. Claims made before ``settled_before`` (the process's start) are settled (see
        :func:`decide_claim`)."""
        held = await in_executor(self.executor, self.store.held_by_prefix, POD_HOLDER_PREFIX)
        done: list[tuple[int, ClaimAction]] = []
        if not held:
            return done
        try:
            api_client = await self._connect()
        except Exception as error:  # noqa: BLE001 - no cluster: every claim waits for the next tick
            self._log_unchecked(held[0][0].id, error)
            return done
        async with api_client:
            api = await self._core_api(api_client)
            # one listing per namespace holding claims, not a read per claimed pod
            listed: dict[str, dict[str, PodFacts] | None] = {}
            for booking, claimed_at in held:
                pod = holder_pod(booking.server)
                try:
                    if pod is None:
                        raise ValueError(f"holder {booking.server!r} names no pod")
                    namespace, name = pod
                    if namespace not in listed:
                        listed[namespace] = await self._list_namespace(api, namespace)
                    facts = (listed[namespace] or {}).get(name)
                    if facts is None:
                        # not among the labelled pods listed: gone, not stored yet, or its
                        # label taken off since admission; only a read tells which
                        facts = await self._read_pod(api, *pod)
                    settled = settled_before is not None and claimed_at < settled_before
                    action = decide_claim(booking, claimed_at, facts, now, self.grace, settled)
                    if action is ClaimAction.DELETE_POD:
                        if not delete_pods:
                            continue  # left to a later call
                        await delete_pod(api, *pod)
                        log.info("Deleted pod %s/%s: its booking %s ended at %s", *pod,
                                 booking.id, booking.end)
                    if action is not None:
                        await in_executor(self.executor, self.store.release, booking.id, booking.server)
                        done.append((booking.id, action))
                except Exception as error:  # noqa: BLE001 - one pod must not stop the others
                    self._log_unchecked(booking.id, error)
        return done

    def _log_unchecked(self, booking_id: int, error: Exception) -> None:
        if self._unavailable_logged:
            log.debug("Pod claim of booking %s not checked: %s", booking_id, error)
        else:
            log.warning("Pod claim of booking %s not checked (retried every tick): %s",
                        booking_id, error)
            self._unavailable_logged = True

    async def stop_pod(self, booking: Booking) -> bool:
        """The lifecycle's stop rule for a pod holder: delete the pod; True once it is gone
        or going (the reconcile then releases the claim)."""
        pod = holder_pod(booking.server)
        if pod is None:
            return False
        try:
            async with await self._connect() as api_client:
                await delete_pod(await self._core_api(api_client), *pod)
        except Exception as error:  # noqa: BLE001 - retried on the next tick
            log.warning("Could not delete pod %s/%s of booking %s: %s", *pod, booking.id, error)
            return False
        log.info("Deleted pod %s/%s: its booking %s ended", *pod, booking.id)
        return True
