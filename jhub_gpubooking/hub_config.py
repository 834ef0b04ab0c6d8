"""``configure(c)``: everything a ``jupyterhub_config.py`` needs for GPU booking, in one call.

It adds (or completes) the hub-managed booking service, gives it the Hub API scopes it needs,
lets users open its page, shares the service's API token with the spawner and makes
:class:`~jhub_gpubooking.spawner.GPUBookingSpawner` the Hub's spawner. Roles are *merged*: a role
the configuration already defines (z2jh ``hub.loadRoles``, or an earlier line) keeps every scope,
user, group and service it has; only what is missing is added. Redefining the built-in ``user``
role from scratch would drop what an admin gave it, since the Hub replaces a role's scopes with
the configured ones.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from jupyterhub.roles import get_default_roles
from jupyterhub.utils import url_path_join
from traitlets.config import Config
from traitlets.config.loader import LazyConfigValue

__all__ = [
    "HUB_POD_ENVIRONMENT",
    "OAUTH_SCOPES",
    "SERVICE_SCOPES",
    "configure",
    "service_role_name",
]

#: What the booking service calls on the Hub API, and so what its role must grant:
#: look users up (GET users/{name}: their groups decide the policy, their servers whether a
#: claim is still held, and each server's state which booking it runs on), and stop the servers
#: whose booking ended (DELETE users/{name}/servers). The service refuses to start without them.
SERVICE_SCOPES = (
    "list:users", "read:users:groups", "read:servers", "admin:server_state", "delete:servers"
)

#: Scopes the service's OAuth tokens carry, so the page sees the logged-in user's groups
#: (group policies, ``admin_groups``); ``!user`` limits it to the user's own groups.
OAUTH_SCOPES = ("read:users:groups!user",)

#: Variables of the hub pod the service needs but does not inherit: JupyterHub starts a managed
#: service with only ``env_keep`` plus its ``environment``. ``KUBERNETES_SERVICE_*`` let the node
#: watch load the in-cluster config; ``POD_NAMESPACE`` names the hub's service account for the
#: admission webhook; ``GPUBOOKING_DB_URL`` carries the database URL from a Kubernetes Secret.
HUB_POD_ENVIRONMENT = (
    "KUBERNETES_SERVICE_HOST",
    "KUBERNETES_SERVICE_PORT",
    "POD_NAMESPACE",
    "GPUBOOKING_DB_URL",
)

#: Set in the service's environment when the Hub runs jupyterhub-idle-culler with
#: ``--cull-users`` (z2jh ``cull.users: true``): the culler deletes inactive users, who come back
#: at their next login, so the service must not take their bookings off as if they had left
#: (``c.RemovedUsers.check_interval_minutes`` then defaults to 0).
HUB_CULLS_USERS_ENV = "GPUBOOKING_HUB_CULLS_USERS"

DEFAULT_SERVICE_NAME = "gpu-booking"
DEFAULT_SERVICE_URL = "http://127.0.0.1:10101"

#: The Hub's own page templates this package extends (the "server not running" page links to
#: booking again), and the template variable carrying the reservation page's URL.
HUB_TEMPLATES = str(Path(__file__).parent / "templates" / "hub")
PAGE_URL_TEMPLATE_VAR = "gpu_booking_page_url"


def service_role_name(service_name: str) -> str:
    """The role ``configure`` grants the service's scopes through."""
    return f"{service_name}-service"


def _configured_list(section: Config, key: str) -> list:
    """A list-valued option as configured so far, including lazy ``.append``/``.extend``."""
    if key not in section:
        return []
    value = section[key]
    if isinstance(value, LazyConfigValue):
        return list(value.get_value([]))
    return list(value)


def _configured_dict(section: Config, key: str) -> dict:
    """A dict-valued option as configured so far, including a lazy ``.update``."""
    if key not in section:
        return {}
    value = section[key]
    if isinstance(value, LazyConfigValue):
        return dict(value.get_value({}))
    return dict(value)


def _add_missing(existing: Iterable[str], wanted: Iterable[str]) -> list[str]:
    merged = list(existing)
    merged.extend(item for item in wanted if item not in merged)
    return merged


def _merge_role(roles: list[dict], name: str, scopes: Iterable[str], *,
                services: Iterable[str] = (), new_role: Mapping[str, Any]) -> None:
    """Add ``scopes`` (and ``services``) to the role ``name``; create it from ``new_role``."""
    for role in roles:
        if role.get("name") == name:
            break
    else:
        role = {"name": name, **new_role}
        roles.append(role)
    role["scopes"] = _add_missing(role.get("scopes") or (), scopes)
    if services:
        role["services"] = _add_missing(role.get("services") or (), services)


def culls_users(services: Iterable[Mapping[str, Any]]) -> bool:
    """Whether one of the Hub's ``services`` is jupyterhub-idle-culler deleting inactive users
    (``--cull-users``, as z2jh adds it for ``cull.users: true``)."""
    for service in services:
        command = [str(part) for part in service.get("command") or ()]
        if any("idle_culler" in part or "idle-culler" in part for part in command) and any(
            part.lower() in ("--cull-users", "--cull-users=true", "--cull-users=1")
            for part in command
        ):
            return True
    return False


def _default_user_scopes() -> list[str]:
    """The scopes of the Hub's built-in ``user`` role (``["self"]`` today)."""
    [user] = [role for role in get_default_roles() if role["name"] == "user"]
    return list(user["scopes"])


