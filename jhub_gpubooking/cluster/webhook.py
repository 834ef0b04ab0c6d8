"""The admission webhook component (``c.AdmissionWebhook``): its HTTPS server and pod claims.

The review rules live in :mod:`jhub_gpubooking.admission` (review, claims, server); this
component configures and runs them inside the service process, on the service's store,
executor and clock.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from tornado.httpserver import HTTPServer
from tornado.ioloop import PeriodicCallback
from traitlets import Any as AnyTrait
from traitlets import Dict, Integer, List, Unicode, default
from traitlets.config import LoggingConfigurable

from ..admission.admitted_pods import AdmittedPods
from ..admission.claims import PodClaims
from ..admission.review import AdmissionSettings
from ..admission.server import hub_group_members, start_webhook_server, webhook_app

#: How often the webhook's certificate files are checked for a cert-manager renewal.
CERTIFICATE_CHECK_SECONDS = 60


class AdmissionWebhook(LoggingConfigurable):
    """Gates GPU pods created outside the Hub on their owner's bookings (off by default)."""

    webhook_port = Integer(
        0,
        help="Port of the admission webhook's HTTPS server (POST /mutate and /validate); "
        "0 turns the webhook off.",
    ).tag(config=True)
    webhook_address = Unicode(
        "0.0.0.0", help="Address the webhook server listens on (the API server reaches it "
        "through a Kubernetes Service)."
    ).tag(config=True)
    webhook_certfile = Unicode(
        "", help="TLS certificate of the webhook (e.g. tls.crt of cert-manager's Secret). The "
        "API server only calls webhooks over HTTPS; empty serves plain HTTP, for local tests only."
    ).tag(config=True)
    webhook_keyfile = Unicode("", help="TLS private key matching webhook_certfile.").tag(
        config=True
    )
    webhook_namespaces = List(
        Unicode(),
        help="Namespaces whose pods are gated; pods elsewhere are allowed unchanged. Empty: "
        "every namespace the webhook configuration's namespaceSelector sends.",
    ).tag(config=True)
    namespace_owners = Dict(
        Unicode(),
        help="Namespace → owner of the GPU pods created there: a Hub user name, or "
        "'group:NAME' for any member of a Hub group (the service token then needs read:groups).",
    ).tag(config=True)
    webhook_hub_service_accounts = List(
        Unicode(),
        help="Kubernetes users (shell patterns) whose pods name their owner in the "
        "hub.jupyter.org/username annotation: the Hub's service account. Pods from anyone else "
        "belong to their namespace's owner, since anyone can write that annotation.",
    ).tag(config=True)

    @default("webhook_hub_service_accounts")
    def _default_hub_accounts(self) -> list[str]:
        # z2jh names the hub's service account "hub"; POD_NAMESPACE is set in the hub pod
        return [f"system:serviceaccount:{os.environ.get('POD_NAMESPACE', 'default')}:hub"]

    webhook_client_ca_file = Unicode(
        "",
        help="CA bundle that signs the API server's client certificate for admission webhooks "
        "(its --admission-control-config-file kubeconfig). Set, the webhook completes TLS only "
        "with callers presenting a certificate this CA signed; empty, any caller the network "
        "policy lets through may connect.",
    ).tag(config=True)
    webhook_client_names = List(
        Unicode(),
        help="Common or DNS names allowed in the client certificate (needs "
        "webhook_client_ca_file); empty: any certificate the CA signed.",
    ).tag(config=True)
    webhook_max_concurrent_reviews = Integer(
        2,
        help="Reviews of GPU pods that may read the database at once (on the service's executor, "
        "so keep it below GPUBookingService.executor_threads); others wait up to 3 seconds and "
        "are then refused with 'try again', so a flood of reviews cannot take the REST API's "
        "executor.",
    ).tag(config=True)
    store = AnyTrait(help="The service's BookingStore (its pools are the live ones).")
    executor = AnyTrait(help="The service's executor for database work.")
    clock = AnyTrait(help="The service's clock.")
    connector = AnyTrait(help="ClusterAccess.connector: opens the Kubernetes API client.")
    hub_api_url = Unicode(help="The Hub's REST API URL, for group members of namespace owners.")
    api_token = Unicode(help="The service's Hub API token.")
    booking_page_url = Unicode(help="Public URL of the reservation page, named in refusals.")
    metrics = AnyTrait(None, help="The service's ServiceMetrics.")
    backends = Dict(help="The service's GPU backends (GPUBookingService.gpu_backends, resolved).")
    grace_seconds = Integer(
        help="Lifecycle.end_grace_seconds: an admitted pod's activeDeadlineSeconds is its "
        "booking's end plus this, and a pod still running then is deleted."
    )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if self.webhook_client_names and not self.webhook_client_ca_file:
            raise ValueError("webhook_client_names needs webhook_client_ca_file: names are "
                             "checked in client certificates that CA signed.")
        self.server: HTTPServer | None = None
        self._certificate_check: PeriodicCallback | None = None
        self.pod_claims: PodClaims | None = None
        self.admitted_pods: AdmittedPods | None = None
        if self.webhook_port:
            async def connect() -> Any:
                # checked per use: without Kubernetes credentials the claims wait (logged once)
                return await self.connector("The webhook's pod claims")()

            self.pod_claims = PodClaims(
                self.store, connect, self.executor,
                timedelta(seconds=self.grace_seconds),
            )
            self.admitted_pods = AdmittedPods(
                self.store, connect, self.executor, timedelta(seconds=self.grace_seconds),
                self.admission_settings, self.metrics,
            )

    def admission_settings(self) -> AdmissionSettings:
        """Rebuilt per review, so pools discovered since start-up are used."""
        return AdmissionSettings(
            pools=self.store.pools,
            namespace_owners=dict(self.namespace_owners),
            namespaces=tuple(self.webhook_namespaces),
            hub_service_accounts=tuple(self.webhook_hub_service_accounts),
            grace_seconds=self.grace_seconds,
            backends=self.backends,
            booking_page_url=self.booking_page_url,
        )

    def start(self, first_check: Callable[[float], Awaitable[bool]] | None = None) -> None:
        """Start the webhook's server, if on (inside the running event loop). Reviews that
        would claim a booking wait for ``first_check`` (the lifecycle's
        ``after_first_check``) briefly, and are refused while it runs."""
        if not self.webhook_port:
            return
        app = webhook_app(
            store=self.store, executor=self.executor, clock=self.clock,
            admission_settings=self.admission_settings,
            group_members=hub_group_members(self.hub_api_url, self.api_token),
            review_slots=asyncio.Semaphore(max(1, self.webhook_max_concurrent_reviews)),
            client_names=tuple(self.webhook_client_names), first_check=first_check,
        )
        self.server, port, certificate = start_webhook_server(
            app, self.webhook_port, self.webhook_address, self.webhook_certfile,
            self.webhook_keyfile, self.webhook_client_ca_file,
        )
        if certificate is not None:
            self._certificate_check = PeriodicCallback(
                certificate.reload_if_changed, CERTIFICATE_CHECK_SECONDS * 1000
            )
            self._certificate_check.start()
        self.log.info("Admission webhook listening on %s:%s (%s)", self.webhook_address, port,
                      "TLS" if self.webhook_certfile else "plain HTTP, for tests only")

    async def check_admitted_pods(self, now: datetime) -> None:
        """Called first in the lifecycle tick: pods on bookings the database lacks or has
        unclaimed (after a restore) are deleted or get their claim back."""
        if self.admitted_pods is not None:
            await self.admitted_pods.check(now)

    @property
    def pods_compared(self) -> bool:
        """Whether :meth:`check_admitted_pods` has compared the admitted pods with the database
        since this process started (True when the webhook does not claim bookings)."""
        return self.admitted_pods is None or self.admitted_pods.compared

    async def reconcile_pod_claims(self, now: datetime, delete_pods: bool = True,
                                   settled_before: datetime | None = None) -> None:
        """Called by the lifecycle tick: release the claims of pods that are gone and (with
        ``delete_pods``) end pods whose bookings are over (see :meth:`PodClaims.reconcile`)."""
        if self.pod_claims is not None:
            await self.pod_claims.reconcile(now, delete_pods=delete_pods,
                                            settled_before=settled_before)

    def stop(self) -> None:
        if self._certificate_check is not None:
            self._certificate_check.stop()
        if self.server is not None:
            self.server.stop()
