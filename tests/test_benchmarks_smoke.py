"""The benchmark scripts run in their tiny mode, print their tables, and report numbers that
are consistent with each other; the simulator's own measures are checked on hand-made cases."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from fractions import Fraction
from pathlib import Path

import pytest

from benchmarks.common import exact_sample_size, median_ci, run_jobs
from benchmarks.lab_trace import TARGETS, jain_index, needed_gpu_hours, reused_gpu_hours
from benchmarks.trace_replay import Outcome, classify_refusal, first_fit
from benchmarks.tracegen import TraceShape, generate
from jhub_gpubooking.core.errors import NoCapacity
from jhub_gpubooking.core.model import Booking, Placement, Pool

REPO = Path(__file__).resolve().parent.parent
T0 = datetime(2026, 9, 7, 9, 0, tzinfo=timezone.utc)
POOL = Pool(name="p", slices_per_gpu=4, nodes={"n1": 2, "n2": 2})


def run_script(module: str, tmp_path: Path, *args: str) -> tuple[str, dict]:
    """Run ``python -m benchmarks.<module> --tiny`` and return its output and JSON results."""
    result_file = tmp_path / f"{module}.json"
    completed = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", "--tiny", "--json", str(result_file),
         *args],
        check=False, cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout, json.loads(result_file.read_text())


def booking(node: str, gpus: tuple[int, ...], slices: int, start_hour: float, end_hour: float,
            amount: Fraction, booking_id: int = 1) -> Booking:
    return Booking(user="u", pool="p", amount=amount, id=booking_id,
                   start=T0 + timedelta(hours=start_hour), end=T0 + timedelta(hours=end_hour),
                   placement=Placement(node, gpus, slices))


# ---------------------------------------------------------------- the scripts


# pure replays (no Hub, SQLAlchemy or tornado): one dependency set when both run (tests/one_set.py)
@pytest.mark.one_set("latest")
def test_lab_trace_prints_tables_with_consistent_numbers(tmp_path):
    output, results = run_script("lab_trace", tmp_path, "--seeds", "3,4")

    assert "| replay " in output and "Targets (re-placing + waitlist + start early), seeds 3, 4" in output
    assert "| offline optimum (ILP)" in output
    bound = results["bound_gpu_hours"]
    resolved = results["time_resolved_bound_gpu_hours"]
    assert 0 < resolved <= bound + 1e-6
    names = [r["replay"] for r in results["replays"]]
    assert names == [
        "re-placing + waitlist + start early", "re-placing + waitlist, no start early",
        "best fit + waitlist", "best fit, no waitlist",
        "first fit + waitlist", "whole GPUs, re-placing + waitlist + start early",
        "re-placing + waitlist + start early, no-show 10 min",
        "re-placing + waitlist + start early, no-show 30 min",
        "re-placing + waitlist + start early, no no-show release",
    ]
    for replay in results["replays"]:
        assert replay["admitted_requests"] + replay["refused_requests"] == replay["requests"]
        assert replay["share_of_bound"] == pytest.approx(replay["admitted_gpu_hours"] / bound)
        assert replay["share_of_time_resolved_bound"] == pytest.approx(
            replay["admitted_gpu_hours"] / resolved)
        assert replay["fragmentation_refusals"] == (
            replay["refusals_fragmentation_spatial"] + replay["refusals_fragmentation_temporal"]
        ) == (replay["fragmentation_refusals_not_blocked"]
              + replay["fragmentation_refusals_blocked_by_started"])
        assert 0 <= replay["reused_gpu_hours"] <= replay["released_gpu_hours"] + 1e-9
        assert 0 <= replay["needed_gpu_hours"] <= replay["reused_gpu_hours"] + 1e-9
        assert replay["released_gpu_hours"] <= replay["no_show_gpu_hours"] + 1e-9
        assert 0 <= replay["booked_from_waitlist"] <= replay["waited_requests"]
        assert 0 <= replay["started_early"] <= replay["start_early_offers"]
        assert 0 < replay["fairness"] <= 1
        assert all(0 <= share <= 1 for share in replay["refused_share_by_amount"].values())
    by_name = {r["replay"]: r for r in results["replays"]}
    assert by_name["best fit, no waitlist"]["waited_requests"] == 0
    assert by_name["best fit + waitlist"]["moved_bookings"] == 0
    assert by_name["re-placing + waitlist, no start early"]["start_early_offers"] == 0
    never = by_name["re-placing + waitlist + start early, no no-show release"]
    assert never["released_gpu_hours"] == never["reused_gpu_hours"] == 0
    assert never["needed_gpu_hours"] == never["no_show_needed"] == 0

    # the targets: exactly the six names, each on both seeds, the first seed's from its replays
    targets = results["targets"]
    assert list(targets) == list(TARGETS) == [
        "share_of_time_resolved_bound", "fragmentation_refusals_avoidable",
        "fragmentation_refusals_blocked_by_started", "no_show_reclaimed", "jain",
        "whole_gpu_gain",
    ]
    product = by_name["re-placing + waitlist + start early"]
    whole = by_name["whole GPUs, re-placing + waitlist + start early"]
    first = {name: entry["seeds"]["3"] for name, entry in targets.items()}
    assert first == {
        "share_of_time_resolved_bound": product["share_of_time_resolved_bound"],
        "fragmentation_refusals_avoidable": product["fragmentation_refusals_avoidable"],
        "fragmentation_refusals_blocked_by_started":
            product["fragmentation_refusals_blocked_by_started"],
        "no_show_reclaimed": product["no_show_reclaimed"],
        "jain": product["fairness"],
        "whole_gpu_gain": pytest.approx(product["admitted_gpu_hours"] / whole["admitted_gpu_hours"]),
    }
    assert all(set(entry["seeds"]) == {"3", "4"} for entry in targets.values())

    # the avoidable refusals are decided exactly (--tiny: a sample of 5) on every seed
    assert set(results["exact_avoidable"]) == {"3", "4"}
    exact = results["exact_avoidable"]["3"]
    assert exact == product["fragmentation_refusals_exact"]
    assert exact["not_blocked"] == product["fragmentation_refusals_not_blocked"]
    assert exact["checked"] == min(5, exact["not_blocked"])
    assert exact["sampled"] == (exact["not_blocked"] > 5)
    assert (exact["avoidable_proven"] + exact["not_avoidable"] + exact["undecided"]
            == exact["checked"])
    assert product["fragmentation_refusals_avoidable_ci95"] == exact["ci95"]
    low, high = exact["ci95"]
    assert 0 <= low <= first["fragmentation_refusals_avoidable"] <= high <= exact["not_blocked"]
    assert "decided exactly (an ILP each)" in output

    optimum = results["offline_optimum"]
    assert optimum["optimal"] and optimum["optimum_gpu_hours"] <= optimum["demand_gpu_hours"]
    for name, admitted in optimum["online_gpu_hours"].items():
        # the optimum is exact: no online scheduler admits more under the same rules
        assert admitted <= optimum["optimum_gpu_hours"] + 1e-9
        assert optimum["online_share_of_optimum"][name] == pytest.approx(
            admitted / optimum["optimum_gpu_hours"])


def test_exact_step_records_every_exact_step_of_each_solvers_replay(tmp_path):
    output, results = run_script("exact_step", tmp_path, "--solvers", "highs,portfolio")

    assert "| solver " in output and "| portfolio " in output
    assert results["solvers"] == ["highs", "portfolio"]
    for measured in results["results"]:
        steps = measured["steps"]
        assert steps["calls"] > 0 and sum(steps["statuses"].values()) == steps["calls"]
        assert set(steps["statuses"]) <= {"optimal", "feasible", "infeasible", "unknown",
                                          "no program"}
        assert steps["ran_out"] == (steps["ran_out_with_solution"]
                                    + steps["ran_out_without_solution"])
        assert steps["ran_out_with_solution"] == steps["statuses"].get("feasible", 0)
        # a step admits only with a re-placement, so never when the program was infeasible
        assert steps["admitted"] <= steps["calls"] - steps["statuses"].get("infeasible", 0)
        assert 0 < steps["wall_p50_s"] <= steps["wall_p99_s"] <= steps["wall_max_s"]
        exact = measured["fragmentation_refusals_exact"]
        assert exact["checked"] <= exact["not_blocked"]
        assert measured["fragmentation_refusals_avoidable"] == exact["avoidable"]
    # the core's own functions are back once the replays are done
    from benchmarks.exact_step import Steps, recording
    from jhub_gpubooking.core import exact_moves, replacement

    before = exact_moves.solve_binary, replacement.place_exactly
    with recording(Steps()):
        assert exact_moves.solve_binary is not before[0]
    assert (exact_moves.solve_binary, replacement.place_exactly) == before


def test_scaling_prints_latencies_for_both_history_sizes(tmp_path):
    output, results = run_script("scaling", tmp_path)

    assert "| backend " in output and "| sqlite " in output
    for backend in results["results"]:
        assert backend["sizes"] == {"small": 100, "large": 1000}
        for size in ("small", "large"):
            measured = backend[size]
            assert measured["creates"] == 20
            assert 0 < measured["median_ms"] <= measured["p99_ms"]
        assert backend["median_ratio"] == pytest.approx(
            backend["large"]["median_ms"] / backend["small"]["median_ms"]
        )


def test_busy_pool_splits_create_latencies_by_outcome(tmp_path):
    output, results = run_script("busy_pool", tmp_path)

    assert "| backend " in output and "| sqlite " in output
    assert results["pool"] == {"nodes": 16, "gpus_per_node": 8, "slices_per_gpu": 4}
    for backend in results["results"]:
        assert backend["upcoming"] == 300 and backend["creates"] == 20
        counts = {outcome: backend[outcome]["count"] for outcome in ("placed", "moved", "refused")}
        assert sum(counts.values()) == backend["all"]["count"] == 20
        # the tiny pool is as busy as the full one: some requests get in only by moving bookings
        assert counts["moved"] > 0 and backend["bookings_moved"] >= counts["moved"]
        for outcome in ("all", "placed", "moved"):
            measured = backend[outcome]
            assert 0 < measured["median_ms"] <= measured["p99_ms"]
            assert 0 <= measured["median_cpu_ms"] <= measured["p99_cpu_ms"]


def test_extensions_compares_extending_with_and_without_moves(tmp_path):
    output, results = run_script("extensions", tmp_path)

    assert "| backend " in output and "| sqlite " in output
    assert results["extend_by_minutes"] == 120
    by_run = {(r["backend"], r["moves"]): r for r in results["results"]}
    for (backend, moves), result in by_run.items():
        outcomes = result["extensions"]
        assert result["upcoming"] == 300 and 0 < result["running"] <= 40
        assert sum(outcomes.values()) == result["running"]
        assert 0 < result["check_p50"] <= result["check_p99"]
        assert 0 < result["extend_p50"] <= result["extend_p99"]
        if not moves:
            assert outcomes["moved"] == 0
            with_moves = by_run[(backend, True)]
            # the same running bookings; moving lets in at least as many, some only by moving
            assert with_moves["running"] == result["running"]
            assert with_moves["extensions"]["moved"] > 0
            assert with_moves["extensions"]["refused"] <= outcomes["refused"]


def test_create_cost_measures_the_services_own_cpu_per_create_and_listing(tmp_path):
    output, results = run_script("create_cost", tmp_path)

    assert "service CPU ms/create" in output and "| sqlite  | spawner (state=upcoming) " in output
    (sqlite,) = results["results"]
    assert sqlite["creates"] == 10 and sqlite["create_cpu_ms"] > 0
    # where a create's CPU goes: the request without the database, the store without HTTP,
    # and the store with the creates one per transaction and eight per transaction
    assert "request floor ms" in output and "store, 8 per transaction ms" in output
    assert sqlite["request_floor_cpu_ms"] > 0
    assert set(sqlite["store_cpu_ms"]) == {"store create", "store, one per transaction",
                                           "store, 8 per transaction"}
    assert all(cost > 0 for cost in sqlite["store_cpu_ms"].values())
    assert set(sqlite["lists"]) == {"page (start=now)", "spawner (state=upcoming)",
                                    "first page (limit=10)"}
    for cost in sqlite["lists"].values():
        assert cost["small"] > 0 and cost["ratio"] == pytest.approx(cost["large"] / cost["small"])
    assert results["targets"] == {
        "list_ratio": max(sqlite["lists"][name]["ratio"]
                          for name in ("page (start=now)", "spawner (state=upcoming)")),
        "create_cpu_ms": {"sqlite": sqlite["create_cpu_ms"]},
    }


@pytest.mark.e2e
def test_api_throughput_measures_every_operation_against_a_real_hub(tmp_path):
    output, results = run_script("api_throughput", tmp_path)

    assert "| backend | operation " in output and "create / hub req/s" in output
    (sqlite,) = results["results"]
    operations = sqlite["operations"]
    assert list(operations) == ["hub GET api/user", "booking create", "booking list",
                                "booking cancel"]
    for operation in operations.values():
        # 5 clients x 2 rounds, every request answered as expected
        assert operation["requests"] == 10 and operation["failures"] == {}
        assert 0 < operation["p50_ms"] <= operation["p99_ms"]
        cpu = operation["cpu_ms_per_request"]
        assert set(cpu) == {"clients", "hub", "proxy", "service", "cluster", "database"}
        assert all(ms >= 0 for ms in cpu.values()) and operation["cores_busy"] > 0
        assert cpu["database"] == 0  # SQLite runs inside the service
    # the service's own work shows up where it answers: ten creates cost it measurable CPU
    assert operations["booking create"]["cpu_ms_per_request"]["service"] > 0
    assert sqlite["create_vs_hub"] == pytest.approx(
        operations["booking create"]["requests_per_second"]
        / operations["hub GET api/user"]["requests_per_second"]
    )
    # creates one at a time (4) and arriving open loop (5 clients x 2) at half the Hub's rate
    latency = sqlite["latency"]
    assert [latency["unloaded create"]["requests"], latency["open-loop create"]["requests"]] == [
        4, 10]
    assert latency["open-loop create"]["failures"] == {}
    assert sqlite["open_loop_rate"] == pytest.approx(
        0.5 * operations["hub GET api/user"]["requests_per_second"])
    assert sqlite["queueing_ms"]["p99"] == pytest.approx(
        latency["open-loop create"]["p99_ms"] - latency["unloaded create"]["p99_ms"])
    assert results["targets"] == {
        "create_vs_hub": {"sqlite": sqlite["create_vs_hub"]},
        "create_cpu_ms": {"sqlite": operations["booking create"]["cpu_ms_per_request"]["service"]},
        "hub_cpu_ms": {"sqlite": operations["hub GET api/user"]["cpu_ms_per_request"]["hub"]},
        "open_loop_p99_ms": {"sqlite": latency["open-loop create"]["p99_ms"]},
    }


@pytest.mark.e2e
def test_spawn_overhead_times_both_spawners_and_the_gate(tmp_path):
    output, results = run_script("spawn_overhead", tmp_path)

    assert "| spawn, GPUBookingSpawner " in output and "gate p99 ms" in output
    assert results["spawns"] == 2 and results["gate_samples_per_spawn"] == 3
    samples = results["samples_ms"]
    # 2 timed spawns per Hub; the gate runs 3 times after each gated spawn, warm-up included
    assert len(samples["gated"]) == len(samples["plain"]) == 2
    assert len(samples["gate"]) == 3 * 3
    for kind in ("gated", "plain", "gate"):
        assert results[kind]["samples"] == len(samples[kind])
        assert 0 < results[kind]["min_ms"] <= results[kind]["median_ms"] <= results[kind]["max_ms"]
    # a spawn includes a pod's start; the gate is only the booking check before it
    assert results["gate"]["max_ms"] < results["gated"]["min_ms"]
    assert results["median_ratio"] == pytest.approx(
        results["gated"]["median_ms"] / results["plain"]["median_ms"]
    )
    # the overhead is judged on pairs: the i-th gated and plain spawns of one round
    ratios = [g / p for g, p in zip(samples["gated"], samples["plain"])]
    targets = results["targets"]
    assert targets["spawn_median_ratio"] == pytest.approx(statistics.median(ratios))
    low, high = targets["spawn_ratio_ci95"]
    assert min(ratios) <= low <= targets["spawn_median_ratio"] <= high <= max(ratios)
    assert targets["spawn_ratio_ci_coverage"] == 0.5  # two pairs: [min, max] covers only 50%
    assert targets["gate_p99_ms"] == results["gate"]["p99_ms"]
    assert targets["gate_median_ms"] == results["gate"]["median_ms"]
    # every gate costs the service and the spawner's side some CPU (a claim, a pod's settings)
    assert set(targets["gate_cpu_ms"]) == {"spawner", "service", "hub"}
    assert targets["gate_cpu_ms"]["service"] > 0 and targets["gate_cpu_ms"]["spawner"] > 0
    assert "gate CPU per load_user_options" in output
    assert "median of pair ratios" in output and "confidence interval (exact)" in output


def test_median_ci_takes_the_exact_order_statistics():
    # n = 60: ranks 22 and 39 hold the median with 97.3% (rank 23/38 would be under 95%)
    low, high, coverage = median_ci([float(i) for i in range(60, 0, -1)])
    assert (low, high) == (22.0, 39.0)
    assert coverage == pytest.approx(1 - 2 * sum(math.comb(60, i) for i in range(22)) / 2**60)
    assert coverage >= 0.95 > 1 - 2 * sum(math.comb(60, i) for i in range(23)) / 2**60
    # six samples reach 96.9% with min and max; five cannot reach 95% and say so
    assert median_ci([3, 1, 2, 6, 5, 4]) == (1, 6, pytest.approx(1 - 2 / 64))
    assert median_ci([3, 1, 2, 5, 4]) == (1, 5, pytest.approx(1 - 2 / 32))
    assert median_ci([7]) == (7, 7, 0.0)


def test_a_tiny_replay_decides_at_most_five_refusals_exactly():
    assert [exact_sample_size(n, tiny=True) for n in (0, 3, 5, 40)] == [5, 3, 5, 5]
    assert [exact_sample_size(n, tiny=False) for n in (0, 3, 40)] == [0, 3, 40]


@pytest.mark.parametrize("processes", [1, 2])
def test_run_jobs_answers_in_the_jobs_order_in_one_process_or_several(processes):
    assert run_jobs(divmod, [(7, 2), (9, 4), (5, 5)], processes) == [(3, 1), (2, 1), (1, 0)]


# ---------------------------------------------------------------- the simulator's measures


def test_trace_is_seeded_and_follows_its_shape():
    shape = TraceShape(users=5, weeks=1)
    first, again = generate(shape, seed=7), generate(shape, seed=7)

    assert first.requests == again.requests
    assert first.requests != generate(shape, seed=8).requests
    assert sum(len(members) for members in first.groups.values()) == 5
    for request in first.requests:
        assert request.start >= request.made_at.replace(second=0, microsecond=0) - timedelta(
            minutes=15)
        assert timedelta(minutes=15) <= request.length <= timedelta(hours=72)
        assert request.start.minute % 15 == 0 and request.length.seconds % 900 == 0
        assert request.amount in {a for a, _ in shape.amounts}
        assert not (request.no_show and request.used_share is not None)


def test_first_fit_takes_the_first_gpu_and_node_in_pool_order():
    half_on_n1 = booking("n1", (0,), 2, 0, 4, Fraction(1, 2))

    # best fit would top up n1/0; first fit also starts there because it comes first
    assert first_fit(POOL, [half_on_n1], T0, T0 + timedelta(hours=1), Fraction(1, 2)) == \
        Placement("n1", (0,), 2)
    assert first_fit(POOL, [half_on_n1], T0, T0 + timedelta(hours=1), Fraction(3, 4)) == \
        Placement("n1", (1,), 3)
    assert first_fit(POOL, [half_on_n1], T0, T0 + timedelta(hours=1), Fraction(2)) == \
        Placement("n2", (0, 1), 4)


def test_first_fit_refuses_like_the_core_when_nothing_fits():
    full = [booking(node, (0, 1), 4, 0, 2, Fraction(2), n) for n, node in enumerate(POOL.nodes)]

    with pytest.raises(NoCapacity):
        first_fit(POOL, full, T0, T0 + timedelta(hours=1), Fraction(1, 4))


def test_refusals_are_told_apart_by_cause():
    hour = timedelta(hours=1)
    # three quarters used on every GPU: one quarter free on each, a half fits nowhere
    quarters = [booking(node, (i,), 3, 0, 2, Fraction(3, 4), n)
                for n, (node, i) in enumerate([("n1", 0), ("n1", 1), ("n2", 0), ("n2", 1)])]
    assert classify_refusal(POOL, quarters, T0, T0 + hour, Fraction(1, 2)) == \
        "fragmentation (spatial)"
    assert classify_refusal(POOL, quarters, T0, T0 + hour, Fraction(2)) == "capacity"

    # every GPU is free for part of [0 h, 2 h), but none for all of it
    staggered = [booking("n1", (0,), 4, 0, 1, Fraction(1), 1),
                 booking("n1", (1,), 4, 1, 2, Fraction(1), 2),
                 booking("n2", (0, 1), 4, 0, 2, Fraction(2), 3)]
    assert classify_refusal(POOL, staggered, T0, T0 + 2 * hour, Fraction(1)) == \
        "fragmentation (temporal)"


def test_reused_hours_count_only_slices_beyond_what_fitted_anyway():
    no_show = booking("n1", (0,), 4, 0, 4, Fraction(1), 1)
    outcome = Outcome("case")
    outcome.released.append((no_show, T0 + timedelta(hours=1)))
    outcome.admitted = {
        1: no_show.with_changes(end=T0 + timedelta(hours=1)),
        # a half GPU on the freed GPU for 2 of the 3 released hours
        2: booking("n1", (0,), 2, 1, 3, Fraction(1, 2), 2),
        # another GPU: never counts
        3: booking("n2", (0,), 4, 0, 4, Fraction(1), 3),
    }

    assert reused_gpu_hours(POOL, outcome) == Fraction(1)
    # the pool's other three GPUs were free but for n2's first one: the pool never needed the
    # released GPU
    assert needed_gpu_hours(POOL, outcome) == 0


def test_needed_hours_count_what_the_pool_held_beyond_its_gpus_minus_the_released():
    hour = timedelta(hours=1)
    no_show = booking("n1", (0,), 4, 0, 4, Fraction(1), 1)
    outcome = Outcome("case")
    outcome.released.append((no_show, T0 + hour))
    outcome.admitted = {
        1: no_show.with_changes(end=T0 + hour),
        # from 1 h to 3 h the other three GPUs are taken: the half GPU on the freed one is
        # needed; from 3 h to 4 h n2's GPUs are free again, so its last hour is not
        2: booking("n1", (0,), 2, 1, 4, Fraction(1, 2), 2),
        3: booking("n1", (1,), 4, 0, 3, Fraction(1), 3),
        4: booking("n2", (0, 1), 4, 0, 3, Fraction(2), 4),
    }

    assert reused_gpu_hours(POOL, outcome) == Fraction(3, 2)
    assert needed_gpu_hours(POOL, outcome) == Fraction(1)


def test_jain_index_is_one_for_equal_shares_and_one_over_n_for_a_monopoly():
    assert jain_index([0.5, 0.5, 0.5]) == pytest.approx(1)
    assert jain_index([1, 0, 0, 0]) == pytest.approx(0.25)
    assert jain_index([1, 0.5]) == pytest.approx(0.9)


def test_backup_prints_its_duration_and_create_latency_around_it(tmp_path):
    output, results = run_script("backup", tmp_path)

    assert "| backend " in output and "| sqlite " in output
    # each backend with backups beside the service and inside it
    assert sorted((r["backend"], r["backups_in"]) for r in results["results"]) == sorted(
        (backend, place) for backend in {r["backend"] for r in results["results"]}
        for place in ("another process", "a thread of the service"))
    for backend in results["results"]:
        assert backend["history"] == 1000 and backend["creates"] == 20
        assert backend["backups"] >= 1 and backend["backup_seconds_median"] > 0
        # the first backup holds the whole history and the quiet phase's bookings, at least
        assert backend["bookings_in_first_backup"] >= 1000 + 20
        assert backend["backup_bytes"] > 0
        for phase in ("create_quiet", "create_during"):
            assert 0 < backend[phase]["median_ms"] <= backend[phase]["p99_ms"]
        # a backup asked to stop halfway ended (stopped, or finished first), leaving no file
        assert backend["stop_seconds"] >= 0 and isinstance(backend["stopped"], bool)
        # a restore that took away the creates made since its backup (the script checks that,
        # and that the next booking's id is new) was timed
        assert backend["restore_seconds"] > 0


def test_migration_times_an_upgrade_that_keeps_every_row(tmp_path):
    output, results = run_script("migration", tmp_path)

    assert "| backend " in output and "| sqlite " in output
    for measured in results["results"]:
        assert measured["bookings"] == 1000 and measured["from"] == "0001"
        assert measured["rows"] == {"bookings": 1000, "booking_events": 1000}
        assert measured["upgrade_seconds"] > 0
