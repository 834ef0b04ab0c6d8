"""What one booking create, and one listing, cost the service itself: in one process, no Hub.

Run from the repository root (a minute on 2 cores; ``--tiny`` takes seconds)::

    python -m benchmarks.create_cost [--creates 300] [--history 10000]
                                     [--postgres-url URL] [--profile N] [--json results.json]

The booking service (:class:`GPUBookingService`, with the demo's pools and policies) serves on a
free port of this process, with a tiny stand-in for the Hub's ``GET api/user`` (the service's
``HubAuth`` asks it once per token, then answers from its cache, as against a real Hub). A
client process sends the requests one at a time over one keep-alive connection, so the CPU time
this process uses per request is the service's own cost of it (CPU time of the process,
``time.process_time``): the HTTP parsing, the Hub identity, the handler, the database work in
the executor thread, the JSON answer.

Measured, per database (SQLite in a temporary file, PostgreSQL when the server answers):

- **create**: ``POST api/bookings``, each for another hour, so none is refused; with the SQL
  statements the service sent per create (SQLAlchemy's ``before_cursor_execute``; the COMMIT
  and the pool's connection ping are not counted);
- **list**: the user's ``GET api/bookings`` as the booking page asks for it (``start`` = now)
  and as the Hub's spawner asks for it (``state=upcoming``), and the whole list's first page
  (no filter, ``limit=10``), once with 10 past bookings and once with ``--history`` past
  bookings of the same user (target: at most 2x).

Then where a create's CPU goes, without HTTP or without the database:

- **request floor**: an authenticated ``GET api/pools`` (no database work) sent the same way,
  one per exchange: the HTTP parsing, the cached Hub identity, the JSON answer and the
  harness's own exchange, which a create pays as well;
- **store create**: ``BookingStore.create`` called in this process (no HTTP, no executor): the
  database work, from validation to commit (on SQLite the database's own CPU is in it; a
  server's is not);
- **store, K per transaction**: ``--together`` creates of different users written by
  ``BookingStore.create_all`` in one transaction, against the same creates one transaction
  each: what the service saves per create when creates queue for the database together (its
  create queue).

``--profile N`` prints the N functions of the creates with the most CPU time of their own
(cProfile, CPU clock), twice: the event loop's thread (HTTP, identity, handler, JSON), where
the executor's database work shows up as time in ``epoll``'s poll while the loop waits for it,
then the executor threads (each task under its own profiler, the thread's CPU clock).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import http.client
import json
import multiprocessing
import pstats
import threading
import time
from contextlib import ExitStack
from datetime import datetime, timedelta, timezone
from pathlib import Path

from sqlalchemy import event, insert
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.ioloop import IOLoop
from tornado.netutil import bind_sockets
from traitlets.config import PyFileConfigLoader

from jhub_gpubooking.core.model import Booking
from jhub_gpubooking.core.timegrid import ceil_to_grid, format_time
from jhub_gpubooking.db.models import BookingRow
from jhub_gpubooking.service.app import GPUBookingService

from .common import (
    DEFAULT_POSTGRES_URL,
    benchmark_databases,
    markdown_table,
    percentile,
    print_machine,
    write_json,
)

HERE = Path(__file__).resolve().parent
PREFIX = "/services/gpu-booking/"
SERVICE_NAME = "gpu-booking"
USER = "bench-user"
TOKEN = "bench-user-token"
POOL = "a100"
TARGET_LIST_RATIO = 2.0
#: Creates go to one of this many hours from tomorrow on (the demo's policy books a week ahead)
CREATE_HOURS = 24 * 5
#: The listings the booking page and the Hub's spawner ask for (the target applies to them).
CLIENT_LISTS = ("page (start=now)", "spawner (state=upcoming)")


class FakeHubUser(web.RequestHandler):
    """The Hub's ``GET api/user``: the one benchmark user, allowed to access the service."""

    def get(self) -> None:
        if self.request.headers.get("Authorization") != f"token {TOKEN}":
            raise web.HTTPError(403)
        self.finish({"kind": "user", "name": USER, "admin": False, "groups": [],
                     "scopes": [f"access:services!service={SERVICE_NAME}"]})


def demo_service_config():
    """The demo's service configuration (pools, policies), as the throughput benchmark uses."""
    loader = PyFileConfigLoader("gpubooking_config.py", path=str(HERE.parent / "demo"))
    return loader.load_config()


