"""Lab-trace simulation: a semester of bookings replayed against the booking core.

Run from the repository root (about a minute on 2 cores; ``--tiny`` takes seconds)::

    python -m benchmarks.lab_trace [--seed 1] [--users 48] [--weeks 16] [--load 0.85]
                                   [--no-show-minutes 30] [--json results.json]

The trace (users, groups, amounts, lengths, lead times, no-shows, early stops, patience) is
described in :mod:`benchmarks.tracegen`. The same trace is replayed four times, side by side:

* **best fit** — the product: :func:`jhub_gpubooking.core.placement.place`;
* **first fit** — the first GPU / node that fits, in pool order (a comparison policy that lives
  only here);
* **whole GPUs** — best fit, but every request rounded up to whole GPUs, as a booking system
  without GPU sharing does;
* **best fit, no release** — the product without the no-show rule.

Releases use the core's own rule for a cancelled active booking (``policy.cancel_outcome``):
a no-show is released ``--no-show-minutes`` after its start, an early stopper cancels the rest.

Reported per replay: GPU-hours admitted (the amounts users asked for x booked hours) against the
fluid bound ``min(GPUs x time, total demand)``; refusals, split into *capacity* (less than the
requested amount free at some moment of the interval) and *fragmentation* (enough free in total
at every moment, but no single GPU / node holds it: *spatial* if some moment has no GPU or node
with room, *temporal* if every moment has one but not the same one throughout); GPU-hours of
no-shows reused by later bookings; Jain's fairness index of the share of demand served per user,
over the requests made while the pool was at least 75% booked over their interval.
"""

from __future__ import annotations

import argparse
import heapq
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fractions import Fraction

from jhub_gpubooking.core import placement as placing
from jhub_gpubooking.core.errors import NoCapacity
from jhub_gpubooking.core.model import Booking, BookingState, Placement, Pool, format_amount
from jhub_gpubooking.core.policy import cancel_outcome, gpu_hours
from jhub_gpubooking.core.timegrid import ceil_to_grid, floor_to_grid

from .common import markdown_table, print_machine, write_json
from .tracegen import SLOT_MINUTES, Request, Trace, TraceShape, generate

Placer = Callable[[Pool, list[Booking], datetime, datetime, Fraction], Placement]

MAX_ATTEMPTS = 3
PATIENCE = timedelta(hours=24)
#: A request is "under contention" when, as it is made, this share of the pool is booked at
#: some moment of its interval.
CONTENDED_BOOKED_SHARE = Fraction(3, 4)

TARGETS = {
    "share_of_bound": 0.97,
    "gain_over_whole": 1.3,
    "no_show_reclaimed": 0.80,
    "fairness": 0.90,
    "fragmentation_refusals": 0,
}


def first_fit(
    pool: Pool, existing: list[Booking], start: datetime, end: datetime, amount: Fraction
) -> Placement:
    """The first GPU (fraction) or node (whole GPUs) in pool order with room for ``amount``."""
    slices = pool.amount_to_slices(amount)
    table = placing.UsageTable(pool, existing, start, end)
    peaks = table.peaks(0, table.pieces)
    capacity = pool.slices_per_gpu
    if amount < 1:
        for (node, index), peak in zip(table.gpus, peaks):
            if peak + slices <= capacity:
                return Placement(node, (index,), slices)
    else:
        untouched: dict[str, list[int]] = defaultdict(list)
        for (node, index), peak in zip(table.gpus, peaks):
            if peak == 0:
                untouched[node].append(index)
        for node in pool.nodes:
            if len(untouched[node]) >= amount:
                return Placement(node, tuple(untouched[node][: int(amount)]), capacity)
    # both policies see the same peaks, so the core refuses too, naming the full interval
    placing.place(pool, existing, start, end, amount)
    raise AssertionError("first fit found no room where the core placement did")


@dataclass(frozen=True)
class Replay:
    name: str
    placer: Placer
    whole_gpus: bool = False
    release_no_shows: bool = True


REPLAYS = (
    Replay("best fit (product)", placing.place),
    Replay("first fit", first_fit),
    Replay("whole GPUs, best fit", placing.place, whole_gpus=True),
    Replay("best fit, no no-show release", placing.place, release_no_shows=False),
)


