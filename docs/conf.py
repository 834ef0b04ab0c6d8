"""Sphinx configuration of the jhub-gpubooking documentation (MyST Markdown, pydata theme).

Reference pages are generated from the code: config options by autodoc_traits, the REST API
from the service's openapi.yaml, the CLI from its argparse parser and the metrics table from
the service's Prometheus registry.
"""

from __future__ import annotations

import os
from pathlib import Path

from prometheus_client import Counter, Histogram
from traitlets import TraitType

import jhub_gpubooking
from jhub_gpubooking.service.metrics import ServiceMetrics

DOCS = Path(__file__).parent
SCREENSHOT_DIR = DOCS / "_static" / "screenshots"

# The CLI's --db-url default is read from the environment when its parser is built; a URL with
# a password must never end up in the published pages.
os.environ.pop("GPUBOOKING_DB_URL", None)

project = "jhub-gpubooking"
author = "jhub-gpubooking contributors"
copyright = "jhub-gpubooking contributors"
release = version = jhub_gpubooking.__version__

extensions = [
    "myst_parser",
    "autodoc_traits",
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "sphinxcontrib.openapi",
    "sphinxarg.ext",
]
myst_enable_extensions = ["colon_fence", "deflist", "substitution"]
myst_heading_anchors = 3
# keep "--option" as typed: the CLI pages show command-line flags
smartquotes_action = "qe"
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_static"]
root_doc = "index"

html_theme = "pydata_sphinx_theme"
html_title = "jhub-gpubooking"
html_static_path = ["_static"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}

# No intersphinx inventories are fetched (the build must work offline); links to other
# projects are plain URLs.
intersphinx_mapping: dict = {}
autodoc_typehints = "none"
# KubeSpawner's own docstrings are not ours to fix; only our own pages must be warning-free.
suppress_warnings = ["myst.xref_missing"]


# --- screenshots: optional, copied in from the browser tests' test-output/screenshots/ -----

SCREENSHOTS = {
    "reservation_page_screenshot": (
        "reservation-page.png",
        "The reservation page: pools, the week's timeline, the booking form and my bookings.",
    ),
    "chooser_screenshot": (
        "chooser.png",
        "The server chooser: GPU profiles are enabled only during one of the user's bookings.",
    ),
    "jupyterlab_screenshot": (
        "jupyterlab.png",
        "JupyterLab running on the booked GPU share, started from the A100 profile.",
    ),
    "spawn_waits_screenshot": (
        "spawn-waits.png",
        "The spawn page while a GPU start waits for a booking service the Hub is restarting.",
    ),
    "jupyterlab_booking_screenshot": (
        "jupyterlab-booking.png",
        "Inside JupyterLab: the booking's share and time left in the status bar, and the warning "
        "before its end with Extend and Open bookings.",
    ),
}


def screenshot(filename: str, caption: str, folder: Path = SCREENSHOT_DIR) -> str:
    """A figure when the screenshot is present, else a note, so a fresh clone still builds."""
    if (folder / filename).exists():
        return f"```{{figure}} /_static/screenshots/{filename}\n:alt: {caption}\n\n{caption}\n```"
    return (
        f"```{{note}}\nScreenshot `{filename}` is not in this build: the browser tests save it to "
        f"`test-output/screenshots/`; copy it to `docs/_static/screenshots/`.\n```"
    )


myst_substitutions = {key: screenshot(*value) for key, value in SCREENSHOTS.items()}


# --- metrics table: generated from the service's own registry -----------------------------


def metrics_table() -> str:
    """Markdown table of every metric ServiceMetrics registers, as Prometheus exposes it."""
    metrics = ServiceMetrics()
    suffixes = {Counter: ["_total"], Histogram: ["_bucket", "_sum", "_count"]}
    rows = []
    for collector in vars(metrics).values():
        if not hasattr(collector, "describe"):
            continue
        for metric in collector.describe():
            names = [metric.name + s for s in suffixes.get(type(collector), [""])]
            exposed = ", ".join(f"`{name}`" for name in names)
            rows.append(f"| {exposed} | {metric.type} | {metric.documentation} |")
    return "\n".join(["| metric | type | meaning |", "| --- | --- | --- |", *sorted(rows)])


myst_substitutions["metrics_table"] = metrics_table()


# --- jhub-gpubooking-service's command line: from the Application's aliases and flags ---------


def service_options_table() -> str:
    """Markdown table of the service's short command-line options."""
    from jhub_gpubooking.service.app import GPUBookingService

    rows = []
    for alias, target in GPUBookingService.aliases.items():
        cls_name, _, trait_name = target.rpartition(".")
        owner = GPUBookingService if cls_name == "GPUBookingService" else None
        help_text = owner.class_traits()[trait_name].help if owner else f"Sets `{target}`."
        rows.append(f"| `--{alias}=…` | {' '.join(help_text.split())} |")
    for flag, (_, help_text) in GPUBookingService.flags.items():
        rows.append(f"| `--{flag}` | {' '.join(help_text.split())} |")
    return "\n".join(["| option | meaning |", "| --- | --- |", *rows])


myst_substitutions["service_options_table"] = service_options_table()


# --- config reference: our own options only -----------------------------------------------


def skip_inherited_traits(app, what, name, obj, skip, options):
    """Leave out traits inherited from KubeSpawner / traitlets' Application.

    autodoc_traits lists every configurable trait, inherited ones included; those are
    documented by their own projects (linked from the pages), and their docstrings are not
    written for this site.
    """
    inherited = (
        isinstance(obj, TraitType)
        and obj.this_class is not None
        and not obj.this_class.__module__.startswith("jhub_gpubooking")
    )
    return True if inherited else None


def setup(app):
    app.connect("autodoc-skip-member", skip_inherited_traits)
