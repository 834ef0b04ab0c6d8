"""The exact last resort of re-placing, step by step, during the lab trace's target replay.

Run from the repository root (about 5 minutes per solver on 2 quiet cores, plus the exact
check of the refusals, 0.3-1 s each for about 900; ``--tiny`` takes seconds)::

    python -m benchmarks.exact_step [--seed 1] [--solvers highs,cpsat,portfolio] [--jobs 1]
                                    [--exact-sample N] [--exact-seconds 30] [--json PATH]

For each solver (:mod:`jhub_gpubooking.core.ilp_solvers`) the target replay of
:mod:`.lab_trace` (re-placing + waitlist + start early) runs with ``place_or_move``'s exact
last resort on that solver and the service's default time limit
(``exact_moves.DEFAULT_SECONDS``), and every exact step is recorded: its wall time, the
process's CPU time (the portfolio's HiGHS thread included), the solver's answer (optimal,
infeasible, or the time ran out with or without a re-placement) and whether it admitted the
request; the longer searches that follow a step that ran out without an answer (the service's
search without the pool's lock, ``exact_moves.DEFAULT_RETRY_SECONDS``) are recorded apart.
Then every fragmentation refusal not blocked by started bookings is decided by the
exact check of :mod:`.avoidable` (``--exact-seconds`` each, with the default solver for every
replay, so the replays are judged by the same oracle). The table is the one of
docs/benchmarks.md, "CP-SAT and the portfolio for the exact last resort".

The steps are observed by wrapping ``place_exactly`` and ``solve_binary`` where the core looks
them up (for the replay only): the core has no hook for this, and a benchmark should not add one.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from unittest import mock

from jhub_gpubooking.core import exact_moves, ilp_solvers, replacement

from .common import exact_sample_size, markdown_table, percentile, print_machine, run_jobs, write_json
from .lab_trace import TARGET_REPLAY, exact_refusals, measure
from .trace_replay import re_placing, replay
from .tracegen import TraceShape, generate

#: The solvers replayed by default: each alone, then both at once.
SOLVERS = ("highs", "cpsat", "portfolio")


@dataclass
class Steps:
    """The exact steps of one replay: per step wall s, CPU s, solver status, admitted; the
    longer searches after a step ran out (``exact_moves.DEFAULT_RETRY_SECONDS``, the service's
    search without the pool's lock) are kept apart in ``retries``."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    status: list[str] = field(default_factory=list)
    admitted: list[bool] = field(default_factory=list)
    retries: Steps | None = None

    def summary(self, time_limit: float) -> dict:
        ran_out = [s for s in self.status if s in ("feasible", "unknown")]
        wall = self.wall or [0.0]
        return {
            "calls": len(self.wall),
            "time_limit_seconds": time_limit,
            "ran_out": len(ran_out),
            "ran_out_with_solution": ran_out.count("feasible"),
            "ran_out_without_solution": ran_out.count("unknown"),
            "statuses": {s: self.status.count(s) for s in sorted(set(self.status))},
            "admitted": sum(self.admitted),
            "wall_p50_s": percentile(wall, 50), "wall_p99_s": percentile(wall, 99),
            "wall_max_s": max(wall), "cpu_total_s": sum(self.cpu),
            **({"retries": self.retries.summary(exact_moves.DEFAULT_RETRY_SECONDS)}
               if self.retries is not None else {}),
        }


@contextmanager
def recording(steps: Steps):
    """Record every exact step the core takes while the block runs."""
    solve, place = exact_moves.solve_binary, replacement.place_exactly

    steps.retries = Steps()
    recorded = [steps]

    def solve_recorded(*args, **kwargs):
        answer = solve(*args, **kwargs)
        recorded[-1].status[-1] = answer.status
        return answer

    def place_recorded(*args, **kwargs):
        limit = kwargs.get("time_limit", exact_moves.DEFAULT_SECONDS)
        steps_now = steps if limit <= exact_moves.DEFAULT_SECONDS else steps.retries
        recorded.append(steps_now)
        # "no program": what stays leaves the request no GPU, so nothing was solved
        steps_now.status.append("no program")
        wall, cpu = time.perf_counter(), time.process_time()
        found = None
        try:  # raises exact_moves.RanOut when the time ran out without an answer
            found = place(*args, **kwargs)
        finally:
            steps_now.wall.append(time.perf_counter() - wall)
            steps_now.cpu.append(time.process_time() - cpu)
            steps_now.admitted.append(found is not None)
        return found

    with mock.patch.object(exact_moves, "solve_binary", solve_recorded), \
            mock.patch.object(replacement, "place_exactly", place_recorded):
        yield steps


def replay_with(solver: str, shape: TraceShape, seed: int, sample: int,
                exact_seconds: float) -> dict:
    """The target replay of ``seed`` with ``solver`` in the exact last resort, measured."""
    trace = generate(shape, seed=seed)
    how = dataclasses.replace(TARGET_REPLAY, name=f"{TARGET_REPLAY.name} ({solver})",
                              placer=functools.partial(re_placing, solver=solver))
    # the first solve imports the solver (scipy, OR-Tools): not a step's own time
    ilp_solvers.solve_binary(1, [({0: 1.0}, 0.0, 1.0)], [1.0], [], 1.0, solver=solver)
    began = time.perf_counter()
    with recording(Steps()) as steps:
        outcome = replay(trace, how)
    minutes = (time.perf_counter() - began) / 60
    measured = measure(trace, outcome)
    measured.update(exact_refusals(trace, outcome, sample, exact_seconds, seed))
    return {"solver": solver, "replay_minutes": minutes,
            "steps": steps.summary(exact_moves.DEFAULT_SECONDS), **measured}


def print_results(results: list[dict]) -> None:
    rows = []
    for r in results:
        steps, exact = r["steps"], r["fragmentation_refusals_exact"]
        rows.append([
            r["solver"], steps["calls"],
            f"{steps['ran_out']} ({steps['ran_out_with_solution']} / "
            f"{steps['ran_out_without_solution']})",
            steps["admitted"],
            f"{steps['retries']['admitted']} / {steps['retries']['calls']} "
            f"({steps['retries']['wall_max_s']:.1f})",
            f"{r['fragmentation_refusals_avoidable']} ({exact['not_blocked']}; "
            f"{exact['undecided']})",
            r["moved_bookings"], r["share_of_time_resolved_bound"], r["fairness"],
            r["no_show_reclaimed"], round(r["admitted_gpu_hours"]), r["refused_requests"],
            f"{steps['wall_p50_s']:.3f} / {steps['wall_p99_s']:.2f} / {steps['wall_max_s']:.2f}",
            round(steps["cpu_total_s"], 1), round(r["replay_minutes"], 1),
        ])
    print(markdown_table(
        ["solver", "exact step calls",
         f"ran out of {exact_moves.DEFAULT_SECONDS:g} s (with / without a solution)",
         "admitted by the step",
         f"then {exact_moves.DEFAULT_RETRY_SECONDS:g} s without the lock: admitted / calls "
         "(max s)",
         "avoidable fragmentation refusals (of not blocked; undecided)", "bookings moved",
         "share of time-resolved bound", "Jain", "no-show reclaimed", "admitted GPU-h",
         "refused requests", "step wall s p50 / p99 / max", "step CPU s", "replay min"],
        rows,
    ))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--solvers", default=",".join(SOLVERS),
                        help="comma-separated, from: " + ", ".join(ilp_solvers.SOLVERS))
    parser.add_argument("--jobs", type=int, default=1,
                        help="replay this many solvers at once, in separate processes (they "
                        "then share the cores)")
    parser.add_argument("--exact-sample", type=int, default=0,
                        help="decide only a random sample of this many refusals (0: all)")
    parser.add_argument("--exact-seconds", type=float, default=30,
                        help="time limit of each refusal's exact check")
    parser.add_argument("--tiny", action="store_true", help="6 users for 1 week (smoke test)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    solvers = [name.strip() for name in args.solvers.split(",") if name.strip()]
    for name in solvers:
        try:  # an unknown name, or CP-SAT without OR-Tools (with the pip command): before replaying
            ilp_solvers.resolve(name)
        except ValueError as error:
            parser.error(str(error))
    shape = TraceShape(users=6, weeks=1) if args.tiny else TraceShape()
    sample = exact_sample_size(args.exact_sample, args.tiny)
    jobs = [(name, shape, args.seed, sample, args.exact_seconds) for name in solvers]
    print_machine()
    results = run_jobs(replay_with, jobs, args.jobs)
    print(f"\nSeed {args.seed}, {TARGET_REPLAY.name}, one replay per solver:\n")
    print_results(results)
    write_json(args.json, {"seed": args.seed, "solvers": solvers, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
