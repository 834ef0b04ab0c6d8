"""The documentation builds with warnings as errors, and its reference pages come from the code.

The build runs Sphinx in a subprocess (about half a minute); deselect it with ``-m "not docs"``.
"""

from __future__ import annotations

import html
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from jhub_gpubooking.service.app import COMPONENTS, GPUBookingService
from jhub_gpubooking.service.flagged import flagged_routes
from jhub_gpubooking.service.metrics import ServiceMetrics
from jhub_gpubooking.service.routes import service_routes
from jhub_gpubooking.spawner import GPUBookingSpawner

DOCS = Path(__file__).parents[1] / "docs"
#: Pages of this documentation written by hand (the benchmarks page is generated elsewhere).
HAND_WRITTEN = sorted(
    path
    for path in DOCS.rglob("*.md")
    if path.relative_to(DOCS).parts[0] not in {"_build", "_static"} and path.name != "benchmarks.md"
)


@pytest.fixture(scope="module")
def built_site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("docs")
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-E",
            "-q",
            "-b",
            "html",
            "-d",
            str(out / "doctrees"),
            str(DOCS),
            str(out / "html"),
        ],
        check=False,  # the assertion below shows Sphinx's own errors
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert build.returncode == 0, build.stderr
    assert "WARNING" not in build.stderr
    return out / "html"


