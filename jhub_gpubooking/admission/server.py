"""The admission webhook's HTTP side: Tornado handlers and the TLS server that runs them.

It runs inside the booking service process (see ``GPUBookingService.webhook_port``), so it
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
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any
from urllib.parse import quote

from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from ..core.clock import Clock
from ..core.model import Booking
from .review import (
    AdmissionSettings,
    Owner,
    Verdict,
    parse_review,
    pod_owner,
    review_pod,
    review_response,
    wants_gpus,
)

log = logging.getLogger(__name__)

GroupMembers = Callable[[str], Awaitable[set[str]]]


def hub_group_members(hub_api_url: str, api_token: str, timeout: float = 5.0) -> GroupMembers:
    """Members of a Hub group from the Hub REST API (the token's role needs ``read:groups``)."""

    async def members(group: str) -> set[str]:
        url = f"{hub_api_url.rstrip('/')}/groups/{quote(group, safe='')}"
        reply = await AsyncHTTPClient().fetch(
            url, headers={"Authorization": f"token {api_token}"}, request_timeout=timeout
        )
        return set(json.loads(reply.body).get("users") or ())

    return members


class AdmissionHandler(web.RequestHandler):
    """One AdmissionReview in, one out. Only pod CREATE requests are judged; the webhook
    configurations route nothing else here, and anything else is allowed unchanged."""

    with_patch = False

    def initialize(self, store: Any, executor: Executor, clock: Clock,
                   admission_settings: Callable[[], AdmissionSettings],
                   group_members: GroupMembers) -> None:
        self.store = store
        self.executor = executor
        self.clock = clock
        self.admission_settings = admission_settings
        self.group_members = group_members

    def check_xsrf_cookie(self) -> None:
        """The API server posts with a client certificate context, never with browser cookies."""

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
        if request.get("operation") != "CREATE" or kind != "Pod" or not isinstance(pod, dict):
            return Verdict(allowed=True)
        settings = self.admission_settings()
        namespace = request.get("namespace") or ""
        creator = (request.get("userInfo") or {}).get("username", "")
        owner = pod_owner(pod, namespace, creator, settings)
        bookings: list[Booking] = []
        # pods without GPUs (most of them) are answered without touching the database
        if owner is not None and wants_gpus(pod, settings):
            try:
                bookings = await self.active_bookings(owner)
            except (HTTPClientError, OSError) as error:
                return Verdict(allowed=False,
                               message=f"The GPU booking check could not finish ({error}); try again.")
        return review_pod(pod, namespace, creator, settings, bookings, self.clock.now())

    async def active_bookings(self, owner: Owner) -> list[Booking]:
        users = {owner.user} if owner.user else await self.group_members(owner.group)
        loop = asyncio.get_running_loop()
        active = await loop.run_in_executor(self.executor, lambda: self.store.list(state="active"))
        return [booking for booking in active if booking.user in users]


class MutatingHandler(AdmissionHandler):
    with_patch = True


class ValidatingHandler(AdmissionHandler):
    with_patch = False


def webhook_app(**handler_args: Any) -> web.Application:
    """Routes of the webhook server; ``handler_args`` as in :meth:`AdmissionHandler.initialize`."""
    return web.Application(
        [(r"/mutate", MutatingHandler, handler_args),
         (r"/validate", ValidatingHandler, handler_args)],
    )


def tls_context(certfile: str, keyfile: str) -> ssl.SSLContext:
    """Server TLS from cert-manager's secret files; TLS 1.2+ as the API server speaks it."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    return context


class ReloadingCertificate:
    """The webhook's TLS context, reloaded when cert-manager renews the certificate.

    cert-manager rewrites the Secret's files in place (and a self-signed issuer changes the CA it
    injects into the webhook configurations), so a server that kept the first certificate would
    be refused by the API server after a renewal. Loading the new pair into the same context
    serves every new handshake with it; connections already open keep theirs.
    """

    def __init__(self, certfile: str, keyfile: str):
        self.certfile, self.keyfile = certfile, keyfile
        self.context = tls_context(certfile, keyfile)
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
    app: web.Application, port: int, address: str, certfile: str, keyfile: str
) -> tuple[HTTPServer, int, ReloadingCertificate | None]:
    """Listen (TLS when a certificate is given); return the server, the bound port and the
    certificate to re-check periodically (None for plain HTTP, used only in tests)."""
    certificate = ReloadingCertificate(certfile, keyfile) if certfile else None
    server = HTTPServer(app, ssl_options=certificate.context if certificate else None)
    sockets = bind_sockets(port, address)
    server.add_sockets(sockets)
    return server, sockets[0].getsockname()[1], certificate
