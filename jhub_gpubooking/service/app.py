"""The hub-managed booking service: a traitlets Application serving a Tornado app.

Run by the Hub as a managed service (``jhub-gpubooking-service``); it reads the
``JUPYTERHUB_*`` environment the Hub gives managed services for its name, URL, prefix,
Hub API URL/token and OAuth client. See ``docs`` for the Hub-side service definition.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

from jupyterhub.services.auth import HubOAuth
from jupyterhub.utils import url_path_join
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.log import LogFormatter
from traitlets import Bool, Callable, Dict, Enum, Float, Instance, Integer, List, Unicode, Union, default, validate
from traitlets.config import Application, Config, catch_config_error

from .._version import __version__
from ..cluster.access import ClusterAccess
from ..cluster.nodes import NodeInventory
from ..cluster.orphans import OrphanPods
from ..cluster.webhook import AdmissionWebhook
from ..core.clock import Clock, SystemClock
from ..core.exact_moves import DEFAULT_RETRY_SECONDS
from ..core.exact_moves import DEFAULT_SECONDS as DEFAULT_EXACT_SECONDS
from ..core.ilp_solvers import SOLVERS
from ..core.ilp_solvers import resolve as resolve_solver
from ..core.model import Pool
from ..core.policy import SAFE_DEFAULT_POLICY
from ..db.flags import BookingFlags
from ..db.session import DEFAULT_DB_URL
from ..gpu import resolve_backends
from .backups import ScheduledBackups
from .base import hub_user_model, unknown_hub_user
from .config_sections import move_options, moved_options
from .email import EmailWarnings
from .hub_servers import HubServers
from .lifecycle import Lifecycle
from .metrics import ServiceMetrics
from .monitoring import GPUMonitoring
from .opportunistic import Opportunistic
from .pages import ReservationPage
from .planning import Budgets, RecurringSeries
from .pool_checks import check_pools
from .ratelimit import WriteRateLimiter
from .removed_users import RemovedUsers
from .routes import UnknownPathHandler, service_handlers
from .startup import (
    HUB_LOG_FORMAT,
    SHUTDOWN_SECONDS,
    finish_executor,
    freeze_startup_heap,
    hub_scopes_suffice,
    read_cookie_secret,
    wait_for_database,
    with_package_loggers,
)
from .waitlist import Waitlist

#: The service's components, each configured in its own section (``c.Lifecycle.*``, ...).
COMPONENTS = (
    ReservationPage,
    Lifecycle,
    EmailWarnings,
    Opportunistic,
    Budgets,
    RecurringSeries,
    Waitlist,
    GPUMonitoring,
    ClusterAccess,
    AdmissionWebhook,
    OrphanPods,
    NodeInventory,
    RemovedUsers,
    HubServers,
    ScheduledBackups,
)

#: Options whose name changed (the others kept theirs when they moved to a component).
RENAMED_OPTIONS = {
    ("GPUBookingService", "inventory_kubeconfig"): ("ClusterAccess", "kubeconfig"),
    # one grace for everything running on a booking (see Lifecycle.end_grace_seconds)
    ("GPUBookingService", "webhook_deadline_grace_seconds"): ("Lifecycle", "end_grace_seconds"),
    ("AdmissionWebhook", "webhook_deadline_grace_seconds"): ("Lifecycle", "end_grace_seconds"),
}


class GPUBookingService(Application):
    """Book GPUs for time slots; the Hub's spawner asks this service before starting GPU servers."""

    name = "jhub-gpubooking-service"
    version = __version__
    description = __doc__
    classes = list(COMPONENTS)

    aliases = {
        "config": "GPUBookingService.config_file",
        "db-url": "GPUBookingService.db_url",
        "url": "GPUBookingService.service_url",
        "log-level": "Application.log_level",
    }
    flags = {
        "upgrade-db": (
            {"GPUBookingService": {"upgrade_db": True}},
            "Upgrade the database schema to the current version before starting.",
        ),
        "generate-config": (
            {"GPUBookingService": {"generate_config": True}},
            "Write a commented default config file to --config and exit.",
        ),
    }

    config_file = Unicode(
        "jhub_gpubooking_service_config.py",
        help="Python config file to load (traitlets style, e.g. c.GPUBookingService.pools = [...]).",
    ).tag(config=True)
    generate_config = Bool(
        False, help="Write the default config to config_file and exit instead of serving."
    ).tag(config=True)
    upgrade_db = Bool(
        False,
        help="Run the database migrations at start. Without it, a stale schema stops the service "
        "with a message asking to run `jhub-gpubooking db upgrade`.",
    ).tag(config=True)

    service_name = Unicode(
        help="Name of this service in the Hub (default: $JUPYTERHUB_SERVICE_NAME or gpu-booking)."
    ).tag(config=True)

    @default("service_name")
    def _default_service_name(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVICE_NAME") or "gpu-booking"

    service_url = Unicode(
        help="URL to listen on (default: $JUPYTERHUB_SERVICE_URL, set by the Hub for managed services)."
    ).tag(config=True)

    @default("service_url")
    def _default_service_url(self) -> str:
        return os.environ.get("JUPYTERHUB_SERVICE_URL") or "http://127.0.0.1:10101"

    service_prefix = Unicode(
        help="URL prefix the Hub's proxy routes to this service (default: $JUPYTERHUB_SERVICE_PREFIX)."
    ).tag(config=True)

    @default("service_prefix")
    def _default_service_prefix(self) -> str:
        return (
            os.environ.get("JUPYTERHUB_SERVICE_PREFIX")
            or url_path_join(self.hub_base_url, "services", self.service_name) + "/"
        )

    @validate("service_prefix", "hub_base_url")
    def _slashes_around(self, proposal) -> str:
        return "/" + proposal["value"].strip("/") + "/" if proposal["value"].strip("/") else "/"

    hub_base_url = Unicode(
        help="Base URL of the whole JupyterHub deployment (default: $JUPYTERHUB_BASE_URL or /)."
    ).tag(config=True)

    @default("hub_base_url")
    def _default_hub_base_url(self) -> str:
        return os.environ.get("JUPYTERHUB_BASE_URL") or "/"

    hub_api_url = Unicode(help="The Hub's REST API URL (default: $JUPYTERHUB_API_URL).").tag(
        config=True
    )

    @default("hub_api_url")
    def _default_hub_api_url(self) -> str:
        return os.environ.get("JUPYTERHUB_API_URL") or "http://127.0.0.1:8081" + url_path_join(
            self.hub_prefix, "api"
        )

    api_token = Unicode(
        help="This service's Hub API token (default: $JUPYTERHUB_API_TOKEN). Its role needs "
        "list:users, read:users, read:users:groups and read:servers (to tell whether a server "
        "holding a booking is still running)."
    ).tag(config=True)

    @default("api_token")
    def _default_api_token(self) -> str:
        return os.environ.get("JUPYTERHUB_API_TOKEN", "")

    public_url = Unicode(
        help="Public URL of this service as browsers and calendar apps reach it, used for feed "
        "links (default: $JUPYTERHUB_PUBLIC_URL; if empty, built from each request's host)."
    ).tag(config=True)

    @default("public_url")
    def _default_public_url(self) -> str:
        return os.environ.get("JUPYTERHUB_PUBLIC_URL", "")

    db_url = Unicode(
        help="SQLAlchemy URL of the booking database (SQLite, PostgreSQL or MySQL/MariaDB); "
        "default: $GPUBOOKING_DB_URL, else sqlite:///gpubooking.sqlite in the working directory "
        "(the same default as the jhub-gpubooking admin CLI).",
    ).tag(config=True)

    @default("db_url")
    def _default_db_url(self) -> str:
        return os.environ.get("GPUBOOKING_DB_URL", DEFAULT_DB_URL)
    pools = List(
        Dict(),
        help="GPU pools: one dict per pool with the keys of jhub_gpubooking.core.model.Pool "
        "(name, nodes, slices_per_gpu, backend, display_name, ...).",
    ).tag(config=True)
    gpu_backends = Dict(
        value_trait=Union([Callable(), Unicode()]),
        help="Extra or replacement GPU sharing backends, as on GPUBookingSpawner.gpu_backends: "
        "backend name -> translation function, or its import path 'module:function'. The "
        "service translates with them where it builds pod settings itself (the admission "
        "webhook) and checks every pool against them at start; set the same table on the "
        "spawner, which builds the Hub's pods.",
    ).tag(config=True)
    default_policy = Dict(
        SAFE_DEFAULT_POLICY,
        help="Booking policy for everyone (keys of jhub_gpubooking.core.policy.Policy, e.g. "
        "max_minutes, max_days_ahead, max_gpus, budget_gpu_hours); missing keys mean no limit. "
        "The default allows bookings of at most a week (max_minutes 10080) starting at most 90 "
        "days ahead (max_days_ahead 90); setting this option replaces the whole dict, so keep "
        "these two keys unless you mean to lift them.",
    ).tag(config=True)
    group_policies = Dict(
        help="Per Hub group, policy keys overriding default_policy; a user in several groups gets "
        "the most generous value of each key."
    ).tag(config=True)
    slot_minutes = Integer(
        15, help="Booking grid in minutes: bookings start and end on multiples of it."
    ).tag(config=True)
    exact_move_seconds = Float(
        DEFAULT_EXACT_SECONDS,
        min=0,
        help="Longest time in seconds a create may spend re-placing upcoming bookings exactly "
        "(an integer program, see exact_move_solver) when the quick searches find no way to "
        "let the request in by moving bookings that have not started. The pool's lock is held "
        "meanwhile, so other creates, claims and cancels in that pool wait; the best "
        "re-placement found in time is used. Creates written in one transaction (a burst of "
        "requests, the occurrences of a series) share this time. 0 turns this last resort off.",
    ).tag(config=True)
    exact_move_retry_seconds = Float(
        DEFAULT_RETRY_SECONDS,
        min=0,
        help="When that search runs out of exact_move_seconds without an answer, search again "
        "for up to this many seconds without the pool's lock (other creates, claims and "
        "cancels go on meanwhile), and book what it finds if it still holds once the lock is "
        "taken again; the user waits that long for the answer. One such search runs at a "
        "time; a request arriving while it runs is refused as before. A waitlisted request "
        "in the same case gets it on the lifecycle tick (one wait a tick, each at most every "
        "10 minutes). 0 refuses at once.",
    ).tag(config=True)
    exact_move_solver = Enum(
        SOLVERS,
        default_value="auto",
        help="Which solver answers that integer program: 'highs' (HiGHS, from scipy, always "
        "installed), 'cpsat' (OR-Tools' CP-SAT on one thread; pip install "
        "'jhub-gpubooking[cpsat]'), 'portfolio' (both at once on two threads, the first proof "
        "wins: they fail on different programs) or 'auto' (the portfolio when OR-Tools is "
        "installed, else HiGHS). The service refuses to start with 'cpsat' or 'portfolio' and "
        "no OR-Tools.",
    ).tag(config=True)

    @validate("exact_move_solver")
    def _exact_move_solver_installed(self, proposal) -> str:
        resolve_solver(proposal["value"])  # CP-SAT without OR-Tools: say how to install it
        return proposal["value"]

    spawner_services = List(
        Unicode(),
        help="Hub services whose tokens act as the Hub's spawner (may read any user's active "
        "bookings and claim/release them). Default: this service itself, since the spawner "
        "uses the service's own API token.",
    ).tag(config=True)

    @default("spawner_services")
    def _default_spawner_services(self) -> list[str]:
        return [self.service_name]

    admin_groups = List(
        Unicode(),
        help="Hub groups whose members administer bookings, besides Hub admins.",
    ).tag(config=True)
    db_timeout_seconds = Float(
        5.0,
        help="Longest wait for the database before a request is answered 503 (Service "
        "Unavailable, with Retry-After): connecting to PostgreSQL/MariaDB, a free pooled "
        "connection, SQLite's write lock, a row lock. The Hub's spawner then refuses GPU "
        "starts with its 'booking service unavailable' sentence instead of hanging.",
    ).tag(config=True)
    executor_threads = Integer(
        4, help="Threads for database work, so the event loop never waits on the database."
    ).tag(config=True)
    authenticate_metrics = Bool(
        True,
        help="Require an admin or a Hub service token for /metrics (like the Hub's own "
        "authenticate_prometheus).",
    ).tag(config=True)
    auth_cache_seconds = Integer(
        10,
        help="Seconds the service trusts the Hub's answer about a token or login cookie before "
        "asking again (HubOAuth's cache_max_age, whose own default is 300). A revoked token, a "
        "logout or a removal from an admin group takes effect within this time; every cache "
        "miss costs one Hub API call. The service's own token (which the Hub's spawner uses "
        "when the service is one of spawner_services) is recognised without asking the Hub.",
    ).tag(config=True)

    @validate("auth_cache_seconds")
    def _auth_cache_within_bounds(self, proposal) -> int:
        if not 0 <= proposal["value"] <= 300:
            raise ValueError("auth_cache_seconds must be from 0 to 300 seconds.")
        return proposal["value"]

    write_rate_per_minute = Integer(
        120,
        help="Write requests (POST, PATCH, PUT, DELETE) each user or service may send per minute "
        "on average; more are refused with 429 and Retry-After. 0 turns the limit off. The "
        "Hub's spawner (spawner_services) is never limited.",
    ).tag(config=True)
    write_burst = Integer(
        30, help="Write requests a user may send at once before write_rate_per_minute applies."
    ).tag(config=True)
    cookie_secret_file = Unicode(
        "",
        help="File holding the secret that signs login cookies; created if missing. Empty: a new "
        "random secret at each start, which logs browsers out when the service restarts.",
    ).tag(config=True)

    clock = Instance(Clock, help="Source of the current time (not configurable from files).")

    @default("clock")
    def _default_clock(self) -> Clock:
        return SystemClock()

    @default("log_level")
    def _default_log_level(self) -> int:
        return logging.INFO

    _log_formatter_cls = LogFormatter  # tornado's, for the colours of the Hub's line format

    @default("log_format")
    def _default_log_format(self) -> str:
        return HUB_LOG_FORMAT

    def get_default_logging_config(self) -> dict:
        return with_package_loggers(super().get_default_logging_config(), self.log_level)

    def _move_flat_options(self, config: Config) -> Config:
        """Options set under their old name (``c.GPUBookingService.<option>``, a renamed one)
        apply at their new place, with a deprecation warning (see config_sections)."""
        moved = moved_options(type(self).__name__, COMPONENTS, RENAMED_OPTIONS)
        return move_options(config, moved, self.log)

    # config reaches the service two ways: assigned (the constructor's config=) or merged in
    # place (config files, the command line); both pass through _move_flat_options
    @validate("config")
    def _config_with_sections(self, proposal) -> Config:
        return self._move_flat_options(proposal["value"])

    def update_config(self, config: Config) -> None:
        super().update_config(self._move_flat_options(config))

    @property
    def hub_prefix(self) -> str:
        return url_path_join(self.hub_base_url, "hub") + "/"

    @catch_config_error
    def initialize(self, argv=None) -> None:
        super().initialize(argv)
        if self.generate_config:
            return
        if self.config_file and os.path.exists(self.config_file):
            self.load_config_file(self.config_file)
            # the command line wins over the file
            self.update_config(self.cli_config)

    def write_default_config(self) -> None:
        if os.path.exists(self.config_file):
            sys.exit(f"{self.config_file} exists; remove it or choose another --config.")
        Path(self.config_file).write_text(self.generate_config_file())
        print(f"Wrote default config to {self.config_file}")

    def load_pools(self) -> dict[str, Pool]:
        """The configured pools, each checked against the GPU backends (one sentence on error)."""
        pools: dict[str, Pool] = {}
        for entry in self.pools:
            pool = Pool.from_config(entry)
            if pool.name in pools:
                raise ValueError(f"Two pools are named {pool.name!r}; pool names must be unique.")
            pools[pool.name] = pool
        check_pools(pools.values(), self.backends)
        return pools

    def open_store(self):
        """Open the database, refusing a stale schema unless ``upgrade_db`` is set."""
        from ..db.session import check_schema, make_engine, make_session_factory, upgrade
        from ..db.store import BookingStore

        if self.upgrade_db:
            upgrade(self.db_url)
        # the one engine and session factory of the service: every component is handed them
        engine = self.db_engine = make_engine(self.db_url, timeout=self.db_timeout_seconds)
        check_schema(engine)
        self.session_factory = make_session_factory(engine)
        store = BookingStore(
            self.session_factory,
            self.pool_objects,
            self.default_policy,
            self.group_policies,
            slot_minutes=self.slot_minutes,
            clock=self.clock,
            exact_move_seconds=self.exact_move_seconds,
            exact_move_solver=self.exact_move_solver,
            exact_move_retry_seconds=self.exact_move_retry_seconds,
            on_longer_search=self.metrics.observe_longer_search,
            budgets=self.budgets.budget_book(),
        )
        store.sync_pools()
        return store

    def make_hub_auth(self) -> HubOAuth:
        return HubOAuth(
            parent=self,
            api_url=self.hub_api_url,
            api_token=self.api_token,
            base_url=self.service_prefix,
            hub_prefix=self.hub_prefix,
            access_scopes={f"access:services!service={self.service_name}"},
            cache_max_age=self.auth_cache_seconds,
        )

    def make_tornado_settings(self) -> dict:
        return {
            "store": self.store,
            "service": self,
            "hub_auth": self.hub_auth,
            "service_prefix": self.service_prefix,
            "hub_prefix": self.hub_prefix,
            "executor": self.executor,
            "clock": self.clock,
            "cookie_secret": read_cookie_secret(self.cookie_secret_file),
            "log_function": self.metrics.log_request,
            "default_handler_class": UnknownPathHandler,
            # HubOAuth checks '_xsrf' on cookie-authenticated writes itself; tornado's own
            # xsrf_cookies would also reject token-authenticated API calls
            "xsrf_cookies": False,
        }

    @property
    def booking_page_url(self) -> str:
        """The reservation page as users reach it (relative when public_url is unset)."""
        return self.public_url.rstrip("/") + self.service_prefix if self.public_url else ""

    def setup(self) -> None:
        """Everything but listening: pools, store, components, auth, executor, tornado app."""
        self.backends = resolve_backends(self.gpu_backends)
        self.pool_objects = self.load_pools()
        self.metrics = ServiceMetrics()
        self.budgets = Budgets(parent=self)
        self.store = wait_for_database(self.open_store, self.db_url, self.log)
        self.executor = ThreadPoolExecutor(
            self.executor_threads, thread_name_prefix="gpubooking-db"
        )
        self.setup_components()
        self.hub_auth = self.make_hub_auth()
        self.write_limiter = WriteRateLimiter(self.write_rate_per_minute, self.write_burst)
        self.tornado_app = web.Application(
            service_handlers(self.service_prefix, self.booking_flags), **self.make_tornado_settings()
        )

    def setup_components(self) -> None:
        """The service's components, each with its config section and what it works on."""
        common = {"parent": self, "store": self.store, "executor": self.executor}
        hub = {"hub_api_url": self.hub_api_url, "api_token": self.api_token}
        self.page = ReservationPage(parent=self)
        self.series = RecurringSeries(parent=self)
        self.monitoring = GPUMonitoring(parent=self)
        self.cluster_access = ClusterAccess(parent=self)
        self.emails = EmailWarnings(
            parent=self, executor=self.executor,
            page_url=self.booking_page_url or self.service_prefix,
        )
        self.lifecycle = Lifecycle(
            **common, **hub, db_engine=self.db_engine, clock=self.clock, metrics=self.metrics,
            emails=self.emails, slot_minutes=self.slot_minutes,
        )
        # the webhook's pods get the lifecycle's one grace; the tick then reconciles their claims
        self.webhook = AdmissionWebhook(
            **common, **hub, clock=self.clock, connector=self.cluster_access.connector,
            booking_page_url=self.booking_page_url, backends=self.backends,
            grace_seconds=self.lifecycle.end_grace_seconds, metrics=self.metrics,
        )
        self.lifecycle.webhook = self.webhook
        self.lifecycle.hub_servers = HubServers(**common, **hub, metrics=self.metrics,
                                                grace_seconds=self.lifecycle.end_grace_seconds)
        self.lifecycle.orphan_pods = OrphanPods(
            **common, connector=self.cluster_access.connector,
            grace_seconds=self.lifecycle.end_grace_seconds, hub_servers=self.lifecycle.hub_servers,
        )
        # the tick serves the waitlist after its releases (and expires past waits)
        self.waitlist = self.lifecycle.waitlist = Waitlist(**common, emails=self.emails)
        self.lifecycle.removed_users = RemovedUsers(**common, **hub, waits=self.waitlist.waits,
                                                    metrics=self.metrics)
        self.opportunistic = Opportunistic(
            **common, lifecycle=self.lifecycle, metrics=self.metrics
        )
        self.backups = ScheduledBackups(
            parent=self, executor=self.executor, db_url=self.db_url, db_engine=self.db_engine,
            clock=self.clock, metrics=self.metrics)
        self.booking_flags = BookingFlags(self.store)
        self.inventory = NodeInventory(
            **common, flags=self.booking_flags, connector=self.cluster_access.connector,
            on_pools=self._use_pools,
        )

    def _use_pools(self, pools: dict[str, Pool]) -> None:
        self.pool_objects = pools

    async def hub_user_groups(self, user: str) -> tuple[str, ...]:
        """The user's Hub groups (group policies decide which pools they may use)."""
        model = await hub_user_model(self.hub_api_url, self.api_token, user)
        if model is None:
            raise unknown_hub_user(user)
        return tuple(model.get("groups") or ())

    def start(self) -> None:
        if self.generate_config:
            self.write_default_config()
            return
        from ..db.session import StaleSchema

        try:
            self.setup()
        except StaleSchema as error:
            self.log.critical("%s", error)
            self.exit(2)
        except ValueError as error:
            # pools, policies and inventory templates validate themselves with one sentence;
            # the admin needs that sentence, not a traceback
            self.log.critical("Configuration error: %s", error)
            self.exit(2)
        except KeyboardInterrupt:
            # told to stop while waiting for the database (see startup.wait_for_database)
            self.log.info("Interrupted before serving")
            return
        try:
            asyncio.run(self.serve())
        except KeyboardInterrupt:
            self.log.info("Interrupted")
        finally:
            finish_executor(self.executor, self.log)

    async def serve(self) -> None:
        """Listen on ``service_url`` until SIGINT or SIGTERM (the Hub sends SIGINT first to stop
        a managed service, Kubernetes SIGTERM to the hub pod), then stop within 2 seconds."""
        if not await hub_scopes_suffice(self.hub_api_url, self.api_token, self.log):
            self.exit(2)
        freeze_startup_heap()
        listen = urlparse(self.service_url)
        server = HTTPServer(self.tornado_app, xheaders=True)
        server.listen(listen.port or 80, listen.hostname or "127.0.0.1")
        self.inventory.start()
        self.lifecycle.start()
        self.webhook.start(first_check=self.lifecycle.after_first_check)
        self.backups.start()
        self.log.info(
            "GPU booking service %s listening on %s (prefix %s)",
            self.service_name,
            self.service_url,
            self.service_prefix,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        # installed explicitly: a process started in the background inherits SIGINT ignored
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        self.log.info("Stopping the GPU booking service")
        self.lifecycle.stop()
        self.backups.stop()
        self.webhook.stop()
        self.inventory.stop()
        server.stop()
        try:
            await asyncio.wait_for(server.close_all_connections(), SHUTDOWN_SECONDS)
        except asyncio.TimeoutError:
            self.log.info("Closing connections still open")


main = GPUBookingService.launch_instance
