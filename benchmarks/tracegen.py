"""A seeded semester of GPU booking requests of a research lab (the input of lab_trace.py).

Every distribution below is a parameter of :class:`TraceShape`; the defaults describe a lab of
48 people sharing 24 GPUs split in quarters (HAMi) over a 16-week semester:

* **Users** — each user's activity weight is log-normal (mu 0, sigma 1): a few heavy users and a
  long tail of occasional ones.
* **Groups** — users belong to research groups of ``1 + Poisson(3)`` members. Each group has one
  paper deadline, uniform over weeks 5 to the end; in the 10 days before it every member asks 3x
  as often (the contention peaks of a real semester).
* **Arrivals** — per user and day ``Poisson(base_rate x weight x day factor x deadline factor)``
  requests, day factor 1 on weekdays and 0.35 on weekends. 85% are made between 08:00 and 20:00
  UTC, the rest at any hour. ``base_rate`` is set so the expected offered GPU-hours equal
  ``load`` (default 0.85) of the pool's GPU-hours; the realised load is reported.
* **Amounts** — 1/4 GPU 30%, 1/2 22%, 1 GPU 28%, 2 GPUs 12%, 4 GPUs 6%, 8 GPUs 2%.
* **Lengths** — log-normal with median 3 h and sigma 0.9, rounded to the 15-minute grid and
  clipped to 15 min .. 72 h.
* **Lead times** — 45% "book now" (start in the current slot); the rest start an exponential
  time (mean 30 h) later, on the grid, at most 14 days ahead.
* **No-shows** — 10% of bookings are never used.
* **Early stops** — 30% of the used bookings finish at a uniform 30-90% of their length, and the
  user then cancels the rest.
* **Patience** — a refused user tries again at once from the end of the full interval the refusal
  names, up to 3 attempts in all, as long as the start moves by at most 24 h.
* **Waitlist** — a user still refused after that joins the waitlist with probability 0.5
  (``waitlist_share``), asking for the first interval of the same length and amount that starts
  within 24 h (``wait_window_hours``) of the start first asked for; the wait expires at that
  latest start. Drawn from its own random stream, so the rest of the trace does not change.
* **Start early** — when the service offers a user to start an upcoming booking now instead
  (capacity freed by a release, see ``Lifecycle.start_early_hours``), the user accepts with
  probability 0.25 (``start_early_share``), decided once per booking from its own random stream
  and answered within the slot the offer is made in; the user of a no-show never accepts
  (they are not there). The rest of the trace does not change.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from fractions import Fraction

from jhub_gpubooking.core.model import Pool
from jhub_gpubooking.core.timegrid import ceil_to_grid, floor_to_grid

SLOT_MINUTES = 15


def lab_pool() -> Pool:
    """24 A100s on four nodes (two of 8, two of 4), each shared in quarters."""
    return Pool(
        name="a100", slices_per_gpu=4, backend="hami",
        nodes={"gpu-a": 8, "gpu-b": 8, "gpu-c": 4, "gpu-d": 4},
    )


@dataclass(frozen=True)
class TraceShape:
    """The distributions of the generated semester (see the module docstring)."""

    users: int = 48
    weeks: int = 16
    load: float = 0.85
    semester_start: datetime = datetime(2026, 9, 7, tzinfo=timezone.utc)  # a Monday
    activity_sigma: float = 1.0
    mean_group_extra_members: float = 3.0
    deadline_days: int = 10
    deadline_factor: float = 3.0
    weekend_factor: float = 0.35
    working_hours_share: float = 0.85
    amounts: tuple[tuple[Fraction, float], ...] = (
        (Fraction(1, 4), 0.30), (Fraction(1, 2), 0.22), (Fraction(1), 0.28),
        (Fraction(2), 0.12), (Fraction(4), 0.06), (Fraction(8), 0.02),
    )
    median_hours: float = 3.0
    length_sigma: float = 0.9
    min_minutes: int = 15
    max_hours: int = 72
    book_now_share: float = 0.45
    mean_lead_hours: float = 30.0
    max_days_ahead: int = 14
    no_show_rate: float = 0.10
    early_stop_rate: float = 0.30
    early_stop_range: tuple[float, float] = (0.3, 0.9)
    waitlist_share: float = 0.5
    wait_window_hours: int = 24
    start_early_share: float = 0.25

    @property
    def semester_end(self) -> datetime:
        return self.semester_start + timedelta(weeks=self.weeks)


@dataclass(frozen=True)
class Request:
    """One wish of one user: what they ask for, and how they will actually use it."""

    id: int
    user: str
    group: str
    made_at: datetime
    start: datetime
    end: datetime
    amount: Fraction
    no_show: bool
    #: share of the booking used before the user stops and cancels the rest (None: all of it)
    used_share: float | None = None
    #: a refused user waits for the first free interval of the same length and amount
    joins_waitlist: bool = False
    #: offered to start the booking early (capacity freed before its start), the user accepts
    starts_early: bool = False

    @property
    def length(self) -> timedelta:
        return self.end - self.start

    @property
    def gpu_hours(self) -> Fraction:
        return self.amount * Fraction(int(self.length.total_seconds()), 3600)


@dataclass
class Trace:
    shape: TraceShape
    pool: Pool
    requests: list[Request]
    groups: dict[str, list[str]] = field(default_factory=dict)


def _groups(rng: random.Random, users: list[str], shape: TraceShape) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    remaining = list(users)
    while remaining:
        size = 1 + _poisson(rng, shape.mean_group_extra_members)
        groups[f"group-{len(groups) + 1}"] = remaining[:size]
        remaining = remaining[size:]
    return groups


def _poisson(rng: random.Random, mean: float) -> int:
    """Knuth's method: exact and fast for the small means used here."""
    limit, count, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        count += 1
        product *= rng.random()
    return count


