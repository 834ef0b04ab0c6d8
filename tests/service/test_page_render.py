"""The reservation page's server side without a browser: context builder, HTML, routes,
and the page as a real Hub serves it (links, assets, and an XSRF token that works)."""

from __future__ import annotations

import contextlib
import json
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser

import httpx
import pytest
from tornado import web

from jhub_gpubooking.core.timegrid import floor_to_grid, format_time
from jhub_gpubooking.service import pages
from jhub_gpubooking.service.routes import service_handlers

# deliberately unusual prefixes: nothing may assume the Hub's default layout
HUB_PREFIX = "/lab/hub-x/"
SERVICE_PREFIX = "/lab/services/gpus/"
ASSET_URLS = {
    "booking.js": f"{SERVICE_PREFIX}static/service/booking.js?v=abc",
    "booking.css": f"{SERVICE_PREFIX}static/service/booking.css?v=def",
    "common.js": f"{SERVICE_PREFIX}static/service/common.js?v=123",
    "timeline.js": f"{SERVICE_PREFIX}static/service/timeline.js?v=456",
    "planning.js": f"{SERVICE_PREFIX}static/service/planning.js?v=789",
    "waitlist.js": f"{SERVICE_PREFIX}static/service/waitlist.js?v=0ab",
    "page.js": f"{SERVICE_PREFIX}static/service/page.js?v=0cd",
    "tables.js": f"{SERVICE_PREFIX}static/service/tables.js?v=0ef",
    "admin.js": f"{SERVICE_PREFIX}static/service/admin.js?v=1ab",
}


def make_context(**overrides):
    arguments = {
        "page_title": "GPU bookings",
        "announcement": "",
        "user_name": "ada",
        "is_admin": False,
        "service_prefix": SERVICE_PREFIX,
        "hub_prefix": HUB_PREFIX,
        "xsrf_token": "2|tok|en",
        "slot_minutes": 15,
        "page_days": 7,
        "list_limit": 100,
        "refresh_seconds": 60,
        "asset_urls": ASSET_URLS,
        "script_nonce": "n0nce",
    }
    arguments.update(overrides)
    return pages.page_context(**arguments)


class PageScan(HTMLParser):
    """Collects what the tests check: links, the xsrf meta tag, ids and the config JSON."""

    def __init__(self):
        super().__init__()
        self.urls: list[str] = []
        self.ids: set[str] = set()
        self.xsrf: str | None = None
        self.config_text = ""
        self.import_map_text = ""
        self.module_scripts: list[str] = []
        self.inline_scripts: list[dict] = []
        self._inside: str | None = None

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.urls += [attributes[name] for name in ("href", "src") if name in attributes]
        if "id" in attributes:
            self.ids.add(attributes["id"])
        if tag == "meta" and attributes.get("name") == "xsrf-token":
            self.xsrf = attributes["content"]
        if tag == "script" and attributes.get("type") == "module":
            self.module_scripts.append(attributes["src"])
        if tag == "script" and "src" not in attributes:
            self.inline_scripts.append(attributes)
        if attributes.get("id") == "gpu-booking-config":
            self._inside = "config_text"
        elif attributes.get("type") == "importmap":
            self._inside = "import_map_text"

    def handle_endtag(self, tag):
        self._inside = None

    def handle_data(self, data):
        if self._inside:
            setattr(self, self._inside, getattr(self, self._inside) + data)


def scan(html: str) -> PageScan:
    parser = PageScan()
    parser.feed(html)
    return parser


def test_page_context_builds_every_url_from_the_prefixes():
    assert make_context() == {
        "page_title": "GPU bookings",
        "announcement": "",
        "script_nonce": "n0nce",
        "user_name": "ada",
        "is_admin": False,
        "xsrf_token": "2|tok|en",
        "hub_home_url": "/lab/hub-x/home",
        "hub_token_url": "/lab/hub-x/token",
        "hub_logo_url": "/lab/hub-x/logo",
        "logout_url": "/lab/hub-x/logout",
        "page_url": "/lab/services/gpus/",
        "hub_css_url": "/lab/hub-x/static/css/style.min.css",
        "hub_favicon_url": "/lab/hub-x/static/favicon.ico",
        "hub_bootstrap_js_url": "/lab/hub-x/static/components/bootstrap/dist/js/bootstrap.bundle.min.js",
        "hub_darkmode_js_url": "/lab/hub-x/static/js/darkmode.js",
        "page_css_url": "/lab/services/gpus/static/service/booking.css?v=def",
        "page_js_url": "/lab/services/gpus/static/service/booking.js?v=abc",
        "import_map": {
            "imports": {
                "/lab/services/gpus/static/service/common.js": "/lab/services/gpus/static/service/common.js?v=123",
                "/lab/services/gpus/static/service/timeline.js": "/lab/services/gpus/static/service/timeline.js?v=456",
                "/lab/services/gpus/static/service/planning.js": "/lab/services/gpus/static/service/planning.js?v=789",
                "/lab/services/gpus/static/service/waitlist.js": "/lab/services/gpus/static/service/waitlist.js?v=0ab",
                "/lab/services/gpus/static/service/page.js": "/lab/services/gpus/static/service/page.js?v=0cd",
                "/lab/services/gpus/static/service/tables.js": "/lab/services/gpus/static/service/tables.js?v=0ef",
                "/lab/services/gpus/static/service/admin.js": "/lab/services/gpus/static/service/admin.js?v=1ab",
            }
        },
        "page_config": {
            "apiUrl": "/lab/services/gpus/api/",
            "user": "ada",
            "isAdmin": False,
            "slotMinutes": 15,
            "pageDays": 7,
            "listLimit": 100,
            "refreshSeconds": 60,
        },
    }


