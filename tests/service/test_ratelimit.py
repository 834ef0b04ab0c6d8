"""The per-user write limiter as a pure token bucket, driven by a fake monotonic clock."""

from __future__ import annotations

import pytest

from jhub_gpubooking.service.ratelimit import WriteRateLimiter


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_then_the_rate_with_the_wait_until_the_next_write():
    clock = FakeClock()
    limiter = WriteRateLimiter(per_minute=6, burst=3, monotonic=clock)
    assert [limiter.acquire("user:ada") for _ in range(3)] == [None, None, None]
    assert limiter.acquire("user:ada") == 10  # one write every 10 s at 6 a minute
    clock.now += 4
    assert limiter.acquire("user:ada") == 6
    clock.now += 6
    assert limiter.acquire("user:ada") is None
    assert limiter.acquire("user:ada") == 10


def test_callers_have_their_own_buckets_and_idle_ones_refill_to_the_burst_only():
    clock = FakeClock()
    limiter = WriteRateLimiter(per_minute=60, burst=2, monotonic=clock)
    assert [limiter.acquire("user:ada") for _ in range(3)] == [None, None, 1]
    assert limiter.acquire("user:bob") is None
    clock.now += 3600
    assert [limiter.acquire("user:ada") for _ in range(3)] == [None, None, 1]


def test_full_buckets_are_forgotten_so_memory_stays_bounded():
    clock = FakeClock()
    limiter = WriteRateLimiter(per_minute=60, burst=2, monotonic=clock)
    for n in range(100):
        limiter.acquire(f"user:u{n}")
    clock.now += 10
    limiter.acquire("user:late")
    assert set(limiter._buckets) == {"user:late"}


def test_zero_per_minute_turns_the_limit_off_and_nonsense_is_refused():
    limiter = WriteRateLimiter(per_minute=0, burst=1)
    assert {limiter.acquire("user:ada") for _ in range(1000)} == {None}
    with pytest.raises(ValueError):
        WriteRateLimiter(per_minute=-1, burst=1)
    with pytest.raises(ValueError):
        WriteRateLimiter(per_minute=1, burst=0)
