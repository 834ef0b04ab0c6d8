"""GPUBookingSpawner: a thin KubeSpawner that starts GPU profiles only on a booked share.

Admins keep their ordinary ``profile_list``; a profile becomes a GPU profile by naming a
booking pool (``"gpu_pool": "a100"``). At every start :meth:`load_user_options` asks the
booking service, in one request, to claim the user's active booking in that pool for this
server, and merges the booked share into KubeSpawner's pod traits. The form never decides: it
only shows what the server will check again.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from typing import Any

from jinja2 import ChoiceLoader, Environment, FileSystemLoader, PackageLoader
from jupyterhub.utils import maybe_future, url_path_join
from kubespawner import KubeSpawner
from sqlalchemy.orm import object_session
from sqlalchemy.orm.exc import UnmappedInstanceError
from tornado import web
from traitlets import Callable, Dict, Float, Instance, Integer, Unicode, Union, default

from .chooser import (  # noqa: F401 (re-exported: the spawner's public helpers)
    BOOKING_FIELD_PREFIX,
    BOOKING_OPTION,
    SERVICE_UNAVAILABLE_MESSAGE,
    checked_profile,
    chooser_profiles,
    gpu_label,
    server_text,
    share_text,
)
from .chooser_reads import ChooserReads, read_for_chooser
from .client import (
    BookingClient,
    BookingRefused,
    BookingServiceStarting,
    BookingServiceUnavailable,
)
from .core.clock import SystemClock
from .core.lifecycle import SERVER_STATE_BOOKING_KEY, SERVER_STATE_PLACEMENT_KEY, placement_state
from .core.model import Booking, Pool, format_amount
from .core.wire import booking_from_json, pool_from_json
from .gpu import PodSettings, booking_pod_settings, pod_booking
from .lab.access import GPUBookingLabAccess
from .start_refusals import (
    SERVICE_STARTING_MESSAGE,
    booking_refusal,
    claim_refusal,
    unavailable_refusal,
)
from .start_waits import StartWaits, ask_until_answered

#: Key under which the claimed booking id survives Hub restarts in the spawner state; the
#: service reads it (admin:server_state) to stop a server only for the booking it runs on.
_STATE_KEY = SERVER_STATE_BOOKING_KEY


class GPUBookingSpawner(KubeSpawner):
    """KubeSpawner whose GPU profiles start only on the user's active booking."""

    #: Booking claimed for this server (persisted in the Hub's state), to release at stop.
    _claimed_booking_id: int | None = None
    #: The placement the pod is made for: {"node", "gpus"} (persisted beside it).
    _booked_placement: dict[str, Any] | None = None
    # the booking-decided traits as configured, before any profile or booking (see _reset_...)
    _configured_traits: dict[str, Any] | None = None
    #: The refusal of the current start, repeated in the progress stream.
    _booking_refusal_message: str | None = None
    #: The current start's waits for the booking service, shown in its progress stream
    _start_waits: StartWaits | None = None
    _release_task: asyncio.Future | None = None

    booking_api_url = Unicode(
        "",
        config=True,
        help="""
        Base URL of the booking service's REST API as the Hub reaches it, ending in the
        service prefix, e.g. ``http://127.0.0.1:10101/services/gpu-booking/``.
        When empty, GPU profiles are refused (the booking cannot be checked).
        """,
    )
    booking_api_token = Unicode(
        "",
        config=True,
        help="""
        API token sent to the booking service; use the service's own JupyterHub API token
        (or one of a service listed in ``GPUBookingService.spawner_services``), which may read
        every user's active bookings and claim them for servers.
        """,
    )
    booking_service_name = Unicode(
        "gpu-booking",
        config=True,
        help="Name of the Hub-managed booking service, used to link to its reservation page.",
    )
    booking_page_url = Unicode(
        config=True,
        help="""
        URL of the reservation page linked from the server chooser. Defaults to the
        service's page under the Hub's base URL (``<base_url>services/<booking_service_name>/``).
        """,
    )
    booking_request_timeout = Float(
        5.0,
        config=True,
        help="Seconds a whole request to the booking service may take before GPU starts are refused.",
    )
    booking_request_retry_timeout = Float(
        45.0,
        min=0,
        config=True,
        help="""
        Seconds a GPU start keeps asking a booking service that cannot answer for now, as
        KubeSpawner's ``k8s_api_request_retry_timeout`` does for the Kubernetes API. The
        spawner asks again 1 s after no answer came (nothing listens: the Hub starts the
        service with itself, and again after a crash; or none within ``booking_connect_timeout``
        / ``booking_request_timeout``), and after the ``Retry-After`` of a 503: the
        service has just started and is comparing the running servers and pods with its
        bookings (it stops making starts wait 30 s after its start), or its database or the
        Hub cannot answer. The spawn page shows each wait. When the time is up the start is
        refused with a sentence saying why. An error that asking again will not mend (a 500,
        a refused token, a wrong URL) is refused at once; so is every one with 0.
        The wait counts in the Hub's ``Spawner.start_timeout`` (z2jh's
        ``singleuser.startTimeout``, 300 s), so keep it well below that.
        """,
    )
    booking_chooser_retry_timeout = Float(
        5.0,
        min=0,
        config=True,
        help="""
        Seconds the server chooser keeps asking a booking service that cannot answer for now
        (as ``booking_request_retry_timeout`` describes), so the spawn page opening just after
        the service (re)started still shows the user's bookings. The page opens no sooner
        meanwhile, so keep it short. When the time is up the chooser offers the GPU profiles
        anyway, with a note that a start waits for the service (no note of the user's
        booking); with ``booking_request_retry_timeout`` 0, or an error waiting will not mend,
        it disables them.
        """,
    )
    booking_connect_timeout = Float(
        2.0,
        config=True,
        help="Seconds to wait for a connection to the booking service before GPU starts are refused.",
    )
    pod_deadline_seconds = Integer(
        0,
        min=0,
        config=True,
        help="""
        ``activeDeadlineSeconds`` of every GPU pod, counted from its start: a far backstop for
        when the booking service cannot stop servers. 0 (the default) sets no deadline. The
        booking's end is enforced by the service, which stops the server at the end plus
        ``Lifecycle.end_grace_seconds`` and follows every extension; Kubernetes cannot
        raise a running pod's deadline, so set this above the longest booking anyone (admins
        included) may hold, or an extended server is cut short. Capped at 2^31-1.
        """,
    )
    booked_priority_class_name = Unicode(
        None,
        allow_none=True,
        config=True,
        help="""
        PriorityClass given to pods running on a booking, so booked pods can preempt
        opportunistic ones. None keeps KubeSpawner's ``priority_class_name``.
        """,
    )
    opportunistic_priority_class_name = Unicode(
        None,
        allow_none=True,
        config=True,
        help="""
        PriorityClass given to pods running on an opportunistic grant (a GPU used without a
        booking, see ``Opportunistic.opportunistic_enabled``): a low, preemptible class so
        the scheduler evicts them first. None keeps ``booked_priority_class_name``.
        """,
    )
    gpu_backends = Dict(
        value_trait=Union([Callable(), Unicode()]),
        config=True,
        help="""
        Extra or replacement GPU sharing backends: backend name -> translation function, or its
        import path ``"module:function"``. Each function turns a pool and a booking into pod
        settings, like the built-in ones in ``jhub_gpubooking.gpu``.
        """,
    )

    lab_access = Instance(GPUBookingLabAccess, help="What booked GPU servers' JupyterLab gets.")

    @default("lab_access")
    def _lab_access_default(self) -> GPUBookingLabAccess:
        return GPUBookingLabAccess(parent=self)

    @default("booking_page_url")
    def _booking_page_url_default(self) -> str:
        # Derived like JupyterHub's own JUPYTERHUB_BASE_URL: the Hub's prefix is the base URL
        # plus "hub/", and services live next to it under the base URL.
        hub_prefix = self.hub.base_url if self.hub else "/"
        base_url = hub_prefix[: -len("hub/")] if hub_prefix.endswith("/hub/") else hub_prefix
        return url_path_join(base_url, "services", self.booking_service_name) + "/"

    @default("options_form")
    def _options_form_default(self):
        # Bookings change all the time, so the chooser is always rendered per request.
        return self._render_booking_chooser if self.profile_list else ""

    def _booking_client(self) -> BookingClient:
        return BookingClient(
            self.booking_api_url,
            self.booking_api_token,
            request_timeout=self.booking_request_timeout,
            connect_timeout=self.booking_connect_timeout,
        )

    async def _initialized_profiles(self) -> list[dict]:
        """The configured profile_list (list, dict or possibly-async callable), evaluated once."""
        profiles = self._sorted_dict_values(self.profile_list)
        if callable(profiles):
            profiles = await maybe_future(profiles(self))
        return self._get_initialized_profile_list(self._sorted_dict_values(profiles))

    # ---------------------------------------------------------------- the chooser

    async def _render_booking_chooser(self, spawner: GPUBookingSpawner) -> str:
        """The options form; JupyterHub calls it with the spawner itself, i.e. ``self``."""
        profiles = await self._initialized_profiles()
        if not profiles:
            return ""
        reads = ChooserReads()
        if any(profile.get("gpu_pool") for profile in profiles):
            reads = await read_for_chooser(
                self._booking_client() if self.booking_api_url else None,
                self.user.name,
                retry_timeout=self.booking_chooser_retry_timeout,
                start_retry_timeout=self.booking_request_retry_timeout,
                log=self.log,
                log_name=self._log_name,
            )
        gpu = chooser_profiles(
            profiles,
            pools=reads.pools,
            active=reads.active,
            upcoming=reads.upcoming,
            booking_page_url=self.booking_page_url,
            now=SystemClock().now(),
            opportunistic=reads.opportunistic,
            server=self.name,
            start_waits=reads.start_waits,
        )
        saved = (self.user_options or {}).get("profile")
        return self._chooser_template().render(
            profile_list=profiles,
            user_options=self.user_options or {},
            gpu=gpu,
            checked=checked_profile(profiles, gpu, saved),
            booking_field_prefix=BOOKING_FIELD_PREFIX,
        )

    def _chooser_template(self):
        # Admin templates first (KubeSpawner's convention), then ours, then KubeSpawner's
        # for the shared style.css.
        environment = Environment(
            loader=ChoiceLoader(
                [
                    FileSystemLoader(self.additional_profile_form_template_paths),
                    PackageLoader("jhub_gpubooking", "templates/spawner"),
                    PackageLoader("kubespawner", "templates"),
                ]
            ),
            autoescape=True,
        )
        # keep the admin's profile order when templates use |tojson
        environment.policies["json.dumps_kwargs"] = {"sort_keys": False}
        if self.profile_form_template:
            return environment.from_string(self.profile_form_template)
        return environment.get_template("form.html")

    # ---------------------------------------------------------------- the server decides

    async def load_user_options(self) -> None:
        """Apply the chosen profile, after claiming the user's booking for a GPU profile.

        Runs at every start (form, REST API, restart with saved options), before any pod
        exists. All I/O happens before KubeSpawner applies overrides, whose callables are
        synchronous.
        """
        self._booking_refusal_message = None
        try:
            await self._load_checked_options()
        except web.HTTPError as refusal:
            self._booking_refusal_message = getattr(refusal, "jupyterhub_message", None)
            raise
        finally:
            if self._start_waits is not None:
                self._start_waits.settled.set()

    async def _load_checked_options(self) -> None:
        self._reset_booking_traits()
        profiles = await self._initialized_profiles()
        if not profiles:
            await super().load_user_options()
            return
        profile = self._chosen_profile(profiles)
        pool_name = profile.get("gpu_pool")
        claimed = await self._claim_booking(pool_name) if pool_name else None
        try:
            self._load_profile(profile["slug"], profiles)
            if claimed:
                self._apply_booking(*claimed)
                self._save_claim_in_hub_state()
        except Exception:
            # the pod will not start on this booking: give it back at once
            await self._release_claim()
            raise

    def _save_claim_in_hub_state(self) -> None:
        """Store the claim in the Hub's database now, not only once the start succeeds.

        A Hub restarted while this start runs (an upgrade, a crashed hub pod) adopts the pod as
        running with the state it last stored; the service stops a server at its booking's end
        only when that state names the booking, so without this such a pod would outlive its
        booking for good.
        """
        try:
            session = object_session(self.orm_spawner)
        except UnmappedInstanceError:
            session = None
        if session is None:
            return  # not a Hub's spawner (tests, tools)
        self.orm_spawner.state = self.get_state()
        session.commit()

    def _chosen_profile(self, profiles: list[dict]) -> dict:
        slug = (self.user_options or {}).get("profile")
        if slug and slug not in {profile["slug"] for profile in profiles}:
            raise booking_refusal(
                f"There is no server option called '{slug}'; choose one on the start page.",
                reason="unknown_profile",
                status_code=400,
            )
        try:
            # KubeSpawner's own checks of profile_options (unlisted choices, regexes)
            self._validate_user_options(profiles)
        except ValueError as invalid:
            raise booking_refusal(str(invalid), reason="invalid_options", status_code=400) from invalid
        return self._get_profile(slug, profiles)

    async def _claim_booking(self, pool_name: str) -> tuple[Pool, Booking]:
        """Claim the user's active booking in ``pool_name`` for this server, or refuse.

        One request (``POST api/pools/{pool}/claim``): the service picks the booking by the
        rule of :mod:`jhub_gpubooking.core.choice` (the one chosen in the form, else this
        server's, else the longest-running and then largest unused one), falls back to an
        opportunistic grant, claims it, and answers with the pool and the booking.
        """
        if not self.booking_api_url:
            self.log.error("GPU start of %s refused: booking_api_url is not set", self._log_name)
            raise unavailable_refusal()
        client, chosen = self._booking_client(), self._chosen_booking_id()
        try:
            answer = await ask_until_answered(
                lambda: client.claim_in_pool(pool_name, self.user.name, self.name, chosen),
                self.booking_request_retry_timeout,
                self._show_claim_wait,
            )
        except BookingServiceStarting as starting:
            self.log.error("GPU start of %s refused, the service is still starting",
                           self._log_name)
            raise booking_refusal(SERVICE_STARTING_MESSAGE, status_code=503,
                                  reason="gpu_booking_starting") from starting
        except BookingServiceUnavailable as error:
            self.log.error("GPU start of %s refused, service down: %s", self._log_name, error)
            raise unavailable_refusal() from error
        except BookingRefused as refused:
            raise claim_refusal(pool_name, refused, self.booking_page_url, self.log,
                                self._log_name) from refused
        pool = pool_from_json(answer["pool"])
        booking = booking_from_json(answer["booking"], pool)
        self._claimed_booking_id = booking.id
        # where the pod is pinned: a restore of the booking database can give the booking
        # back placed elsewhere (c.HubServers compares the two)
        self._booked_placement = (None if booking.placement is None
                                  else placement_state(booking.placement))
        return pool, booking

    def _show_claim_wait(self, error: BookingServiceUnavailable, seconds: float) -> None:
        """Log a wait for the service and show it on the spawn page (see :meth:`progress`)."""
        self.log.info("GPU start of %s waits %g s for the booking service: %s", self._log_name,
                      seconds, error)
        if self._start_waits is not None:
            self._start_waits.add(error, seconds)

    def _chosen_booking_id(self) -> int | None:
        """The booking the user picked in the chooser (several active in one pool), if any."""
        chosen = (self.user_options or {}).get(BOOKING_OPTION)
        if chosen is None or chosen == "":
            return None
        try:
            return int(chosen)
        except (TypeError, ValueError):
            raise booking_refusal(
                f"'{BOOKING_OPTION}' must be the number of one of your bookings.",
                reason="invalid_options",
                status_code=400,
            ) from None

    def _options_from_form(self, formdata: dict) -> dict:
        """KubeSpawner's options, plus the booking picked for the chosen GPU profile."""
        profile = formdata.get("profile", [None])[0]
        picked = formdata.get(f"{BOOKING_FIELD_PREFIX}{profile}", [None])[0]
        rest = {k: v for k, v in formdata.items() if not k.startswith(BOOKING_FIELD_PREFIX)}
        options = super()._options_from_form(rest)
        if picked:
            options[BOOKING_OPTION] = picked
        return options

    def _reset_booking_traits(self) -> None:
        """Start every load from the configured values of the traits a booking decides.

        JupyterHub keeps one spawner object across stop and start, and KubeSpawner merges profile
        overrides into these dicts in place; without this a later start on a CPU profile (or on a
        booking that is gone) would inherit the last GPU share, node pin and deadline.
        """
        if self._configured_traits is None:
            self._configured_traits = {
                name: copy.deepcopy(getattr(self, name)) for name in _BOOKING_TRAITS
            }
            return
        for name, value in self._configured_traits.items():
            setattr(self, name, copy.deepcopy(value))

    def _apply_booking(self, pool: Pool, booking: Booking) -> None:
        """Merge the booked share into the traits KubeSpawner builds the pod from."""
        try:
            settings = booking_pod_settings(
                pool,
                booking,
                now=SystemClock().now(),
                grace_seconds=None,
                deadline_seconds=self.pod_deadline_seconds,
                priority_class_name=self._priority_class_for(booking),
                backends=self.gpu_backends,
            )
        except ValueError as misconfigured:
            # the detail is for the administrator (logs), the user gets one sentence
            self.log.error("GPU pool %s cannot configure a pod: %s", pool.name, misconfigured)
            raise booking_refusal(
                f"The {pool.gpu_model or pool.display_name} GPU pool is misconfigured, so its "
                "servers cannot start; please tell your JupyterHub administrator.",
                reason="gpu_pool_misconfigured",
                status_code=500,
            ) from misconfigured
        self.lab_access.booked_server_settings(self, settings).apply_to(self)
        self.log.info(
            "%s starts on booking %s: %s of pool %s on node %s",
            self._log_name,
            booking.id,
            format_amount(booking.amount),
            pool.name,
            booking.placement.node if booking.placement else "?",
        )

    def _priority_class_for(self, booking: Booking) -> str | None:
        if booking.opportunistic and self.opportunistic_priority_class_name is not None:
            return self.opportunistic_priority_class_name
        return self.booked_priority_class_name

    # ---------------------------------------------------------------- lifecycle

    def start(self):
        self._start_waits = StartWaits()
        start_future = super().start()
        start_future.add_done_callback(self._release_after_failed_start)
        return start_future

    def _release_after_failed_start(self, start_future: asyncio.Future) -> None:
        # The Hub only calls stop() on a failed start if a pod is running, so give the
        # booking back here as well.
        if not start_future.cancelled() and start_future.exception() is None:
            return
        if self._claimed_booking_id is not None:
            self._release_task = asyncio.ensure_future(self._release_claim())

    async def stop(self, now: bool = False) -> None:
        try:
            await super().stop(now=now)
        finally:
            # KubeSpawner's own start calls stop() to clear a leftover pod of the same name (and
            # then creates the pod again) or to clean up before it fails: the claim must outlive
            # that, or another server takes the booking while this pod starts on it. A start
            # that fails after all gives the claim back in _release_after_failed_start.
            if not self._start_running():
                await self._release_claim()

    def _start_running(self) -> bool:
        return self._start_future is not None and not self._start_future.done()

    async def _release_claim(self) -> None:
        """Give the claimed booking back (best effort: the service also expires stale claims)."""
        booking_id, self._claimed_booking_id = self._claimed_booking_id, None
        self._booked_placement = None
        if booking_id is None:
            return
        try:
            await self._booking_client().release(booking_id, self.user.name, self.name)
        except (BookingServiceUnavailable, BookingRefused) as error:
            self.log.warning(
                "Could not release booking %s of %s: %s", booking_id, self._log_name, error
            )

    async def _start_reflector(self, *args: Any, **kwargs: Any):
        # KubeSpawner shares one pod and one event reflector per namespace, started by the
        # first caller that needs it and registered before its first list returns. If that
        # caller is cancelled meanwhile, the list is cancelled, its first load never finishes,
        # and every later start, poll and stop of every user waits on it until its timeout, for
        # as long as the Hub runs (kubespawner 7.1). A booking refusal makes that likely: the
        # spawn page's progress stream starts the event reflector, and the refusal, milliseconds
        # later, ends the stream. Shielded, the first load finishes whoever stops waiting.
        return await asyncio.shield(super()._start_reflector(*args, **kwargs))

    async def progress(self):
        # the claim's waits come before the pod exists: then KubeSpawner's pod events
        if self._start_waits is not None:
            async for wait in self._start_waits.events(self._start_future):
                yield wait
        async for event in super().progress():
            yield event
        if self._start_future is not None and not self._start_future.done():
            # without pod events KubeSpawner's progress ends at once; wait for the verdict
            await asyncio.wait([self._start_future])
        if self._booking_refusal_message:
            yield {"progress": 100, "failed": True, "message": self._booking_refusal_message}

    async def poll(self) -> int | None:
        status = await super().poll()
        if status is None and self._claimed_booking_id is None:
            # a start still pending when the Hub stopped left no state, and the Hub, back, has
            # found its pod running: the pod's label names the booking, so the state does too
            # (the service's checks and stop at the end go by it)
            pod = self.pod_reflector.pods.get(f"{self.namespace}/{self.pod_name}")
            self._claimed_booking_id, self._booked_placement = pod_booking(pod)
        return status

    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        if self._claimed_booking_id is not None:
            state[_STATE_KEY] = self._claimed_booking_id
            if self._booked_placement is not None:
                state[SERVER_STATE_PLACEMENT_KEY] = self._booked_placement
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self._claimed_booking_id = state.get(_STATE_KEY, self._claimed_booking_id)
        self._booked_placement = state.get(SERVER_STATE_PLACEMENT_KEY, self._booked_placement)

    def clear_state(self) -> None:
        # a claim left by a pod that ended on its own is stale; the service lets the next
        # server take it once the Hub reports this one stopped
        super().clear_state()
        self._claimed_booking_id = None
        self._booked_placement = None


#: the traits a booking decides (the fields of gpu.PodSettings)
_BOOKING_TRAITS = tuple(field.name for field in dataclasses.fields(PodSettings))
