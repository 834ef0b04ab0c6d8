"""Spawn overhead of the booking gate: GPUBookingSpawner vs plain KubeSpawner, same pod.

Run from the repository root (about 30 minutes on 2 cores; ``--tiny`` about one)::

    python -m benchmarks.spawn_overhead [--spawns 60] [--gate-samples 10]
                                        [--log-dir DIR] [--json results.json]

One simulated cluster, two real Hubs on free ports (:class:`demo.launch.Demo`), identical but
for the spawner (``benchmarks/spawn_hub_config.py``): the *gated* Hub runs GPUBookingSpawner,
the *plain* Hub KubeSpawner whose A100 profile has the booked pod settings as static overrides.
The gated user holds a quarter-A100 booking made through the service. Each round is one pair:
a gated and a plain spawn, one right after the other (gated first on even rounds, plain first
on odd ones, after one warm-up round), so both see the same load; a spawn is timed from
``POST {hub prefix}api/users/{user}/server`` to the Hub's progress stream reporting the server
ready, and the server is stopped before the next one. The overhead is the median of the
per-pair ratios gated / plain with a distribution-free 95% confidence interval (exact order
statistics, :func:`benchmarks.common.median_ci`).

The gate's own latency is measured outside the Hub, in this process: a GPUBookingSpawner with
the gated Hub's own configuration (loaded from the same files) runs ``load_user_options``
against the running service (the claim request, then the booked share applied to the pod
settings), timed in the spawner's process around that call, and the claim is given back
through the service's client. ``--gate-samples`` of these run after every gated spawn, while
no server holds the booking. Around each of them the CPU time of three processes is taken too
(this one, i.e. the spawner's side, the booking service and the Hub, the last asked only when
the service's token cache has expired): per-process CPU holds on a machine shared with other
load, where wall times do not.

``--json`` writes the samples, the summary and a top-level ``targets`` object:
``gate_p99_ms``, ``gate_median_ms``, ``gate_cpu_ms`` (mean per gate, by process),
``spawn_median_ratio`` (median of the per-pair ratios), ``spawn_ratio_ci95``
(``[low, high]``) and the interval's exact coverage (below 95% only for very few pairs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import tempfile
import time
from contextlib import ExitStack
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import httpx
import psutil
from jupyterhub.objects import Hub
from jupyterhub.utils import url_path_join
from traitlets.config.loader import PyFileConfigLoader

from demo.launch import Demo, free_ports
from jhub_gpubooking.client import BookingClient
from jhub_gpubooking.core.timegrid import floor_to_grid, format_time

from .common import (
    markdown_table,
    median_ci,
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
#: Same-length names, so the two Hubs' pod names (jupyter-<user>) cost the same.
USERS = {"gated": "bench-gated", "plain": "bench-plain"}
PROFILE = "a100"
#: The demo's booking rules allow at most 8 hours; the whole run fits well inside.
BOOKING_HOURS = 8
TARGET_MEDIAN_RATIO, TARGET_GATE_P99_MS = 1.02, 10.0
READY_TIMEOUT_SECONDS = 120
#: Tries per timed spawn: a pod that never starts (e.g. the simulated kubelet lost its pod IP
#: to another test's cluster) is counted as a failure and the spawn tried again.
SPAWN_TRIES = 3


class SpawnFailed(RuntimeError):
    """The Hub gave up on a server (refused, or not ready in time)."""


class HubDriver:
    """Starts and stops one user's default server through a Hub's REST API, as a script would."""

    def __init__(self, client: httpx.AsyncClient, hub_url: str, user: str):
        self.client = client
        self.user = user
        self.user_api = url_path_join(hub_url, HUB_PREFIX, "api", "users", user)

    async def create_user(self) -> None:
        response = await self.client.post(self.user_api)
        if response.status_code not in (201, 409):  # 409: exists already
            response.raise_for_status()

    async def timed_spawn(self) -> float:
        """Seconds from the start request to the Hub calling the server ready."""
        began = time.perf_counter()
        response = await self.client.post(url_path_join(self.user_api, "server"),
                                          json={"profile": PROFILE})
        if response.status_code == 202:
            await self._wait_ready()
        elif response.status_code != 201:
            raise SpawnFailed(f"{self.user}: start refused: {response.status_code} {response.text}")
        return time.perf_counter() - began

    async def _wait_ready(self) -> None:
        # the progress stream ends with the "ready" event as soon as the Hub marks the server up
        url = url_path_join(self.user_api, "server", "progress")
        async with self.client.stream("GET", url, timeout=READY_TIMEOUT_SECONDS) as stream:
            stream.raise_for_status()
            async for line in stream.aiter_lines():
                if not line.startswith("data:"):
                    continue
                event = json.loads(line[len("data:"):])
                if event.get("ready"):
                    return
                if event.get("failed"):
                    raise SpawnFailed(f"{self.user}: start failed: {event.get('message')}")
        raise SpawnFailed(f"{self.user}: the progress stream ended before the server was ready")

    async def stop(self) -> None:
        response = await self.client.delete(url_path_join(self.user_api, "server"))
        if response.status_code not in (202, 204, 400):  # 400: not running (a failed start)
            response.raise_for_status()
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            model = (await self.client.get(self.user_api)).raise_for_status().json()
            if "" not in model["servers"]:
                return
            await asyncio.sleep(0.2)
        raise RuntimeError(f"{self.user}: server still running after {READY_TIMEOUT_SECONDS} s")


async def book_gated_user(client: httpx.AsyncClient, hub_url: str) -> int:
    """A quarter A100 for the gated user from the current slot on (booked by the admin)."""
    start = floor_to_grid(datetime.now(timezone.utc), 15)
    response = await client.post(url_path_join(hub_url, SERVICE_PREFIX, "api", "bookings"), json={
        "user": USERS["gated"], "pool": PROFILE, "gpus": "1/4", "start": format_time(start),
        "end": format_time(start + timedelta(hours=BOOKING_HOURS)),
    })
    response.raise_for_status()
    return response.json()["id"]


def gated_hub_spawner(demo: Demo):
    """A GPUBookingSpawner configured exactly as the gated Hub's (same config files, same env)."""
    saved_env = dict(os.environ)
    os.environ.update(demo.env())  # the config files read DEMO_*; KubeSpawner reads KUBECONFIG
    try:
        # imported only now: kubernetes_asyncio reads $KUBECONFIG once, when first imported
        # (and if something imported it earlier, point its default at this demo's kubeconfig)
        from kubernetes_asyncio.config import kube_config

        kube_config.KUBE_CONFIG_DEFAULT_LOCATION = os.environ["KUBECONFIG"]
        from jhub_gpubooking.spawner import GPUBookingSpawner

        config = PyFileConfigLoader(demo.hub_config.name, path=str(demo.hub_config.parent)).load_config()
        spawner = GPUBookingSpawner(
            config=config,
            hub=Hub(base_url=HUB_PREFIX),
            user=SimpleNamespace(name=USERS["gated"], id=1, escaped_name=USERS["gated"],
                                 url=url_path_join(BASE_URL, "user", USERS["gated"]), server=None),
            orm_spawner=SimpleNamespace(name="", display_name="", server=None),
            api_token=secrets.token_hex(16),
            oauth_client_id="gate-benchmark",
        )
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
    spawner.user_options = {"profile": PROFILE}
    # granting the server's token the service's scope writes the Hub's own database, which a
    # spawner built outside the Hub has not; the gate's service round trips are what is timed
    spawner.lab_access.enabled = False
    return spawner


