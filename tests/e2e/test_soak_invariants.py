"""The soak's invariant checker on hand-made snapshots: each invariant catches its violation and
stays quiet on the edge cases the live walk meets (a preempted grant, a booking made "now")."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from soak_capacity import wait_fits
from soak_invariants import (
    Extension,
    InvariantChecker,
    Restore,
    Snapshot,
    WalkFacts,
)
from soak_json import booked_hours

from jhub_gpubooking.core.lifecycle import SERVER_STATE_BOOKING_KEY
from jhub_gpubooking.core.model import Pool
from jhub_gpubooking.core.timegrid import format_time
from jhub_gpubooking.core.wire import pool_to_json

NOW = datetime(2030, 1, 7, 10, 30, 20, tzinfo=timezone.utc)
#: the service's pool JSON: A100s of 40 GiB shared in quarters with HAMi
POOLS = {"a100": pool_to_json(Pool(name="a100", nodes={"n1": 1}, slices_per_gpu=4,
                                   backend="hami", gpu_memory_mib=40960))}


def booking(id: int, start: int, end: int, *, slices: int = 2, gpu: int = 0, created=None,
            state: str | None = None, user: str = "ada", **extra) -> dict:
    """A booking JSON from minutes after 10:00 (``end`` may be fractional)."""
    at = NOW.replace(minute=0, second=0)
    start_at, end_at = at + timedelta(minutes=start), at + timedelta(minutes=end)
    return {"id": id, "user": user, "pool": "a100", "gpus": slices / 4,
            "start": format_time(start_at), "end": format_time(end_at),
            "created": format_time(created or start_at), "updated": format_time(start_at),
            "state": state or ("active" if start_at <= NOW < end_at else "ended"),
            "placement": {"node": "n1", "gpus": [gpu], "slices": slices},
            "released_end": None, "release_reason": None, **extra}


def pod(name: str, booking_id: int | None, user: str | None = None, gpu: bool = True,
        index: int = 0, slices: int = 2) -> dict:
    """A running pod on n1, made for GPU ``index`` (booking() places on GPU 0) and for a share
    of ``slices`` quarters (booking()'s default), as HAMi counts it."""
    annotations = {"hub.jupyter.org/username": user} if user else {}
    if booking_id is not None:
        annotations["gpubooking.jupyter.org/booking-id"] = str(booking_id)
        annotations["gpubooking.jupyter.org/gpu-indices"] = str(index)
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(10240 * slices),
              "nvidia.com/gpucores": str(25 * slices)} if gpu else {"cpu": "1"}
    return {"metadata": {"name": name, "namespace": "jhub", "annotations": annotations},
            "spec": {"containers": [{"resources": {"limits": limits}}], "nodeName": "n1"},
            "status": {"phase": "Running"}}


def report(booked: float, **parts: float) -> dict:
    totals = {"bookings": 1, "booked_gpu_hours": booked} | {
        f"{name}_gpu_hours": parts.get(name, 0.0)
        for name in ("used", "idle", "released", "no_show", "scheduled")}
    return {"rows": [{"key": "a100", **totals}], "total": totals}


def wait(id: int, start: int, latest_start: int, *, state: str = "waiting",
         booking_id: int | None = None, user: str = "ada", slices: int = 2) -> dict:
    """A wait JSON from minutes after 10:00 (an hour long)."""
    at = NOW.replace(minute=0, second=0)
    return {"id": id, "user": user, "pool": "a100", "gpus": f"{slices}/4",
            "start": format_time(at + timedelta(minutes=start)),
            "latest_start": format_time(at + timedelta(minutes=latest_start)),
            "minutes": 60, "state": state, "booking_id": booking_id}


def window(id: int, start: int, end: int, node: str | None = "n1") -> dict:
    """A maintenance window JSON from minutes after 10:00."""
    at = NOW.replace(minute=0, second=0)
    return {"id": id, "pool": "a100", "node": node, "reason": "soak",
            "start": format_time(at + timedelta(minutes=start)),
            "end": format_time(at + timedelta(minutes=end))}


