"""Lab-trace simulation: a semester of bookings replayed against the booking core.

Run from the repository root (each re-placing replay of a seed takes about 13 minutes on 2 quiet
cores, most of it in the exact last resort of ``place_or_move``, about 3,000 calls of up to 1 s
and a few dozen longer searches of up to 10 s after those that ran out;
plus 0.3-1 s per refusal the ILP decides, about 1,000 per seed: ``--exact-sample 150`` decides
a sample; ``--tiny`` takes seconds)::

    python -m benchmarks.lab_trace [--seeds 1,2,3,4] [--users 48] [--weeks 16] [--load 0.85]
                                   [--exact-sample N] [--json results.json]

The trace (users, groups, amounts, lengths, lead times, no-shows, early stops, patience, who
joins the waitlist) is described in :mod:`benchmarks.tracegen`; the replays in
:mod:`benchmarks.trace_replay`. On the first seed the same trace is replayed side by side:

* **re-placing + waitlist + start early** — the scheduler of issue 17: best fit, and when that
  refuses, :func:`jhub_gpubooking.core.replacement.place_or_move` moves upcoming bookings (its
  exact last resort with the service's default time limit);
  refused users may wait; no-shows are released after 15 minutes, and capacity a release frees
  is offered to bookings starting within 8 hours (``core.start_early``). The targets are
  measured on this one;
* **re-placing + waitlist, no start early** — the same without start-early offers;
* **best fit + waitlist** — the same without moving bookings;
* **best fit, no waitlist** — the product before issue 17 (with the 15-minute no-show rule);
* **first fit + waitlist** — the first GPU / node that fits, in pool order (a comparison policy
  that lives only in the benchmark);
* **whole GPUs** — re-placing + waitlist + start early, every request rounded up to whole GPUs,
  as a booking system without GPU sharing does;
* **no-show 10 / 30 min, never** — re-placing + waitlist + start early with another no-show
  release time.

The other seeds replay what the targets need (re-placing + waitlist + start early, whole GPUs). Finally an
exact offline optimum (an ILP, :mod:`benchmarks.trace_optimum`) on a one-week, two-node slice
says how far the online scheduler is from what a scheduler knowing the whole week could admit.

Reported per replay: GPU-hours admitted (the amounts users asked for x booked hours) against the
fluid bound ``min(GPUs x time, total demand)`` and the time-resolved bound; refusals (every
attempt), split into *capacity* (less than the requested amount free at some moment of the
interval) and *fragmentation* (enough free in total at every moment, but no single GPU / node
holds it: *spatial* if some moment has no GPU or node with room, *temporal* if every moment has
one but not the same one throughout), and among those the ones *blocked by started bookings*
(the request does not fit even with every upcoming booking gone, so no move can help), and, for
the target replay, the others decided exactly by an ILP each (:mod:`.avoidable`: could some
re-placement of the upcoming bookings have let the request in?); GPU-hours
of no-shows reused by later bookings; Jain's fairness index of the share of demand served per
user, over the requests made while the pool was at least 75% booked over their interval.
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from datetime import datetime
from fractions import Fraction

from jhub_gpubooking.core import exact_moves
from jhub_gpubooking.core.model import Pool, format_amount
from jhub_gpubooking.core.policy import gpu_hours

from .avoidable import classify_refusals
from .common import exact_sample_size, markdown_table, print_machine, run_jobs, write_json
from .trace_optimum import optimum_report
from .trace_replay import (
    PATIENCE,
    Outcome,
    Replay,
    best_fit,
    first_fit_placer,
    re_placing,
    replay,
)
from .tracegen import Trace, TraceShape, generate

#: Start-early offers as the service makes them by default (``Lifecycle.start_early_hours``).
START_EARLY_HOURS = 8
#: The scheduler the targets are measured on.
TARGET_REPLAY = Replay("re-placing + waitlist + start early", re_placing, keep_refusals=True,
                       start_early_hours=START_EARLY_HOURS)
WHOLE_REPLAY = Replay("whole GPUs, re-placing + waitlist + start early", re_placing,
                      whole_gpus=True, start_early_hours=START_EARLY_HOURS)
REPLAYS = (
    TARGET_REPLAY,
    Replay("re-placing + waitlist, no start early", re_placing),
    Replay("best fit + waitlist", best_fit),
    Replay("best fit, no waitlist", best_fit, waitlist=False),
    Replay("first fit + waitlist", first_fit_placer),
    WHOLE_REPLAY,
    Replay("re-placing + waitlist + start early, no-show 10 min", re_placing, no_show_minutes=10,
           start_early_hours=START_EARLY_HOURS),
    Replay("re-placing + waitlist + start early, no-show 30 min", re_placing, no_show_minutes=30,
           start_early_hours=START_EARLY_HOURS),
    Replay("re-placing + waitlist + start early, no no-show release", re_placing,
           no_show_minutes=None, start_early_hours=START_EARLY_HOURS),
)
#: The other seeds replay only what the targets are computed from.
SEED_REPLAYS = (TARGET_REPLAY, WHOLE_REPLAY)

#: name -> (comparison, target); None: reported, no target. Issue 17's targets, plus the gain
#: of sharing over whole GPUs the earlier lab-trace target asked for.
TARGETS: dict[str, tuple[str, float] | None] = {
    "share_of_time_resolved_bound": (">=", 0.98),
    "fragmentation_refusals_avoidable": ("<=", 0),
    "fragmentation_refusals_blocked_by_started": None,
    "no_show_reclaimed": (">=", 0.60),
    "jain": (">=", 0.90),
    "whole_gpu_gain": (">=", 1.3),
}


# ------------------------------------------------------------------------- measures


def _slices_over(changes: list[tuple[datetime, int, int]], capacity: int) -> int:
    """Slice-seconds held beyond ``capacity - R`` while ``R`` slices are released, from
    (when, held change, released change) events."""
    over_seconds = 0
    used = released = 0
    previous = None
    for when, used_change, released_change in sorted(changes):
        if previous is not None and released:
            over = min(max(used - (capacity - released), 0), released)
            over_seconds += over * int((when - previous).total_seconds())
        used, released, previous = used + used_change, released + released_change, when
    return over_seconds


def _release_changes(outcome: Outcome) -> dict[tuple[str, int], list[tuple[datetime, int, int]]]:
    """Per GPU, the (when, held change, released change) events of the replay."""
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
    return changes


def reused_gpu_hours(pool: Pool, outcome: Outcome) -> Fraction:
    """GPU-hours of released no-show capacity that later bookings actually hold.

    While a GPU has ``R`` released slices, the bookings on it could hold at most ``S - R``
    had nothing been released; whatever they hold above that uses released slices.
    """
    capacity = pool.slices_per_gpu
    reused = sum(_slices_over(events, capacity) for events in _release_changes(outcome).values())
    return Fraction(reused, capacity * 3600)


def needed_gpu_hours(pool: Pool, outcome: Outcome) -> Fraction:
    """GPU-hours of released no-show capacity the pool as a whole needed: while ``R`` slices
    are released, whatever the pool's bookings hold beyond its slices minus ``R``.

    The same count as :func:`reused_gpu_hours` over the pool instead of each GPU, so it does
    not depend on where the scheduler put a booking: a booking placed on a released GPU while
    another GPU was free counts as reused, not as needed. It is at most the reused hours.
    """
    capacity = pool.total_gpus * pool.slices_per_gpu
    everything = [event for events in _release_changes(outcome).values() for event in events]
    return Fraction(_slices_over(everything, capacity), pool.slices_per_gpu * 3600)


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
    capacity_hours, demand, resolved = fluid_bounds(trace)
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
    needed = needed_gpu_hours(trace.pool, outcome)
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
        "fragmentation_refusals_blocked_by_started": outcome.blocked_by_started,
        # the upper bound: would fit with every upcoming booking gone (see exact_refusals)
        "fragmentation_refusals_not_blocked": fragmentation - outcome.blocked_by_started,
        "moved_bookings": outcome.moves,
        "waited_requests": outcome.waited,
        "booked_from_waitlist": outcome.from_waitlist,
        "start_early_offers": outcome.start_early_offers,
        "started_early": outcome.started_early,
        "admitted_gpu_hours": float(admitted),
        "share_of_bound": float(admitted / bound) if bound else 1.0,
        "share_of_time_resolved_bound": float(admitted / resolved) if resolved else 1.0,
        "no_show_gpu_hours": float(no_show_hours),
        "released_gpu_hours": float(released),
        "reused_gpu_hours": float(reused),
        "no_show_reclaimed": float(reused / no_show_hours) if no_show_hours else 1.0,
        "needed_gpu_hours": float(needed),
        "no_show_needed": float(needed / no_show_hours) if no_show_hours else 1.0,
        "contended_users": len(served),
        "refused_share_by_amount": {
            amount: refused / asked for amount, (refused, asked) in by_amount.items()
        },
        "fairness": jain_index([float(got / asked) for got, asked in served.values() if asked]),
    }


def exact_refusals(trace: Trace, outcome: Outcome, sample: int, time_limit: float,
                   seed: int) -> dict:
    """The target replay's fragmentation refusals decided exactly (:mod:`.avoidable`): the
    measures ``fragmentation_refusals_avoidable`` (the avoidable ones: counted, or estimated
    from a sample), its 95% interval, and the classification itself."""
    exact = classify_refusals(trace.pool, outcome.avoidable, sample, time_limit, seed)
    return {
        "fragmentation_refusals_avoidable": exact["avoidable"],
        "fragmentation_refusals_avoidable_ci95": exact["ci95"],
        "fragmentation_refusals_exact": exact,
    }


def seed_targets(product: dict, whole: dict) -> dict[str, float]:
    """The target measures of one seed, from its target replay and its whole-GPU replay."""
    gain = (product["admitted_gpu_hours"] / whole["admitted_gpu_hours"]
            if whole["admitted_gpu_hours"] else math.inf)
    return {
        "share_of_time_resolved_bound": product["share_of_time_resolved_bound"],
        "fragmentation_refusals_avoidable": product["fragmentation_refusals_avoidable"],
        "fragmentation_refusals_blocked_by_started":
            product["fragmentation_refusals_blocked_by_started"],
        "no_show_reclaimed": product["no_show_reclaimed"],
        "jain": product["fairness"],
        "whole_gpu_gain": gain,
    }


def judge_targets(by_seed: dict[int, dict[str, float]]) -> dict[str, dict]:
    """The top-level ``targets`` object: each measure on every seed, its worst, met or not."""
    judged = {}
    for name, rule in TARGETS.items():
        values = {str(seed): measured[name] for seed, measured in by_seed.items()}
        entry = {"seeds": values, "target": None, "compare": None, "met": None}
        if rule is not None:
            compare, target = rule
            worst = min(values.values()) if compare == ">=" else max(values.values())
            met = worst >= target if compare == ">=" else worst <= target
            entry.update(target=target, compare=compare, worst=worst, met=met)
        judged[name] = entry
    return judged


# ------------------------------------------------------------------------- report


def diagnose(trace: Trace, product: dict, by_name: dict[str, dict]) -> list[str]:
    """Why each missed target of the first seed is missed, from the replays' own numbers."""
    capacity_hours, demand, resolved = fluid_bounds(trace)
    bound = min(capacity_hours, demand)
    whole = by_name[WHOLE_REPLAY.name]
    notes = []
    if product["share_of_time_resolved_bound"] < 0.98:
        notes.append(
            f"Share of the time-resolved bound {product['share_of_time_resolved_bound']:.3f}: "
            f"demand is {float(demand / capacity_hours):.2f} of the capacity but comes in peaks; "
            f"the time-resolved bound integral(min(GPUs, demand(t))) is "
            f"{float(resolved / bound):.3f} of the plain bound. What is still refused is mostly "
            f"capacity ({product['refusals_capacity']} capacity vs "
            f"{product['fragmentation_refusals']} fragmentation refusals): at the peaks a request "
            f"that cannot wait more than {PATIENCE.total_seconds() / 3600:.0f} h is lost, though "
            "the bound would count the GPUs it could have used hours later."
        )
    gain = product["admitted_gpu_hours"] / whole["admitted_gpu_hours"]
    if gain < 1.3:
        fractional = sum((r.gpu_hours for r in trace.requests if r.amount < 1), Fraction(0))
        notes.append(
            f"Gain over whole GPUs {gain:.2f}x: whole-GPU booking (with the same re-placing and "
            f"waitlist) still admits {whole['share_of_time_resolved_bound']:.3f} of the "
            f"time-resolved bound, which is only {float(resolved) / whole['admitted_gpu_hours']:.2f}x "
            f"its admitted hours; requests for less than a GPU are only "
            f"{float(fractional / demand):.0%} of the demanded GPU-hours, and rounding them up "
            "costs only while the pool is full."
        )
    if product["no_show_reclaimed"] < 0.6:
        lost_waiting = product["no_show_gpu_hours"] - product["released_gpu_hours"]
        unused = product["released_gpu_hours"] - product["reused_gpu_hours"]
        notes.append(
            f"No-show reclaim {product['no_show_reclaimed']:.3f}: of "
            f"{product['no_show_gpu_hours']:.0f} no-show GPU-h, {lost_waiting:.0f} pass before "
            f"the release rule fires and {unused:.0f} are freed but wanted by no later request "
            f"or wait ({product['booked_from_waitlist']} of {product['waited_requests']} waits "
            f"were booked; {product['started_early']} of {product['start_early_offers']} "
            "bookings offered an early start took it): released time is short notice, and "
            "outside the peaks nobody needs it. Counted over the pool instead of each GPU, "
            f"only {product['no_show_needed']:.3f} of the no-show GPU-h were needed: held while "
            "the bookings held more than the pool could have without the release; the rest of "
            "the reused time landed on released GPUs while others were free."
        )
    if product["fragmentation_refusals_avoidable"] > 0:
        exact = product["fragmentation_refusals_exact"]
        low, high = exact["ci95"]
        decided = (f"all {exact['checked']} decided" if not exact["sampled"] else
                   f"estimated from {exact['checked']} sampled, 95% interval {low}-{high}")
        notes.append(
            f"Fragmentation: of {product['fragmentation_refusals']} fragmentation refusals, "
            f"{product['fragmentation_refusals_blocked_by_started']} are blocked by started "
            "bookings, which never move; of the other "
            f"{product['fragmentation_refusals_not_blocked']}, an exact check (an ILP each, "
            f"{decided}) finds {product['fragmentation_refusals_avoidable']} that some "
            "re-placement of upcoming bookings would have let in: place_or_move's exact last "
            "resort (the same ILP) has a time limit of "
            f"{exact_moves.DEFAULT_SECONDS:g} s per create under the pool's lock and "
            f"{exact_moves.DEFAULT_RETRY_SECONDS:g} s more without it, the check 30 s, so these "
            "are the ones it ran out of time on. The rest need their room themselves."
        )
    if product["fairness"] < 0.9:
        notes.append(f"Fairness {product['fairness']:.3f} over {product['contended_users']} "
                     "users under contention: large amounts are refused more often.")
    return notes


