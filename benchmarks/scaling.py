"""Does creating a booking slow down as history piles up?

Run from the repository root (a few minutes on 2 cores, most of it inserting history;
``--tiny`` takes seconds)::

    python -m benchmarks.scaling [--small 1000] [--large 1000000] [--creates 200]
                                 [--postgres-url URL] [--json results.json]

For each backend (SQLite in a temporary file, and PostgreSQL when the server at
``--postgres-url`` answers) two databases are migrated with Alembic and filled with
``--small`` and ``--large`` past bookings of 200 users over three years (one "created" event
each), inserted with SQLAlchemy Core in batches. Then ``--creates`` bookings are made through
:class:`jhub_gpubooking.db.store.BookingStore`, alternating between the two databases so both
see the same machine load, with a policy that reads the user's recent bookings (monthly budget,
cooldown). Reported: median and p99 create latency and the large/small median ratio (target
<= 1.2).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import datetime, timedelta, timezone
from fractions import Fraction

from sqlalchemy import Engine, func, insert, select, text

from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.core.model import Pool
from jhub_gpubooking.db.models import BookingEventRow, BookingRow
from jhub_gpubooking.db.session import make_engine, make_session_factory, upgrade
from jhub_gpubooking.db.store import BookingStore

from .common import (
    benchmark_databases,
    database_benchmark_arguments,
    markdown_table,
    percentile,
    print_machine,
    write_json,
)

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)
HISTORY_USERS = 200
HISTORY_DAYS = 3 * 365
INSERT_BATCH = 10_000
TARGET_RATIO = 1.2
POLICY = {"max_minutes": 8 * 60, "max_days_ahead": 60, "cooldown_minutes": 15,
          "budget_gpu_hours": 10_000, "budget_period": "month"}
POOL = Pool(name="a100", slices_per_gpu=4, backend="hami", nodes={"gpu-1": 8, "gpu-2": 8})


def history_rows(count: int, seed: int) -> Iterator[tuple[dict, dict]]:
    """(booking, its "created" event) for ``count`` bookings that all ended before NOW."""
    rng = random.Random(seed)
    nodes = list(POOL.nodes)
    for _ in range(count):
        start = NOW - timedelta(minutes=15 * rng.randrange(96, HISTORY_DAYS * 96))
        end = start + timedelta(minutes=15 * rng.randrange(1, 33))
        whole = rng.random() < 0.5
        gpus = rng.choice((1, 2)) if whole else 1
        amount = Fraction(gpus) if whole else Fraction(rng.choice((1, 2, 3)), 4)
        first_gpu = rng.randrange(0, 8 - gpus + 1)
        booking = {
            "user": f"user-{rng.randrange(HISTORY_USERS):03d}", "pool": POOL.name,
            "slices": int(amount * 4), "amount_num": amount.numerator,
            "amount_den": amount.denominator, "start": start, "end": end,
            "status": "cancelled" if rng.random() < 0.05 else "booked", "note": "",
            "node": rng.choice(nodes), "gpu_indices": list(range(first_gpu, first_gpu + gpus)),
            "slices_per_gpu_held": 4 if whole else int(amount * 4), "server": None,
            "claimed_at": None, "created": start - timedelta(hours=1), "updated": start,
        }
        yield booking, {"at": booking["created"], "actor": booking["user"], "kind": "created",
                        "detail": {"gpus": str(amount)}}


def fill_history(url: str, count: int, seed: int) -> float:
    """Insert ``count`` past bookings with SQLAlchemy Core; returns the seconds it took."""
    began = time.perf_counter()
    engine = make_engine(url)
    bookings, events = BookingRow.__table__, BookingEventRow.__table__
    try:
        rows = history_rows(count, seed)
        with engine.begin() as connection:
            next_id = connection.execute(
                select(func.coalesce(func.max(bookings.c.id), 0) + 1)).scalar_one()
            while batch := [pair for _, pair in zip(range(INSERT_BATCH), rows)]:
                # explicit ids let the events point at their bookings without a round trip each
                ids = range(next_id, next_id + len(batch))
                connection.execute(insert(bookings), [{**b, "id": i} for i, (b, _) in zip(ids, batch)])
                connection.execute(insert(events), [{**e, "booking_id": i}
                                                    for i, (_, e) in zip(ids, batch)])
                next_id += len(batch)
            if engine.dialect.name == "postgresql":
                # the explicit ids bypassed the sequence: move it past them
                connection.execute(text(
                    "SELECT setval(pg_get_serial_sequence('bookings', 'id'), max(id)) FROM bookings"))
                connection.execute(text(
                    "SELECT setval(pg_get_serial_sequence('booking_events', 'id'), max(id)) "
                    "FROM booking_events"))
            connection.execute(text("ANALYZE"))
    finally:
        engine.dispose()
    return time.perf_counter() - began


def open_store(engine: Engine) -> BookingStore:
    store = BookingStore(make_session_factory(engine), {POOL.name: POOL},
                         default_policy=POLICY, clock=ManualClock(NOW))
    store.sync_pools()
    return store


def measure_creates(stores: dict[str, BookingStore], creates: int) -> dict[str, list[float]]:
    """Create latencies (ms) per store, alternating between the stores request by request."""
    latencies: dict[str, list[float]] = {name: [] for name in stores}
    for n in range(creates):
        # a quarter GPU for an hour, a new hour each time: never refused for capacity
        start = NOW + timedelta(hours=1 + n)
        user = f"user-{n % HISTORY_USERS:03d}"
        for name, store in stores.items():
            began = time.perf_counter()
            store.create(user, POOL.name, Fraction(1, 4), start, start + timedelta(hours=1))
            latencies[name].append((time.perf_counter() - began) * 1000)
    return latencies


def run_backend(backend: str, urls: dict[str, str], sizes: dict[str, int], creates: int,
                seed: int) -> dict:
    engines = {name: make_engine(url) for name, url in urls.items()}
    try:
        stores, fill_seconds = {}, {}
        for name, url in urls.items():
            upgrade(url)
            stores[name] = open_store(engines[name])  # the pool row the history points at
            fill_seconds[name] = fill_history(url, sizes[name], seed)
        latencies = measure_creates(stores, creates)
    finally:
        for engine in engines.values():
            engine.dispose()
    result = {"backend": backend, "sizes": sizes, "fill_seconds": fill_seconds}
    for name, samples in latencies.items():
        result[name] = {"median_ms": percentile(samples, 50), "p99_ms": percentile(samples, 99),
                        "creates": len(samples)}
    result["median_ratio"] = result["large"]["median_ms"] / result["small"]["median_ms"]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=1_000, help="past bookings, small database")
    parser.add_argument("--large", type=int, default=1_000_000, help="past bookings, large one")
    parser.add_argument("--creates", type=int, default=200, help="timed creates per database")
    database_benchmark_arguments(parser, tiny="100 vs 1,000 bookings, 20 creates")
    args = parser.parse_args(argv)
    if args.tiny:
        args.small, args.large, args.creates = 100, 1_000, 20
    sizes = {"small": args.small, "large": args.large}
    print_machine()
    results = []
    with ExitStack() as stack:
        for backend, urls in benchmark_databases(stack, args.postgres_url, list(sizes)).items():
            results.append(run_backend(backend, urls, sizes, args.creates, args.seed))
    print()
    print(markdown_table(
        ["backend", "history", "fill s", "create p50 ms", "create p99 ms", "p50 ratio", "target"],
        [[r["backend"], f"{r['sizes'][name]:,}", f"{r['fill_seconds'][name]:.1f}",
          r[name]["median_ms"], r[name]["p99_ms"],
          r["median_ratio"] if name == "large" else "", f"<= {TARGET_RATIO}" if name == "large"
          else ""]
         for r in results for name in ("small", "large")],
    ))
    write_json(args.json, {"results": results, "target_ratio": TARGET_RATIO})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