@dataclass
class Outcome:
    """What one replay of the trace produced."""

    replay: str
    booked: dict[int, Booking] = field(default_factory=dict)  # request id -> as first booked
    admitted: dict[int, Booking] = field(default_factory=dict)  # request id -> after releases
    refused_requests: int = 0
    refusals: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    contended: set[int] = field(default_factory=set)
    released: list[tuple[Booking, datetime]] = field(default_factory=list)  # no-show, freed from


def classify_refusal(
    pool: Pool, live: list[Booking], start: datetime, end: datetime, amount: Fraction
) -> str:
    """'capacity', 'fragmentation (spatial)' or 'fragmentation (temporal)'."""
    intervals = placing.availability(pool, live, start, end)
    if min(i.free_gpus for i in intervals) < amount:
        return "capacity"
    if any(i.largest_bookable < amount for i in intervals):
        return "fragmentation (spatial)"
    return "fragmentation (temporal)"


def _overlapping(live: dict[int, Booking], start: datetime, end: datetime) -> list[Booking]:
    return [b for b in live.values() if b.start < end and start < b.end]


def _is_contended(pool: Pool, others: list[Booking], start: datetime, end: datetime) -> bool:
    intervals = placing.availability(pool, others, start, end)
    least_free = min(i.free_gpus for i in intervals)
    return least_free <= (1 - CONTENDED_BOOKED_SHARE) * pool.total_gpus


def replay(trace: Trace, how: Replay, no_show_minutes: int) -> Outcome:
    """Replay every request in the order they are made; releases happen at their moment."""
    pool, outcome = trace.pool, Outcome(how.name)
    live: dict[int, Booking] = {}
    # (when, 0 = release before 1 = request at the same moment, request id)
    events: list[tuple[datetime, int, int]] = [(r.made_at, 1, r.id) for r in trace.requests]
    heapq.heapify(events)
    requests = {r.id: r for r in trace.requests}
    release_at: dict[int, datetime] = {}
    while events:
        now, kind, request_id = heapq.heappop(events)
        if kind == 0:
            _release(outcome, live, requests[request_id], now)
            continue
        # bookings that ended before the current slot can touch no new request
        horizon = floor_to_grid(now, SLOT_MINUTES)
        for finished in [i for i, b in live.items() if b.end <= horizon]:
            del live[finished]
        request = requests[request_id]
        booking = _book(pool, how, outcome, live, request)
        if booking is None:
            continue
        live[request_id] = outcome.admitted[request_id] = outcome.booked[request_id] = booking
        if request.no_show and how.release_no_shows:
            release_at[request_id] = booking.start + timedelta(minutes=no_show_minutes)
        elif request.used_share is not None:
            release_at[request_id] = booking.start + request.used_share * request.length
        if request_id in release_at:
            heapq.heappush(events, (release_at[request_id], 0, request_id))
    return outcome


def _book(
    pool: Pool, how: Replay, outcome: Outcome, live: dict[int, Booking], request: Request
) -> Booking | None:
    amount = Fraction(math.ceil(request.amount)) if how.whole_gpus else request.amount
    start, end = request.start, request.end
    others = _overlapping(live, start, end)
    if _is_contended(pool, others, start, end):
        outcome.contended.add(request.id)
    for _ in range(MAX_ATTEMPTS):
        others = _overlapping(live, start, end)
        try:
            placed = how.placer(pool, others, start, end, amount)
        except NoCapacity as refusal:
            outcome.refusals[classify_refusal(pool, others, start, end, amount)] += 1
            start = max(ceil_to_grid(refusal.full_end, SLOT_MINUTES), start + timedelta(
                minutes=SLOT_MINUTES))
            end = start + request.length
            if start - request.start > PATIENCE:
                break
            continue
        return Booking(user=request.user, pool=pool.name, amount=amount, start=start, end=end,
                       placement=placed, id=request.id)
    outcome.refused_requests += 1
    return None


def _release(outcome: Outcome, live: dict[int, Booking], request: Request, now: datetime) -> None:
    booking = outcome.admitted[request.id]
    if booking.state(now) is not BookingState.ACTIVE:
        return
    released = cancel_outcome(booking, now)
    if request.no_show:
        outcome.released.append((booking, released.end if released.holds_capacity else booking.start))
    outcome.admitted[request.id] = released
    if request.id in live:
        live[request.id] = released