def print_replays(results: list[dict]) -> None:
    print(markdown_table(
        ["replay", "admitted GPU-h", "of time-resolved bound", "refused requests",
         "capacity refusals", "frag. spatial", "frag. temporal", "blocked by started", "moves",
         "waits booked", "started early", "no-show GPU-h", "reused", "reclaimed", "needed", "Jain"],
        [[r["replay"], round(r["admitted_gpu_hours"], 1), r["share_of_time_resolved_bound"],
          r["refused_requests"], r["refusals_capacity"], r["refusals_fragmentation_spatial"],
          r["refusals_fragmentation_temporal"], r["fragmentation_refusals_blocked_by_started"],
          r["moved_bookings"], f"{r['booked_from_waitlist']}/{r['waited_requests']}",
          f"{r['started_early']}/{r['start_early_offers']}",
          round(r["no_show_gpu_hours"], 1), round(r["reused_gpu_hours"], 1),
          r["no_show_reclaimed"], r["no_show_needed"], r["fairness"]]
         for r in results],
    ))


def report_seed(trace: Trace, results: list[dict]) -> dict:
    """Print the first seed's tables; its bounds for the JSON."""
    capacity_hours, demand, resolved = fluid_bounds(trace)
    bound = min(capacity_hours, demand)
    shape = trace.shape
    print(f"\nTrace: {len(trace.requests)} requests by {shape.users} users in {len(trace.groups)} "
          f"groups over {shape.weeks} weeks; pool {trace.pool.total_gpus} GPUs in "
          f"{trace.pool.slices_per_gpu} slices; demand {float(demand):,.0f} GPU-h = "
          f"{float(demand / capacity_hours):.2f} of capacity {float(capacity_hours):,.0f} GPU-h; "
          f"fluid bound {float(bound):,.0f} GPU-h, time-resolved bound {float(resolved):,.0f} GPU-h\n")
    print_replays(results)
    amounts = sorted(results[0]["refused_share_by_amount"], key=Fraction)
    print("\nShare of requests finally refused, by amount asked:\n")
    print(markdown_table(
        ["replay", *(f"{amount} GPU" for amount in amounts)],
        [[r["replay"], *(r["refused_share_by_amount"][a] for a in amounts)] for r in results],
    ))
    return {"bound_gpu_hours": float(bound), "time_resolved_bound_gpu_hours": float(resolved)}


