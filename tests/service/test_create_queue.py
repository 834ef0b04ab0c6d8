"""The service's create queue: creates that arrive while others are written go together, each
answered with its own outcome; a failed transaction fails its batch only. The queue is run
against a recording writer here, and against the real service and store below."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from fractions import Fraction
from types import SimpleNamespace
from unittest import mock

import pytest
from sqlalchemy import event

from jhub_gpubooking.core import exact_moves, replacement
from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.core.errors import NoCapacity
from jhub_gpubooking.core.model import Placement
from jhub_gpubooking.service.app import GPUBookingService
from jhub_gpubooking.service.create_queue import MAX_BATCH_SECONDS, CreateQueue

NOW = datetime(2030, 1, 7, 10, 5, tzinfo=timezone.utc)


class Refused(Exception):
    pass


class RecordingWriter:
    """Writes in the executor, records each batch; an item named "refused" is refused, a batch
    holding "broken" fails as a whole. Each write waits until the test lets it go."""

    def __init__(self):
        self.batches: list[list[str]] = []
        self.go = asyncio.Event()
        self.loop = asyncio.get_running_loop()

    def __call__(self, batch, seconds):
        names = [new.name for new in batch]
        self.batches.append(names)
        assert seconds == MAX_BATCH_SECONDS
        asyncio.run_coroutine_threadsafe(self.go.wait(), self.loop).result(timeout=10)
        if "broken" in names:
            raise RuntimeError("the transaction failed")
        if "slow" in names:  # out of time after it: the rest were not tried
            names = names[:names.index("slow") + 1]
        return [Refused(name) if name == "refused" else f"booking of {name}" for name in names]


def new(name: str, locks=("a100",)):
    return SimpleNamespace(name=name, locks=locks)


@pytest.fixture
def executor():
    with ThreadPoolExecutor(4) as pool:
        yield pool


async def until(condition) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not reached")


async def test_creates_arriving_while_one_is_written_go_together_next(executor):
    writer = RecordingWriter()
    queue = CreateQueue(executor, writer)
    first = asyncio.ensure_future(queue.create(new("ada")))
    await until(lambda: writer.batches == [["ada"]])
    later = [asyncio.ensure_future(queue.create(new(name))) for name in ("bob", "refused", "eve")]
    await asyncio.sleep(0.05)
    assert writer.batches == [["ada"]]  # nothing else starts while ada's is written

    writer.go.set()
    assert await first == "booking of ada"
    results = await asyncio.gather(*later, return_exceptions=True)
    assert writer.batches == [["ada"], ["bob", "refused", "eve"]]
    assert results[0] == "booking of bob" and results[2] == "booking of eve"
    assert isinstance(results[1], Refused)


async def test_a_batch_holds_at_most_the_limit_and_the_rest_follow_in_order(executor):
    writer = RecordingWriter()
    queue = CreateQueue(executor, writer, limit=2)
    tasks = [asyncio.ensure_future(queue.create(new(f"u{n}"))) for n in range(5)]
    writer.go.set()
    assert await asyncio.gather(*tasks) == [f"booking of u{n}" for n in range(5)]
    assert writer.batches == [["u0"], ["u1", "u2"], ["u3", "u4"]]


async def test_a_failed_transaction_fails_its_batch_only(executor):
    writer = RecordingWriter()
    queue = CreateQueue(executor, writer)
    first = asyncio.ensure_future(queue.create(new("ada")))
    await until(lambda: writer.batches)
    batch = [asyncio.ensure_future(queue.create(new(name))) for name in ("bob", "broken")]
    await asyncio.sleep(0.01)
    writer.go.set()
    assert await first == "booking of ada"
    results = await asyncio.gather(*batch, return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    # the queue goes on
    assert await queue.create(new("carol")) == "booking of carol"


async def test_creates_a_transaction_had_no_time_for_are_written_next_first(executor):
    writer = RecordingWriter()
    queue = CreateQueue(executor, writer)
    first = asyncio.ensure_future(queue.create(new("ada")))
    await until(lambda: writer.batches)
    batch = [asyncio.ensure_future(queue.create(new(name))) for name in ("slow", "bob", "eve")]
    await asyncio.sleep(0.01)
    later = asyncio.ensure_future(queue.create(new("carol")))
    await asyncio.sleep(0.01)
    writer.go.set()
    assert await asyncio.gather(first, *batch, later) == [
        f"booking of {name}" for name in ("ada", "slow", "bob", "eve", "carol")]
    assert writer.batches == [["ada"], ["slow", "bob", "eve", "carol"], ["bob", "eve", "carol"]]


async def test_creates_needing_other_locks_are_written_beside_them(executor):
    writer = RecordingWriter()
    queue = CreateQueue(executor, writer)
    a100 = asyncio.ensure_future(queue.create(new("ada", ("a100",))))
    t4 = asyncio.ensure_future(queue.create(new("bob", ("t4",))))
    await until(lambda: len(writer.batches) == 2)  # neither waits for the other
    writer.go.set()
    assert await asyncio.gather(a100, t4) == ["booking of ada", "booking of bob"]


async def test_a_create_whose_request_went_away_does_not_stop_the_others(executor):
    writer = RecordingWriter()
    queue = CreateQueue(executor, writer)
    first = asyncio.ensure_future(queue.create(new("ada")))
    await until(lambda: writer.batches)
    gone = asyncio.ensure_future(queue.create(new("bob")))
    kept = asyncio.ensure_future(queue.create(new("eve")))
    await asyncio.sleep(0.01)
    gone.cancel()
    writer.go.set()
    assert await first == "booking of ada"
    assert await kept == "booking of eve"


def ran_out(name: str) -> NoCapacity:
    return NoCapacity(f"no room for {name}", NOW, NOW, Fraction(0), search_ran_out=True)


async def test_only_a_refusal_after_a_search_that_ran_out_is_searched_longer(executor):
    """Apart from its batch: the others are answered before the longer search ends."""
    answers = {"ada": ran_out("ada"), "eve": "booking of eve",
               "bob": NoCapacity("full", NOW, NOW, Fraction(0))}
    searched, release = [], threading.Event()

    def search_longer(create, outcome):
        searched.append((create.name, outcome))
        release.wait(timeout=10)
        return "booking of ada, after a longer search"

    queue = CreateQueue(executor, lambda batch, seconds: [answers[n.name] for n in batch],
                        search_longer)
    creates = {name: asyncio.ensure_future(queue.create(new(name))) for name in answers}
    assert await creates["eve"] == "booking of eve"
    with pytest.raises(NoCapacity):
        await creates["bob"]
    await until(lambda: len(searched) == 1)
    assert not creates["ada"].done()
    release.set()
    assert await creates["ada"] == "booking of ada, after a longer search"
    assert searched == [("ada", answers["ada"])]


async def test_a_longer_search_that_finds_nothing_answers_the_refusal(executor):
    refused = ran_out("ada")
    queue = CreateQueue(executor, lambda batch, seconds: [refused],
                        lambda create, outcome: outcome)
    with pytest.raises(NoCapacity) as raised:
        await queue.create(new("ada"))
    assert raised.value is refused


async def test_a_stopped_executor_fails_the_create_instead_of_hanging():
    executor = ThreadPoolExecutor(1)
    executor.shutdown()
    queue = CreateQueue(executor, lambda batch, seconds: [])
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(queue.create(new("ada")), timeout=5)


async def test_the_service_writes_concurrent_creates_in_fewer_transactions(tmp_path):
    service = GPUBookingService(
        db_url=f"sqlite:///{tmp_path / 'bookings.sqlite'}", upgrade_db=True,
        pools=[{"name": "t4", "nodes": {"node-c": 1}, "slices_per_gpu": 4, "backend": "hami",
                "gpu_memory_mib": 15360}],
        hub_api_url="http://127.0.0.1:1/hub/api", api_token="service-token",
        clock=ManualClock(NOW), default_policy={},
    )
    service.setup()
    writes = []
    event.listen(service.db_engine, "commit", lambda connection: writes.append(1))
    start, end = NOW.replace(hour=12, minute=0), NOW.replace(hour=13, minute=0)
    try:
        results = await asyncio.gather(*(
            service.opportunistic.create_booking(f"user{n}", "t4", "1/4", start, end,
                                                 actor=f"user{n}")
            for n in range(6)
        ), return_exceptions=True)
    finally:
        service.executor.shutdown(wait=True)

    booked = [r for r in results if not isinstance(r, Exception)]
    refused = [r for r in results if isinstance(r, NoCapacity)]
    # the one GPU holds four quarters; the two creates that came last are refused, each
    # naming the next free hour, and nothing else went wrong
    assert [b.user for b in booked] == ["user0", "user1", "user2", "user3"]
    assert len(refused) == 2 and all(r.next_free == (end, end.replace(hour=14))
                                      for r in refused)
    assert len({b.id for b in booked}) == 4
    assert [b.user for b in service.store.list(state=None)] == [b.user for b in booked]
    assert len(writes) < 6  # the first alone, the rest together


async def test_the_service_searches_longer_without_the_lock_when_the_exact_step_ran_out(
        tmp_path):
    """Through the service's create path: a 17-GPU pool where a whole GPU fits only if one
    quarter joins the other, the bounded searches given no budget, and the exact program
    running out of time at the service's exact_move_seconds (solved at the longer limit)."""
    service = GPUBookingService(
        db_url=f"sqlite:///{tmp_path / 'bookings.sqlite'}", upgrade_db=True,
        pools=[{"name": "big", "nodes": {"node-x": 2, "node-y": 15}, "slices_per_gpu": 4,
                "backend": "hami", "gpu_memory_mib": 15360}],
        hub_api_url="http://127.0.0.1:1/hub/api", api_token="service-token",
        clock=ManualClock(NOW), default_policy={}, exact_move_seconds=0.5,
        exact_move_retry_seconds=5,
    )
    service.setup()
    limits = []
    real = replacement.place_exactly

    def hard_program(*args, time_limit, **kwargs):
        limits.append(time_limit)
        found = real(*args, time_limit=time_limit, **kwargs)
        if time_limit == 0.5 and found is not None:
            raise exact_moves.RanOut("a hard program")
        return found

    start, end = NOW.replace(hour=12, minute=0), NOW.replace(hour=13, minute=0)
    store = service.store
    try:
        quarters = [store.create(user, "big", "1/4", start, end) for user in ("ada", "bob")]
        with store.unit_of_work(["big"]) as work:
            work.move_all([(quarters[0], Placement("node-x", (0,), 1)),
                           (quarters[1], Placement("node-x", (1,), 1))])
        store.create("cy", "big", 15, start, end)
        with mock.patch.multiple(replacement, BOUNDED_EXPANSIONS=0, REPACK_GPU_STEPS=0,
                                 place_exactly=hard_program):
            whole = await service.opportunistic.create_booking("dee", "big", 1, start, end,
                                                               actor="dee")
    finally:
        service.executor.shutdown(wait=True)
    assert limits == [0.5, 5]
    assert whole.placement.node == "node-x"
    gpus = [store.get(q.id).placement.gpus for q in quarters]
    assert gpus[0] == gpus[1] != whole.placement.gpus
