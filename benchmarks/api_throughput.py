"""Booking API throughput under 100 concurrent clients, next to the Hub's own ``GET api/user``.

Run from the repository root (a few minutes on 2 cores; ``--tiny`` takes under a minute)::

    python -m benchmarks.api_throughput [--clients 100] [--rounds 10]
                                        [--postgres-url URL] [--json results.json]

For each database (SQLite, and PostgreSQL when the server answers) the demo is started on free
ports (:class:`demo.launch.Demo`: simulated cluster, real JupyterHub and proxy, the booking
service managed by the Hub) and ``--clients`` users each get a Hub API token. Every round runs
four phases one after the other, each with all clients at once through the proxy: the Hub's
``GET {hub prefix}api/user``, then booking create, list (the user's upcoming bookings) and cancel
on the service. Client ``i`` books a quarter A100 for the ``i``-th hour from tomorrow on, so no
request is refused for capacity; every create still takes the pool lock. Reported per operation:
requests/s (completed requests / wall time of its phases), p50 and p99 latency, failures, and
create's throughput relative to the Hub's call (target >= 1.0x, p99 <= 50 ms). The clients run
on the same 2 cores as the Hub, the proxy and the service, so each phase also records the CPU
time every process used (the clients, the Hub, the proxy, the service, the simulated cluster):
per request, it shows which process the cores are spent in.

Then two create measurements that separate service time from queueing (issue 18 item 3):

- **unloaded**: creates one at a time (each cancelled again before the next), so none waits
  for another: the latency of a create when the service has nothing else to do;
- **open loop**: creates arriving at random (Poisson) times at half the rate the Hub answered
  ``GET api/user`` in the rounds above, whether or not earlier ones were answered, for
  ``--open-loop-rounds`` rounds of two creates per client (cancelled between rounds, not
  timed). Its latency minus the unloaded one is the time requests spent queueing.

The ``targets`` of ``--json``: per database, create's throughput relative to the Hub's call
(``create_vs_hub``, >= 1.0), the service's CPU per create and the Hub's per ``GET api/user``
(``create_cpu_ms``, ``hub_cpu_ms``: the first at most the second), and the open loop's p99
(``open_loop_p99_ms``, <= 50 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import secrets
import tempfile
import time
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import aiohttp
import psutil
from jupyterhub.utils import url_path_join
from sqlalchemy.engine import make_url

from demo.launch import Demo, free_ports
from jhub_gpubooking.core.timegrid import ceil_to_grid, format_time

from .common import (
    DEFAULT_POSTGRES_URL,
    benchmark_databases,
    markdown_table,
    percentile,
    print_machine,
    process_cpu_seconds,
    write_json,
)

HERE = Path(__file__).resolve().parent
#: The demo's Hub serves at the root of its URL; its API and services hang off these prefixes.
BASE_URL = "/"
HUB_PREFIX = url_path_join(BASE_URL, "hub/")
SERVICE_PREFIX = url_path_join(BASE_URL, "services", "gpu-booking/")
POOL = "a100"
OPERATIONS = ("hub GET api/user", "booking create", "booking list", "booking cancel")
TARGET_RATIO, TARGET_P99_MS = 1.0, 50.0
#: The open loop's arrival rate, as a share of the Hub's measured GET api/user rate.
OPEN_LOOP_LOAD = 0.5


#: The processes whose CPU time is recorded, as named in the tables ("database": the
#: PostgreSQL server processes serving the booking database; SQLite runs in the service).
PROCESSES = ("clients", "hub", "proxy", "service", "cluster", "database")


class CpuMeter:
    """CPU seconds used so far by each process of the demo and by the clients, and by the
    PostgreSQL backends connected to the booking database ``database`` (if any): the
    scheduler's nanosecond counters (:func:`.common.process_cpu_seconds`), since a phase of a
    few requests may use less than the kernel's 10 ms tick."""

    def __init__(self, demo: Demo, database: str | None = None):
        self.database = database
        self.backends: dict[int, psutil.Process] = {}
        hub = psutil.Process(demo.hub.pid)
        self.processes = {"clients": psutil.Process(), "hub": hub,
                          "cluster": psutil.Process(demo.cluster.pid)}
        for child in hub.children():
            command = " ".join(child.cmdline())
            if "configurable-http-proxy" in command:
                self.processes["proxy"] = child
            elif "jhub_gpubooking.service" in command:
                self.processes["service"] = child
        missing = set(PROCESSES) - set(self.processes) - {"database"}
        if missing:
            raise RuntimeError(f"demo processes not found: {', '.join(sorted(missing))}")

    def seconds(self) -> dict[str, float]:
        used = {name: process_cpu_seconds(process.pid) for name, process in self.processes.items()}
        used["database"] = self._database_seconds()
        return used

    def _database_seconds(self) -> float:
        """CPU of the server processes of the booking database: a backend's title names its
        database; one that exits between two readings takes its CPU with it (the service keeps
        its pooled connections, so that is rare)."""
        if self.database is None:
            return 0.0
        for process in psutil.process_iter(["name", "cmdline"]):
            if (process.pid not in self.backends and process.info["name"] == "postgres"
                    and self.database in " ".join(process.info["cmdline"] or ())):
                self.backends[process.pid] = process
        seconds = 0.0
        for pid, process in list(self.backends.items()):
            if not process.is_running():
                del self.backends[pid]
                continue
            seconds += process_cpu_seconds(pid)
        return seconds