def print_targets(targets: dict[str, dict], seeds: list[int]) -> None:
    print(f"\nTargets ({TARGET_REPLAY.name}), seeds {', '.join(map(str, seeds))}:\n")
    rows = []
    for name, entry in targets.items():
        wanted = "reported" if entry["target"] is None else f"{entry['compare']} {entry['target']}"
        met = "" if entry["met"] is None else ("met" if entry["met"] else "MISSED")
        rows.append([name, wanted, *(entry["seeds"][str(seed)] for seed in seeds), met])
    print(markdown_table(["measure", "target", *(f"seed {seed}" for seed in seeds), ""], rows))


def replay_seed(shape: TraceShape, seed: int, every_replay: bool, exact_sample: int = 0,
                exact_seconds: float = 30) -> list[dict]:
    """The measures of one seed's replays (all of them, or those the targets need); the
    target replay's refusals are decided exactly (all, or ``exact_sample`` of them)."""
    trace = generate(shape, seed=seed)
    results = []
    for how in REPLAYS if every_replay else SEED_REPLAYS:
        outcome = replay(trace, how)
        measured = measure(trace, outcome)
        if how is TARGET_REPLAY:
            measured.update(exact_refusals(trace, outcome, exact_sample, exact_seconds, seed))
        results.append(measured)
    return results


