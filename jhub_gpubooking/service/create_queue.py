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

from ..core.model import Booking
from ..db.creates import NewBooking

#: Most creates written in one transaction: the first of a batch waits for the last, and a
#: create that has to move bookings may take up to the exact step's second under the lock.
MAX_CREATES_PER_TRANSACTION = 16

Batch = list[tuple[NewBooking, asyncio.Future]]


class CreateQueue:
    """Creates waiting for the database, one queue per set of pools their rules lock."""

    def __init__(self, executor: Executor,
                 write: Callable[[Sequence[NewBooking]], list[Booking | Exception]],
                 limit: int = MAX_CREATES_PER_TRANSACTION):
        self._executor = executor
        self._write = write
        self._limit = limit
        self._waiting: dict[tuple[str, ...], Batch] = {}

    async def create(self, new: NewBooking) -> Booking:
        """The booking ``new`` creates, or its refusal or error raised; written with the
        creates queued beside it."""
        future = asyncio.get_running_loop().create_future()
        key = new.locks
        writing = key in self._waiting  # a batch of these locks is in the database now
        self._waiting.setdefault(key, []).append((new, future))
        if not writing:
            self._write_next(key, [])
        return await future

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
                self._executor, self._write, [new for new, _ in batch])
        except RuntimeError as error:  # the executor is shut down: the service is stopping
            done = asyncio.get_running_loop().create_future()
            done.set_exception(error)
        done.add_done_callback(partial(self._written, key, batch))

    def _written(self, key: tuple[str, ...], batch: Batch, done: asyncio.Future) -> None:
        try:
            outcomes = done.result()
        except BaseException as error:  # the transaction failed: none of them was created
            outcomes = [error] * len(batch)
        for (_, future), outcome in zip(batch, outcomes):
            if future.done():  # its request went away
                continue
            if isinstance(outcome, asyncio.CancelledError):
                future.cancel()
            elif isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
        self._write_next(key, batch)
