"""Per-user limit on write requests: a token bucket per caller, kept in the service's memory.

A person clicking on the page never meets it; a runaway script does, and gets ``429`` with
``Retry-After`` instead of filling the database. The service is one process, so memory is the
right place; a restart simply refills every bucket.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Bucket:
    tokens: float
    updated: float


class WriteRateLimiter:
    """``per_minute`` writes per caller on average, up to ``burst`` at once.

    ``per_minute == 0`` turns the limit off. ``monotonic`` is injectable for tests.
    """

    def __init__(
        self, per_minute: int, burst: int, monotonic: Callable[[], float] = time.monotonic
    ):
        if per_minute < 0 or burst < 1:
            raise ValueError("The write rate must be >= 0 per minute and the burst >= 1.")
        self.per_minute = per_minute
        self.burst = burst
        self.monotonic = monotonic
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def acquire(self, caller: str) -> int | None:
        """Take one write for ``caller``: None if allowed, else the seconds until one is."""
        if self.per_minute == 0:
            return None
        rate = self.per_minute / 60.0
        now = self.monotonic()
        with self._lock:
            bucket = self._buckets.get(caller)
            if bucket is None:
                self._forget_full(now, rate)  # before adding: a new bucket is full too
                bucket = self._buckets[caller] = _Bucket(float(self.burst), now)
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.updated) * rate)
            bucket.updated = now
            if bucket.tokens >= 1:
                bucket.tokens -= 1
                return None
            return max(1, math.ceil((1 - bucket.tokens) / rate))

    def _forget_full(self, now: float, rate: float) -> None:
        """Drop buckets that have refilled: a new caller's bucket starts full anyway."""
        full = [
            name
            for name, bucket in self._buckets.items()
            if bucket.tokens + (now - bucket.updated) * rate >= self.burst
        ]
        for name in full:
            del self._buckets[name]
