"""The admission webhook's HTTP side: Tornado handlers and the TLS server that runs them.

It runs inside the booking service process (see ``AdmissionWebhook.webhook_port``), so it
reads the same database and the same live pools as the REST API, with no second deployment.
``POST /mutate`` answers a MutatingWebhookConfiguration (verdict plus JSONPatch) and
``POST /validate`` a ValidatingWebhookConfiguration (verdict only, re-checked on the final pod
after every mutating webhook ran).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
from collections.abc import Awaitable, Callable, Collection
from concurrent.futures import Executor
from typing import Any
from urllib.parse import quote

from sqlalchemy.exc import SQLAlchemyError
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from ..core.clock import Clock
from ..core.errors import Conflict
from ..core.model import Booking
from ..executor import in_executor
from .review import (
    AdmissionSettings,
    Owner,
    Verdict,
    parse_review,
    pod_owner,
    pod_shape_error,
    review_ephemeral_containers,
    review_pod,
    review_response,
    wants_gpus,
)

log = logging.getLogger(__name__)

GroupMembers = Callable[[str], Awaitable[set[str]]]
#: Reviews that may read the database at once (webhook_max_concurrent_reviews).
DEFAULT_REVIEW_SLOTS = 2


def hub_group_members(hub_api_url: str, api_token: str, timeout: float = 5.0) -> GroupMembers:
    """Members of a Hub group from the Hub REST API (the token's role needs ``read:groups``)."""

    async def members(group: str) -> set[str]:
        url = f"{hub_api_url.rstrip('/')}/groups/{quote(group, safe='')}"
        reply = await AsyncHTTPClient().fetch(
            url, headers={"Authorization": f"token {api_token}"}, request_timeout=timeout
        )
        return set(json.loads(reply.body).get("users") or ())

    return members


#: Largest AdmissionReview accepted, the API server's own request body limit (3 MiB).
MAX_REVIEW_BYTES = 3 * 1024 * 1024
#: Seconds a review may wait for a free slot before it is refused (the API server waits 5 s).
REVIEW_QUEUE_SECONDS = 3.0
#: Seconds to receive a whole body and to keep an idle connection (slow clients hold nothing).
BODY_TIMEOUT_SECONDS = 10.0
IDLE_CONNECTION_SECONDS = 60.0

#: Seconds a review that would claim a booking waits for the service's first check of the
#: running servers and pods after it started (before the slot's wait: the two stay under 5 s).
FIRST_CHECK_SECONDS = 1.5

BUSY = "The GPU booking service is busy; try again in a moment."
STARTING = ("The GPU booking service has just started and is still checking the pods and "
            "servers that run on bookings; create the pod again in a few seconds.")
UNAVAILABLE = "The GPU booking check could not finish; try again in a moment."


class AdmissionHandler(web.RequestHandler):
    """One AdmissionReview in, one out. Pod CREATE requests and ``pods/ephemeralcontainers``
    updates are judged; anything else the configurations route here is allowed unchanged.

    A review that needs the database waits for one of ``review_slots``: a flood of reviews
    then costs queue time, not the REST API's executor. Replies carry the verdict, a refusal
    sentence and the patch only.
    """

    with_patch = False

    def initialize(self, store: Any, executor: Executor, clock: Clock,
                   admission_settings: Callable[[], AdmissionSettings],
                   group_members: GroupMembers, review_slots: asyncio.Semaphore,
                   client_names: Collection[str] = (),
                   first_check: Callable[[float], Awaitable[bool]] | None = None) -> None:
        """``first_check(timeout)``: the lifecycle's ``after_first_check`` (None: none)."""
        self.store = store
        self.first_check = first_check
        self.executor = executor
        self.clock = clock
        self.admission_settings = admission_settings
        self.group_members = group_members
        self.review_slots = review_slots
        self.client_names = set(client_names)

    def check_xsrf_cookie(self) -> None:
        """The API server posts with a client certificate context, never with browser cookies."""

    def prepare(self) -> None:
        if self.client_names and not self.client_names & client_certificate_names(self.request):
            raise web.HTTPError(403, "client certificate not allowed")

    async def post(self) -> None:
        try:
            request = parse_review(self.request.body)
        except ValueError as error:
            raise web.HTTPError(400, "%s", str(error)) from None
        verdict = await self.judge(request)
        if not verdict.allowed:
            log.info("Denied pod %s/%s: %s", request.get("namespace"), request.get("name"),
                     verdict.message)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(review_response(request["uid"], verdict, self.with_patch)))

    async def judge(self, request: dict) -> Verdict:
        pod = request.get("object")
        kind = (request.get("kind") or {}).get("kind")
        operation = request.get("operation")
        ephemeral = operation == "UPDATE" and request.get("subResource") == "ephemeralcontainers"
        if kind != "Pod" or not (operation == "CREATE" or ephemeral):
            return Verdict(allowed=True)
        malformed = pod_shape_error(pod)
        if malformed:
            raise web.HTTPError(400, "%s", malformed)
        settings = self.admission_settings()
        namespace = str(request.get("namespace") or "")
        creator = str((request.get("userInfo") or {}).get("username") or "")
        review = review_ephemeral_containers if ephemeral else review_pod
        owner = pod_owner(pod, namespace, creator, settings)
        # pods without GPUs (most of them) are answered without touching the database
        if owner is None or not wants_gpus(pod, settings):
            return review(pod, namespace, creator, settings, [], self.clock.now())
        if (self.with_patch and self.first_check is not None
                and not await self.first_check(FIRST_CHECK_SECONDS)):
            # a booking a pod or server runs on may look unclaimed until that check: a claim
            # now could put this pod on it beside them
            return Verdict(allowed=False, message=STARTING)
        try:
            await asyncio.wait_for(self.review_slots.acquire(), REVIEW_QUEUE_SECONDS)
        except asyncio.TimeoutError:
            return Verdict(allowed=False, message=BUSY)
        try:
            for _attempt in range(2):
                bookings = await self.active_bookings(owner)
                verdict = review(pod, namespace, creator, settings, bookings, self.clock.now())
                if not (self.with_patch and verdict.claim and not request.get("dryRun")):
                    return verdict
                if await self.claim(verdict):
                    return verdict
                # another pod took the booking between the read and the claim, or it moved:
                # look again
            return Verdict(allowed=False, message="The GPU booking covering this pod was just "
                           "taken by another pod; one booking admits one pod at a time.")
        except (HTTPClientError, OSError, SQLAlchemyError) as error:
            log.warning("Admission review of %s/%s failed: %s", namespace,
                        request.get("name"), error)
            return Verdict(allowed=False, message=UNAVAILABLE)
        finally:
            self.review_slots.release()

    async def claim(self, verdict: Verdict) -> bool:
        """Claim the verdict's booking for the pod, like the Hub's spawner claims it for a
        server; False when another holder got it first."""
        try:
            claimed = await in_executor(self.executor, self.store.claim, verdict.booking.id,
                                        verdict.claim)
        except Conflict:
            return False
        if claimed.placement != verdict.booking.placement:
            # moved to let another request in just before it started (its placement was
            # provisional until then): the patch would pin the old GPUs, so give the claim back
            # and review again with the final placement, which a claim keeps
            await in_executor(self.executor, self.store.release, verdict.booking.id,
                              verdict.claim)
            return False
        log.info("Booking %s claimed by %s", verdict.booking.id, verdict.claim)
        return True

    async def active_bookings(self, owner: Owner) -> list[Booking]:
        users = {owner.user} if owner.user else await self.group_members(owner.group)
        return await in_executor(self.executor, self.store.active_for_users, users)