def snapshot(bookings: list[dict], pods=(), servers=None, hours=None, waits=(),
             windows=()) -> Snapshot:
    period = (NOW.replace(minute=0, second=0), NOW + timedelta(hours=2))
    by_id = {b["id"]: b for b in bookings}
    if hours is None:
        booked = float(sum(booked_hours(b, *period) for b in bookings))
        hours = report(booked, idle=booked)
    return Snapshot(now=NOW, bookings=by_id, servers=servers or {}, pods=list(pods),
                    report=hours, report_period=period, pools=POOLS,
                    waits={w["id"]: w for w in waits}, windows={w["id"]: w for w in windows})


def check(*snapshots: Snapshot, facts: WalkFacts | None = None) -> list[str]:
    checker = InvariantChecker(grace=timedelta(0), slack=timedelta(seconds=20), max_bookings=2)
    return [v for s in snapshots for v in checker.check(s, facts or WalkFacts())]


def test_a_quiet_demo_breaks_nothing():
    bookings = [booking(1, 0, 60), booking(2, 0, 60, slices=2)]  # 2 + 2 of 4 slices
    assert check(snapshot(bookings, [pod("jupyter-ada", 1, "ada")],
                          {("ada", ""): {"ready": True}})) == []


def test_two_pods_on_one_booking():
    violations = check(snapshot([booking(1, 0, 60)], [pod("a", 1), pod("b", 1)]))
    assert violations == ["booking 1 runs 2 pods at once: jhub/a, jhub/b"]


def test_a_gpu_pod_past_its_booking_beyond_the_slack_but_not_within_an_outage():
    ended = booking(1, 0, 30)  # ended 20 s ago, exactly the slack: allowed
    assert check(snapshot([ended], [pod("a", 1)])) == []
    ended = booking(1, 0, 29.5)  # 50 s ago
    assert len(check(snapshot([ended], [pod("a", 1)]))) == 1
    facts = WalkFacts(outages=[(NOW - timedelta(seconds=45), NOW)])  # the Hub was restarting
    assert check(snapshot([ended], [pod("a", 1)]), facts=facts) == []
    assert check(snapshot([ended], [pod("a", None)])) == [
        "GPU pod jhub/a runs without a booking (None)"]
    # a server still starting when its booking ended gets no more time: the service stops it
    starting = snapshot([ended], [pod("a", 1, "ada")], {("ada", ""): {"pending": "spawn"}})
    assert len(check(starting)) == 1