class GateCpu:
    """CPU seconds the gate costs each process: this one (the spawner's side, all threads),
    the gated Hub's booking service and the Hub itself (asked only on a token cache miss)."""

    def __init__(self, demo: Demo):
        self.pids = {"hub": demo.hub.pid}
        for child in psutil.Process(demo.hub.pid).children():
            if "jhub_gpubooking.service" in " ".join(child.cmdline()):
                self.pids["service"] = child.pid
        if "service" not in self.pids:
            raise RuntimeError("the gated Hub's booking service process was not found")

    def seconds(self) -> dict[str, float]:
        used = {name: process_cpu_seconds(pid) for name, pid in self.pids.items()}
        used["spawner"] = time.process_time()
        return used


async def timed_gate(spawner, client: BookingClient, booking_id: int,
                     cpu: GateCpu) -> tuple[float, dict[str, float]]:
    """Seconds inside the booking check and the CPU seconds each process spent on it; the
    claim is given back afterwards (not counted)."""
    cpu_before = cpu.seconds()
    began = time.perf_counter()
    await spawner.load_user_options()
    seconds = time.perf_counter() - began
    cpu_after = cpu.seconds()
    await client.release(booking_id, spawner.user.name, spawner.name)
    return seconds, {name: cpu_after[name] - cpu_before[name] for name in cpu_after}


