"""Racing processes can never overbook a pool, on every backend.

Eight OS processes (spawned, so each has its own interpreter and connection pool) make 50
booking attempts each for overlapping slots of two small pools. Afterwards every instant is
re-checked, both with the core's audit and with an independent count per GPU.
"""

from __future__ import annotations

import multiprocessing
from collections import defaultdict

import race_worker
from db_test_times import NOW

from jhub_gpubooking.core.placement import overbooked_instants
from jhub_gpubooking.db.convert import pool_config

PROCESSES = 8
ATTEMPTS = 50


def slices_over_capacity(pool, bookings) -> list[tuple]:
    """(node, gpu, instant, slices) wherever a GPU holds more than it has: checked at every
    booking start, the only instants at which usage can grow."""
    holding = [b for b in bookings if b.pool == pool.name and b.holds_capacity]
    found = []
    for instant in sorted({b.start for b in holding}):
        used = defaultdict(int)
        for booking in holding:
            if booking.start <= instant < booking.end:
                for gpu in booking.placement.gpus:
                    used[booking.placement.node, gpu] += booking.placement.slices
        found += [
            (node, gpu, instant, slices)
            for (node, gpu), slices in used.items()
            if slices > pool.slices_per_gpu or gpu >= pool.nodes[node]
        ]
    return found


def run_race(url: str, configs: list[dict], **options) -> list[tuple]:
    """PROCESSES spawned workers racing; their reports (seed, created, refused, errors)."""
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(PROCESSES)
    results = context.Queue()
    workers = [
        context.Process(
            target=race_worker.race,
            args=(url, configs, NOW, seed, ATTEMPTS, ready, results),
            kwargs=options,
        )
        for seed in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    try:
        reports = [results.get(timeout=240) for _ in workers]
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()
                worker.join()
    assert [errors for *_, errors in reports] == [[]] * PROCESSES
    return reports


def test_racing_processes_never_overbook(migrated_url, store, pools):
    configs = [pool_config(pool) for pool in pools.values()]
    reports = run_race(migrated_url, configs)
    created = sum(report[1] for report in reports)
    refused = sum(report[2] for report in reports)
    assert created + refused == PROCESSES * ATTEMPTS
    assert refused > 0, "no attempt was refused: the race never reached full capacity"

    bookings = store.list()
    assert len(bookings) == created
    for pool in pools.values():
        assert overbooked_instants(pool, bookings) == []
        assert slices_over_capacity(pool, bookings) == []


def test_a_limit_across_pools_holds_when_requests_race_in_different_pools(
    migrated_url, store, pools
):
    """One user, at most one booking: eight processes book it in both pools at once. Each pool's
    lock alone would let one request per pool through; the rule needs every pool locked."""
    configs = [pool_config(pool) for pool in pools.values()]
    reports = run_race(migrated_url, configs, user="student", default_policy={"max_bookings": 1})
    assert sum(report[1] for report in reports) == 1
    assert [booking.user for booking in store.list()] == ["student"]