class MutatingHandler(AdmissionHandler):
    with_patch = True


class ValidatingHandler(AdmissionHandler):
    with_patch = False


def webhook_app(**handler_args: Any) -> web.Application:
    """Routes of the webhook server; ``handler_args`` as in :meth:`AdmissionHandler.initialize`.
    One queue of review slots serves both routes."""
    handler_args.setdefault("review_slots", asyncio.Semaphore(DEFAULT_REVIEW_SLOTS))
    return web.Application(
        [(r"/mutate", MutatingHandler, handler_args),
         (r"/validate", ValidatingHandler, handler_args)],
    )


def client_certificate_names(request: Any) -> set[str]:
    """Common name and DNS names of the verified client certificate (empty without one)."""
    try:
        certificate = request.get_ssl_certificate()
    except (AttributeError, ValueError):
        return set()
    if not certificate:
        return set()
    names = {value for rdn in certificate.get("subject", ()) for key, value in rdn
             if key == "commonName"}
    names |= {value for key, value in certificate.get("subjectAltName", ()) if key == "DNS"}
    return names


def tls_context(certfile: str, keyfile: str, client_ca_file: str = "") -> ssl.SSLContext:
    """Server TLS from cert-manager's secret files; TLS 1.2+ as the API server speaks it.
    With ``client_ca_file`` every caller must present a certificate that CA signed."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    if client_ca_file:
        context.load_verify_locations(cafile=client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class ReloadingCertificate:
    """The webhook's TLS context, reloaded when cert-manager renews the certificate.

    cert-manager rewrites the Secret's files in place (and a self-signed issuer changes the CA it
    injects into the webhook configurations), so a server that kept the first certificate would
    be refused by the API server after a renewal. Loading the new pair into the same context
    serves every new handshake with it; connections already open keep theirs.
    """

    def __init__(self, certfile: str, keyfile: str, client_ca_file: str = ""):
        self.certfile, self.keyfile = certfile, keyfile
        self.context = tls_context(certfile, keyfile, client_ca_file)
        self._stamp = self._files_stamp()

    def _files_stamp(self) -> tuple[int, ...]:
        # Secret volumes swap a symlink; stat follows it to the new files
        return tuple(os.stat(path).st_mtime_ns for path in (self.certfile, self.keyfile))

    def reload_if_changed(self) -> bool:
        try:
            stamp = self._files_stamp()
            if stamp == self._stamp:
                return False
            self.context.load_cert_chain(self.certfile, self.keyfile)
        except (OSError, ssl.SSLError) as error:
            # caught between the two files being replaced: the next check takes the full pair
            log.warning("Webhook certificate not reloaded yet: %s", error)
            return False
        self._stamp = stamp
        log.info("Webhook certificate reloaded from %s", self.certfile)
        return True


def start_webhook_server(
    app: web.Application, port: int, address: str, certfile: str, keyfile: str,
    client_ca_file: str = "",
) -> tuple[HTTPServer, int, ReloadingCertificate | None]:
    """Listen (TLS when a certificate is given); return the server, the bound port and the
    certificate to re-check periodically (None for plain HTTP, used only in tests).

    Bodies over :data:`MAX_REVIEW_BYTES` are refused before they are read, and slow bodies and
    idle connections are cut, so no caller can hold the event loop or memory."""
    if client_ca_file and not certfile:
        raise ValueError("webhook_client_ca_file needs webhook_certfile: client certificates "
                         "are only checked over TLS.")
    certificate = ReloadingCertificate(certfile, keyfile, client_ca_file) if certfile else None
    server = HTTPServer(app, ssl_options=certificate.context if certificate else None,
                        max_body_size=MAX_REVIEW_BYTES, body_timeout=BODY_TIMEOUT_SECONDS,
                        idle_connection_timeout=IDLE_CONNECTION_SECONDS)
    sockets = bind_sockets(port, address)
    server.add_sockets(sockets)
    return server, sockets[0].getsockname()[1], certificate