async def spawn_and_stop(driver: HubDriver, failures: list[str]) -> float:
    """Seconds of one successful spawn (the server is stopped again); failed tries are noted."""
    for _ in range(SPAWN_TRIES):
        try:
            seconds = await driver.timed_spawn()
        except SpawnFailed as failed:
            failures.append(str(failed))
            await driver.stop()
            continue
        await driver.stop()
        return seconds
    raise SpawnFailed(f"{driver.user}: {SPAWN_TRIES} spawns in a row failed: {failures[-1]}")


async def measure(gated: Demo, plain: Demo, spawns: int, gate_samples: int) -> dict[str, list]:
    headers = {"Authorization": f"token {gated.admin_token}"}
    samples: dict[str, list] = {"gated": [], "plain": [], "gate": [], "failures": [],
                                "gate_cpu": []}
    async with httpx.AsyncClient(headers=headers, timeout=60) as client:
        drivers = {"gated": HubDriver(client, gated.hub_url, USERS["gated"]),
                   "plain": HubDriver(client, plain.hub_url, USERS["plain"])}
        for driver in drivers.values():
            await driver.create_user()
        booking_id = await book_gated_user(client, gated.hub_url)
        spawner = gated_hub_spawner(gated)
        cpu = GateCpu(gated)
        booking_client = BookingClient(
            spawner.booking_api_url, spawner.booking_api_token,
            request_timeout=spawner.booking_request_timeout,
            connect_timeout=spawner.booking_connect_timeout,
        )
        for round_number in range(-1, spawns):  # round -1 warms both Hubs up, uncounted
            order = ("gated", "plain") if round_number % 2 == 0 else ("plain", "gated")
            for kind in order:
                seconds = await spawn_and_stop(drivers[kind], samples["failures"])
                if round_number >= 0:
                    samples[kind].append(seconds)
                if kind == "gated":
                    for _ in range(gate_samples):
                        seconds, cpu_seconds = await timed_gate(spawner, booking_client,
                                                                booking_id, cpu)
                        samples["gate"].append(seconds)
                        samples["gate_cpu"].append(cpu_seconds)
    return samples


def start_hubs(stack: ExitStack, log_dir: Path) -> tuple[Demo, Demo]:
    """The cluster and the gated Hub, then the plain Hub on the same cluster (stopped first)."""
    admin_token = secrets.token_hex(32)

    def demo(kind: str, state: Path, **env: str) -> Demo:
        hub, proxy_api, service, public = free_ports(4)
        ports = {"DEMO_HUB_PORT": str(hub), "DEMO_PROXY_API_PORT": str(proxy_api),
                 "DEMO_SERVICE_PORT": str(service)}
        return Demo(state_dir=state, port=public, k8s_port=k8s_port,
                    admin_token=admin_token, hub_config=HERE / "spawn_hub_config.py",
                    extra_env={**ports, "BENCH_SPAWNER": kind, **env}, log_dir=log_dir / kind)

    (k8s_port,) = free_ports(1)
    states = [Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"gpub-spawn-{kind}-")))
              for kind in ("gated", "plain")]
    gated = stack.enter_context(demo("gated", states[0]))
    plain = demo("plain", states[1], KUBECONFIG=str(gated.kubeconfig))
    plain.state_dir.mkdir(parents=True, exist_ok=True)
    stack.callback(plain.stop)
    plain.start_hub()
    return gated, plain