@dataclass
class Phase:
    """Latencies (ms), wall time, failures and CPU time of one operation over all rounds."""

    latencies_ms: list[float] = field(default_factory=list)
    wall_seconds: float = 0.0
    failures: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    cpu_seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))


async def timed(phase: Phase, session: aiohttp.ClientSession, method: str, url: str,
                expected: int, **request) -> dict | None:
    """One request; its latency counts whatever the answer; returns the JSON if as expected."""
    began = time.perf_counter()
    try:
        async with session.request(method, url, **request) as response:
            body = await response.read()
    except aiohttp.ClientError as error:
        phase.failures[type(error).__name__] += 1
        return None
    phase.latencies_ms.append((time.perf_counter() - began) * 1000)
    if response.status != expected:
        phase.failures[f"HTTP {response.status}"] += 1
        return None
    return json.loads(body)


async def run_phase(phase: Phase, cpu: CpuMeter, requests) -> list[dict | None]:
    cpu_before, began = cpu.seconds(), time.perf_counter()
    results = await asyncio.gather(*requests)
    phase.wall_seconds += time.perf_counter() - began
    for name, seconds in cpu.seconds().items():
        phase.cpu_seconds[name] += seconds - cpu_before[name]
    return results


async def user_tokens(session: aiohttp.ClientSession, hub_api: str, admin_token: str,
                      clients: int) -> list[str]:
    """Create the benchmark users and one API token each, through the Hub's REST API."""
    names = [f"bench-{n:03d}" for n in range(clients)]
    headers = {"Authorization": f"token {admin_token}"}
    async with session.post(url_path_join(hub_api, "users"), json={"usernames": names},
                            headers=headers, raise_for_status=True):
        pass
    tokens = []
    for name in names:
        async with session.post(url_path_join(hub_api, "users", name, "tokens"),
                                json={"note": "api_throughput"}, headers=headers,
                                raise_for_status=True) as response:
            tokens.append((await response.json())["token"])
    return tokens


def create_body(tomorrow: datetime, client: int, half: int | None) -> dict:
    """Client ``client``'s quarter A100 for its own hour from tomorrow on (``half`` 0 or 1: the
    first or second half of that hour, so a client can hold two bookings at once)."""
    start = tomorrow + timedelta(hours=client, minutes=30 * (half or 0))
    length = timedelta(hours=1) if half is None else timedelta(minutes=30)
    return {"pool": POOL, "gpus": "1/4", "start": format_time(start),
            "end": format_time(start + length)}


async def cancel_all(session: aiohttp.ClientSession, bookings_url: str,
                     created: list[tuple[dict | None, dict]]) -> None:
    """Cancel the bookings (untimed: only keeps the clients within their booking limit)."""
    async def cancel(booking: dict, headers: dict) -> None:
        url = url_path_join(bookings_url, str(booking["id"]))
        async with session.delete(url, headers=headers, raise_for_status=True):
            pass

    await asyncio.gather(*(cancel(b, h) for b, h in created if b is not None))


async def measure_unloaded(session, cpu: CpuMeter, bookings_url: str, auth: list[dict],
                           tomorrow: datetime, count: int) -> Phase:
    """``count`` creates one after the other, each cancelled before the next is sent."""
    phase = Phase()
    for n in range(count):
        headers = auth[n % len(auth)]
        [booking] = await run_phase(phase, cpu, [
            timed(phase, session, "POST", bookings_url, 201, headers=headers,
                  json=create_body(tomorrow, n % len(auth), None))])
        await cancel_all(session, bookings_url, [(booking, headers)])
    return phase