# ------------------------------------------------------------------------- measures


def reused_gpu_hours(pool: Pool, outcome: Outcome) -> Fraction:
    """GPU-hours of released no-show capacity that later bookings actually hold.

    While a GPU has ``R`` released slices, the bookings on it could hold at most ``S - R``
    had nothing been released; whatever they hold above that uses released slices.
    """
    capacity = pool.slices_per_gpu
    changes: dict[tuple[str, int], list[tuple[datetime, int, int]]] = defaultdict(list)
    for booking in outcome.admitted.values():
        if booking.holds_capacity:
            for gpu in booking.placement.gpus:
                changes[(booking.placement.node, gpu)] += [
                    (booking.start, booking.placement.slices, 0),
                    (booking.end, -booking.placement.slices, 0),
                ]
    for original, freed_from in outcome.released:
        for gpu in original.placement.gpus:
            changes[(original.placement.node, gpu)] += [
                (freed_from, 0, original.placement.slices),
                (original.end, 0, -original.placement.slices),
            ]
    reused_slice_seconds = 0
    for gpu_changes in changes.values():
        gpu_changes.sort()
        used = released = 0
        previous = None
        for when, used_change, released_change in gpu_changes:
            if previous is not None and released:
                over = min(max(used - (capacity - released), 0), released)
                reused_slice_seconds += over * int((when - previous).total_seconds())
            used, released, previous = used + used_change, released + released_change, when
    return Fraction(reused_slice_seconds, capacity * 3600)


def fluid_bounds(trace: Trace) -> tuple[Fraction, Fraction, Fraction]:
    """(GPUs x time, total demand, time-resolved bound: integral of min(GPUs, demand(t)))."""
    start = trace.shape.semester_start
    end = max([trace.shape.semester_end] + [r.end for r in trace.requests])
    capacity = trace.pool.total_gpus
    capacity_hours = capacity * Fraction(int((end - start).total_seconds()), 3600)
    demand = sum((r.gpu_hours for r in trace.requests), Fraction(0))
    changes = sorted(
        [(r.start, r.amount) for r in trace.requests] + [(r.end, -r.amount) for r in trace.requests]
    )
    resolved, level, previous = Fraction(0), Fraction(0), None
    for when, change in changes:
        if previous is not None:
            resolved += min(level, capacity) * Fraction(int((when - previous).total_seconds()), 3600)
        level, previous = level + change, when
    return capacity_hours, demand, resolved


def jain_index(values: list[float]) -> float:
    """Jain's fairness index: 1 when all values are equal, 1/n when one takes everything."""
    if not values or not any(values):
        return 1.0
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def measure(trace: Trace, outcome: Outcome) -> dict:
    """The numbers of one replay (admitted hours count the amounts users asked for)."""
    requests = {r.id: r for r in trace.requests}
    capacity_hours, demand, _ = fluid_bounds(trace)
    bound = min(capacity_hours, demand)
    admitted = sum((requests[i].gpu_hours for i in outcome.admitted), Fraction(0))
    no_show_hours = sum(
        (gpu_hours(b) for i, b in outcome.booked.items() if requests[i].no_show), Fraction(0)
    )
    released = sum(
        (original.amount * Fraction(int((original.end - freed).total_seconds()), 3600)
         for original, freed in outcome.released),
        Fraction(0),
    )
    reused = reused_gpu_hours(trace.pool, outcome)
    served: dict[str, list[Fraction]] = defaultdict(lambda: [Fraction(0), Fraction(0)])
    for request_id in outcome.contended:
        request = requests[request_id]
        served[request.user][1] += request.gpu_hours
        if request_id in outcome.admitted:
            served[request.user][0] += request.gpu_hours
    by_amount: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for request in trace.requests:
        by_amount[format_amount(request.amount)][1] += 1
        by_amount[format_amount(request.amount)][0] += request.id not in outcome.admitted
    fragmentation = sum(n for kind, n in outcome.refusals.items() if kind.startswith("frag"))
    return {
        "replay": outcome.replay,
        "requests": len(trace.requests),
        "admitted_requests": len(outcome.admitted),
        "refused_requests": outcome.refused_requests,
        "refusals_capacity": outcome.refusals.get("capacity", 0),
        "refusals_fragmentation_spatial": outcome.refusals.get("fragmentation (spatial)", 0),
        "refusals_fragmentation_temporal": outcome.refusals.get("fragmentation (temporal)", 0),
        "fragmentation_refusals": fragmentation,
        "admitted_gpu_hours": float(admitted),
        "share_of_bound": float(admitted / bound) if bound else 1.0,
        "no_show_gpu_hours": float(no_show_hours),
        "released_gpu_hours": float(released),
        "reused_gpu_hours": float(reused),
        "no_show_reclaimed": float(reused / no_show_hours) if no_show_hours else 1.0,
        "contended_users": len(served),
        "refused_share_by_amount": {
            amount: refused / asked for amount, (refused, asked) in by_amount.items()
        },
        "fairness": jain_index([float(got / asked) for got, asked in served.values() if asked]),
    }


