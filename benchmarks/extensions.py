"""How many running bookings can be extended on a large, busy pool, and at what cost?

Run from the repository root (a few minutes; ``--tiny`` takes seconds)::

    python -m benchmarks.extensions [--upcoming 3000] [--running 200] [--postgres-url URL]
                                    [--json results.json]

The pool and its upcoming bookings are those of :mod:`benchmarks.busy_pool` (16 nodes x 8
GPUs x 4 slices, 3,000 upcoming bookings at random fitting places over eight days). Then
``--running`` bookings are made for the running slot ("book now", 30 minutes to 3 hours,
whatever fits), and each asks how far it may be extended (``largest_extension``, looking 7 days
ahead as the JupyterLab status does) and is then extended by 2 hours (``change_end``).

Everything runs twice on fresh databases: with extensions moving upcoming bookings off the
booking's GPUs (:mod:`jhub_gpubooking.core.extension_room`), and without (the move reach set
to 0, as before that rule). Reported per backend and run: extensions admitted without moves,
admitted by moving bookings, refused, and p50/p99 wall and CPU time of both calls.
"""

from __future__ import annotations

import argparse
import random
import time
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from unittest import mock

from sqlalchemy import func, select

from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.core.errors import BookingError
from jhub_gpubooking.db import unit_of_work
from jhub_gpubooking.db.models import BookingEventRow
from jhub_gpubooking.db.session import make_engine, make_session_factory, upgrade
from jhub_gpubooking.db.store import BookingStore

from .busy_pool import AMOUNTS, NOW, POOL, fill, upcoming_rows
from .common import (
    benchmark_databases,
    database_benchmark_arguments,
    markdown_table,
    percentile,
    print_machine,
    write_json,
)

EXTEND_BY = timedelta(hours=2)
LOOK_AHEAD = timedelta(days=7)


@contextmanager
def moves_allowed(allowed: bool):
    """Extensions move upcoming bookings (the service's rule), or never (reach 0)."""
    if allowed:
        yield
        return
    with mock.patch.object(unit_of_work, "EXTENSION_MOVE_REACH", timedelta(0)):
        yield


def moved_events(store: BookingStore) -> int:
    with store.read_transaction() as session:
        return session.execute(select(func.count()).select_from(BookingEventRow).where(
            BookingEventRow.kind == "moved")).scalar_one()


def timed(call, *args, **kwargs) -> tuple[object, float, float]:
    """``call(*args, **kwargs)``'s result (or the BookingError it raised), wall and CPU
    milliseconds."""
    began, began_cpu = time.perf_counter(), time.process_time()
    try:
        result = call(*args, **kwargs)
    except BookingError as refused:
        result = refused
    return (result, (time.perf_counter() - began) * 1000,
            (time.process_time() - began_cpu) * 1000)


def run(backend: str, url: str, rows: list[dict], running: int, seed: int, moves: bool) -> dict:
    upgrade(url)
    engine = make_engine(url)
    try:
        store = BookingStore(make_session_factory(engine), {POOL.name: POOL},
                             clock=ManualClock(NOW))
        store.sync_pools()
        fill(url, rows)
        rng = random.Random(seed + 2)
        booked = []
        for n in range(running):
            minutes = 15 * rng.randrange(2, 13)
            try:
                booked.append(store.create(f"runner-{n:03d}", POOL.name, rng.choice(AMOUNTS[:5]),
                                           NOW, NOW + timedelta(minutes=minutes)))
            except BookingError:
                pass
        samples: dict[str, list[float]] = {"check": [], "check_cpu": [], "extend": [],
                                           "extend_cpu": []}
        outcomes = {"plain": 0, "moved": 0, "refused": 0}
        with moves_allowed(moves):
            for booking in booked:
                _, wall, cpu = timed(store.largest_extension, booking.id, LOOK_AHEAD)
                samples["check"].append(wall)
                samples["check_cpu"].append(cpu)
                before = moved_events(store)
                result, wall, cpu = timed(store.change_end, booking.id, booking.end + EXTEND_BY,
                                          actor="bench")
                samples["extend"].append(wall)
                samples["extend_cpu"].append(cpu)
                if isinstance(result, BookingError):
                    outcomes["refused"] += 1
                else:
                    outcomes["moved" if moved_events(store) > before else "plain"] += 1
    finally:
        engine.dispose()
    return {"backend": backend, "moves": moves, "upcoming": len(rows), "running": len(booked),
            "extensions": outcomes,
            **{f"{name}_{q}": percentile(values, p) if values else None
               for name, values in samples.items() for q, p in (("p50", 50), ("p99", 99))}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upcoming", type=int, default=3_000, help="upcoming bookings")
    parser.add_argument("--running", type=int, default=200, help="running bookings to extend")
    database_benchmark_arguments(parser, tiny="300 upcoming bookings, 40 running ones")
    args = parser.parse_args(argv)
    if args.tiny:
        args.upcoming, args.running = 300, 40
    print_machine()
    rows = upcoming_rows(args.upcoming, args.seed)
    results = []
    with ExitStack() as stack:
        names = ["with_moves", "without_moves"]
        for backend, urls in benchmark_databases(stack, args.postgres_url, names).items():
            for moves in (True, False):
                url = urls["with_moves" if moves else "without_moves"]
                results.append(run(backend, url, rows, args.running, args.seed, moves))
    print()
    print(markdown_table(
        ["backend", "moves", "running", "extended", "by moving", "refused", "check p50 ms",
         "check p99 ms", "extend p50 ms", "extend p99 ms", "extend p50 CPU ms",
         "extend p99 CPU ms"],
        [[r["backend"], "yes" if r["moves"] else "no", r["running"],
          r["extensions"]["plain"] + r["extensions"]["moved"], r["extensions"]["moved"],
          r["extensions"]["refused"], r["check_p50"], r["check_p99"], r["extend_p50"],
          r["extend_p99"], r["extend_cpu_p50"], r["extend_cpu_p99"]] for r in results],
    ))
    write_json(args.json, {"extend_by_minutes": EXTEND_BY // timedelta(minutes=1),
                           "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