def test_page_security_headers_deny_framing_and_foreign_scripts():
    assert pages.page_security_headers("n0nce") == {
        "Content-Security-Policy": (
            "default-src 'self'; script-src 'self' 'nonce-n0nce'; style-src 'self'; "
            "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
            "form-action 'self'; frame-ancestors 'none'"
        ),
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin",
    }


def test_the_only_executed_inline_script_carries_the_nonce():
    page = scan(pages.render_page(make_context()))
    executed = [a for a in page.inline_scripts if a.get("type") != "application/json"]
    assert executed == [{"type": "importmap", "nonce": "n0nce"}]


def test_rendered_page_links_only_under_the_prefixes_and_carries_the_xsrf_token():
    html = pages.render_page(make_context())
    page = scan(html)
    local_urls = [url for url in page.urls if not url.startswith("#")]
    assert local_urls, "the page links to the Hub and its own assets"
    assert all(url.startswith((HUB_PREFIX, SERVICE_PREFIX)) for url in local_urls), local_urls
    assert "/hub/" not in html
    assert "/services/gpu-booking/" not in html
    assert page.xsrf == "2|tok|en"
    assert json.loads(page.config_text) == make_context()["page_config"]
    assert json.loads(page.import_map_text) == make_context()["import_map"]
    assert page.module_scripts == ["/lab/services/gpus/static/service/booking.js?v=abc"]
    # the Hub's own stylesheet and the page's script are both included
    assert "/lab/hub-x/static/css/style.min.css" in page.urls
    assert "/lab/services/gpus/static/service/booking.js?v=abc" in page.urls
    assert {"/lab/hub-x/home", "/lab/hub-x/logout"} <= set(page.urls)


def test_form_controls_have_labels_and_the_refusal_box_is_live():
    html = pages.render_page(make_context())
    page = scan(html)
    for control in ("gb-pool", "gb-amount", "gb-start", "gb-end", "gb-note"):
        assert control in page.ids
        assert f'for="{control}"' in html
    assert (
        'id="gb-form-feedback" class="alert mt-3 mb-0 d-none" role="alert" aria-live="assertive"'
        in html
    )


def test_my_bookings_has_the_place_for_the_users_waits():
    page = scan(pages.render_page(make_context()))
    assert {"gb-my-bookings", "gb-my-waits", "gb-mine-feedback"} <= page.ids


def test_admin_section_only_for_admins():
    assert "gb-admin" not in scan(pages.render_page(make_context())).ids
    admin_page = scan(pages.render_page(make_context(is_admin=True)))
    assert {"gb-admin", "gb-maintenance-form", "gb-all-bookings"} <= admin_page.ids
    assert json.loads(admin_page.config_text)["isAdmin"] is True


def test_user_supplied_text_is_escaped_in_html_and_in_the_config_script():
    hostile = 'x"</script><script>alert(1)</script>'
    html = pages.render_page(make_context(user_name=hostile, announcement=hostile))
    assert "<script>alert(1)</script>" not in html
    assert json.loads(scan(html).config_text)["user"] == hostile


def test_announcement_and_title_come_from_the_service_config():
    html = pages.render_page(
        make_context(page_title="Lab GPUs", announcement="Node a1 is down today.")
    )
    assert "<title>Lab GPUs</title>" in html
    assert "Node a1 is down today." in html
    assert "gb-announcement" not in scan(pages.render_page(make_context())).ids


def test_static_asset_url_is_versioned_by_content_hash():
    # tornado's content hash (the same one StaticFileHandler uses for its cache headers)
    expected = web.StaticFileHandler.get_content_version(str(pages.STATIC_DIR / "booking.js"))
    assert len(expected) >= 32
    assert pages.static_asset_url(SERVICE_PREFIX, "booking.js") == (
        f"{SERVICE_PREFIX}static/service/booking.js?v={expected}"
    )


