"""The reservation page: one server-rendered HTML shell plus plain JS that talks to the REST API.

The server renders only what the browser cannot know by itself: the URL prefixes, the user,
the slot grid and the XSRF token. Everything else (pools, availability, bookings) the page
fetches from ``api/`` so there is one source of truth for rules and refusals: the API.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path
from typing import Any

import jinja2
from tornado import web
from traitlets import Integer, Unicode, validate
from traitlets.config import LoggingConfigurable

from ..core.model import amount_to_json
from .api import MAX_PAGE_SIZE
from .base import BaseHandler

PACKAGE_DIR = Path(__file__).resolve().parent.parent
STATIC_DIR = PACKAGE_DIR / "static" / "service"
TEMPLATE_NAME = "service/reservation.html"
#: URL path of the page's assets under the service prefix; it mirrors the package layout
#: (``static/service/``) so an application-wide ``static_path`` serves the same files.
ASSET_PATH = "static/service/"
#: ES modules that booking.js imports; the page maps each to its versioned URL (an import map)
#: so a new release never mixes fresh and cached modules.
PAGE_MODULES = (
    "common.js", "page.js", "tables.js", "timeline.js", "planning.js", "waitlist.js", "admin.js",
)
PAGE_ASSETS = ("booking.js", "booking.css", *PAGE_MODULES)

_templates = jinja2.Environment(
    loader=jinja2.FileSystemLoader(PACKAGE_DIR / "templates"),
    autoescape=jinja2.select_autoescape(["html"]),
    undefined=jinja2.StrictUndefined,  # a missing context key is a bug, not an empty string
)


def static_asset_url(service_prefix: str, filename: str) -> str:
    """URL of a page asset, versioned by content hash so browsers never run a stale script."""
    version = web.StaticFileHandler.get_version({"static_path": str(STATIC_DIR)}, filename)
    return f"{service_prefix}{ASSET_PATH}{filename}?v={version}"


def page_security_headers(nonce: str) -> dict[str, str]:
    """Headers that keep the page out of other sites' frames and run only its own scripts.

    Scripts and styles come from this origin (the page's assets and the Hub's static files, both
    behind the Hub's proxy); the one inline script, the import map, carries ``nonce``.
    """
    policy = {
        "default-src": "'self'",
        "script-src": f"'self' 'nonce-{nonce}'",
        "style-src": "'self'",
        "img-src": "'self' data:",
        "connect-src": "'self'",
        "object-src": "'none'",
        "base-uri": "'none'",
        "form-action": "'self'",
        "frame-ancestors": "'none'",
    }
    return {
        "Content-Security-Policy": "; ".join(f"{key} {value}" for key, value in policy.items()),
        # for browsers older than CSP frame-ancestors
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin",
    }


def page_context(
    *,
    page_title: str,
    announcement: str,
    user_name: str,
    is_admin: bool,
    service_prefix: str,
    hub_prefix: str,
    xsrf_token: str,
    slot_minutes: int,
    page_days: int,
    list_limit: int,
    refresh_seconds: int,
    asset_urls: dict[str, str],
    script_nonce: str,
    max_gpus: float | int | None = None,
) -> dict[str, Any]:
    """Everything the reservation template needs; every URL derives from the two prefixes.

    ``max_gpus``: the most GPUs the user's policy lets them book at once (None: no limit, as
    for admins), so the form and the timeline offer no amount the service would refuse.
    """
    hub_static = f"{hub_prefix}static/"
    return {
        "page_title": page_title,
        "announcement": announcement,
        "script_nonce": script_nonce,
        "user_name": user_name,
        "is_admin": is_admin,
        "xsrf_token": xsrf_token,
        "hub_home_url": f"{hub_prefix}home",
        "hub_token_url": f"{hub_prefix}token",
        "hub_logo_url": f"{hub_prefix}logo",
        "logout_url": f"{hub_prefix}logout",
        "page_url": service_prefix,
        "hub_css_url": f"{hub_static}css/style.min.css",
        "hub_favicon_url": f"{hub_static}favicon.ico",
        "hub_bootstrap_js_url": f"{hub_static}components/bootstrap/dist/js/bootstrap.bundle.min.js",
        "hub_darkmode_js_url": f"{hub_static}js/darkmode.js",
        "page_css_url": asset_urls["booking.css"],
        "page_js_url": asset_urls["booking.js"],
        "import_map": {
            "imports": {
                f"{service_prefix}{ASSET_PATH}{name}": asset_urls[name] for name in PAGE_MODULES
            }
        },
        # read by booking.js; rendered with |tojson so it is safe inside <script>
        "page_config": {
            "apiUrl": f"{service_prefix}api/",
            "user": user_name,
            "isAdmin": is_admin,
            "slotMinutes": slot_minutes,
            "pageDays": page_days,
            "listLimit": list_limit,
            "refreshSeconds": refresh_seconds,
            # only with a limit: absent, the page offers what the pools hold
            **({} if max_gpus is None else {"maxGpus": max_gpus}),
        },
    }


def render_page(context: dict[str, Any]) -> str:
    return _templates.get_template(TEMPLATE_NAME).render(**context)


class ReservationPage(LoggingConfigurable):
    """What the reservation page shows (``c.ReservationPage``)."""

    page_days = Integer(
        7, help="Days shown at once on the reservation page and by default in availability."
    ).tag(config=True)
    page_list_size = Integer(
        100,
        help="Bookings and maintenance windows the reservation page loads at once into each of "
        "its tables; a 'Show more' button loads the next ones (1 to the API's page maximum).",
    ).tag(config=True)

    @validate("page_list_size")
    def _page_list_size_within_api_pages(self, proposal) -> int:
        if not 1 <= proposal["value"] <= MAX_PAGE_SIZE:
            raise ValueError(f"page_list_size must be from 1 to {MAX_PAGE_SIZE}.")
        return proposal["value"]

    page_refresh_seconds = Integer(
        60,
        min=0,
        help="Seconds between the reservation page's refreshes of its own while it is open and "
        "visible: a booking ended, released or booked from the waitlist, a new notice, the "
        "timeline then show without a reload. A hidden tab does not refresh; shown again after at "
        "least this long, it refreshes at once. Nor does the page refresh while the user is "
        "changing a booking in it. Each refresh "
        "reads about six API routes (more for admins); 0 turns it off.",
    ).tag(config=True)
    page_title = Unicode("GPU bookings", help="Title of the reservation page.").tag(config=True)
    page_announcement = Unicode(
        "", help="Text shown at the top of the reservation page (e.g. maintenance notices)."
    ).tag(config=True)


class ReservationPageHandler(BaseHandler):
    """``GET {service_prefix}``: the reservation page for the logged-in Hub user."""

    @web.authenticated
    def get(self) -> None:
        service_prefix = self.settings["service_prefix"]
        service = self.settings["service"]
        page = service.page
        nonce = secrets.token_urlsafe(16)
        context = page_context(
            page_title=page.page_title,
            announcement=page.page_announcement,
            user_name=self.current_user["name"],
            is_admin=self.is_admin,
            service_prefix=service_prefix,
            hub_prefix=self.settings["hub_prefix"],
            # HubOAuth patches xsrf_token so the same value passes its cookie-auth check
            xsrf_token=self.xsrf_token.decode("ascii"),
            slot_minutes=service.slot_minutes,
            page_days=page.page_days,
            list_limit=page.page_list_size,
            refresh_seconds=page.page_refresh_seconds,
            asset_urls={name: static_asset_url(service_prefix, name) for name in PAGE_ASSETS},
            script_nonce=nonce,
            max_gpus=self.policy_max_gpus(),
        )
        for name, value in page_security_headers(nonce).items():
            self.set_header(name, value)
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(render_page(context))

    def policy_max_gpus(self) -> float | int | None:
        """The user's ``max_gpus`` as the API writes amounts; None without a limit (admins are
        exempt from every policy, as the service's checks are)."""
        principal = self.principal
        if principal is None or principal.is_admin:
            return None
        limit = self.store.policy_for(principal.groups).max_gpus
        return None if limit is None else amount_to_json(limit)


def page_handlers(prefix: str) -> list[tuple]:
    """Routes of the page and its assets, for the service app to add under its prefix."""
    escaped = re.escape(prefix)
    return [
        (rf"{escaped}{ASSET_PATH}(.*)", web.StaticFileHandler, {"path": str(STATIC_DIR)}),
        (escaped, ReservationPageHandler),
    ]
