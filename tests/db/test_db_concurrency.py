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


def test_racing_processes_never_overbook(migrated_url, store, pools):
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(PROCESSES)
    results = context.Queue()
    configs = [pool_config(pool) for pool in pools.values()]
    workers = [
        context.Process(
            target=race_worker.race,
            args=(migrated_url, configs, NOW, seed, ATTEMPTS, ready, results),
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
    created = sum(report[1] for report in reports)
    refused = sum(report[2] for report in reports)
    assert created + refused == PROCESSES * ATTEMPTS
    assert refused > 0, "no attempt was refused: the race never reached full capacity"

    bookings = store.list()
    assert len(bookings) == created
    for pool in pools.values():
        assert overbooked_instants(pool, bookings) == []
        assert slices_over_capacity(pool, bookings) == []
