"""Request handling shared by every handler of the booking service.

Identity comes only from the Hub: an ``Authorization: token …`` header (checked with
``HubAuth.user_for_token``) or the OAuth cookie set by the service's ``oauth_callback``.
The Hub user model is resolved once per request in :meth:`BaseHandler.prepare` (asynchronously,
so the event loop never waits on the Hub) and then exposed as :attr:`BaseHandler.principal`.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.client import responses
from typing import Any, TypeVar

from jupyterhub.services.auth import HubOAuth, HubOAuthenticated, UserNotAllowed
from jupyterhub.utils import url_escape_path, url_path_join
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from tornado.log import app_log

from ..core.errors import BookingError
from ..core.timegrid import format_time
from ..db.session import unavailable_reason
from ..executor import in_executor

T = TypeVar("T")

#: Seconds a client is asked to wait (``Retry-After``) when the database or the Hub cannot
#: answer.
RETRY_AFTER_SECONDS = 5
#: Seconds the service waits for the Hub's answer about a user.
HUB_LOOKUP_TIMEOUT_SECONDS = 10
#: Methods that change state and count against the per-user write limit.
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: The 403 of a request without a login or a token (the API never redirects to a login page).
AUTHENTICATION_REQUIRED = "Authentication required: log in to JupyterHub or send a Hub API token."


def refusal(status: int, message: str, retry_after: int | None = None) -> web.HTTPError:
    """An HTTPError whose message is shown as-is (safe even if it contains '%').

    ``retry_after`` (seconds) becomes a ``Retry-After`` header (429 and 503 answers).
    """
    error = web.HTTPError(status, "%s", message)
    error.retry_after = retry_after
    return error


def unknown_hub_user(user: str) -> web.HTTPError:
    """The refusal of a request that names a user the Hub does not have (404, as for an
    unknown pool): a typo, or someone who has never logged in."""
    return refusal(404, f"The Hub has no user named {user!r}. Check the spelling; someone who "
                   "has never logged in can be added on the Hub's admin page first.")


def checked_user(value: Any) -> str:
    """The Hub user name a request body names (``user``)."""
    if not isinstance(value, str) or not value:
        raise refusal(400, "'user' must be a Hub user name.")
    return value


async def hub_user_model(api_url: str, token: str, user: str) -> dict | None:
    """The Hub's model of ``user`` (groups, servers), None if the Hub has no such user.

    Any other failure (the Hub down, slow or refusing) is a 503 the client may retry, never a
    500: it says nothing about the request.
    """
    if user in (".", ".."):  # would address another API path once the URL is normalised
        return None
    url = url_path_join(api_url, "users", url_escape_path(user))
    try:
        response = await AsyncHTTPClient().fetch(
            url,
            headers={"Authorization": f"token {token}"},
            request_timeout=HUB_LOOKUP_TIMEOUT_SECONDS,
        )
        model = json.loads(response.body)
        # only the model of exactly this user counts (never a list or another path's answer)
        return model if isinstance(model, dict) and model.get("name") == user else None
    except HTTPClientError as error:
        if error.code in (400, 404):  # the Hub refuses names it cannot have as 400
            return None
        reason = f"it answered {error.code}"
    except (OSError, ValueError) as error:
        reason = f"it could not be reached ({type(error).__name__})"
    raise refusal(
        503,
        f"The Hub could not tell who {user} is right now ({reason}); try again shortly.",
        retry_after=RETRY_AFTER_SECONDS,
    )


@dataclass(frozen=True)
class Principal:
    """Who is calling, as the Hub told us.

    ``kind`` is ``"user"`` or ``"service"``; ``is_spawner`` marks a Hub service named in
    ``GPUBookingService.spawner_services`` (the Hub's spawner talks to us with that token).
    """

    kind: str
    name: str
    groups: tuple[str, ...] = ()
    is_admin: bool = False
    is_spawner: bool = False

    @property
    def is_user(self) -> bool:
        return self.kind == "user"

    def may_act_for(self, user: str) -> bool:
        """May this principal read or change ``user``'s bookings?"""
        return self.is_admin or (self.is_user and self.name == user)


def principal_from_model(
    model: dict, admin_groups: Iterable[str], spawner_services: Iterable[str]
) -> Principal:
    """Turn a Hub user/service model into a :class:`Principal` (pure, for testing)."""
    kind = model.get("kind", "user")
    name = model["name"]
    if kind == "service":
        return Principal(kind="service", name=name, is_spawner=name in set(spawner_services))
    groups = tuple(sorted(model.get("groups") or ()))
    is_admin = bool(model.get("admin")) or bool(set(groups) & set(admin_groups))
    return Principal(kind="user", name=name, groups=groups, is_admin=is_admin)


class BaseHandler(HubOAuthenticated, web.RequestHandler):
    """Base of all service handlers: Hub identity, JSON errors, executor access.

    Handlers find what they need in ``self.settings``: ``store`` (the BookingStore),
    ``service`` (the :class:`~jhub_gpubooking.service.app.GPUBookingService`), ``hub_auth``,
    ``service_prefix``, ``hub_prefix``, ``executor`` and ``clock``.
    """

    def initialize(self, route_template: str = "") -> None:
        # the OpenAPI path template of the route, used as the metrics label
        self.route_template = route_template

    @property
    def hub_auth(self) -> HubOAuth:
        return self.settings["hub_auth"]

    @hub_auth.setter
    def hub_auth(self, auth: HubOAuth) -> None:
        # HubAuthenticated defines a setter; the service configures one HubOAuth for all handlers
        raise AttributeError("hub_auth comes from the application settings")

    @property
    def service(self):
        return self.settings["service"]

    @property
    def store(self):
        return self.settings["store"]

    @property
    def clock(self):
        return self.settings["clock"]

    async def prepare(self) -> None:
        """Resolve the Hub identity without blocking the event loop."""
        model = self.own_token_model()
        if model is None:
            model = await self.hub_auth.get_user(self, sync=False)
        self._principal = None
        if not model:
            self._hub_auth_user_cache = None
            return
        try:
            self._hub_auth_user_cache = self.check_hub_user(model)
        except UserNotAllowed:
            self._hub_auth_user_cache = None
            return
        self._principal = principal_from_model(
            model, self.service.admin_groups, self.service.spawner_services
        )
        self.limit_writes(self._principal)

    def own_token_model(self) -> dict | None:
        """The service itself, for a request with the service's own API token, when the service
        is one of ``spawner_services`` (by default it is: the Hub's spawner shares its token).

        The Hub would only say the same about that token, after a round trip: HubOAuth caches its
        answer ``auth_cache_seconds``, so one spawn gate in a few paid a Hub call for it (the
        gate's slowest samples, docs/benchmarks.md). A token the Hub no longer knows stops the
        service's own Hub calls as well; a different spawner token is asked about as always."""
        own = self.service.api_token
        if not own or self.service.service_name not in self.service.spawner_services:
            return None
        token = self.hub_auth.get_token(self, in_cookie=False)
        if not token or not hmac.compare_digest(token.encode(), own.encode()):
            return None
        model = {"kind": "service", "name": self.service.service_name}
        # what HubAuth's get_user leaves on a handler it identified by a token
        self._cached_hub_user = model
        self._token_authenticated = True
        return model

    def limit_writes(self, principal: Principal) -> None:
        """429 with Retry-After when ``principal`` writes faster than the service allows."""
        if self.request.method not in WRITE_METHODS or principal.is_spawner:
            return
        wait = self.service.write_limiter.acquire(f"{principal.kind}:{principal.name}")
        if wait is not None:
            raise refusal(
                429,
                f"Too many changes in a short time (at most {self.service.write_burst} at once, "
                f"then {self.service.write_rate_per_minute} a minute); try again in {wait} "
                "seconds.",
                retry_after=wait,
            )

    def check_hub_user(self, model: dict) -> dict:
        # our own spawner service(s) need no 'access:services' scope: the Hub vouched for them
        if model.get("kind") == "service" and model.get("name") in self.service.spawner_services:
            return model
        return super().check_hub_user(model)

    @property
    def principal(self) -> Principal | None:
        """The authenticated caller, or None for anonymous requests."""
        return getattr(self, "_principal", None)

    @property
    def is_admin(self) -> bool:
        return bool(self.principal and self.principal.is_admin)

    def require_principal(self) -> Principal:
        if self.principal is None:
            if self.request.method not in ("GET", "HEAD", "OPTIONS") and self.get_secure_cookie(
                self.hub_auth.cookie_name
            ):
                # HubOAuth ignores the login cookie on writes without a matching _xsrf token
                raise web.HTTPError(
                    403, "This request needs the '_xsrf' token (X-XSRFToken header) of the page."
                )
            raise web.HTTPError(403, AUTHENTICATION_REQUIRED)
        return self.principal

    def require_user(self) -> Principal:
        """The caller must be a Hub user (services have no bookings of their own)."""
        principal = self.require_principal()
        if not principal.is_user:
            raise refusal(403, f"Service {principal.name} cannot use this endpoint.")
        return principal

    def require_admin(self) -> Principal:
        principal = self.require_principal()
        if not principal.is_admin:
            raise web.HTTPError(403, "Only booking administrators may do this.")
        return principal

    def listed_user(self, principal: Principal, user: str | None, what: str) -> str | None:
        """Whose ``what`` (bookings, waits) a list shows: an admin's ``?user=`` (None:
        everyone's); a user's own, asked or not; anyone else's is refused."""
        if principal.is_admin:
            return user
        if not principal.is_user or (user is not None and user != principal.name):
            raise refusal(403, f"Only booking administrators may list other users' {what}.")
        return principal.name

    def require_acting_for(self, user: str) -> Principal:
        """The caller must be ``user`` themself or an admin."""
        principal = self.require_principal()
        if not principal.may_act_for(user):
            raise refusal(403, f"You may not see or change the bookings of {user}.")
        return principal

    def json_body(self, allowed: Iterable[str], required: Iterable[str] = ()) -> dict:
        """The JSON object in the body, limited to an explicit allow-list of fields."""
        try:
            body = json.loads(self.request.body or b"null")
        except (ValueError, UnicodeDecodeError):
            raise web.HTTPError(400, "The request body is not valid JSON.") from None
        except RecursionError:  # e.g. 100 000 nested '[': the parser gives up, we answer 400
            raise web.HTTPError(400, "The request body is nested too deeply.") from None
        if not isinstance(body, dict):
            raise web.HTTPError(400, "The request body must be a JSON object.")
        allowed = set(allowed)
        unknown = sorted(set(body) - allowed)
        if unknown:
            raise refusal(
                400,
                f"Unknown field(s): {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}.",
            )
        missing = [name for name in required if name not in body]
        if missing:
            raise refusal(400, f"Missing field(s): {', '.join(missing)}.")
        return body

    async def run_in_executor(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run blocking (database) work in the service's thread pool."""
        return await in_executor(self.settings["executor"], func, *args, **kwargs)

    def service_url(self, *parts: str) -> str:
        """A path under the service prefix (never hard-code the Hub's layout)."""
        return url_path_join(self.settings["service_prefix"], *parts)

    def public_service_url(self, *parts: str) -> str:
        """An absolute URL of a path under the service, as users' clients must reach it."""
        base = self.service.public_url or f"{self.request.protocol}://{self.request.host}"
        if base.rstrip("/").endswith(self.settings["service_prefix"].rstrip("/")):
            # JUPYTERHUB_PUBLIC_URL already includes the service prefix
            return url_path_join(base, *parts)
        return url_path_join(base, self.service_url(*parts))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Errors are JSON ``{"status": N, "message": "…"}`` like the Hub's REST API.

        A database that cannot answer (down, locked, read-only, full) is a 503 with
        ``Retry-After``, so clients (the Hub's spawner among them) know to come back."""
        exc_info = kwargs.get("exc_info")
        message = ""
        if exc_info:
            exception = exc_info[1]
            unavailable = unavailable_reason(exception)
            if isinstance(exception, BookingError):
                message = exception.message
            elif unavailable:
                message = unavailable
                self.set_header("Retry-After", str(RETRY_AFTER_SECONDS))
            else:
                message = getattr(exception, "log_message", "") or ""
                format_args = getattr(exception, "args", ())
                if message and format_args and isinstance(exception, web.HTTPError):
                    message = message % format_args
        if not message:
            message = responses.get(status_code, "Unknown HTTP error")
        retry_after = getattr(exc_info[1], "retry_after", None) if exc_info else None
        if retry_after is not None:
            self.set_header("Retry-After", str(retry_after))
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        body: dict[str, Any] = {"status": status_code, "message": message}
        next_free = getattr(exc_info[1], "next_free", None) if exc_info else None
        if next_free is not None:
            # a capacity refusal offers the earliest free interval, for a client to book at once
            body["next_free"] = {"start": format_time(next_free[0]), "end": format_time(next_free[1])}
        self.finish(json.dumps(body))

    def log_exception(self, typ, value, tb) -> None:
        # booking refusals are normal answers, not server errors worth a traceback
        if isinstance(value, BookingError):
            return
        if unavailable_reason(value):
            # an outage is one line per request, not a traceback each
            app_log.warning(
                "%s %s answered 503, database unavailable: %s",
                self.request.method,
                getattr(self, "route_template", "") or type(self).__name__,
                str(value).splitlines()[0],
            )
            return
        super().log_exception(typ, value, tb)

    def send_error(self, status_code: int = 500, **kwargs: Any) -> None:
        exc_info = kwargs.get("exc_info")
        if exc_info and isinstance(exc_info[1], BookingError):
            status_code = exc_info[1].status
        elif exc_info and unavailable_reason(exc_info[1]):
            status_code = 503
        super().send_error(status_code, **kwargs)