def test_a_gpu_pod_on_a_booking_not_started_or_placed_elsewhere():
    on_n2 = pod("a", 1)
    on_n2["spec"]["nodeName"] = "n2"
    assert check(snapshot([booking(1, 0, 60)], [on_n2])) == [
        "GPU pod jhub/a was made for n2 GPU (0,), its booking 1 is placed on n1 GPU (0,)"]
    on_gpu_1 = pod("a", 1)
    on_gpu_1["metadata"]["annotations"]["gpubooking.jupyter.org/gpu-indices"] = "1"
    assert check(snapshot([booking(1, 0, 60)], [on_gpu_1])) == [
        "GPU pod jhub/a was made for n1 GPU (1,), its booking 1 is placed on n1 GPU (0,)"]
    pinned = pod("a", 2)
    del pinned["spec"]["nodeName"]
    pinned["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}  # pending, not bound
    assert check(snapshot([booking(2, 40, 60, state="upcoming")], [pinned])) == [
        "GPU pod jhub/a runs on booking 2, which has not started"]


def test_a_gpu_pod_must_ask_for_its_bookings_share():
    """A Hub server's pod gets exactly the booked share; a pod made outside the Hub asks for
    the same resources, none of them more (the webhook's rule)."""
    half = booking(1, 0, 60, slices=2)
    assert check(snapshot([half], [pod("jupyter-ada", 1, "ada", slices=2)])) == []
    assert check(snapshot([half], [pod("jupyter-ada", 1, "ada", slices=1)])) == [
        "GPU pod jhub/jupyter-ada asks for nvidia.com/gpu: 1, nvidia.com/gpucores: 25, "
        "nvidia.com/gpumem: 10240, its booking 1 of 0.5 GPU(s) gives nvidia.com/gpu: 1, "
        "nvidia.com/gpucores: 50, nvidia.com/gpumem: 20480"]
    assert check(snapshot([half], [pod("train", 1, slices=1)])) == []  # less: the job's choice
    greedy = pod("train", 1, slices=3)
    assert check(snapshot([half], [greedy])) == [
        "GPU pod jhub/train asks for nvidia.com/gpu: 1, nvidia.com/gpucores: 75, "
        "nvidia.com/gpumem: 30720, its booking 1 of 0.5 GPU(s) gives nvidia.com/gpu: 1, "
        "nvidia.com/gpucores: 50, nvidia.com/gpumem: 20480"]
    unlimited = pod("train", 1)
    del unlimited["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"]
    assert len(check(snapshot([half], [unlimited]))) == 1  # a share without a memory limit


def restore(undone: set[int], *, up_ago: int = 10, bookings=(), waits=(),
            last_id: int = 3) -> Restore:
    up = NOW - timedelta(seconds=up_ago)
    return Restore(down=up - timedelta(seconds=30), up=up, bookings={b["id"]: b for b in bookings},
                   waits={w["id"]: w for w in waits}, undone=frozenset(undone), last_id=last_id)


def test_a_restore_has_the_slack_to_stop_what_runs_on_what_it_undid():
    # bob's booking 1 is gone, carol's 2 is back before its start, dan's 3 back on another node
    running = snapshot(
        [booking(1, 0, 60, user="bob"), booking(2, 0, 60, user="carol", gpu=1, created=NOW),
         booking(3, 0, 60, user="dan")],
        [pod("jupyter-bob", 1, "bob"), pod("jupyter-carol", 2, "carol", index=1), pod("train", 3)],
        {("bob", ""): {"ready": True}, ("carol", ""): {"ready": True}})
    running.pods[2]["spec"]["nodeName"] = "n1"
    running.now = NOW - timedelta(minutes=2)  # the servers ran before the restore
    moved = {**booking(3, 0, 60, user="dan"), "placement": {"node": "n2", "gpus": [0],
                                                            "slices": 2}}
    carols = booking(2, 40, 60, user="carol", gpu=1, state="upcoming", created=NOW)
    restored = snapshot([carols, moved], running.pods, running.servers)
    facts = WalkFacts(restores=[restore({1, 2, 3})])
    checker = InvariantChecker(grace=timedelta(0), slack=timedelta(seconds=20))
    assert checker.check(running, WalkFacts()) == []
    checker.restored(restore({1, 2, 3}, bookings=[carols, moved]), given={1, 2, 3})
    assert checker.check(restored, facts) == []  # within the slack of the hub's return
    late = WalkFacts(restores=[restore({1, 2, 3}, up_ago=60)])
    assert [v.split(" after the restore")[0] for v in checker.check(restored, late)] == [
        "GPU pod jhub/jupyter-bob runs without a booking (1) 0:01:00",
        "GPU pod jhub/jupyter-carol runs on booking 2, which has not started 0:01:00",
        "GPU pod jhub/train was made for n1 GPU (0,), its booking 3 is placed on n2 GPU (0,) "
        "0:01:00"]
    # the servers it stopped: bob's and carol's may go, but not one on a booking given back
    # that covers it
    assert checker.check(snapshot([carols, moved]), facts) == []
    kept_back = [booking(1, 0, 60, user="bob", server=None)]
    checker = InvariantChecker(grace=timedelta(0), slack=timedelta(seconds=20))
    checker.check(running, WalkFacts())
    checker.restored(restore({1, 2, 3}, bookings=kept_back), given={1, 2, 3})
    assert checker.check(snapshot(kept_back), facts) == [
        "server bob/ (booking 1) stopped while its booking was still active and nobody "
        "stopped it"]
    # ... unless it came back placed elsewhere than the server's pod was made for
    moved_back = [booking(1, 0, 60, user="bob", server=None, gpu=1)]
    checker = InvariantChecker(grace=timedelta(0), slack=timedelta(seconds=20))
    checker.check(running, WalkFacts())
    checker.restored(restore({1, 2, 3}, bookings=moved_back), given={1, 2, 3})
    assert checker.check(snapshot(moved_back), facts) == []
    # ... or its booking had ended, so the service was stopping it, and the restore gave back
    # the backup's longer booking
    ending = snapshot([booking(1, 0, 2, user="bob")], running.pods, running.servers)
    checker = InvariantChecker(grace=timedelta(0), slack=timedelta(seconds=20))
    checker.check(running, WalkFacts())
    checker.check(ending, WalkFacts())  # the server is still there: its stop is under way
    checker.restored(restore({1, 2, 3}, bookings=kept_back), given={1, 2, 3})
    assert checker.check(snapshot(kept_back), facts) == []


def test_a_restore_lists_the_backups_bookings_and_gives_no_id_twice():
    kept = booking(1, 0, 60)
    changed = booking(2, 40, 60, gpu=1, state="upcoming", created=NOW)
    checker = InvariantChecker(grace=timedelta(0), slack=timedelta(seconds=20))
    before = snapshot([kept, {**changed, "state": "cancelled"}, booking(3, 0, 60, gpu=2)])
    assert checker.check(before, WalkFacts()) == []
    checker.restored(restore({2, 3}, bookings=[kept, changed]), given={1, 2, 3})
    # 3 is gone, 2 is upcoming again, 4 is new: all as a restore leaves them
    assert checker.check(snapshot([kept, changed, booking(4, 0, 60, gpu=3)]), WalkFacts()) == []
    checker = InvariantChecker(grace=timedelta(0), slack=timedelta(seconds=20))
    checker.check(before, WalkFacts())
    checker.restored(restore({2, 3}, bookings=[kept, changed]), given={1, 2, 3})
    assert checker.check(snapshot([kept, booking(3, 0, 60, gpu=2, user="bob")]),
                         WalkFacts()) == [
        "booking 2 (ada: 0.5 of a100) is no longer listed",
        "booking id 3 was given twice: made as {'user': 'ada', 'pool': 'a100', 'gpus': 0.5, "
        "'created': '2030-01-07T10:00:00Z'}, now {'user': 'bob', 'pool': 'a100', 'gpus': 0.5, "
        "'created': '2030-01-07T10:00:00Z'}",
        "booking 3 is neither the backup's nor made after the restore (ids up to 3 were given "
        "before it)"]
    assert checker.given_ids() == {1, 2, 3}


def test_a_server_stopped_while_its_booking_runs():
    running = snapshot([booking(1, 0, 60)], [pod("jupyter-ada", 1, "ada")],
                       {("ada", ""): {"ready": True}})
    gone = snapshot([booking(1, 0, 60)])
    assert len(check(running, gone)) == 1
    # its user stopped it, or its booking ended: fine
    facts = WalkFacts(user_stops={("ada", ""): NOW})
    assert check(running, gone, facts=facts) == []
    assert check(running, snapshot([booking(1, 0, 30, state="ended")])) == []
    # a grant preempted by a booking starting later: its server yields now
    preempted = booking(1, 0, 31, opportunistic=True, release_reason="preempted")
    assert check(running, snapshot([preempted])) == []


def test_a_server_first_seen_after_a_restore_took_its_booking_may_be_stopped():
    """bob's server came up just before the hub's stop for a restore that took its booking 1
    away; the walk deleted its pod as the restore said before it saw the server ready. Its
    state names the booking, and it started before the restore, so the service may stop it."""
    started = format_time(NOW - timedelta(minutes=2))
    server = {"ready": True, "started": started, "state": {SERVER_STATE_BOOKING_KEY: 1}}
    facts = WalkFacts(restores=[restore({1})])
    assert check(snapshot([], servers={("bob", ""): server}), snapshot([]), facts=facts) == []
    # a server that started after the restore gets no such excuse
    server["started"] = format_time(NOW)
    assert check(snapshot([], servers={("bob", ""): server}), snapshot([]), facts=facts) == [
        "server bob/ (booking 1) stopped while its booking does not exist and nobody stopped it"]


def test_an_extended_server_must_outlive_the_old_end():
    extended = booking(1, 0, 40)
    facts = WalkFacts(extensions=[Extension(1, ("ada", ""), NOW - timedelta(minutes=1),
                                            NOW - timedelta(minutes=2))])
    assert len(check(snapshot([extended]), facts=facts)) == 1
    facts.extensions[0].checked = False
    running = snapshot([extended], [pod("p", 1, "ada")], {("ada", ""): {"ready": True}})
    assert check(running, facts=facts) == []
    # ended now after the extension, and the server stopped; then a restore gave back the
    # extended booking, so its end is later than the stop: the restore undid what stopped it
    facts.extensions[0].checked = False
    facts.restores.append(restore({1}))
    assert check(snapshot([extended]), facts=facts) == []


def test_overbooking_counts_a_booking_from_its_creation():
    full = booking(1, 0, 60, slices=4)
    assert len(check(snapshot([full, booking(2, 20, 40, slices=1)]))) == 1
    # an opportunistic grant cut back to the slot's start by a booking made "now" within it
    grant = booking(1, 30, 30.2, slices=4, opportunistic=True, release_reason="preempted")
    made_now = booking(2, 30, 60, slices=4, created=NOW)
    assert check(snapshot([grant, made_now])) == []


def test_overbooking_counts_a_booking_started_early_from_its_move():
    ended_now = booking(1, 0, 30, slices=4)  # a whole GPU, its user ended it at 10:30
    # another booking took the offer to start in the running slot, which began at 10:29
    moved = booking(2, 29, 89, slices=4, created=NOW - timedelta(hours=1))
    assert len(check(snapshot([ended_now, moved]))) == 1
    assert check(snapshot([ended_now, moved]),
                 facts=WalkFacts(started_early={2: NOW.replace(second=0)})) == []


def test_the_accounting_must_add_up_and_match_the_bookings():
    bookings = [booking(1, 0, 60)]  # half a GPU for an hour: 0.5 GPU-hours
    assert check(snapshot(bookings, hours=report(0.5, used=0.2, idle=0.3))) == []
    assert len(check(snapshot(bookings, hours=report(0.5, used=0.2, idle=0.2)))) == 2  # row, total
    assert len(check(snapshot(bookings, hours=report(0.6, used=0.3, idle=0.3)))) == 1


def test_a_pod_claim_must_end_with_its_pod():
    claimed = booking(1, 0, 60, server="pod:jobs-ada/train-1")
    pod_there = pod("train-1", 1)
    pod_there["metadata"]["namespace"] = "jobs-ada"
    checker = InvariantChecker(grace=timedelta(0), slack=timedelta(seconds=20))
    assert checker.check(snapshot([claimed], [pod_there]), WalkFacts()) == []
    assert checker.checks["pod claims end with their pod"] == 1
    # the pod is gone: the claim may stay while the service waits for a pod being created
    gone = snapshot([claimed])
    assert checker.check(gone, WalkFacts()) == []
    later = snapshot([claimed])
    later.now = NOW + timedelta(seconds=79)
    assert checker.check(later, WalkFacts()) == []
    later.now = NOW + timedelta(seconds=81)
    assert checker.check(later, WalkFacts()) == [
        "booking 1 is still claimed by pod jobs-ada/train-1 0:01:21 after the pod was gone "
        "(allowed 0:01:20)"]
    # released: nothing left to watch
    assert checker.check(snapshot([booking(1, 0, 60)]), WalkFacts()) == []


def test_a_booked_wait_names_its_own_booking():
    made = booking(7, 10, 70)  # ada's half GPU from 10:10, "gpus" 0.5 where the wait says 2/4
    assert check(snapshot([made], waits=[wait(1, 0, 10, state="booked", booking_id=7)])) == []
    assert check(snapshot([made], waits=[wait(1, 0, 10, state="booked", booking_id=8)])) == [
        "wait 1 was booked as booking 8, which does not exist"]
    assert check(snapshot([made], waits=[wait(1, 0, 10, state="booked", booking_id=7),
                                         wait(2, 0, 10, state="booked", booking_id=7)])) == [
        "booking 7 was made for waits 1 and 2"]
    assert check(snapshot([made], waits=[
        wait(1, 0, 10, state="booked", booking_id=7, user="bob", slices=1)])) == [
        "wait 1 asked for ('bob', 'a100', Fraction(1, 4)), its booking 7 is "
        "('ada', 'a100', Fraction(1, 2))"]
    assert len(check(snapshot([made], waits=[wait(1, 0, 5, state="booked", booking_id=7)]))) == 1


def test_a_booked_wait_started_early_may_start_before_its_window():
    # the wait asked for 10:20..10:30; its booking then took the offer to start at 10:10
    moved = snapshot([booking(7, 10, 70)], waits=[wait(1, 20, 30, state="booked", booking_id=7)])
    assert check(moved, facts=WalkFacts(started_early={7: NOW})) == []
    assert check(moved) == ["wait 1 may start 2030-01-07T10:20:00Z..2030-01-07T10:30:00Z, its "
                            "booking 7 starts 2030-01-07T10:10:00Z"]
    # but never after its latest start
    late = snapshot([booking(7, 40, 70)], waits=[wait(1, 20, 30, state="booked", booking_id=7)])
    assert len(check(late, facts=WalkFacts(started_early={7: NOW}))) == 1


def test_a_wait_that_ended_stays_as_it_ended():
    booked = snapshot([booking(7, 10, 70)], waits=[wait(1, 0, 10, state="booked", booking_id=7)])
    again = snapshot([booking(7, 10, 70)], waits=[wait(1, 0, 40)])
    assert check(booked, again) == ["wait 1 ended ('booked', 7) and is now ('waiting', None)"]
    withdrawn = snapshot([], waits=[wait(1, 0, 40, state="withdrawn")])
    assert check(withdrawn, withdrawn) == []


def test_a_wait_expires_one_slot_after_its_latest_start():
    # its last slot, 10:29-10:30, ended 20 s ago: the slack
    assert check(snapshot([], waits=[wait(1, 0, 29)])) == []
    late = snapshot([], waits=[wait(1, 0, 28)])  # ended 80 s ago
    assert check(late) == ["wait 1 still waits 0:01:20 after its last slot ended (allowed 0:00:20)"]
    facts = WalkFacts(outages=[(NOW - timedelta(minutes=2), NOW)])  # the service was restarting
    assert check(late, facts=facts) == []
    assert check(snapshot([], waits=[wait(1, 0, 28, state="expired")])) == []


def test_no_booking_holds_a_gpu_under_maintenance():
    on_n1 = booking(1, 30, 40)
    elsewhere = booking(2, 30, 40, placement={"node": "n2", "gpus": [0], "slices": 2})
    before = booking(3, 0, 30)  # ends where the window starts
    cancelled = booking(4, 30, 40, state="cancelled")
    quiet = [elsewhere, before, cancelled]
    assert check(snapshot(quiet, windows=[window(5, 30, 35)])) == []
    assert check(snapshot([on_n1, *quiet], windows=[window(5, 30, 35)])) == [
        "booking 1 (2030-01-07T10:30:00Z..2030-01-07T10:40:00Z on n1) holds a GPU under "
        "maintenance window 5 (2030-01-07T10:30:00Z..2030-01-07T10:35:00Z on n1 of a100)"]
    # a window on the whole pool covers every node
    assert len(check(snapshot(quiet, windows=[window(5, 30, 35, node=None)]))) == 1
    # a collision the admin was told about and could not clear is theirs to handle
    assert check(snapshot([on_n1], windows=[window(5, 30, 35)]),
                 facts=WalkFacts(uncleared={(5, 1)})) == []


def test_a_wait_that_fits_is_booked_within_the_slack():
    full = booking(1, 0, 60, slices=4)  # the one GPU, until 11:00
    half = booking(2, 0, 60, slices=2)
    waiting = wait(1, 30, 45)  # half a GPU for an hour, starting 10:30..10:45
    checker = InvariantChecker(grace=timedelta(0), slack=timedelta(seconds=20), max_bookings=2)

    def at(seconds: int, *bookings: dict, windows=(), user_bookings=()) -> list[str]:
        taken = snapshot([*bookings, *user_bookings], waits=[waiting], windows=windows)
        taken.now = NOW + timedelta(seconds=seconds)
        # these snapshots swap bookings in and out, which no walk shows: only the waits count
        # here ("nothing is lost" has its own test)
        return [v for v in checker.check(taken, WalkFacts()) if not v.startswith("booking ")]

    assert at(0, full) == [] and checker.checks["waits that fit are booked"] == 1
    # half the GPU is free from now: the service has the slack to book the wait
    assert at(0, half) == [] and at(20, half) == []
    assert at(21, half) == [
        "wait 1 (ada: 2/4 of a100 for 60 min, from 2030-01-07T10:30:00Z to "
        "2030-01-07T10:45:00Z) still waits 0:00:21 after its request fitted (allowed 0:00:20)"]
    # not fitting for a moment starts the count again
    assert at(22, full) == [] and at(40, half) == [] and at(60, half) == []
    # a maintenance window on the node, or a user at the booking limit: nothing to book
    assert at(90, half, windows=[window(5, 60, 65)]) == []
    ada = [booking(8, 100, 110, user="ada", state="upcoming"),
           booking(9, 120, 130, user="ada", state="upcoming")]
    assert at(200, half, user_bookings=ada) == []
    assert at(201, half) == [] and at(250, full) == []
    # a booking that ended holds nothing, even in the running slot
    assert at(300, booking(3, 0, 30, slices=4)) == []
    assert len(at(321, booking(3, 0, 30, slices=4))) == 1
    # later in its window: only its last start, 10:45, fits after a booking ending then
    late, minute = wait(2, 30, 45), timedelta(minutes=1)
    assert not wait_fits(late, snapshot([booking(4, 0, 46, slices=4)], waits=[late]), minute)
    assert wait_fits(late, snapshot([booking(4, 0, 45, slices=4)], waits=[late]), minute)


def test_nothing_listed_is_lost_and_no_booking_goes_back():
    made = NOW - timedelta(minutes=1)
    upcoming = booking(1, 40, 50, state="upcoming", created=made)
    listed = snapshot([upcoming, booking(2, 0, 60)], waits=[wait(1, 0, 40)])
    # it starts early, its end moves, a wait is booked: each is life moving on
    moved_on = snapshot([booking(1, 0, 70, created=made), booking(2, 0, 60)],
                        waits=[wait(1, 0, 40, state="booked", booking_id=1)])
    assert check(listed, moved_on) == []
    assert check(listed, snapshot([booking(2, 0, 60)])) == [
        "booking 1 (ada: 0.5 of a100) is no longer listed",
        "wait 1 (ada: 2/4 of a100) is no longer listed"]
    # what it was made as stays: whose it is, its pool, its share, when it was made
    assert check(listed, snapshot([{**upcoming, "user": "bob"}, booking(2, 0, 60)],
                                  waits=[wait(1, 0, 40)])) == [
        "booking 1 was made as {'user': 'ada', 'pool': 'a100', 'gpus': 0.5, 'created': "
        "'2030-01-07T10:29:20Z'}, now shows {'user': 'bob', 'pool': 'a100', 'gpus': 0.5, "
        "'created': '2030-01-07T10:29:20Z'}"]
    ended, cancelled = booking(2, 0, 30, state="ended"), booking(2, 0, 30, state="cancelled")
    assert check(snapshot([ended]), snapshot([booking(2, 0, 30, state="active")])) == [
        "booking 2 went from ended to active"]
    assert check(snapshot([ended]), snapshot([cancelled])) == [
        "booking 2 went from ended to cancelled"]
    back = booking(2, 40, 60, state="upcoming", created=NOW.replace(minute=0, second=0))
    assert check(snapshot([booking(2, 0, 60)]), snapshot([back])) == [
        "booking 2 went from active to upcoming"]


def test_a_server_start_is_decided_within_the_slack():
    checker = InvariantChecker(grace=timedelta(0), slack=timedelta(seconds=20),
                               start_slack=timedelta(seconds=60))

    def at(seconds: int, pending: str | None = "spawn", facts=None) -> list[str]:
        taken = snapshot([], servers={("ada", "gpu"): {"ready": False, "pending": pending}})
        taken.now = NOW + timedelta(seconds=seconds)
        return checker.check(taken, facts or WalkFacts())

    assert at(0) == [] and at(60) == [] and checker.checks["server starts are decided"] == 2
    assert at(61) == ["server ada/gpu still starting 0:01:01 after its start (allowed 0:01:00)"]
    # a Hub restart in the meantime gives it that long again
    restarted = WalkFacts(outages=[(NOW + timedelta(seconds=10), NOW + timedelta(seconds=40))])
    assert at(61, facts=restarted) == []
    # ready, or stopped, and a new start counts from its own beginning
    assert at(62, pending=None) == [] and at(200) == [] and at(260) == []