def run_client(port: int, connection) -> None:
    """Child process: for each list of (method, path, body) received, send the requests one by
    one and answer their (status, JSON body); stop at None."""
    client = http.client.HTTPConnection("127.0.0.1", port)
    headers = {"Authorization": f"token {TOKEN}", "Content-Type": "application/json"}
    while (requests := connection.recv()) is not None:
        answers = []
        for method, path, body in requests:
            client.request(method, path, body=json.dumps(body) if body else None,
                           headers=headers)
            response = client.getresponse()
            answers.append((response.status, json.loads(response.read() or b"null")))
        connection.send(answers)


class Harness:
    """The service and the stand-in Hub on free ports of this process's event loop, and the
    client process."""

    def __init__(self, db_url: str):
        hub_sockets = bind_sockets(0, "127.0.0.1")
        self.hub_server = HTTPServer(web.Application([(r"/hub/api/user", FakeHubUser)]))
        self.hub_server.add_sockets(hub_sockets)
        self.service = GPUBookingService(
            config=demo_service_config(), db_url=db_url, upgrade_db=True,
            hub_api_url=f"http://127.0.0.1:{hub_sockets[0].getsockname()[1]}/hub/api",
            api_token="service-token", service_name=SERVICE_NAME, service_prefix=PREFIX,
            # the benchmark's client writes faster than a person does
            write_rate_per_minute=1_000_000, write_burst=1_000_000,
        )
        self.service.setup()
        sockets = bind_sockets(0, "127.0.0.1")
        self.server = HTTPServer(self.service.tornado_app)
        self.server.add_sockets(sockets)
        #: SQL statements the service sent to the database (each a round trip on a server)
        self.statements = 0

        def count(*_args) -> None:
            self.statements += 1

        event.listen(self.service.db_engine, "before_cursor_execute", count)
        self.connection, child_end = multiprocessing.Pipe()
        self.client = multiprocessing.get_context("spawn").Process(
            target=run_client, args=(sockets[0].getsockname()[1], child_end), daemon=True)
        self.client.start()

    def close(self) -> None:
        self.connection.send(None)
        self.client.join()
        self.server.stop()
        self.hub_server.stop()
        self.service.executor.shutdown(wait=True)
        self.service.db_engine.dispose()

    def serve(self, requests: list[tuple[str, str, dict | None]],
              profile: cProfile.Profile | None = None) -> tuple[float, list]:
        """Serve ``requests`` sent by the client process: the CPU seconds this process used
        meanwhile, and the (status, body) answers."""
        loop = IOLoop.current()
        answers: list = []

        async def exchange() -> None:
            answered = asyncio.Event()
            fd = self.connection.fileno()
            loop.add_handler(fd, lambda *_: answered.set(), IOLoop.READ)
            try:
                self.connection.send(requests)
                await answered.wait()
            finally:
                loop.remove_handler(fd)
            answers.extend(self.connection.recv())

        if profile is not None:
            profile.enable()
        began = time.process_time()
        loop.run_sync(exchange, timeout=600)
        used = time.process_time() - began
        if profile is not None:
            profile.disable()
        return used, answers


class ExecutorProfile:
    """Profiles every task the service's executor runs while enabled: a profiler per worker
    thread (cProfile follows one thread), on that thread's CPU clock."""

    def __init__(self, executor):
        self.enabled = False
        self.profiles: list[cProfile.Profile] = []
        self._local = threading.local()
        submit = executor.submit

        def profiled_submit(function, *args, **kwargs):
            if not self.enabled:
                return submit(function, *args, **kwargs)
            return submit(self._run, function, *args, **kwargs)

        executor.submit = profiled_submit

    def _run(self, function, *args, **kwargs):
        profile = getattr(self._local, "profile", None)
        if profile is None:
            profile = self._local.profile = cProfile.Profile(time.thread_time)
            self.profiles.append(profile)
        profile.enable()
        try:
            return function(*args, **kwargs)
        finally:
            profile.disable()

    def print_stats(self, top: int) -> None:
        if self.profiles:
            stats = pstats.Stats(*self.profiles)
            stats.sort_stats("tottime").print_stats(top)


def request_floor(harness: Harness, requests: int) -> float:
    """Service CPU ms of an authenticated request without database work (``GET api/pools``),
    one per exchange, as the creates are sent."""
    used = 0.0
    for _ in range(requests):
        seconds, [(status, _)] = harness.serve([("GET", f"{PREFIX}api/pools", None)])
        if status != 200:
            raise RuntimeError(f"GET api/pools answered {status}")
        used += seconds
    return used * 1000 / requests