async def measure_open_loop(session, cpu: CpuMeter, bookings_url: str, auth: list[dict],
                            tomorrow: datetime, rate: float, rounds: int) -> Phase:
    """Creates arriving at ``rate`` per second (Poisson), two per client and round."""
    phase, arrivals = Phase(), random.Random(18)
    loop = asyncio.get_running_loop()

    async def arrive(at: float, client: int, half: int):
        await asyncio.sleep(max(0.0, at - loop.time()))
        return await timed(phase, session, "POST", bookings_url, 201, headers=auth[client],
                           json=create_body(tomorrow, client, half))

    for _ in range(rounds):
        requests = [(i, half) for half in (0, 1) for i in range(len(auth))]
        at, scheduled = loop.time(), []
        for client, half in requests:
            at += arrivals.expovariate(rate)
            scheduled.append(arrive(at, client, half))
        created = await run_phase(phase, cpu, scheduled)
        await cancel_all(session, bookings_url,
                         [(b, auth[client]) for b, (client, _) in zip(created, requests)])
    return phase


async def measure(demo: Demo, clients: int, rounds: int, unloaded: int, open_loop_rounds: int,
                  database: str | None) -> tuple[dict[str, Phase], dict[str, Phase], float]:
    hub_url, admin_token, cpu = demo.hub_url, demo.admin_token, CpuMeter(demo, database)
    hub_api = url_path_join(hub_url, HUB_PREFIX, "api")
    bookings_url = url_path_join(hub_url, SERVICE_PREFIX, "api", "bookings")
    phases = {name: Phase() for name in OPERATIONS}
    tomorrow = ceil_to_grid(datetime.now(timezone.utc), 60) + timedelta(days=1)
    # aiohttp (a JupyterHub dependency) spends a fraction of httpx's CPU per request, and the
    # clients share the 2 cores with the servers they measure
    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tokens = await user_tokens(session, hub_api, admin_token, clients)
        auth = [{"Authorization": f"token {token}"} for token in tokens]
        for _ in range(rounds):
            phase = phases["hub GET api/user"]
            await run_phase(phase, cpu, [
                timed(phase, session, "GET", url_path_join(hub_api, "user"), 200, headers=h)
                for h in auth
            ])
            phase = phases["booking create"]
            created = await run_phase(phase, cpu, [
                timed(phase, session, "POST", bookings_url, 201, headers=h,
                      json=create_body(tomorrow, i, None))
                for i, h in enumerate(auth)
            ])
            phase = phases["booking list"]
            await run_phase(phase, cpu, [
                timed(phase, session, "GET", bookings_url, 200, headers=h,
                      params={"state": "upcoming"})
                for h in auth
            ])
            phase = phases["booking cancel"]
            await run_phase(phase, cpu, [
                timed(phase, session, "DELETE", url_path_join(bookings_url, str(booking["id"])),
                      200, headers=h)
                for booking, h in zip(created, auth) if booking is not None
            ])
        hub = phases["hub GET api/user"]
        rate = OPEN_LOOP_LOAD * len(hub.latencies_ms) / hub.wall_seconds
        load = {
            "unloaded create": await measure_unloaded(session, cpu, bookings_url, auth,
                                                      tomorrow, unloaded),
            "open-loop create": await measure_open_loop(session, cpu, bookings_url, auth,
                                                        tomorrow, rate, open_loop_rounds),
        }
    return phases, load, rate


def phase_summary(phase: Phase) -> dict:
    samples = phase.latencies_ms or [float("nan")]
    return {
        "requests": len(phase.latencies_ms),
        "requests_per_second": len(phase.latencies_ms) / phase.wall_seconds,
        "p50_ms": percentile(samples, 50), "p99_ms": percentile(samples, 99),
        "failures": dict(phase.failures),
        "cpu_ms_per_request": {name: phase.cpu_seconds[name] * 1000 / len(samples)
                               for name in PROCESSES},
        "cores_busy": sum(phase.cpu_seconds.values()) / phase.wall_seconds,
    }


def run_backend(backend: str, db_url: str, clients: int, rounds: int, unloaded: int,
                open_loop_rounds: int, log_dir: Path) -> dict:
    admin_token = secrets.token_hex(32)
    hub, proxy_api, service, public, k8s = free_ports(5)
    ports = {"DEMO_HUB_PORT": str(hub), "DEMO_PROXY_API_PORT": str(proxy_api),
             "DEMO_SERVICE_PORT": str(service)}
    with tempfile.TemporaryDirectory(prefix="gpub-throughput-") as state:
        demo = Demo(state_dir=Path(state), port=public, k8s_port=k8s,
                    admin_token=admin_token, hub_config=HERE / "hub_config.py",
                    extra_env={**ports, "BENCH_BOOKING_DB_URL": db_url},
                    log_dir=log_dir / backend)
        with demo:
            database = make_url(db_url).database if backend == "postgresql" else None
            phases, load, rate = asyncio.run(
                measure(demo, clients, rounds, unloaded, open_loop_rounds, database))
    result = {"backend": backend, "clients": clients, "rounds": rounds,
              "operations": {name: phase_summary(phase) for name, phase in phases.items()},
              "open_loop_rate": rate,
              "latency": {name: phase_summary(phase) for name, phase in load.items()}}
    operations, latency = result["operations"], result["latency"]
    result["create_vs_hub"] = (operations["booking create"]["requests_per_second"]
                               / operations["hub GET api/user"]["requests_per_second"])
    result["queueing_ms"] = {
        f"p{q}": latency["open-loop create"][f"p{q}_ms"] - latency["unloaded create"][f"p{q}_ms"]
        for q in (50, 99)
    }
    return result