def test_page_handlers_route_the_page_and_its_assets_under_the_prefix():
    routes = pages.page_handlers("/lab/services/gpus/")
    application = web.Application(routes)
    rules = application.default_router.rules[0].target.rules
    matches = {
        path: next((rule for rule in rules if rule.matcher.regex.match(path)), None)
        for path in (
            "/lab/services/gpus/",
            "/lab/services/gpus/static/service/booking.js",
            "/other/",
        )
    }
    assert matches["/lab/services/gpus/"].target is pages.ReservationPageHandler
    asset_route = matches["/lab/services/gpus/static/service/booking.js"]
    assert asset_route.target is web.StaticFileHandler
    assert asset_route.target_kwargs == {"path": str(pages.STATIC_DIR)}
    assert matches["/other/"] is None


@pytest.mark.e2e
def test_page_served_through_the_hub_links_its_assets_and_its_xsrf_token_works(booking_hub):
    hub = booking_hub
    with contextlib.closing(hub.login_session("ada")) as session:
        response = session.get(hub.service_url)
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("text/html")
        page = scan(response.text)
        # the headers name the nonce the page's import map carries; a fresh one per response
        nonce = next(a["nonce"] for a in page.inline_scripts if a.get("type") == "importmap")
        expected = pages.page_security_headers(nonce)
        assert {name: response.headers.get(name) for name in expected} == expected
        assert session.get(hub.service_url).headers["Content-Security-Policy"] != (
            response.headers["Content-Security-Policy"]
        )
        assert json.loads(page.config_text) == {
            "apiUrl": f"{hub.service_prefix}api/",
            "user": "ada",
            "isAdmin": False,
            "slotMinutes": 15,
            "pageDays": 7,
            "listLimit": 100,
            "refreshSeconds": 60,
        }
        local_urls = [url for url in page.urls if not url.startswith("#")]
        assert all(url.startswith((hub.hub_prefix, hub.service_prefix)) for url in local_urls)
        # the page's modules and the Hub's stylesheet are all reachable where the page says
        modules = {"booking.js": page.module_scripts[0]}
        for plain_url, versioned_url in json.loads(page.import_map_text)["imports"].items():
            assert versioned_url.startswith(plain_url + "?v=")
            modules[plain_url.rsplit("/", 1)[1]] = versioned_url
        # every module of the page's folder, each at its versioned URL (a module missing from
        # the import map would load unversioned: a stale copy from the cache after an upgrade)
        assert set(modules) == {path.name for path in pages.STATIC_DIR.glob("*.js")}
        for name, url in modules.items():
            script = session.get(hub.public_url + url)
            assert script.status_code == 200
            assert script.content == (pages.STATIC_DIR / name).read_bytes()
        stylesheet = session.get(f"{hub.public_url}{hub.hub_prefix}static/css/style.min.css")
        assert stylesheet.status_code == 200 and "text/css" in stylesheet.headers["Content-Type"]

        # the rendered token is the one HubOAuth checks on cookie-authenticated writes
        assert page.xsrf == hub.xsrf_headers(session)["X-XSRFToken"]
        start = floor_to_grid(datetime.now(timezone.utc), 60) + timedelta(days=1)
        body = {
            "pool": "a100",
            "gpus": 1,
            "start": format_time(start),
            "end": format_time(start + timedelta(hours=1)),
        }
        assert session.post("api/bookings", json=body).status_code == 403
        booked = session.post("api/bookings", json=body, headers={"X-XSRFToken": page.xsrf})
        assert booked.status_code == 201, booked.text
        assert booked.json()["user"] == "ada"


@pytest.mark.e2e
def test_anonymous_visitors_are_sent_to_the_hubs_oauth_login(booking_hub):
    response = httpx.get(booking_hub.service_url, follow_redirects=False)
    assert response.status_code == 302
    assert response.headers["Location"].startswith(f"{booking_hub.hub_prefix}api/oauth2/authorize?")


@pytest.mark.e2e
def test_the_service_prefix_without_its_slash_redirects_to_the_page(booking_hub):
    """``/services/gpu-booking`` reaches the service as the proxy passes it on: a redirect to the
    page (keeping the query), not a JSON 404."""
    bare = booking_hub.service_prefix.rstrip("/")
    response = httpx.get(f"{booking_hub.public_url}{bare}?view=past", follow_redirects=False)
    assert response.status_code == 302, response.text
    assert response.headers["Location"] == f"{booking_hub.service_prefix}?view=past"


def test_the_service_routes_redirect_the_prefix_without_its_slash():
    application = web.Application(service_handlers(SERVICE_PREFIX, flags=None))
    rules = application.default_router.rules[0].target.rules
    [rule] = [rule for rule in rules if rule.matcher.regex.match(SERVICE_PREFIX.rstrip("/"))]
    assert (rule.target, rule.target_kwargs) == (
        web.RedirectHandler, {"url": SERVICE_PREFIX, "permanent": False})
