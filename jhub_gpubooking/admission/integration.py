"""Cluster integration of the booking service: the admission webhook and node discovery.

:class:`ClusterIntegration` is mixed into ``GPUBookingService`` so its options are
``c.GPUBookingService.*`` traits and both parts share the service's store, pools and executor.
The webhook runs in the service process, on its own TLS port, rather than as its own command:
it needs the same database and the same live (discovered) pools the REST API uses, and the
service already runs in the hub pod where z2jh keeps the database credentials.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from jupyterhub.utils import url_path_join
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.ioloop import PeriodicCallback
from traitlets import Bool, Dict, HasTraits, Integer, List, Unicode, default

from ..core.model import Pool
from ..gpu import pinning_gap
from .claims import PodClaims
from .review import AdmissionSettings
from .server import hub_group_members, start_webhook_server, webhook_app

#: How often the webhook's certificate files are checked for a cert-manager renewal.
CERTIFICATE_CHECK_SECONDS = 60
#: Set by Kubernetes in every container; the in-cluster config needs both.
IN_CLUSTER_VARIABLES = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")


class ClusterIntegration(HasTraits):
    """Traits and start/stop of the webhook server and the node watcher."""

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
        "so keep it below executor_threads); others wait up to 3 seconds and are then refused "
        "with 'try again', so a flood of reviews cannot take the REST API's executor.",
    ).tag(config=True)

    webhook_deadline_grace_seconds = Integer(
        60, help="Seconds an admitted GPU pod may outlive its booking's end (activeDeadlineSeconds)."
    ).tag(config=True)

    inventory_from_nodes = Bool(
        False,
        help="Build pools from the cluster's nodes (GPU Feature Discovery labels, allocatable "
        "resources, HAMi annotations) and keep them in sync; configured pools with other names "
        "stay as configured.",
    ).tag(config=True)
    gpu_uuids_from_nodes = Bool(
        False,
        help="Watch the nodes of configured HAMi pools and take their GPU UUIDs from HAMi's "
        "node annotation (hami.io/node-nvidia-register) where the pool lists none, so a booked "
        "share is pinned to its GPU (nvidia.com/use-gpuuuid). Discovered pools "
        "(inventory_from_nodes) always do. Needs the node watch's rights.",
    ).tag(config=True)
    inventory_pool_templates = Dict(
        Dict(),
        help="GPU product (the nvidia.com/gpu.product node label) → pool template: a pool dict "
        "without 'nodes' and 'gpu_uuids', e.g. {'NVIDIA-A100-SXM4-40GB': {'name': 'a100', "
        "'backend': 'hami', 'slices_per_gpu': 4}}.",
    ).tag(config=True)
    inventory_node_selector = Unicode(
        "", help="Label selector limiting the watched nodes (e.g. nvidia.com/gpu.present=true)."
    ).tag(config=True)
    inventory_kubeconfig = Unicode(
        "", help="Kubeconfig file for the node watch and the webhook's pod claims; empty: the "
        "pod's in-cluster service account (its role needs get, list and watch on nodes, and get "
        "and delete on pods in the gated namespaces)."
    ).tag(config=True)

    # -- start-up -----------------------------------------------------------------------------

    def admission_settings(self) -> AdmissionSettings:
        """Rebuilt per review, so pools discovered since start-up are used."""
        page = self.public_url.rstrip("/") + self.service_prefix if self.public_url else ""
        return AdmissionSettings(
            pools=self.pool_objects,
            namespace_owners=dict(self.namespace_owners),
            namespaces=tuple(self.webhook_namespaces),
            hub_service_accounts=tuple(self.webhook_hub_service_accounts),
            grace_seconds=self.webhook_deadline_grace_seconds,
            booking_page_url=page,
        )

    def setup_cluster_integration(self, tornado_app: web.Application) -> None:
        """Add the flagged-bookings API and prepare the node watcher (not started yet)."""
        from ..db.session import make_engine, make_session_factory
        from ..inventory_sync import BookingFlags, ClusterInventory, NodeWatcher, flagged_routes

        self.node_watcher = None
        if self.webhook_client_names and not self.webhook_client_ca_file:
            raise ValueError("webhook_client_names needs webhook_client_ca_file: names are "
                             "checked in client certificates that CA signed.")
        flags = BookingFlags(make_session_factory(make_engine(self.db_url)), self.clock)
        tornado_app.add_handlers(".*$", [
            web.url(url_path_join(self.service_prefix, template), handler,
                    {**args, "route_template": template})
            for template, handler, args in flagged_routes(flags)
        ])
        self._pinning_warned: set[str] = set()
        self.warn_unpinned_pools(self.pool_objects)
        if not (self.inventory_from_nodes or self.gpu_uuids_from_nodes):
            return
        templates = self.inventory_pool_templates if self.inventory_from_nodes else {}
        inventory = ClusterInventory(self.store, templates, flags, on_pools=self._use_pools,
                                     configured_uuids=self.gpu_uuids_from_nodes)
        purpose = "inventory_from_nodes" if self.inventory_from_nodes else "gpu_uuids_from_nodes"
        self.node_watcher = NodeWatcher(self.kubernetes_connector(purpose), inventory.apply,
                                        label_selector=self.inventory_node_selector,
                                        executor=self.executor)

    def _use_pools(self, pools: dict[str, Pool]) -> None:
        self.pool_objects = pools
        self.warn_unpinned_pools(pools)

    def warn_unpinned_pools(self, pools: dict[str, Pool]) -> list[str]:
        """Log, once per distinct message, each pool whose bookings cannot be pinned to the GPU
        their placement holds (see :func:`jhub_gpubooking.gpu.pinning_gap`)."""
        gaps = [gap for gap in map(pinning_gap, pools.values()) if gap]
        for gap in gaps:
            if gap not in self._pinning_warned:
                self.log.warning("%s", gap)
        self._pinning_warned = set(gaps)
        return gaps

    def kubernetes_connector(self, purpose: str = "inventory_from_nodes"
                             ) -> Callable[[], Awaitable[Any]]:
        """How the node watch opens its ``kubernetes_asyncio`` client. Checked now: refuses
        (``ValueError``, one sentence the service prints before exiting) when there is no way to
        reach the API. Run later, in the watch's task: the client's modules take seconds to
        load, and the Hub gives a managed service ten seconds to answer."""
        path = self.inventory_kubeconfig
        if path and not os.path.isfile(path):
            raise ValueError(f"inventory_kubeconfig {path} does not exist.")
        missing = [name for name in IN_CLUSTER_VARIABLES if not os.environ.get(name)]
        if not path and missing:
            raise ValueError(
                f"{purpose} needs the Kubernetes API, but {' and '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not set in the service's environment "
                "(the Hub starts a managed service with only env_keep and its own 'environment': "
                "jhub_gpubooking.configure(c) passes them on) and inventory_kubeconfig is empty."
            )

        async def connect() -> Any:
            # loaded in a thread, so the service keeps answering meanwhile
            await asyncio.to_thread(importlib.import_module, "kubernetes_asyncio.config")
            from kubernetes_asyncio import client, config

            if path:
                return await config.new_client_from_config(config_file=path)
            configuration = client.Configuration()
            # the pod's service account: token and CA mounted by Kubernetes
            config.load_incluster_config(client_configuration=configuration)
            return client.ApiClient(configuration)

        return connect

    def start_cluster_integration(self) -> None:
        """Start the node watcher and the webhook server (inside the running event loop)."""
        self.webhook_server: HTTPServer | None = None
        if self.node_watcher is not None:
            self.node_watcher.start()
        if self.webhook_port:
            app = webhook_app(
                store=self.store, executor=self.executor, clock=self.clock,
                admission_settings=self.admission_settings,
                group_members=hub_group_members(self.hub_api_url, self.api_token),
                review_slots=asyncio.Semaphore(max(1, self.webhook_max_concurrent_reviews)),
                client_names=tuple(self.webhook_client_names),
            )
            self.webhook_server, port, certificate = start_webhook_server(
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

    # -- pod claims (called by the lifecycle tick) ----------------------------------------------

    @property
    def pod_claims(self) -> PodClaims | None:
        """The webhook's pod claims, when the webhook is on (None otherwise)."""
        if not self.webhook_port:
            return None
        if getattr(self, "_pod_claims", None) is None:
            async def connect() -> Any:
                # checked per use: without Kubernetes credentials the claims wait (logged once)
                return await self.kubernetes_connector("The webhook's pod claims")()

            self._pod_claims = PodClaims(
                self.store, connect, self.executor,
                timedelta(seconds=self.webhook_deadline_grace_seconds),
            )
        return self._pod_claims

    async def reconcile_pod_claims(self, now: datetime) -> None:
        if self.pod_claims is not None:
            await self.pod_claims.reconcile(now)

    def stop_cluster_integration(self) -> None:
        if getattr(self, "_certificate_check", None) is not None:
            self._certificate_check.stop()
        if self.webhook_server is not None:
            self.webhook_server.stop()
        if self.node_watcher is not None:
            # the task closes its connection when cancelled (at the latest when the loop ends)
            self.node_watcher.stop()