def configure(
    c: Config,
    *,
    name: str = DEFAULT_SERVICE_NAME,
    url: str | None = None,
    config_file: str | None = None,
    command: Sequence[str] | None = None,
    api_token: str | None = None,
    environment: Mapping[str, str] | None = None,
    pass_environment: Iterable[str] = HUB_POD_ENVIRONMENT,
    booking_api_url: str | None = None,
    user_role: str = "user",
    spawner: bool = True,
) -> dict:
    """Add GPU booking to a JupyterHub configuration; returns the service's entry.

    - **The service** ``name`` in ``c.JupyterHub.services``: an entry already there (z2jh makes
      one per ``hub.services`` key, with the chart's generated ``api_token``) is completed, not
      replaced. ``url`` is where the Hub routes ``/services/<name>/`` (default: the entry's, else
      ``http://127.0.0.1:10101``); ``command`` defaults to this Python running
      ``jhub_gpubooking.service`` with ``--config config_file``.
    - **Its environment**: the Hub's values of ``pass_environment`` (default
      :data:`HUB_POD_ENVIRONMENT`), overridden by the entry's ``environment``, then by
      ``environment``; :data:`HUB_CULLS_USERS_ENV` when a service configured *before* this call
      culls users (z2jh adds its culler before ``hub.extraConfig`` runs).
    - **Roles**: :data:`SERVICE_SCOPES` merged into the role ``<name>-service`` (created if
      missing, keeping any scope it already has, e.g. ``read:groups`` for the webhook's group
      owners); ``access:services!service=<name>`` merged into ``user_role`` (a new ``user`` role
      starts from the Hub's default scopes).
    - **The token** shared by service and spawner: ``api_token``, else the entry's, else a random
      one (service and spawner then get a new one at every Hub start, together).
    - **The Hub's "server not running" page** links to the reservation page ("Book again"):
      :data:`HUB_TEMPLATES` appended to ``c.JupyterHub.template_paths`` (an admin's own
      templates stay first) and the page's URL in ``c.JupyterHub.template_vars``.
    - **The spawner** (unless ``spawner=False``): ``c.JupyterHub.spawner_class = "gpubooking"``
      and ``c.GPUBookingSpawner.booking_api_url / booking_api_token / booking_service_name``.
      ``booking_api_url`` defaults to loopback on the service's port, under the Hub's
      ``base_url``: the spawner runs in the Hub's process, on the service's machine (the hub pod).
    """
    services = _configured_list(c.JupyterHub, "services")
    for service in services:
        if service.get("name") == name:
            break
    else:
        service = {"name": name}
        services.append(service)

    if url is not None:
        service["url"] = url
    service.setdefault("url", DEFAULT_SERVICE_URL)
    if command is not None:
        service["command"] = list(command)
    elif config_file is not None or "command" not in service:
        service["command"] = [sys.executable, "-m", "jhub_gpubooking.service"]
        if config_file is not None:
            service["command"] += ["--config", config_file]
    service.setdefault("display", True)
    # users already trust the Hub's own pages; a second consent screen only confuses them
    service.setdefault("oauth_no_confirm", True)
    service["oauth_client_allowed_scopes"] = _add_missing(
        service.get("oauth_client_allowed_scopes") or (), OAUTH_SCOPES
    )
    # what the entry already sets for the service wins over what the hub's process happens to have
    passed = {key: os.environ[key] for key in pass_environment if key in os.environ}
    service["environment"] = {**passed, **(service.get("environment") or {}),
                              **(environment or {})}
    if culls_users(services):
        service["environment"].setdefault(HUB_CULLS_USERS_ENV, "1")
    token = api_token or service.get("api_token") or secrets.token_hex(32)
    service["api_token"] = token
    c.JupyterHub.services = services

    roles = _configured_list(c.JupyterHub, "load_roles")
    _merge_role(
        roles, service_role_name(name), SERVICE_SCOPES, services=[name],
        new_role={"description": "The GPU booking service: read users, their groups and "
                                 "servers; stop servers whose booking ended."},
    )
    _merge_role(roles, user_role, [f"access:services!service={name}"],
                new_role={"scopes": _default_user_scopes() if user_role == "user" else []})
    c.JupyterHub.load_roles = roles

    # a booking's end stops the server: the Hub's "server not running" page links to booking again
    base_url = c.JupyterHub.base_url if "base_url" in c.JupyterHub else "/"
    template_vars = _configured_dict(c.JupyterHub, "template_vars")
    template_vars.setdefault(PAGE_URL_TEMPLATE_VAR, url_path_join(base_url, "services", name) + "/")
    c.JupyterHub.template_vars = template_vars
    c.JupyterHub.template_paths = _add_missing(
        _configured_list(c.JupyterHub, "template_paths"), [HUB_TEMPLATES]
    )

    if spawner:
        if booking_api_url is None:
            port = urlparse(service["url"]).port or 80
            booking_api_url = url_path_join(f"http://127.0.0.1:{port}", base_url,
                                            f"services/{name}/")
        c.JupyterHub.spawner_class = "gpubooking"
        c.GPUBookingSpawner.booking_service_name = name
        c.GPUBookingSpawner.booking_api_url = booking_api_url
        c.GPUBookingSpawner.booking_api_token = token
    return service