def _length(rng: random.Random, shape: TraceShape) -> timedelta:
    hours = rng.lognormvariate(math.log(shape.median_hours), shape.length_sigma)
    slots = round(hours * 60 / SLOT_MINUTES)
    minutes = min(max(slots * SLOT_MINUTES, shape.min_minutes), shape.max_hours * 60)
    return timedelta(minutes=minutes)


def _moment_in_day(rng: random.Random, day: datetime, shape: TraceShape) -> datetime:
    if rng.random() < shape.working_hours_share:
        return day + timedelta(hours=8 + 12 * rng.random())
    return day + timedelta(hours=24 * rng.random())


def _start(rng: random.Random, made_at: datetime, shape: TraceShape) -> datetime:
    now_slot = floor_to_grid(made_at, SLOT_MINUTES)
    if rng.random() < shape.book_now_share:
        return now_slot
    lead = timedelta(hours=min(rng.expovariate(1 / shape.mean_lead_hours),
                               shape.max_days_ahead * 24))
    return ceil_to_grid(made_at + lead, SLOT_MINUTES)


def _expected_gpu_hours_per_request(shape: TraceShape) -> float:
    # the log-normal mean; clipping and grid rounding change it by a few percent at most
    mean_amount = sum(float(a) * p for a, p in shape.amounts)
    mean_hours = shape.median_hours * math.exp(shape.length_sigma**2 / 2)
    return mean_amount * mean_hours


def generate(shape: TraceShape, seed: int, pool: Pool | None = None) -> Trace:
    """A semester of requests, ordered by the moment they are made."""
    rng = random.Random(seed)
    pool = pool or lab_pool()
    users = [f"user-{n:03d}" for n in range(1, shape.users + 1)]
    weights = {user: rng.lognormvariate(0, shape.activity_sigma) for user in users}
    groups = _groups(rng, users, shape)
    group_of = {user: group for group, members in groups.items() for user in members}
    first_deadline_week = min(5, shape.weeks)
    deadlines = {
        group: shape.semester_start
        + timedelta(weeks=rng.uniform(first_deadline_week - 1, shape.weeks))
        for group in groups
    }

    days = shape.weeks * 7
    capacity_gpu_hours = pool.total_gpus * days * 24
    day_factors = [1.0 if day % 7 < 5 else shape.weekend_factor for day in range(days)]
    # calibrate so the expected offered GPU-hours are `load` of the capacity
    expected_deadline_boost = 1 + (shape.deadline_factor - 1) * min(shape.deadline_days, days) / days
    weighted_days = sum(day_factors) * sum(weights.values()) * expected_deadline_boost
    base_rate = shape.load * capacity_gpu_hours / (
        weighted_days * _expected_gpu_hours_per_request(shape)
    )
    amounts, amount_weights = zip(*shape.amounts)

    requests: list[Request] = []
    for day in range(days):
        day_start = shape.semester_start + timedelta(days=day)
        for user in users:
            deadline = deadlines[group_of[user]]
            near_deadline = timedelta(0) <= deadline - day_start <= timedelta(days=shape.deadline_days)
            rate = base_rate * weights[user] * day_factors[day]
            rate *= shape.deadline_factor if near_deadline else 1
            for _ in range(_poisson(rng, rate)):
                made_at = _moment_in_day(rng, day_start, shape)
                start = _start(rng, made_at, shape)
                no_show = rng.random() < shape.no_show_rate
                used_share = None
                if not no_show and rng.random() < shape.early_stop_rate:
                    used_share = rng.uniform(*shape.early_stop_range)
                requests.append(Request(
                    id=0, user=user, group=group_of[user], made_at=made_at, start=start,
                    end=start + _length(rng, shape),
                    amount=rng.choices(amounts, amount_weights)[0],
                    no_show=no_show, used_share=used_share,
                ))
    requests.sort(key=lambda r: r.made_at)
    # its own stream: the waitlist share changes nothing else of the trace
    waits = random.Random(f"waitlist-{seed}")
    early = random.Random(f"start-early-{seed}")
    numbered = [
        Request(**{**r.__dict__, "id": n,
                   "joins_waitlist": waits.random() < shape.waitlist_share,
                   # drawn for every request, so the stream does not depend on the no-shows
                   "starts_early": early.random() < shape.start_early_share and not r.no_show})
        for n, r in enumerate(requests, start=1)
    ]
    return Trace(shape=shape, pool=pool, requests=numbered, groups=groups)
