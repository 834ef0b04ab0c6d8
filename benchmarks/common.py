"""What every benchmark script shares: Markdown tables, percentiles, the machine description
and the ``--json`` result file (read by the smoke test and pasted into docs/benchmarks.md)."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Sequence

#: Packages whose versions decide the numbers, named in every machine description.
MEASURED_PACKAGES = (
    "jupyterhub", "jupyterhub-kubespawner", "SQLAlchemy", "tornado", "psycopg", "httpx",
)


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GitHub-style table, so a script's output can be pasted into the docs as is."""
    cells = [[str(h) for h in headers]] + [[_cell(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:,.1f}"
    return str(value)


def percentile(samples: Sequence[float], percent: int) -> float:
    """The ``percent``-th percentile (inclusive method: stays within the observed range)."""
    if len(samples) == 1:
        return float(samples[0])
    return statistics.quantiles(samples, n=100, method="inclusive")[percent - 1]


def machine_description() -> dict[str, Any]:
    """Cores, memory, Python and the versions of the packages that matter for the numbers."""
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    versions = {}
    for name in MEASURED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(memory_gib, 1),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "packages": versions,
    }


def print_machine() -> None:
    machine = machine_description()
    packages = ", ".join(f"{name} {version}" for name, version in machine["packages"].items())
    print(
        f"Machine: {machine['cpus']} CPUs, {machine['memory_gib']} GiB, Python "
        f"{machine['python']} on {machine['platform']}; {packages}"
    )


def write_json(path: str | None, results: dict[str, Any]) -> None:
    """Write ``results`` (plus the machine description) if ``--json PATH`` was given."""
    if not path:
        return
    payload = {"machine": machine_description(), "argv": sys.argv, **results}
    Path(path).write_text(json.dumps(payload, indent=2, default=str))
