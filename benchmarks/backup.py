"""How long does ``jhub-gpubooking db backup`` take on a database full of history, and does it
hold up the service's bookings while it runs, beside the service or inside it?

Run from the repository root (a couple of minutes on 2 cores; ``--tiny`` takes seconds)::

    python -m benchmarks.backup [--history 100000] [--creates 200]
                                [--postgres-url URL] [--json results.json]

For each backend (SQLite in a temporary file, and PostgreSQL when the server at
``--postgres-url`` answers) a database is migrated and filled with ``--history`` past bookings
and their events (as in ``benchmarks.scaling``). Then ``--creates`` bookings are made through
:class:`jhub_gpubooking.db.store.BookingStore` with no backup running, and again while backups
run one after another (each into a new file): in another process, as an admin's ``kubectl
exec`` runs beside the service, and in a thread of the creating process, as
``c.ScheduledBackups`` runs inside the service (sharing its Python interpreter). Reported: the
backup's duration (the whole command, or the call) and file size, and create latency without
and during backups; and how long a backup under way takes to end once the service is stopping
(``stop_seconds``: the stop is asked for halfway through a backup, as a SIGTERM would).
Last, ``jhub-gpubooking db restore`` of a backup taken before ``--creates`` more bookings
(``restore_seconds``: its own backup of the database first, the rows replaced and read back),
checked to have taken those bookings away and to give the next booking a new id.
"""

from __future__ import annotations

import argparse
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from datetime import timedelta
from fractions import Fraction
from pathlib import Path

from sqlalchemy import func, select

from jhub_gpubooking.core.backups import PARTIAL
from jhub_gpubooking.db.backup import backup_database
from jhub_gpubooking.db.copy import CopyStopped
from jhub_gpubooking.db.models import BookingRow
from jhub_gpubooking.db.restore import restore_database
from jhub_gpubooking.db.session import make_engine, upgrade

from .common import (
    benchmark_databases,
    database_benchmark_arguments,
    markdown_table,
    percentile,
    print_machine,
    write_json,
)
from .scaling import HISTORY_USERS, NOW, POOL, fill_history, open_store


def bookings_in(file: Path) -> int:
    connection = sqlite3.connect(file)
    try:
        return connection.execute("SELECT count(*) FROM bookings").fetchone()[0]
    finally:
        connection.close()


def timed_creates(store, creates: int, first_hour: int) -> list[float]:
    """Create latencies (ms): a quarter GPU for an hour, a new hour each time."""
    latencies = []
    for n in range(creates):
        start = NOW + timedelta(hours=first_hour + n)
        began = time.perf_counter()
        store.create(f"user-{n % HISTORY_USERS:03d}", POOL.name, Fraction(1, 4), start,
                     start + timedelta(hours=1))
        latencies.append((time.perf_counter() - began) * 1000)
    return latencies


#: where the backups run: beside the service (``kubectl exec``) or inside it (ScheduledBackups)
PLACES = ("another process", "a thread of the service")


def back_up(place: str, url: str, file: Path) -> None:
    if place == "another process":
        subprocess.run([sys.executable, "-m", "jhub_gpubooking.cli", "db", "backup", str(file),
                        "--db-url", url], check=True, capture_output=True)
    else:
        backup_database(url, file)


def creates_during_backups(store, place: str, url: str, creates: int, first_hour: int,
                           folder: Path) -> tuple[list[float], list[tuple[float, int, int]]]:
    """Create latencies while backups run one after another at ``place``, and the backups'
    (seconds, bytes, bookings)."""
    backups: list[tuple[float, int, int]] = []
    done = threading.Event()

    def back_up_until_done() -> None:
        while not done.is_set() or not backups:
            file = folder / f"backup-{len(backups)}.sqlite"
            began = time.perf_counter()
            back_up(place, url, file)
            seconds = time.perf_counter() - began
            backups.append((seconds, file.stat().st_size, bookings_in(file)))
            file.unlink()

    worker = threading.Thread(target=back_up_until_done)
    worker.start()
    during = timed_creates(store, creates, first_hour)
    done.set()
    worker.join()
    return during, backups


def stopped_halfway(url: str, file: Path, backup_seconds: float) -> tuple[float, bool]:
    """Seconds from asking a backup under way to stop (halfway through) until it has ended, and
    whether it was stopped (a short one may finish first: its file is then deleted)."""
    stop, ended, stopped = threading.Event(), [], []

    def back_up_until_stopped() -> None:
        try:
            backup_database(url, file, stop)
        except CopyStopped:
            stopped.append(True)
        ended.append(time.perf_counter())

    worker = threading.Thread(target=back_up_until_stopped)
    worker.start()
    time.sleep(backup_seconds / 2)
    asked = time.perf_counter()
    stop.set()
    worker.join()
    if not ended:
        raise RuntimeError("the backup asked to stop failed")
    if stopped and (file.exists() or file.with_name(file.name + PARTIAL).exists()):
        raise RuntimeError(f"a stopped backup left {file} or its partial file")
    file.unlink(missing_ok=True)
    return max(0.0, ended[0] - asked), bool(stopped)


