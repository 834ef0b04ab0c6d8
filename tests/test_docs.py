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

from jhub_gpubooking.service.app import GPUBookingService
from jhub_gpubooking.service.metrics import ServiceMetrics
from jhub_gpubooking.spawner import GPUBookingSpawner

DOCS = Path(__file__).parents[1] / "docs"


@pytest.fixture(scope="module")
def built_site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("docs")
    build = subprocess.run(
        [
            sys.executable, "-m", "sphinx", "-W", "--keep-going", "-E", "-q",
            "-b", "html", "-d", str(out / "doctrees"), str(DOCS), str(out / "html"),
        ],
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
    """Configurable traits defined by the package's class itself (not inherited)."""
    return {name for name, trait in cls.class_traits(config=True).items() if trait.this_class is cls}


@pytest.mark.docs
def test_spawner_reference_lists_every_own_option(built_site):
    page = (built_site / "reference" / "spawner-config.html").read_text()
    options = own_config_traits(GPUBookingSpawner)
    assert {"booking_api_url", "booking_api_token", "deadline_grace_seconds"} <= options
    assert [name for name in sorted(options) if f"GPUBookingSpawner.{name}" not in page] == []
    # KubeSpawner's own options are linked, not repeated
    assert "GPUBookingSpawner.cpu_limit" not in page


@pytest.mark.docs
def test_service_reference_lists_every_own_option(built_site):
    page = (built_site / "reference" / "service-config.html").read_text()
    options = own_config_traits(GPUBookingService)
    assert {"db_url", "pools", "default_policy", "group_policies", "spawner_services"} <= options
    assert [name for name in sorted(options) if f"GPUBookingService.{name}" not in page] == []


@pytest.mark.docs
def test_rest_api_page_comes_from_the_openapi_file(built_site):
    spec = yaml.safe_load((DOCS.parent / "jhub_gpubooking/service/openapi.yaml").read_text())
    page = (built_site / "reference" / "rest-api.html").read_text()
    assert [path for path in spec["paths"] if path not in page] == []


@pytest.mark.docs
def test_cli_and_metrics_pages_come_from_the_code(built_site):
    cli = page_text(built_site / "reference" / "cli.html")
    assert "jhub-gpubooking db upgrade" in cli
    assert "--upgrade-db" in cli
    metrics = (built_site / "reference" / "metrics.html").read_text()
    names = [metric.name for metric in ServiceMetrics().registry.collect()]
    assert names and [name for name in names if name not in metrics] == []


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
