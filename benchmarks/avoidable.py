"""Which fragmentation refusals could moving upcoming bookings have avoided? (exactly)

A fragmentation refusal that is not blocked by started bookings (it would fit with every
upcoming booking gone) *may* be avoidable, but the upcoming bookings may need the room
themselves. Deciding it is a feasibility ILP (:func:`.trace_optimum.fits_with_moves`, with the
service's default solver: HiGHS and CP-SAT at once when OR-Tools is installed, else HiGHS):
every upcoming booking lying within ``LONGEST_BOOKING`` of the request may go to any GPUs of
its pool (its amount, times and one node kept), everything else stays, and the request must
fit too. That window is the one the replay's re-placing search may move bookings in, so both
answer the same question: a feasible ILP is a refusal the search should have avoided.

The lab trace decides every such refusal of its target replay (or a seeded random sample, with
a 95% confidence interval, when asked to).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from datetime import datetime
from fractions import Fraction

from jhub_gpubooking.core.model import Booking, Pool
from jhub_gpubooking.core.replacement import is_movable

from .trace_optimum import Item, fits_with_moves
from .trace_replay import LONGEST_BOOKING

#: A refusal as the replay keeps it: (live bookings near it, start, end, amount, now).
Refusal = tuple[list[Booking], datetime, datetime, Fraction, datetime]


def refusal_avoidable(pool: Pool, refusal: Refusal, time_limit: float = 30) -> bool | None:
    """True: some re-placement of the upcoming bookings near the request lets it in; False:
    none does; None: the solver hit ``time_limit`` before deciding."""
    near, start, end, amount, now = refusal
    low, high = start - LONGEST_BOOKING, end + LONGEST_BOOKING
    movable = [b for b in near if is_movable(b, now) and low <= b.start and b.end <= high]
    moving = {b.id for b in movable}
    items = [Item(b.id, b.start, b.end, b.amount) for b in movable]
    items.append(Item(-1, start, end, amount))
    return fits_with_moves(pool, [b for b in near if b.id not in moving], items, time_limit)


def wilson_interval(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95% for the default ``z``)."""
    if not n:
        return 0.0, 1.0
    share = hits / n
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def classify_refusals(pool: Pool, refusals: Sequence[Refusal], sample: int = 0,
                      time_limit: float = 30, seed: int = 0) -> dict:
    """Decide the refusals with :func:`refusal_avoidable`: every one (``sample`` 0 or not
    below their number), else a seeded random sample of ``sample``.

    ``avoidable`` is the count of avoidable ones (all decided) or the estimate (share of the
    sample x count); ``ci95`` bounds it: with all decided, [proven, proven + undecided]; for a
    sample, the Wilson 95% interval of the share (undecided ones counted as not avoidable for
    the low end, as avoidable for the high end) x count.
    """
    total = len(refusals)
    everything = not sample or sample >= total
    picked = list(refusals) if everything else random.Random(seed).sample(list(refusals), sample)
    began = time.perf_counter()
    verdicts = [refusal_avoidable(pool, refusal, time_limit) for refusal in picked]
    proven, undecided = verdicts.count(True), verdicts.count(None)
    if everything:
        estimate, low, high = proven, proven, proven + undecided
    else:
        estimate = round(total * proven / len(picked))
        low = math.floor(total * wilson_interval(proven, len(picked))[0])
        high = math.ceil(total * wilson_interval(proven + undecided, len(picked))[1])
    return {
        "not_blocked": total, "checked": len(picked), "sampled": not everything,
        "avoidable_proven": proven, "not_avoidable": verdicts.count(False),
        "undecided": undecided, "avoidable": estimate, "ci95": [low, high],
        "solver_seconds": time.perf_counter() - began,
    }