def store_costs(store, creates: int, together: int, first: datetime) -> dict[str, float]:
    """CPU ms per create at the store, in this process: ``store.create`` itself, then the
    same creates of ``together`` different users through ``store.create_all``, one per
    transaction and ``together`` per transaction. Every booking is cancelled again, untimed."""
    def requests() -> list:
        # within the demo policy's week ahead; each booking is cancelled before its hour recurs
        return [store.new_booking(f"{USER}-{n % together}", POOL, "1/4",
                                  first + timedelta(hours=n % CREATE_HOURS),
                                  first + timedelta(hours=n % CREATE_HOURS + 1))
                for n in range(creates)]

    def cancel(bookings) -> None:
        for booking in bookings:
            store.cancel(booking.id, booking.user)

    costs = {}
    used = 0.0
    for new in requests():
        request = new.request
        began = time.process_time()
        booking = store.create(request.user, POOL, request.amount, request.start, request.end)
        used += time.process_time() - began
        cancel([booking])
    costs["store create"] = used * 1000 / creates
    for name, size in (("one per transaction", 1), (f"{together} per transaction", together)):
        used = 0.0
        new = requests()
        for offset in range(0, creates, size):
            began = time.process_time()
            outcomes = store.create_all(new[offset:offset + size])
            used += time.process_time() - began
            if not all(isinstance(outcome, Booking) for outcome in outcomes):
                raise RuntimeError(f"a create was refused: {outcomes}")
            cancel(outcomes)
        costs[f"store, {name}"] = used * 1000 / creates
    return costs


def add_history(engine, count: int, now: datetime) -> None:
    """``count`` past quarter-GPU bookings of the user, one a day back from yesterday."""
    rows = []
    for n in range(count):
        start = (now - timedelta(days=n + 1)).replace(minute=0, second=0, microsecond=0)
        rows.append(dict(
            user=USER, pool=POOL, slices=1, amount_num=1, amount_den=4, start=start,
            end=start + timedelta(hours=1), status="booked", note="", node="gpu-a100-1",
            gpu_indices=[0], slices_per_gpu_held=1, server=None, claimed_at=None,
            created=start, updated=start, groups=[], opportunistic=False,
        ))
    with engine.begin() as connection:
        for offset in range(0, len(rows), 5000):
            connection.execute(insert(BookingRow), rows[offset:offset + 5000])


