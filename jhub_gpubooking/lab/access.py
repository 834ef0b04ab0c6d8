"""The Hub side of the JupyterLab extension (``c.GPUBookingLabAccess``), used by
:class:`~jhub_gpubooking.spawner.GPUBookingSpawner` for booked GPU servers only.

A booked server's JupyterLab asks the booking service about its booking with the server's own
``JUPYTERHUB_API_TOKEN``, so that token needs ``access:services!service=<name>``. JupyterHub
(5.5 and 6.1 alike, ``User.spawn``) creates the token from ``Spawner.server_token_scopes``
*before* it hands the spawner the user's options: at that moment nobody knows yet whether this
start is a GPU profile with a booking, and a callable would see the previous start's options.
So the scope is added to the server's token after the booking is claimed, in the spawner's
start; a CPU start gets a new token without it. The Hub still intersects a token's scopes with
its owner's, so the user's role must hold the scope too (``jhub_gpubooking.configure`` merges
it into the ``user`` role).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from jupyterhub.utils import url_path_join
from traitlets import Bool, Float, Integer, List, Unicode
from traitlets.config import LoggingConfigurable

from ..gpu import PodSettings
from .environment import DEFAULT_POLL_SECONDS, DEFAULT_WARN_MINUTES, lab_environment


def service_access_scope(service_name: str) -> str:
    return f"access:services!service={service_name}"


class GPUBookingLabAccess(LoggingConfigurable):
    """What a booked GPU server's JupyterLab gets: service access and its settings."""

    enabled = Bool(
        True, config=True,
        help="Give booked GPU servers what the JupyterLab extension (jhub-gpubooking[lab] in "
        "the user image) needs: the booking service scope on the server's API token and the "
        "GPU_BOOKING_SERVICE_URL/PAGE_URL/WARN_MINUTES/POLL_SECONDS variables. CPU servers "
        "never get them.",
    )
    service_url = Unicode(
        "", config=True,
        help="URL of the booking service as single-user servers reach it, ending in the "
        "service prefix (e.g. http://proxy-public/services/gpu-booking/ to go through the "
        "z2jh proxy). Empty: the URL the Hub routes the service's prefix to (its 'url' plus "
        "/services/<name>/), e.g. http://hub:10101/services/gpu-booking/.",
    )
    warn_minutes = List(
        Integer(min=1), list(DEFAULT_WARN_MINUTES), config=True,
        help="Minutes before the booking's end at which JupyterLab notifies the user (each "
        "notification offers the largest extension allowed then).",
    )
    poll_seconds = Float(
        DEFAULT_POLL_SECONDS, min=1, config=True,
        help="Seconds between two status requests of JupyterLab to its server (which asks the "
        "booking service each time).",
    )

    def service_url_for(self, service_name: str, hub_services: Mapping[str, Any]) -> str:
        """``service_url``, or the Hub's own route target for the service (the URL it proxies
        ``/services/<name>/`` to, which keeps the prefix in the path); "" if neither is known."""
        if self.service_url:
            return self.service_url
        server = getattr(hub_services.get(service_name), "server", None)
        if server is None:
            return ""
        return url_path_join(server.host, server.base_url)

    def environment(self, spawner: Any) -> dict[str, str]:
        """The ``GPU_BOOKING_*`` variables of ``spawner``'s booked server for its JupyterLab."""
        if not self.enabled:
            return {}
        # the Hub's services by name, as JupyterHub hands them to its users' settings
        settings = getattr(spawner.user, "settings", None)
        services = settings.get("services") if isinstance(settings, Mapping) else None
        service_url = self.service_url_for(
            spawner.booking_service_name, services if isinstance(services, Mapping) else {}
        )
        if not service_url:
            self.log.warning(
                "JupyterLab of %s cannot reach the booking service: the Hub has no URL for "
                "service %r; set c.GPUBookingLabAccess.service_url",
                spawner._log_name, spawner.booking_service_name,
            )
        return lab_environment(
            service_url, spawner.booking_page_url, self.warn_minutes, self.poll_seconds
        )

    def booked_server_settings(self, spawner: Any, settings: PodSettings) -> PodSettings:
        """The booking's pod ``settings`` plus the JupyterLab variables, once the starting
        server's token may reach the service."""
        self.grant_service_access(spawner)
        environment = {**settings.environment, **self.environment(spawner)}
        return dataclasses.replace(settings, environment=environment)

    def grant_service_access(self, spawner: Any) -> None:
        """Add the booking service's access scope to the token of ``spawner``'s starting
        server (see the module's docstring for why not through server_token_scopes)."""
        if not self.enabled or not spawner.api_token:
            return
        from jupyterhub import orm  # the Hub's own process: imported only where it runs

        db = spawner.user.db
        token = orm.APIToken.find(db, spawner.api_token) if db is not None else None
        if token is None:
            self.log.warning(
                "No API token of %s in the Hub's database to grant the booking service to",
                spawner._log_name,
            )
            return
        scope = service_access_scope(spawner.booking_service_name)
        if scope not in token.scopes:
            token.scopes = sorted({*token.scopes, scope})
            db.commit()
