"""The service's routes: every handler under the service prefix, and the few handlers of the
app itself (OAuth callback, metrics, unknown paths)."""

from __future__ import annotations

import re

from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler
from jupyterhub.utils import url_path_join
from tornado import web

from ..db.flags import BookingFlags
from ..db.stats import metrics_snapshot
from .api import api_routes
from .base import BaseHandler
from .feeds import feed_routes
from .flagged import flagged_routes
from .lifecycle_api import lifecycle_routes
from .opportunistic import opportunistic_routes
from .pages import page_handlers
from .planning import planning_routes
from .removed_users import removed_users_routes
from .waitlist import waitlist_routes

#: Regular expression of each path parameter used in the route templates.
PATH_PARAMETER_PATTERNS = {
    "booking_id": r"\d+", "window_id": r"\d+", "series_id": r"\d+", "wait_id": r"\d+"
}
DEFAULT_PATH_PARAMETER_PATTERN = r"[^/]+"


def template_to_pattern(template: str) -> str:
    """``api/bookings/{booking_id}`` → ``api/bookings/(\\d+)`` (literal parts escaped)."""
    pattern = ""
    for literal, name in re.findall(r"([^{]*)(?:\{(\w+)\})?", template):
        pattern += re.escape(literal)
        if name:
            pattern += f"({PATH_PARAMETER_PATTERNS.get(name, DEFAULT_PATH_PARAMETER_PATTERN)})"
    return pattern


class OAuthCallbackHandler(HubOAuthCallbackHandler):
    """Finishes the Hub OAuth login with the service's configured HubOAuth."""

    @property
    def hub_auth(self) -> HubOAuth:
        return self.settings["hub_auth"]


class MetricsHandler(BaseHandler):
    async def get(self) -> None:
        if self.service.authenticate_metrics:
            principal = self.require_principal()
            if not (principal.is_admin or principal.kind == "service"):
                raise web.HTTPError(403, "Only administrators and Hub services may read metrics.")
        service = self.service
        now = self.clock.now()
        counts, active = await self.run_in_executor(metrics_snapshot, self.store, now)
        pool_sizes = {name: pool.total_gpus for name, pool in service.pool_objects.items()}
        service.metrics.refresh(counts, active, pool_sizes, now)
        self.set_header("Content-Type", service.metrics.content_type)
        self.finish(service.metrics.exposition())


class UnknownPathHandler(BaseHandler):
    """Paths no route matches (e.g. a booking id that is not a number) get a JSON 404 too."""

    def prepare(self) -> None:
        raise web.HTTPError(404, "There is no such page or API path.")


def service_routes() -> list[tuple[str, type[web.RequestHandler]]]:
    """Every route of the service as OpenAPI path templates, relative to the service prefix."""
    return [
        *api_routes(),
        *lifecycle_routes(),
        *opportunistic_routes(),
        *planning_routes(),
        *removed_users_routes(),
        *waitlist_routes(),
        *feed_routes(),
        ("metrics", MetricsHandler),
    ]


def service_handlers(prefix: str, flags: BookingFlags) -> list:
    """Every handler of the service app, under the service ``prefix``."""
    routes = [
        web.url(
            url_path_join(prefix, template_to_pattern(template)),
            handler,
            {"route_template": template},
        )
        for template, handler in service_routes()
    ]
    routes += [
        web.url(url_path_join(prefix, template), handler, {**args, "route_template": template})
        for template, handler, args in flagged_routes(flags)
    ]
    routes.append((url_path_join(prefix, "oauth_callback"), OAuthCallbackHandler))
    routes.extend(page_handlers(prefix))
    bare = prefix.rstrip("/")
    if bare:  # the prefix without its slash (as the proxy passes it on) is the page's too
        routes.append((re.escape(bare), web.RedirectHandler, {"url": prefix, "permanent": False}))
    return routes