# ------------------------------------------------------------------------- report


def diagnose(trace: Trace, product: dict, by_name: dict[str, dict]) -> list[str]:
    """Why each missed target is missed, from the replays' own numbers."""
    capacity_hours, demand, resolved = fluid_bounds(trace)
    bound = min(capacity_hours, demand)
    whole = by_name["whole GPUs, best fit"]
    first = by_name["first fit"]
    notes = []
    if product["share_of_bound"] < TARGETS["share_of_bound"]:
        notes.append(
            f"Share of bound: demand is {float(demand / capacity_hours):.2f} of the capacity, but "
            f"it comes in peaks; with every request at the time it asks for, no scheduler can "
            f"admit more than the time-resolved bound integral(min(GPUs, demand(t))) = "
            f"{float(resolved / bound):.3f} of the plain bound (patience shifts only refused "
            f"requests, by at most {PATIENCE.total_seconds() / 3600:.0f} h). The product admits "
            f"{product['admitted_gpu_hours'] / float(resolved):.3f} of that time-resolved bound."
        )
    gain = product["admitted_gpu_hours"] / whole["admitted_gpu_hours"]
    if gain < TARGETS["gain_over_whole"]:
        ceiling = float(resolved) / whole["admitted_gpu_hours"]
        fractional = sum((r.gpu_hours for r in trace.requests if r.amount < 1), Fraction(0))
        notes.append(
            f"Gain over whole GPUs is {gain:.2f}x: whole-GPU booking still admits "
            f"{whole['share_of_bound']:.3f} of the bound, so even admitting the whole "
            f"time-resolved bound would be only {ceiling:.2f}x. Rounding up costs only while the "
            f"pool is full, and requests for less than a GPU are only "
            f"{float(fractional / demand):.0%} of the demanded GPU-hours."
        )
    if product["no_show_reclaimed"] < TARGETS["no_show_reclaimed"]:
        lost_waiting = product["no_show_gpu_hours"] - product["released_gpu_hours"]
        unused = product["released_gpu_hours"] - product["reused_gpu_hours"]
        notes.append(
            f"No-show reclaim: of {product['no_show_gpu_hours']:.0f} no-show GPU-h, "
            f"{lost_waiting:.0f} pass before the release rule fires and {unused:.0f} are freed "
            "but wanted by no later request (the released slot is short notice: only book-now "
            "requests and requests refused earlier can still use it)."
        )
    if product["fairness"] < TARGETS["fairness"]:
        notes.append(
            f"Fairness {product['fairness']:.3f} over {product['contended_users']} users under "
            "contention: see the refusal share by amount above; users who mostly ask for large "
            "amounts get a smaller share of their demand."
        )
    if product["fragmentation_refusals"] > TARGETS["fragmentation_refusals"]:
        notes.append(
            f"Fragmentation: {product['refusals_fragmentation_spatial']} spatial and "
            f"{product['refusals_fragmentation_temporal']} temporal refusals (first fit: "
            f"{first['refusals_fragmentation_spatial']} and {first['refusals_fragmentation_temporal']}). "
            "Spatial ones need GPUs free on one node or room on one GPU that exists only split "
            "across nodes/GPUs; temporal ones would need a booking to move between GPUs mid-way. "
            "Placement cannot move running bookings, so some remain for any online policy."
        )
    return notes