def summarize(samples: dict[str, list]) -> dict:
    ms = {kind: [s * 1000 for s in samples[kind]] for kind in ("gated", "plain", "gate")}
    result = {kind: {"samples": len(values), "median_ms": statistics.median(values),
                     "p99_ms": percentile(values, 99), "min_ms": min(values),
                     "max_ms": max(values)}
              for kind, values in ms.items()}
    result["median_ratio"] = result["gated"]["median_ms"] / result["plain"]["median_ms"]
    result["p99_ratio"] = result["gated"]["p99_ms"] / result["plain"]["p99_ms"]
    # the i-th gated and plain spawns ran in the same round, one right after the other
    ratios = [gated / plain for gated, plain in zip(samples["gated"], samples["plain"])]
    low, high, coverage = median_ci(ratios)
    result["pair_ratios"] = ratios
    result["pair_median_ratio"] = statistics.median(ratios)
    result["pair_ratio_ci"] = {"low": low, "high": high, "coverage": coverage}
    result["failed_spawns"] = samples["failures"]
    # CPU is robust against the other load of a shared machine, where wall times are not
    result["gate_cpu_ms"] = {
        name: 1000 * statistics.fmean(sample[name] for sample in samples["gate_cpu"])
        for name in ("spawner", "service", "hub")
    }
    result["targets"] = {
        "gate_p99_ms": result["gate"]["p99_ms"],
        "gate_median_ms": result["gate"]["median_ms"],
        "gate_cpu_ms": result["gate_cpu_ms"],
        "spawn_median_ratio": result["pair_median_ratio"],
        "spawn_ratio_ci95": [low, high],
        "spawn_ratio_ci_coverage": coverage,
        "target_gate_p99_ms": TARGET_GATE_P99_MS,
        "target_spawn_median_ratio": TARGET_MEDIAN_RATIO,
    }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spawns", type=int, default=60,
                        help="timed pairs (one gated and one plain spawn each)")
    parser.add_argument("--gate-samples", type=int, default=10,
                        help="gate measurements after every gated spawn")
    parser.add_argument("--log-dir", default=None,
                        help="keep the Hubs' and the cluster's logs here (default: discarded)")
    parser.add_argument("--tiny", action="store_true", help="2 pairs, 3 gate samples")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.tiny:
        args.spawns, args.gate_samples = 2, 3
    print_machine()
    with ExitStack() as stack:
        log_dir = Path(args.log_dir or stack.enter_context(tempfile.TemporaryDirectory()))
        gated, plain = start_hubs(stack, log_dir)
        samples = asyncio.run(measure(gated, plain, args.spawns, args.gate_samples))
    result = summarize(samples)
    ci = result["pair_ratio_ci"]
    names = {"gated": "spawn, GPUBookingSpawner", "plain": "spawn, KubeSpawner",
             "gate": "gate (load_user_options)"}
    print()
    print(markdown_table(
        ["measure", "samples", "median ms", "p99 ms", "min ms", "max ms"],
        [[names[kind], r["samples"], r["median_ms"], r["p99_ms"], r["min_ms"], r["max_ms"]]
         for kind, r in ((kind, result[kind]) for kind in names)],
    ))
    print()
    print(markdown_table(
        ["measure", "result", "target"],
        [["spawn, median of pair ratios gated / plain", result["pair_median_ratio"],
          f"<= {TARGET_MEDIAN_RATIO}"],
         [f"  its {ci['coverage']:.1%} confidence interval (exact)",
          f"{ci['low']:.3f} - {ci['high']:.3f}", ""],
         ["spawn median gated / median plain", result["median_ratio"], ""],
         ["spawn p99, gated / plain", result["p99_ratio"], ""],
         ["gate p99 ms", result["gate"]["p99_ms"], f"<= {TARGET_GATE_P99_MS:.0f}"]],
    ))
    print()
    print(markdown_table(
        ["gate CPU per load_user_options", "spawner (this process) ms", "service ms", "Hub ms"],
        [["mean over the samples", *(result["gate_cpu_ms"][name]
                                     for name in ("spawner", "service", "hub"))]],
    ))
    for failure in result["failed_spawns"]:
        print(f"failed spawn (tried again): {failure}")
    write_json(args.json, {"spawns": args.spawns, "gate_samples_per_spawn": args.gate_samples,
                           "samples_ms": {k: [s * 1000 for s in samples[k]]
                                          for k in ("gated", "plain", "gate")},
                           **result})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
