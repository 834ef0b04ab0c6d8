"""Booking creates that arrive while others are being written go to the database together.

A create's database work is short (about a millisecond), and much of it is the transaction
around it: a connection from the pool, ``BEGIN IMMEDIATE`` or the pool locks, the commit, the
hop to an executor thread and back. Creates that need the same locks wait for each other
anyway (the database serialises them), so while one batch is written the next ones queue here
and then go in one transaction (``BookingStore.create_all``: each is still refused, or fails,
on its own). A create that arrives when nothing is being written goes at once, alone: under
light load nothing waits longer than before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from functools import partial

from ..core.errors import NoCapacity
from ..core.model import Booking
from ..db.creates import NewBooking

#: Most creates written in one transaction, and how long one takes further creates: the first
#: of a batch is answered once the last is written (about a millisecond each; a create that has
#: to move bookings may take up to the exact step's second), so a batch is kept short. 32 made
#: create throughput on PostgreSQL reach the Hub's ``GET api/user`` where 16 did not
#: (docs/benchmarks.md).
MAX_CREATES_PER_TRANSACTION = 32
MAX_BATCH_SECONDS = 0.05

Batch = list[tuple[NewBooking, asyncio.Future]]


class CreateQueue:
    """Creates waiting for the database, one queue per set of pools their rules lock.

    ``write(creates, seconds)`` writes them in one transaction and answers the outcomes of the
    first ones, all of them unless it ran out of ``seconds`` (``BookingStore.create_all``);
    ``search_longer(create, outcome)`` then answers a create's own outcome again, away from
    the batch (``BookingStore.search_longer``: a search that may take seconds)."""

    def __init__(self, executor: Executor,
                 write: Callable[[Sequence[NewBooking], float], list[Booking | Exception]],
                 search_longer: Callable[[NewBooking, Booking | Exception],
                                         Booking | Exception] | None = None,
                 limit: int = MAX_CREATES_PER_TRANSACTION):
        self._executor = executor
        self._write = write
        self._search_longer = search_longer
        self._limit = limit
        self._waiting: dict[tuple[str, ...], Batch] = {}

    async def create(self, new: NewBooking) -> Booking:
        """The booking ``new`` creates, or its refusal or error raised; written with the
        creates queued beside it."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        key = new.locks
        writing = key in self._waiting  # a batch of these locks is in the database now
        self._waiting.setdefault(key, []).append((new, future))
        if not writing:
            self._write_next(key, [])
        try:
            return await future
        except NoCapacity as refused:
            # BookingStore.search_longer answers any other refusal unchanged; asking here too
            # spares a plain refusal a second hop to the executor
            if self._search_longer is None or not refused.search_ran_out:
                raise
            outcome = await loop.run_in_executor(self._executor, self._search_longer, new,
                                                 refused)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _write_next(self, key: tuple[str, ...], written: Batch) -> None:
        """Start the next batch of ``key`` (the creates queued since ``written`` started)."""
        waiting = self._waiting[key][len(written):]
        if not waiting:
            del self._waiting[key]
            return
        self._waiting[key] = waiting
        batch = waiting[:self._limit]
        try:
            done = asyncio.get_running_loop().run_in_executor(
                self._executor, self._write, [new for new, _ in batch], MAX_BATCH_SECONDS)
        except RuntimeError as error:  # the executor is shut down: the service is stopping
            done = asyncio.get_running_loop().create_future()
            done.set_exception(error)
        done.add_done_callback(partial(self._written, key, batch))

    def _written(self, key: tuple[str, ...], batch: Batch, done: asyncio.Future) -> None:
        try:
            outcomes = done.result()
        except BaseException as error:  # the transaction failed: none of them was created
            outcomes = [error] * len(batch)
        # creates the transaction had no time for stay first in the queue
        written = batch[:len(outcomes)]
        for (_, future), outcome in zip(written, outcomes):
            if future.done():  # its request went away
                continue
            if isinstance(outcome, asyncio.CancelledError):
                future.cancel()
            elif isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
        self._write_next(key, written)