def report(trace: Trace, results: list[dict]) -> dict:
    capacity_hours, demand, resolved = fluid_bounds(trace)
    bound = min(capacity_hours, demand)
    by_name = {r["replay"]: r for r in results}
    product = results[0]
    whole = by_name["whole GPUs, best fit"]
    gain = product["admitted_gpu_hours"] / whole["admitted_gpu_hours"] if whole[
        "admitted_gpu_hours"] else math.inf
    shape = trace.shape
    print(f"\nTrace: {len(trace.requests)} requests by {shape.users} users in {len(trace.groups)} "
          f"groups over {shape.weeks} weeks; pool {trace.pool.total_gpus} GPUs in "
          f"{trace.pool.slices_per_gpu} slices; demand {float(demand):,.0f} GPU-h = "
          f"{float(demand / capacity_hours):.2f} of capacity {float(capacity_hours):,.0f} GPU-h; "
          f"fluid bound {float(bound):,.0f} GPU-h, time-resolved bound {float(resolved):,.0f} GPU-h\n")
    print(markdown_table(
        ["replay", "admitted GPU-h", "of bound", "refused requests", "capacity refusals",
         "frag. spatial", "frag. temporal", "no-show GPU-h", "reused", "reclaimed", "Jain"],
        [[r["replay"], round(r["admitted_gpu_hours"], 1), r["share_of_bound"],
          r["refused_requests"], r["refusals_capacity"], r["refusals_fragmentation_spatial"],
          r["refusals_fragmentation_temporal"], round(r["no_show_gpu_hours"], 1),
          round(r["reused_gpu_hours"], 1), r["no_show_reclaimed"], r["fairness"]]
         for r in results],
    ))
    amounts = sorted(product["refused_share_by_amount"], key=Fraction)
    print("\nShare of requests finally refused, by amount asked:\n")
    print(markdown_table(
        ["replay", *(f"{amount} GPU" for amount in amounts)],
        [[r["replay"], *(r["refused_share_by_amount"][a] for a in amounts)] for r in results],
    ))
    measured = {
        "share_of_bound": product["share_of_bound"],
        "gain_over_whole": gain,
        "no_show_reclaimed": product["no_show_reclaimed"],
        "fairness": product["fairness"],
        "fragmentation_refusals": product["fragmentation_refusals"],
    }
    rows = []
    for key, target in TARGETS.items():
        value = measured[key]
        met = value <= target if key == "fragmentation_refusals" else value >= target
        wanted = f"<= {target}" if key == "fragmentation_refusals" else f">= {target}"
        rows.append([key.replace("_", " "), wanted, value, "met" if met else "MISSED"])
    print("\nTargets (best fit, the product):\n")
    print(markdown_table(["measure", "target", "result", ""], rows))
    notes = diagnose(trace, product, by_name)
    if notes:
        print("\nWhy targets are missed:\n")
        for note in notes:
            print(f"- {note}")
    return {"targets": measured, "diagnosis": notes,
            "bound_gpu_hours": float(bound), "time_resolved_bound_gpu_hours": float(resolved)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Replay a seeded semester of lab bookings against the booking core.",
        epilog="Distributions: see benchmarks/tracegen.py and docs/benchmarks.md.",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--users", type=int, default=TraceShape.users)
    parser.add_argument("--weeks", type=int, default=TraceShape.weeks)
    parser.add_argument("--load", type=float, default=TraceShape.load,
                        help="expected offered GPU-hours as a share of the pool's GPU-hours")
    parser.add_argument("--no-show-minutes", type=int, default=30,
                        help="a booking unused this long after its start is released")
    parser.add_argument("--tiny", action="store_true",
                        help="6 users for 1 week (the smoke test)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    users, weeks = (6, 1) if args.tiny else (args.users, args.weeks)
    trace = generate(TraceShape(users=users, weeks=weeks, load=args.load), seed=args.seed)
    print_machine()
    results = [
        measure(trace, replay(trace, how, args.no_show_minutes)) for how in REPLAYS
    ]
    summary = report(trace, results)
    write_json(args.json, {"seed": args.seed, "replays": results, **summary})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
