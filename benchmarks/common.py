"""What every benchmark script shares: Markdown tables, percentiles, the machine description
and the ``--json`` result file (read by the smoke test and pasted into docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

#: Packages whose versions decide the numbers, named in every machine description.
MEASURED_PACKAGES = (
    "jupyterhub", "jupyterhub-kubespawner", "SQLAlchemy", "tornado", "psycopg", "httpx", "aiohttp",
)

#: The PostgreSQL server the benchmarks create throw-away databases on (trust auth).
DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


#: The most refusals a ``--tiny`` replay (the smoke test) decides exactly.
TINY_EXACT_SAMPLE = 5


def exact_sample_size(requested: int, tiny: bool) -> int:
    """How many refusals a replay decides exactly: ``requested`` (0: all), at most
    :data:`TINY_EXACT_SAMPLE` for ``--tiny``, which must take seconds."""
    return min(requested or TINY_EXACT_SAMPLE, TINY_EXACT_SAMPLE) if tiny else requested


def run_jobs(function: Callable[..., Any], jobs: Sequence[tuple], processes: int) -> list[Any]:
    """``function(*job)`` for every job, in order; in up to ``processes`` separate processes
    when more than one (replays are CPU-bound Python, so threads would not overlap)."""
    if processes > 1 and len(jobs) > 1:
        # spawned, not forked: fork() copies a process whose other threads (a solver's, the
        # test runner's) may hold locks the child then waits on forever; Python 3.12 warns of
        # it, and 3.14 no longer forks by default
        with ProcessPoolExecutor(min(processes, len(jobs)),
                                 mp_context=multiprocessing.get_context("spawn")) as pool:
            return list(pool.map(function, *zip(*jobs)))
    return [function(*job) for job in jobs]


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


def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """A distribution-free confidence interval of the median: ``(low, high, coverage)``.

    Exact order statistics: for ``n`` sorted samples, ``[x_(k), x_(n-k+1)]`` holds the true
    median with probability ``1 - 2 P(B <= k - 1)``, ``B ~ Binomial(n, 1/2)``; ``k`` is the
    largest with at least ``confidence``. Too few samples for that give ``[min, max]`` and its
    smaller coverage, which the caller reports rather than hides.
    """
    ordered = sorted(samples)
    n = len(ordered)
    tail, k = 0.0, 0  # tail = P(B <= k - 1)
    while k + 1 <= (n + 1) // 2:
        next_tail = tail + math.comb(n, k) / 2**n
        if 1 - 2 * next_tail < confidence:
            break
        tail, k = next_tail, k + 1
    k = max(k, 1)
    coverage = 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n
    return ordered[k - 1], ordered[n - k], coverage


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


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far, over all its threads.

    Read from the scheduler's nanosecond counters (``/proc/PID/task/*/schedstat``), not from
    ``/proc/PID/stat``, whose clock ticks (10 ms) are coarser than one request; elsewhere (or
    without schedstat) psutil's ticks. Threads that have ended no longer count, so take
    differences over processes whose threads live on (thread pools, event loops)."""
    try:
        total = 0
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as schedstat:
                total += int(schedstat.read().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        times = psutil.Process(pid).cpu_times()
        return times.user + times.system


def write_json(path: str | None, results: dict[str, Any]) -> None:
    """Write ``results`` (plus the machine description) if ``--json PATH`` was given."""
    if not path:
        return
    payload = {"machine": machine_description(), "argv": sys.argv, **results}
    Path(path).write_text(json.dumps(payload, indent=2, default=str))


@contextmanager
def postgres_databases(server_url: str, names: list[str]) -> Iterator[dict[str, str]]:
    """Throw-away databases on the server, dropped on exit."""
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    created = {name: f"gpub_bench_{uuid.uuid4().hex[:10]}" for name in names}
    try:
        with admin.connect() as connection:
            for database in created.values():
                connection.execute(text(f"CREATE DATABASE {database}"))
        yield {name: make_url(server_url).set(database=database).render_as_string(False)
               for name, database in created.items()}
    finally:
        with admin.connect() as connection:
            for database in created.values():
                connection.execute(text(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)"))
        admin.dispose()


def database_benchmark_arguments(parser: argparse.ArgumentParser, tiny: str) -> None:
    """The options every benchmark on the booking database takes: where PostgreSQL is, the
    seed, ``--tiny`` (what it shrinks to: ``tiny``) and ``--json``."""
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL,
                        help="server to create throw-away databases on ('' to skip PostgreSQL)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tiny", action="store_true", help=tiny)
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")


def benchmark_databases(stack: ExitStack, postgres_url: str,
                        names: list[str]) -> dict[str, dict[str, str]]:
    """backend -> {name: URL} of new databases, dropped when ``stack`` closes: SQLite files in a
    temporary folder, and PostgreSQL databases when the server at ``postgres_url`` answers
    (``''`` skips it; why PostgreSQL is not measured is printed)."""
    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpub-bench-")))
    databases = {"sqlite": {name: f"sqlite:///{folder / name}.sqlite" for name in names}}
    reason = postgres_unreachable(postgres_url) if postgres_url else "skipped"
    if reason:
        print(f"PostgreSQL not measured: {reason}")
    else:
        databases["postgresql"] = stack.enter_context(postgres_databases(postgres_url, names))
    return databases


def postgres_unreachable(server_url: str) -> str | None:
    engine = create_engine(server_url, connect_args={"connect_timeout": 3})
    try:
        with engine.connect():
            return None
    except DBAPIError as error:
        return f"PostgreSQL at {server_url} unreachable: {error.orig}"
    finally:
        engine.dispose()