def print_exact(by_seed_exact: dict[int, dict]) -> None:
    print(f"\nFragmentation refusals of {TARGET_REPLAY.name} decided exactly (an ILP each):\n")
    print(markdown_table(
        ["seed", "not blocked by started", "checked", "avoidable", "not avoidable", "undecided",
         "avoidable (count or estimate)", "95% interval", "solver s"],
        [[seed, e["not_blocked"], e["checked"], e["avoidable_proven"], e["not_avoidable"],
          e["undecided"], e["avoidable"], f"{e['ci95'][0]}-{e['ci95'][1]}",
          round(e["solver_seconds"], 1)] for seed, e in by_seed_exact.items()],
    ))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Replay seeded semesters of lab bookings against the booking core.",
        epilog="Distributions: see benchmarks/tracegen.py and docs/benchmarks.md.",
    )
    parser.add_argument("--seeds", default="1,2,3,4",
                        help="comma-separated seeds; the first gets every replay and the tables")
    parser.add_argument("--seed", type=int, help="one seed only (instead of --seeds)")
    parser.add_argument("--users", type=int, default=TraceShape.users)
    parser.add_argument("--weeks", type=int, default=TraceShape.weeks)
    parser.add_argument("--load", type=float, default=TraceShape.load,
                        help="expected offered GPU-hours as a share of the pool's GPU-hours")
    parser.add_argument("--optimum-seconds", type=float, default=600,
                        help="time limit of the offline optimum's solver")
    parser.add_argument("--exact-sample", type=int, default=0,
                        help="decide only a random sample of this many of each seed's "
                        "fragmentation refusals not blocked by started bookings (an ILP each; "
                        "0: all of them)")
    parser.add_argument("--exact-seconds", type=float, default=30,
                        help="time limit of each of those ILPs")
    parser.add_argument("--jobs", type=int, default=1,
                        help="replay this many seeds at once, in separate processes")
    parser.add_argument("--tiny", action="store_true",
                        help="6 users for 1 week, a tiny optimum slice (the smoke test)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else [int(s) for s in args.seeds.split(",")]
    users, weeks = (6, 1) if args.tiny else (args.users, args.weeks)
    shape = TraceShape(users=users, weeks=weeks, load=args.load)
    print_machine()
    by_seed: dict[int, dict[str, float]] = {}
    first: dict = {}
    sample = exact_sample_size(args.exact_sample, args.tiny)
    jobs = [(shape, seed, seed == seeds[0], sample, args.exact_seconds) for seed in seeds]
    all_results = run_jobs(replay_seed, jobs, args.jobs)
    exact: dict[int, dict] = {}
    for seed, results in zip(seeds, all_results):
        trace = generate(shape, seed=seed)
        by_name = {r["replay"]: r for r in results}
        by_seed[seed] = seed_targets(results[0], by_name[WHOLE_REPLAY.name])
        exact[seed] = results[0]["fragmentation_refusals_exact"]
        if seed == seeds[0]:
            bounds = report_seed(trace, results)
            notes = diagnose(trace, results[0], by_name)
            first = {"seed": seed, "replays": results, **bounds, "diagnosis": notes}
        else:
            print(f"\nSeed {seed}: {len(trace.requests)} requests\n")
            print_replays(results)
    targets = judge_targets(by_seed)
    print_targets(targets, seeds)
    if first["diagnosis"]:
        print(f"\nWhy targets are missed (seed {seeds[0]}):\n")
        for note in first["diagnosis"]:
            print(f"- {note}")
    print_exact(exact)
    optimum = optimum_report(seeds[0], tiny=args.tiny, time_limit=args.optimum_seconds)
    write_json(args.json, {**first, "seeds": seeds, "targets": targets,
                           "by_seed": {str(k): v for k, v in by_seed.items()},
                           "exact_avoidable": {str(k): v for k, v in exact.items()},
                           "offline_optimum": optimum})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