def targets(results: list[dict]) -> dict:
    """Per database, the numbers issue 18 sets targets for."""
    def per_backend(value) -> dict:
        return {r["backend"]: value(r) for r in results}

    return {
        "create_vs_hub": per_backend(lambda r: r["create_vs_hub"]),
        "create_cpu_ms": per_backend(
            lambda r: r["operations"]["booking create"]["cpu_ms_per_request"]["service"]),
        "hub_cpu_ms": per_backend(
            lambda r: r["operations"]["hub GET api/user"]["cpu_ms_per_request"]["hub"]),
        "open_loop_p99_ms": per_backend(lambda r: r["latency"]["open-loop create"]["p99_ms"]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--unloaded", type=int, default=50,
                        help="creates sent one at a time (the latency without queueing)")
    parser.add_argument("--open-loop-rounds", type=int, default=5,
                        help="open-loop rounds, two creates per client each")
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL,
                        help="server for a throw-away booking database ('' to skip PostgreSQL)")
    parser.add_argument("--log-dir", default=None,
                        help="keep the Hub's and the cluster's logs here (default: discarded)")
    parser.add_argument("--tiny", action="store_true", help="5 clients, 2 rounds, SQLite only")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.tiny:
        args.clients, args.rounds, args.postgres_url = 5, 2, ""
        args.unloaded, args.open_loop_rounds = 4, 1
    print_machine()
    results = []
    with ExitStack() as stack:
        log_dir = Path(args.log_dir or stack.enter_context(tempfile.TemporaryDirectory()))
        for backend, urls in benchmark_databases(stack, args.postgres_url, ["booking"]).items():
            results.append(run_backend(backend, urls["booking"], args.clients, args.rounds,
                                       args.unloaded, args.open_loop_rounds, log_dir))
    print()
    print(markdown_table(
        ["backend", "operation", "requests", "req/s", "p50 ms", "p99 ms", "failures"],
        [[r["backend"], name, op["requests"], op["requests_per_second"], op["p50_ms"],
          op["p99_ms"], ", ".join(f"{k}: {v}" for k, v in op["failures"].items()) or "0"]
         for r in results for name, op in r["operations"].items()],
    ))
    print()
    print(markdown_table(
        ["backend", "operation", *(f"{name} CPU ms/req" for name in PROCESSES), "cores busy"],
        [[r["backend"], name, *(op["cpu_ms_per_request"][p] for p in PROCESSES), op["cores_busy"]]
         for r in results for name, op in r["operations"].items()],
    ))
    print()
    print(markdown_table(
        ["backend", "create", "requests", "arrivals/s", "p50 ms", "p99 ms", "failures",
         "service CPU ms/req"],
        [[r["backend"], name, op["requests"],
          r["open_loop_rate"] if name == "open-loop create" else "one at a time",
          op["p50_ms"], op["p99_ms"],
          ", ".join(f"{k}: {v}" for k, v in op["failures"].items()) or "0",
          op["cpu_ms_per_request"]["service"]]
         for r in results for name, op in r["latency"].items()],
    ))
    print()
    print(markdown_table(
        ["backend", "queueing p50 ms", "queueing p99 ms"],
        [[r["backend"], r["queueing_ms"]["p50"], r["queueing_ms"]["p99"]] for r in results],
    ))
    print()
    goals = targets(results)
    print(markdown_table(
        ["backend", "create / hub req/s", "target", "service CPU ms/create",
         "hub CPU ms/api/user", "target", "open-loop create p99 ms", "target"],
        [[backend, goals["create_vs_hub"][backend], f">= {TARGET_RATIO}",
          goals["create_cpu_ms"][backend], goals["hub_cpu_ms"][backend], "create <= hub",
          goals["open_loop_p99_ms"][backend], f"<= {TARGET_P99_MS:.0f}"]
         for backend in goals["create_vs_hub"]],
    ))
    write_json(args.json, {"results": results, "targets": goals})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
