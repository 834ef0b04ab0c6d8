"""One racing process of the concurrency test (imported by spawned children, so no pytest here).

Each worker opens its own engine and BookingStore on the shared database and, after all
workers are ready, fires booking requests for heavily overlapping slots as fast as it can.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.core.errors import Conflict, PolicyViolation
from jhub_gpubooking.core.model import Pool
from jhub_gpubooking.db.session import make_engine, make_session_factory
from jhub_gpubooking.db.store import BookingStore

#: Amounts each pool is asked for: whole GPUs on one, quarter slices on the other.
AMOUNTS = {"a100": ["1", "2"], "t4": ["1/4", "1/2", "1"]}


def race(
    db_url: str,
    pool_configs: list[dict],
    now: datetime,
    seed: int,
    attempts: int,
    ready,
    results,
    user: str | None = None,
    default_policy: dict | None = None,
) -> None:
    """Try ``attempts`` bookings as ``user`` (default: one user per worker) under
    ``default_policy``; put (seed, created, refused, unexpected errors) on results, where
    refused counts capacity (409) and policy (403) refusals."""
    pools = {config["name"]: Pool.from_config(config) for config in pool_configs}
    engine = make_engine(db_url)
    store = BookingStore(
        make_session_factory(engine), pools, default_policy=default_policy or {},
        clock=ManualClock(now),
    )
    chooser = random.Random(seed)
    created = refused = 0
    unexpected: list[str] = []
    ready.wait()
    try:
        for attempt in range(attempts):
            pool = chooser.choice(sorted(pools))
            start = now.replace(minute=0) + timedelta(minutes=15 * chooser.randrange(0, 8))
            end = start + timedelta(minutes=15 * chooser.randrange(1, 5))
            try:
                store.create(user or f"user{seed}", pool, chooser.choice(AMOUNTS[pool]), start, end)
                created += 1
            except (Conflict, PolicyViolation):
                refused += 1
            except Exception as error:  # any other error is reported to the parent, which fails
                unexpected.append(f"attempt {attempt}: {type(error).__name__}: {error}")
    finally:
        engine.dispose()
        results.put((seed, created, refused, unexpected))