def measure_backend(backend: str, db_urls: dict[str, str], creates: int, history: int,
                    list_requests: int, profile_top: int, together: int) -> dict:
    now = datetime.now(timezone.utc)
    result: dict = {"backend": backend, "creates": creates, "history": history,
                    "together": together, "lists": {}}
    # creates: each the next hour from tomorrow; the demo's policy allows two bookings at a
    # time, so each create is followed by the cancel that keeps the user within it
    harness = Harness(db_urls["create"])
    try:
        tomorrow = ceil_to_grid(now, 60) + timedelta(days=1)
        bookings_path = f"{PREFIX}api/bookings"
        warm = [("GET", f"{PREFIX}api/pools", None)]
        harness.serve(warm)
        profile = cProfile.Profile(time.thread_time) if profile_top else None
        executor_profile = ExecutorProfile(harness.service.executor) if profile_top else None
        create_seconds = cancel_seconds = 0.0
        create_statements = 0
        latencies = []
        for n in range(creates):
            start = tomorrow + timedelta(hours=n % CREATE_HOURS)
            body = {"pool": POOL, "gpus": "1/4", "start": format_time(start),
                    "end": format_time(start + timedelta(hours=1))}
            began = time.perf_counter()
            statements_before = harness.statements
            if executor_profile is not None:
                executor_profile.enabled = True
            used, [(status, booking)] = harness.serve([("POST", bookings_path, body)], profile)
            if executor_profile is not None:
                executor_profile.enabled = False
            latencies.append((time.perf_counter() - began) * 1000)
            create_statements += harness.statements - statements_before
            if status != 201:
                raise RuntimeError(f"create answered {status}: {booking}")
            create_seconds += used
            # cancel it again (not profiled) so the next create is within max_bookings
            used, [(status, _)] = harness.serve(
                [("DELETE", f"{bookings_path}/{booking['id']}", None)])
            cancel_seconds += used
        result["create_cpu_ms"] = create_seconds * 1000 / creates
        result["cancel_cpu_ms"] = cancel_seconds * 1000 / creates
        result["create_statements"] = create_statements / creates
        result["request_floor_cpu_ms"] = request_floor(harness, creates)
        result["store_cpu_ms"] = store_costs(harness.service.store, creates, together,
                                             tomorrow + timedelta(hours=7))
        if profile is not None:
            print(f"{backend}: creates, the event loop's thread")
            pstats.Stats(profile).sort_stats("tottime").print_stats(profile_top)
            print(f"{backend}: creates, the executor's threads")
            executor_profile.print_stats(profile_top)
    finally:
        harness.close()
    for size, key in ((10, "small"), (history, "large")):
        harness = Harness(db_urls[key])
        try:
            add_history(harness.service.db_engine, size, now)
            since = format_time(now.replace(minute=0, second=0, microsecond=0))
            queries = {
                "page (start=now)": f"{PREFIX}api/bookings?user={USER}&start={since}",
                "spawner (state=upcoming)": f"{PREFIX}api/bookings?user={USER}&state=upcoming",
                "first page (limit=10)": f"{PREFIX}api/bookings?user={USER}&limit=10",
            }
            for name, path in queries.items():
                harness.serve([("GET", path, None)])  # warm up
                used, answers = harness.serve([("GET", path, None)] * list_requests)
                if {status for status, _ in answers} != {200}:
                    raise RuntimeError(f"list answered {answers[0]}")
                result["lists"].setdefault(name, {})[key] = used * 1000 / list_requests
        finally:
            harness.close()
    for cost in result["lists"].values():
        cost["ratio"] = cost["large"] / cost["small"]
    result["create_wall_p50_ms"] = percentile(latencies, 50)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--creates", type=int, default=300)
    parser.add_argument("--history", type=int, default=10_000,
                        help="past bookings of the user for the large listing")
    parser.add_argument("--lists", type=int, default=200, help="requests per listing measured")
    parser.add_argument("--postgres-url", default=DEFAULT_POSTGRES_URL,
                        help="server for throw-away databases ('' to skip PostgreSQL)")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="print the N functions of the creates with the most CPU time of "
                        "their own (cProfile; the event loop's thread)")
    parser.add_argument("--together", type=int, default=8, metavar="K",
                        help="creates per transaction for the group-commit comparison")
    parser.add_argument("--tiny", action="store_true",
                        help="10 creates, 200 past bookings, 10 lists, SQLite only")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.tiny:
        args.creates, args.history, args.lists, args.postgres_url = 10, 200, 10, ""
    print_machine()
    results = []
    with ExitStack() as stack:
        databases = benchmark_databases(stack, args.postgres_url, ["create", "small", "large"])
        for backend, urls in databases.items():
            results.append(measure_backend(backend, urls, args.creates, args.history,
                                           args.lists, args.profile, args.together))
    print()
    print(markdown_table(
        ["backend", "creates", "service CPU ms/create", "SQL statements/create",
         "service CPU ms/cancel", "create p50 ms"],
        [[r["backend"], r["creates"], r["create_cpu_ms"], r["create_statements"],
          r["cancel_cpu_ms"], r["create_wall_p50_ms"]] for r in results],
    ))
    print()
    print(markdown_table(
        ["backend", "service CPU ms/create", "request floor ms", "store create ms",
         "store, one per transaction ms", f"store, {args.together} per transaction ms",
         "saved per create ms"],
        [[r["backend"], r["create_cpu_ms"], r["request_floor_cpu_ms"], *(
            r["store_cpu_ms"][name] for name in
            ("store create", "store, one per transaction",
             f"store, {args.together} per transaction")),
          r["store_cpu_ms"]["store, one per transaction"]
          - r["store_cpu_ms"][f"store, {args.together} per transaction"]] for r in results],
    ))
    print()
    print(markdown_table(
        ["backend", "listing", "CPU ms, 10 past", f"CPU ms, {args.history:,} past", "ratio",
         "target"],
        [[r["backend"], name, cost["small"], cost["large"], cost["ratio"],
          f"<= {TARGET_LIST_RATIO}"] for r in results for name, cost in r["lists"].items()],
    ))
    write_json(args.json, {"results": results, "targets": {
        # the listings clients make: the booking page's and the spawner's
        "list_ratio": max(r["lists"][name]["ratio"] for r in results for name in CLIENT_LISTS),
        "create_cpu_ms": {r["backend"]: r["create_cpu_ms"] for r in results},
    }})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
