"""Pure parts of the service: principals, routes vs OpenAPI, JSON and iCal builders, metrics,
the Application's traits and its refusal to start on a stale database."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from fractions import Fraction
from pathlib import Path

import yaml
from icalendar import Calendar
from openapi_spec_validator import validate
from traitlets import TraitType

from jhub_gpubooking.core.model import Booking, Placement, Pool
from jhub_gpubooking.service import app as service_app
from jhub_gpubooking.service import startup
from jhub_gpubooking.service.app import GPUBookingService
from jhub_gpubooking.service.base import Principal, principal_from_model
from jhub_gpubooking.service.feeds import bookings_calendar
from jhub_gpubooking.service.flagged import flagged_routes
from jhub_gpubooking.service.metrics import ServiceMetrics, access_log_level, booked_gpus_now
from jhub_gpubooking.service.routes import service_routes, template_to_pattern
from jhub_gpubooking.service.serialize import booking_json, pool_json

OPENAPI_PATH = Path(service_app.__file__).with_name("openapi.yaml")
T0 = datetime(2026, 11, 23, 9, 0, tzinfo=timezone.utc)
POOL = Pool(name="a100", nodes={"n1": 2}, display_name="A100")
SHARED = Pool(name="shared", nodes={"s1": 1}, slices_per_gpu=4)


def make_booking(**changes) -> Booking:
    fields = dict(
        id=7,
        user="ada",
        pool="a100",
        amount=Fraction(1),
        start=T0,
        end=T0 + timedelta(hours=2),
        placement=Placement("n1", (1,), 1),
        note="training run",
        created=T0 - timedelta(days=1),
        updated=T0 - timedelta(days=1),
    )
    fields.update(changes)
    return Booking(**fields)


def test_principal_from_user_model_uses_hub_admin_flag_and_admin_groups():
    admin_groups = ["gpu-admins"]
    assert principal_from_model(
        {"kind": "user", "name": "ada", "admin": False, "groups": ["students"]}, admin_groups, []
    ) == Principal(kind="user", name="ada", groups=("students",), is_admin=False)
    assert principal_from_model(
        {"kind": "user", "name": "carol", "admin": False, "groups": ["gpu-admins"]},
        admin_groups,
        [],
    ).is_admin
    assert principal_from_model({"name": "root", "admin": True}, admin_groups, []).is_admin


def test_principal_from_service_model_is_spawner_only_when_listed():
    listed = principal_from_model({"kind": "service", "name": "gpu-booking"}, [], ["gpu-booking"])
    other = principal_from_model({"kind": "service", "name": "culler"}, [], ["gpu-booking"])
    assert listed == Principal(kind="service", name="gpu-booking", is_spawner=True)
    assert not other.is_spawner and not other.is_admin
    assert not listed.may_act_for("ada")


def test_route_templates_become_anchored_literal_patterns():
    assert template_to_pattern("api/bookings/{booking_id}/claim") == r"api/bookings/(\d+)/claim"
    assert template_to_pattern("feeds/{token}.ics") == r"feeds/([^/]+)\.ics"
    assert template_to_pattern("api/users/{user}/feed-token") == r"api/users/([^/]+)/feed\-token"


def test_openapi_is_valid_and_lists_exactly_the_routes_and_methods_of_the_app():
    document = yaml.safe_load(OPENAPI_PATH.read_text())
    validate(document)
    documented = {
        path.lstrip("/"): {
            method for method in item if method in {"get", "post", "patch", "delete", "put"}
        }
        for path, item in document["paths"].items()
    }
    implemented = {
        template: {
            method
            for method in ("get", "post", "patch", "delete", "put")
            if getattr(handler, method).__qualname__.split(".")[0] != "RequestHandler"
        }
        for template, handler in [
            *service_routes(),
            *((template, handler) for template, handler, _ in flagged_routes(flags=None)),
        ]
    }
    assert documented == implemented


def test_booking_json_shape_and_utc_times():
    booking = make_booking()
    assert booking_json(booking, POOL, T0 + timedelta(minutes=30)) == {
        "id": 7,
        "user": "ada",
        "pool": "a100",
        "gpus": 1,
        "slices": 1,
        "start": "2026-11-23T09:00:00Z",
        "end": "2026-11-23T11:00:00Z",
        "state": "active",
        "note": "training run",
        "created": "2026-11-22T09:00:00Z",
        "updated": "2026-11-22T09:00:00Z",
        "placement": {"node": "n1", "gpus": [1], "slices": 1},
        "placement_provisional": False,
        "server": None,
        "released_end": None,
        "release_reason": None,
        "opportunistic": False,
        "series_id": None,
    }


def test_booking_json_of_a_fraction_counts_slices():
    quarter = make_booking(pool="shared", amount=Fraction(1, 4), placement=Placement("s1", (0,), 1))
    model = booking_json(quarter, SHARED, T0 - timedelta(hours=1))
    assert (model["gpus"], model["slices"], model["state"]) == (0.25, 1, "upcoming")
    # upcoming and unclaimed: it may still move to let another request in
    assert model["placement_provisional"] is True


def test_calendar_parses_back_with_one_event_per_booking():
    bookings = [
        make_booking(),
        make_booking(
            id=8,
            status="cancelled",
            start=T0 + timedelta(days=1),
            end=T0 + timedelta(days=1, hours=1),
        ),
    ]
    calendar = Calendar.from_ical(
        bookings_calendar(
            "ada", bookings, {"a100": POOL}, "gpu-booking", T0 + timedelta(minutes=5),
            "https://hub/services/gpu-booking/",
        )
    )
    events = calendar.walk("VEVENT")
    assert [str(event["uid"]) for event in events] == [
        "booking-7@gpu-booking",
        "booking-8@gpu-booking",
    ]
    assert events[0].decoded("dtstart") == T0
    assert events[0].decoded("dtend") == T0 + timedelta(hours=2)
    assert str(events[0]["summary"]) == "1 GPU on A100"
    assert "training run" in str(events[0]["description"])
    assert [str(event["status"]) for event in events] == ["CONFIRMED", "CANCELLED"]


def test_calendar_says_an_upcoming_bookings_gpus_may_still_change():
    booking = make_booking()
    calendar = bookings_calendar("ada", [booking], {"a100": POOL}, "gpu-booking", T0 - timedelta(hours=1))
    upcoming = str(Calendar.from_ical(calendar).walk("VEVENT")[0]["description"])
    assert "for now: the GPU is assigned at start and may still change." in upcoming
    calendar = bookings_calendar("ada", [booking], {"a100": POOL}, "gpu-booking", T0)
    started = str(Calendar.from_ical(calendar).walk("VEVENT")[0]["description"])
    assert "may still change" not in started and f"Node {booking.placement.node}" in started


def test_booked_gpus_sum_active_bookings_per_pool():
    now = T0 + timedelta(minutes=30)
    bookings = [
        make_booking(),
        make_booking(id=8, pool="shared", amount=Fraction(1, 4)),
        make_booking(id=9, start=T0 + timedelta(days=1), end=T0 + timedelta(days=1, hours=1)),
        make_booking(id=10, status="cancelled"),
    ]
    assert booked_gpus_now(bookings, ["a100", "shared", "empty"], now) == {
        "a100": 1.0,
        "shared": 0.25,
        "empty": 0.0,
    }


def test_metrics_exposition_uses_its_own_registry():
    first, second = ServiceMetrics(), ServiceMetrics()
    first.observe_request("api/pools", "GET", 200, 0.01)
    first.refresh({"active": 1}, [make_booking()], {"a100": 2}, T0)
    text = first.exposition().decode()
    assert 'gpubooking_requests_total{method="GET",route="api/pools",status="200"} 1.0' in text
    assert 'gpubooking_booked_gpus{pool="a100"} 1.0' in text
    assert 'gpubooking_bookings{state="active"} 1.0' in text
    assert "gpubooking_requests_total{" not in second.exposition().decode()


def test_requests_of_one_route_and_status_add_up():
    metrics = ServiceMetrics()
    for seconds in (0.004, 0.02, 0.02):
        metrics.observe_request("api/bookings", "POST", 201, seconds)
    metrics.observe_request("api/bookings", "POST", 409, 0.01)
    text = metrics.exposition().decode()
    assert 'gpubooking_requests_total{method="POST",route="api/bookings",status="201"} 3.0' in text
    assert 'gpubooking_requests_total{method="POST",route="api/bookings",status="409"} 1.0' in text
    assert ('gpubooking_request_duration_seconds_bucket{le="0.005",method="POST",'
            'route="api/bookings",status="201"} 1.0') in text
    assert ('gpubooking_request_duration_seconds_count{method="POST",route="api/bookings",'
            'status="201"} 3.0') in text


def test_only_server_errors_that_do_not_say_when_to_come_back_are_logged_as_errors():
    levels = {status: access_log_level(status) for status in (200, 201, 404, 409, 500, 503, 504)}
    assert levels == {200: logging.INFO, 201: logging.INFO, 404: logging.WARNING,
                      409: logging.WARNING, 500: logging.ERROR, 503: logging.WARNING,
                      504: logging.ERROR}
    # as the Hub's: static files and "not modified" are debug, unless slow
    assert access_log_level(200, static=True) == access_log_level(304) == logging.DEBUG
    assert access_log_level(200, static=True, seconds=1.5) == logging.INFO
    assert access_log_level(404, static=True) == logging.WARNING


def test_the_service_logs_its_modules_and_tornado_on_the_hubs_line():
    """Module loggers (the webhook's verdicts, the sweeps) and tornado's access log reach the
    service's handler at its level, with the Hub's line format; before, Python dropped their
    INFO lines and printed the rest bare."""
    code = (
        "import logging\n"
        "from tornado.log import access_log\n"
        "from jhub_gpubooking.service.app import GPUBookingService\n"
        "app = GPUBookingService()\n"
        "app.log.info('own line')\n"
        "logging.getLogger('jhub_gpubooking.admission.server').info('Denied pod lab/p: no')\n"
        "access_log.info('200 GET api/pools 1.0ms')\n"
        "logging.getLogger('jhub_gpubooking.cluster.orphans').debug('hidden at INFO')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    lines = [re.sub(r"^\[(\w) \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} ", r"[\1 TIME ", line)
             for line in done.stderr.splitlines()]
    assert lines == ["[I TIME GPUBookingService <string>:5] own line",
                     "[I TIME jhub_gpubooking.admission.server <string>:6] Denied pod lab/p: no",
                     "[I TIME tornado.access <string>:7] 200 GET api/pools 1.0ms"]


def test_longer_searches_are_counted_by_outcome_and_timed_when_they_ran():
    metrics = ServiceMetrics()
    metrics.observe_longer_search("admitted", 3.2)
    metrics.observe_longer_search("refused", 10.1)
    metrics.observe_longer_search("busy", None)
    text = metrics.exposition().decode()
    for outcome in ("admitted", "refused", "busy"):
        assert f'gpubooking_longer_searches_total{{outcome="{outcome}"}} 1.0' in text
    # the busy one did not search: two durations, one up to 5 s
    assert "gpubooking_longer_search_duration_seconds_count 2.0" in text
    assert 'gpubooking_longer_search_duration_seconds_bucket{le="5.0"} 1.0' in text


def test_the_startup_heap_is_left_out_of_later_collections():
    import gc

    try:
        startup.freeze_startup_heap()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_every_configurable_trait_has_help():
    own = {
        name: trait
        for name, trait in GPUBookingService.class_traits(config=True).items()
        if name in GPUBookingService.__dict__
    }
    assert {
        "pools",
        "default_policy",
        "group_policies",
        "db_url",
        "slot_minutes",
        "spawner_services",
        "admin_groups",
        "executor_threads",
    } <= set(own)
    assert all(isinstance(trait, TraitType) and len(trait.help) > 20 for trait in own.values())


def test_service_reads_the_hub_environment(monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_SERVICE_NAME", "gpus")
    monkeypatch.setenv("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:4242/lab/services/gpus/")
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/lab/services/gpus/")
    monkeypatch.setenv("JUPYTERHUB_BASE_URL", "/lab/")
    monkeypatch.setenv("JUPYTERHUB_API_URL", "http://hub:8081/lab/hub/api")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "secret")
    service = GPUBookingService()
    assert (service.service_name, service.service_prefix, service.hub_prefix) == (
        "gpus",
        "/lab/services/gpus/",
        "/lab/hub/",
    )
    assert (service.hub_api_url, service.api_token, service.spawner_services) == (
        "http://hub:8081/lab/hub/api",
        "secret",
        ["gpus"],
    )


def run_service(tmp_path: Path, *arguments: str) -> subprocess.CompletedProcess:
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith("JUPYTERHUB_")
    }
    return subprocess.run(
        [sys.executable, "-m", "jhub_gpubooking.service", *arguments],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_service_refuses_a_database_without_schema(tmp_path):
    result = run_service(
        tmp_path, "--db-url", f"sqlite:///{tmp_path / 'new.sqlite'}", "--url", "http://127.0.0.1:1/"
    )
    assert result.returncode != 0
    assert "jhub-gpubooking db upgrade" in result.stderr


def test_a_bad_configuration_stops_the_service_with_one_clear_line(tmp_path):
    config = tmp_path / "config.py"
    config.write_text(
        "c.GPUBookingService.pools = [{'name': 'a100', 'nodes': {'n1': 4}, 'slices_per_gpu': 0}]\n"
    )
    result = run_service(
        tmp_path, "--config", str(config), "--upgrade-db",
        "--db-url", f"sqlite:///{tmp_path / 'db.sqlite'}", "--url", "http://127.0.0.1:1/",
    )
    assert result.returncode == 2
    assert "Configuration error: Pool a100: slices_per_gpu must be an integer from 1 to 64." in (
        result.stderr
    )
    assert "Traceback" not in result.stderr


def test_generate_config_writes_a_loadable_commented_file(tmp_path):
    result = run_service(tmp_path, "--generate-config", "--config", str(tmp_path / "config.py"))
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "config.py").read_text()
    assert "# c.GPUBookingService.pools = []" in text
    assert "c.GPUBookingService.admin_groups" in text


async def test_unexpected_errors_are_json_without_internals():
    import httpx
    from tornado import web
    from tornado.httpserver import HTTPServer
    from tornado.netutil import bind_sockets

    from jhub_gpubooking.service.api import APIHandler

    class FailingHandler(APIHandler):
        async def prepare(self) -> None:
            self._principal = None  # no Hub in this test

        async def get(self) -> None:
            raise OverflowError("Python int too large to convert to SQLite INTEGER")

    sockets = bind_sockets(0, "127.0.0.1")
    server = HTTPServer(web.Application([("/fail", FailingHandler)]))
    server.add_sockets(sockets)
    try:
        async with httpx.AsyncClient() as http:
            response = await http.get(f"http://127.0.0.1:{sockets[0].getsockname()[1]}/fail")
    finally:
        server.stop()
    assert response.status_code == 500
    assert response.json() == {"status": 500, "message": "Internal Server Error"}


def test_pool_json_carries_what_the_spawner_needs_to_build_the_pod():
    mig = Pool(
        name="mig",
        nodes={"m1": 2},
        slices_per_gpu=7,
        backend="mig",
        resource_name="nvidia.com/mig-1g.10gb",
        gpu_uuids={"m1": ("GPU-a", "GPU-b")},
        node_selector={"pool": "mig"},
    )
    assert pool_json(mig) == {
        "name": "mig",
        "display_name": "mig",
        "description": "",
        "gpu_model": "",
        "gpu_memory_mib": 0,
        "backend": "mig",
        "slices_per_gpu": 7,
        "total_gpus": 2,
        "max_gpus_per_booking": 2,
        "nodes": {"m1": 2},
        "gpu_uuids": {"m1": ["GPU-a", "GPU-b"]},
        "node_selector": {"pool": "mig"},
        "resource_name": "nvidia.com/mig-1g.10gb",
        "no_show_minutes": None,
    }


def test_starting_the_service_does_not_import_the_kubernetes_client():
    """The kubernetes package takes seconds to import; the Hub waits only ~10 s for a managed
    service to answer, so only a service that watches nodes may pay for it."""
    code = (
        "import sys, jhub_gpubooking.service.app, jhub_gpubooking.cluster.nodes; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]"
