"""How long does upgrading a database full of history take (``upgrade_db`` at the service's
start, or ``jhub-gpubooking db upgrade``)?

Run from the repository root (a few minutes on 2 cores; ``--tiny`` takes seconds)::

    python -m benchmarks.migration [--sizes 10000,100000] [--postgres-url URL]
                                   [--json results.json]

For each backend (SQLite in a temporary file, and PostgreSQL when the server at
``--postgres-url`` answers) and each size, a database is created at the first schema revision
and filled with that many past bookings and their events (as in ``benchmarks.scaling``,
written through the tables as that revision has them); then it is upgraded to the newest
revision in one go, timed, and its rows are counted again. A semester of a lab is a few
thousand bookings.
"""

from __future__ import annotations

import argparse
import time
from contextlib import ExitStack

from sqlalchemy import MetaData, func, insert, select

from jhub_gpubooking.db.session import head_revision, make_engine, upgrade

from .common import (
    benchmark_databases,
    database_benchmark_arguments,
    markdown_table,
    print_machine,
    write_json,
)
from .scaling import INSERT_BATCH, NOW, POOL, history_rows

FIRST_REVISION = "0001"


def fill_first_revision(url: str, count: int, seed: int) -> float:
    """The database at the first revision with ``count`` past bookings; returns seconds."""
    began = time.perf_counter()
    upgrade(url, FIRST_REVISION)
    engine = make_engine(url)
    try:
        tables = MetaData()
        tables.reflect(engine, only=["pools", "bookings", "booking_events"])
        pools, bookings, events = (tables.tables[name] for name in
                                   ("pools", "bookings", "booking_events"))
        keep = {table.name: set(table.c.keys()) for table in (bookings, events)}
        rows = history_rows(count, seed)
        with engine.begin() as connection:
            connection.execute(insert(pools), [{
                "name": POOL.name, "synced_at": NOW,
                "config": {"name": POOL.name, "slices_per_gpu": POOL.slices_per_gpu,
                           "backend": POOL.backend, "nodes": dict(POOL.nodes)}}])
            next_id = 1
            while batch := [pair for _, pair in zip(range(INSERT_BATCH), rows)]:
                ids = range(next_id, next_id + len(batch))
                connection.execute(insert(bookings), [
                    {key: value for key, value in {**b, "id": i}.items() if key in keep["bookings"]}
                    for i, (b, _) in zip(ids, batch)])
                connection.execute(insert(events), [
                    {key: value for key, value in {**e, "booking_id": i}.items()
                     if key in keep["booking_events"]}
                    for i, (_, e) in zip(ids, batch)])
                next_id += len(batch)
    finally:
        engine.dispose()
    return time.perf_counter() - began


def count_rows(url: str) -> dict[str, int]:
    engine = make_engine(url)
    try:
        tables = MetaData()
        tables.reflect(engine, only=["bookings", "booking_events"])
        with engine.connect() as connection:
            # reflection adds the tables these refer to: count only the history itself
            return {name: connection.execute(
                        select(func.count()).select_from(tables.tables[name])).scalar_one()
                    for name in ("bookings", "booking_events")}
    finally:
        engine.dispose()


def run(backend: str, url: str, size: int, seed: int) -> dict:
    fill_seconds = fill_first_revision(url, size, seed)
    before = count_rows(url)
    began = time.perf_counter()
    reached = upgrade(url)
    seconds = time.perf_counter() - began
    after = count_rows(url)
    if after != before or reached != head_revision():
        raise SystemExit(f"{backend}, {size:,} bookings: the upgrade reached {reached} with "
                         f"rows {after} (before: {before})")
    return {"backend": backend, "bookings": size, "fill_seconds": fill_seconds,
            "upgrade_seconds": seconds, "from": FIRST_REVISION, "to": reached, "rows": after}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000",
                        help="past bookings, comma-separated, one database each")
    database_benchmark_arguments(parser, tiny="1,000 bookings")
    args = parser.parse_args(argv)
    sizes = [1_000] if args.tiny else [int(size) for size in args.sizes.split(",")]
    names = [f"history_{size}" for size in sizes]
    print_machine()
    results = []
    with ExitStack() as stack:
        for backend, urls in benchmark_databases(stack, args.postgres_url, names).items():
            for size, name in zip(sizes, names):
                results.append(run(backend, urls[name], size, args.seed))
    print()
    print(markdown_table(
        ["backend", "bookings", "events", "upgrade", "upgrade s", "fill s"],
        [[r["backend"], f"{r['bookings']:,}", f"{r['rows']['booking_events']:,}",
          f"{r['from']} -> {r['to']}", r["upgrade_seconds"], f"{r['fill_seconds']:.1f}"]
         for r in results],
    ))
    write_json(args.json, {"results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