def timed_restore(store, engine, url: str, creates: int, first_hour: int,
                  folder: Path) -> float:
    """Seconds of a restore of a backup taken before ``creates`` more bookings; raises when it
    did not undo exactly those or an id comes again."""
    file = folder / "restore-from.sqlite"
    backup_database(url, file)
    timed_creates(store, creates, first_hour)
    with engine.connect() as connection:
        largest = connection.execute(select(func.max(BookingRow.id))).scalar_one()
    began = time.perf_counter()
    report = restore_database(file, url, folder / "replaced.sqlite")
    seconds = time.perf_counter() - began
    if len(report.taken_away) != creates or report.taken_back:
        raise RuntimeError(f"the restore took away {len(report.taken_away)} bookings and back "
                           f"{len(report.taken_back)}, not the {creates} made since the backup")
    start = NOW + timedelta(hours=first_hour)
    again = store.create("user-000", POOL.name, Fraction(1, 4), start, start + timedelta(hours=1))
    if again.id <= largest:
        raise RuntimeError(f"booking id {again.id} was given again after the restore")
    for used in (file, folder / "replaced.sqlite"):
        used.unlink()
    return seconds


def run_backend(backend: str, url: str, history: int, creates: int, seed: int,
                folder: Path) -> list[dict]:
    upgrade(url)
    engine = make_engine(url)
    results = []
    try:
        store = open_store(engine)
        fill_seconds = fill_history(url, history, seed)
        quiet = timed_creates(store, creates, first_hour=1)
        rows = []
        for n, place in enumerate(PLACES, start=1):
            during, backups = creates_during_backups(store, place, url, creates,
                                                     1 + n * creates, folder)
            seconds = [b[0] for b in backups]
            rows.append({
                "backend": backend, "history": history, "fill_seconds": fill_seconds,
                "backups_in": place,
                "backups": len(backups), "backup_seconds_median": percentile(seconds, 50),
                "backup_bytes": backups[0][1], "bookings_in_first_backup": backups[0][2],
                "create_quiet": {"median_ms": percentile(quiet, 50),
                                 "p99_ms": percentile(quiet, 99)},
                "create_during": {"median_ms": percentile(during, 50),
                                  "p99_ms": percentile(during, 99)},
                "creates": creates,
            })
        stop_seconds, stopped = stopped_halfway(url, folder / "stopped.sqlite",
                                                rows[-1]["backup_seconds_median"])
        restore_seconds = timed_restore(store, engine, url, creates,
                                        1 + (len(PLACES) + 1) * creates, folder)
        results = [{**row, "stop_seconds": stop_seconds, "stopped": stopped,
                    "restore_seconds": restore_seconds} for row in rows]
    finally:
        engine.dispose()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=100_000, help="past bookings")
    parser.add_argument("--creates", type=int, default=200, help="timed creates, each phase")
    database_benchmark_arguments(parser, tiny="1,000 bookings, 20 creates")
    args = parser.parse_args(argv)
    if args.tiny:
        args.history, args.creates = 1_000, 20
    print_machine()
    results = []
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpub-backup-")))
        for backend, urls in benchmark_databases(stack, args.postgres_url, ["history"]).items():
            results += run_backend(backend, urls["history"], args.history, args.creates,
                                   args.seed, folder)
    print()
    print(markdown_table(
        ["backend", "history", "backups in", "backup s (median)", "backups", "file MB",
         "create p50/p99 ms quiet", "create p50/p99 ms during backups", "stop s",
         "restore s"],
        [[r["backend"], f"{r['history']:,}", r["backups_in"], r["backup_seconds_median"],
          r["backups"],
          f"{r['backup_bytes'] / 1e6:.1f}",
          f"{r['create_quiet']['median_ms']:.1f} / {r['create_quiet']['p99_ms']:.1f}",
          f"{r['create_during']['median_ms']:.1f} / {r['create_during']['p99_ms']:.1f}",
          f"{r['stop_seconds']:.2f}" + ("" if r["stopped"] else " (finished first)"),
          f"{r['restore_seconds']:.2f}"]
         for r in results],
    ))
    write_json(args.json, {"results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