def page_text(path: Path) -> str:
    """The page's text as a reader sees it (tags dropped, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))


def own_config_traits(cls) -> set[str]:
    """Configurable traits defined by the package (the class and its mixins), not inherited
    from KubeSpawner or traitlets."""
    return {
        name
        for name, trait in cls.class_traits(config=True).items()
        if trait.this_class.__module__.startswith("jhub_gpubooking")
    }


def mixin_traits(mixin) -> set[str]:
    return {
        name for name, trait in mixin.class_traits(config=True).items() if trait.this_class is mixin
    }


def app_route_templates() -> list[str]:
    """Every route the service serves, relative to its prefix."""
    flagged = [template for template, _, _ in flagged_routes(flags=None)]
    return [template for template, _ in service_routes()] + flagged


def normalise_route(route: str) -> str:
    """``api/bookings/{id}/claim`` and ``api/bookings/{booking_id}/claim`` are one route."""
    return re.sub(r"\{[^}]*\}", "{}", route.strip("/"))


@pytest.mark.docs
def test_spawner_reference_lists_every_own_option(built_site):
    page = (built_site / "reference" / "spawner-config.html").read_text()
    options = own_config_traits(GPUBookingSpawner)
    assert {"booking_api_url", "booking_api_token", "pod_deadline_seconds"} <= options
    assert [name for name in sorted(options) if f"GPUBookingSpawner.{name}" not in page] == []
    # KubeSpawner's own options are linked, not repeated
    assert "GPUBookingSpawner.cpu_limit" not in page


@pytest.mark.docs
def test_service_reference_lists_every_own_option(built_site):
    page = (built_site / "reference" / "service-config.html").read_text()
    options = own_config_traits(GPUBookingService)
    assert {"db_url", "pools", "default_policy", "group_policies", "spawner_services"} <= options
    assert [name for name in sorted(options) if f"GPUBookingService.{name}" not in page] == []
    # every component's section is listed too, under its own class name
    missing = [
        f"{component.__name__}.{name}"
        for component in COMPONENTS
        for name in sorted(mixin_traits(component))
        if f"{component.__name__}.{name}" not in page
    ]
    assert missing == []


#: The service's components and the how-to pages that explain their options.
COMPONENT_PAGES = {
    "Lifecycle": ["lifecycle"],
    "EmailWarnings": ["lifecycle"],
    "ClusterAccess": ["discover-pools"],
    "AdmissionWebhook": ["admission-webhook"],
    "NodeInventory": ["discover-pools"],
    "OrphanPods": ["lifecycle"],
    "RemovedUsers": ["lifecycle"],
    "HubServers": ["lifecycle"],
    "ScheduledBackups": ["backup"],
    "Budgets": ["budgets-and-series"],
    "RecurringSeries": ["budgets-and-series"],
    "Opportunistic": ["opportunistic"],
    "Waitlist": ["waitlist"],
    "GPUMonitoring": ["opportunistic"],
    "ReservationPage": ["pools"],
}


@pytest.mark.docs
def test_how_to_pages_explain_every_option_of_the_service_components(built_site):
    assert set(COMPONENT_PAGES) == {component.__name__ for component in COMPONENTS}
    missing = []
    for component in COMPONENTS:
        pages = COMPONENT_PAGES[component.__name__]
        text = "".join(page_text(built_site / "howto" / f"{page}.html") for page in pages)
        missing += [f"{component.__name__}.{name}" for name in sorted(mixin_traits(component))
                    if name not in text]
    assert missing == []


def test_every_option_the_pages_name_exists():
    classes = {"GPUBookingService": GPUBookingService, "GPUBookingSpawner": GPUBookingSpawner}
    classes.update({component.__name__: component for component in COMPONENTS})
    pattern = rf"\b({'|'.join(classes)})\.(\w+)"
    named = {
        (page.name, cls, name)
        for page in HAND_WRITTEN
        for cls, name in re.findall(pattern, page.read_text())
    }
    assert len(named) > 20
    unknown = [
        (page, cls, name)
        for page, cls, name in sorted(named)
        if name not in classes[cls].class_traits(config=True)
        and not callable(getattr(classes[cls], name, None))
    ]
    assert unknown == []


def test_every_route_the_pages_name_is_served():
    served = {normalise_route(template) for template in app_route_templates()}
    # a path after a slash is another server's (the Hub's, Prometheus') or a full URL
    named = {
        (page.name, route.rstrip(".,"))
        for page in HAND_WRITTEN
        for route in re.findall(r"(?<![\w/])api/[\w/{}.-]*\w\}?", page.read_text())
    }
    assert {"api/admin/report", "api/admin/holders", "api/flagged"} <= {r for _, r in named}
    assert [
        (page, route) for page, route in sorted(named) if normalise_route(route) not in served
    ] == []


def test_every_metric_the_pages_name_is_exposed():
    # names as Prometheus exposes them (a labelled counter has no sample before its first use)
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
    exposed = {
        metric.name + suffix
        for metric in ServiceMetrics().registry.collect()
        for suffix in suffixes.get(metric.type, [""])
    }
    named = {
        name
        for page in HAND_WRITTEN
        for name in re.findall(r"`(gpubooking_\w+)`", page.read_text())
    }
    assert "gpubooking_releases_total" in named
    assert sorted(named - exposed) == []


@pytest.mark.docs
def test_rest_api_page_comes_from_the_openapi_file(built_site):
    spec = yaml.safe_load((DOCS.parent / "jhub_gpubooking/service/openapi.yaml").read_text())
    page = (built_site / "reference" / "rest-api.html").read_text()
    assert [path for path in spec["paths"] if path not in page] == []
    # every route the service serves is on the page (from the spec, or described by hand)
    text = page_text(built_site / "reference" / "rest-api.html")
    assert [route for route in app_route_templates() if route not in text] == []


@pytest.mark.docs
def test_cli_and_metrics_pages_come_from_the_code(built_site):
    cli = page_text(built_site / "reference" / "cli.html")
    assert "jhub-gpubooking db upgrade" in cli
    assert "jhub-gpubooking db copy" in cli and "--from" in cli and "--to" in cli
    assert "jhub-gpubooking db downgrade" in cli
    assert "--upgrade-db" in cli
    metrics = (built_site / "reference" / "metrics.html").read_text()
    names = [metric.name for metric in ServiceMetrics().registry.collect()]
    assert names and [name for name in names if name not in metrics] == []


@pytest.mark.docs
def test_tutorial_shows_every_screenshot(built_site):
    tutorial = (built_site / "tutorial" / "demo.html").read_text()
    shots = sorted(path.name for path in (DOCS / "_static" / "screenshots").glob("*.png"))
    assert {"reservation-page.png", "chooser.png", "jupyterlab.png", "jupyterlab-booking.png"} <= set(shots)
    assert [name for name in shots if f'src="../_images/{name}"' not in tutorial] == []


@pytest.mark.docs
def test_every_page_is_built(built_site):
    sources = {p.relative_to(DOCS).with_suffix("") for p in DOCS.rglob("*.md")}
    sources = {s for s in sources if s.parts[0] not in {"_build", "_static"}}
    built = {p.relative_to(built_site).with_suffix("") for p in built_site.rglob("*.html")}
    assert sources <= built


def load_conf():
    spec = importlib.util.spec_from_file_location("docs_conf", DOCS / "conf.py")
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    return conf


def test_screenshot_is_a_figure_when_present_and_a_note_when_missing(tmp_path):
    conf = load_conf()
    (tmp_path / "chooser.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    assert conf.screenshot("chooser.png", "The chooser.", tmp_path) == (
        "```{figure} /_static/screenshots/chooser.png\n:alt: The chooser.\n\nThe chooser.\n```"
    )
    note = conf.screenshot("reservation-page.png", "The page.", tmp_path)
    assert note.startswith("```{note}") and "test-output/screenshots/" in note
