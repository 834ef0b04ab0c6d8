"""Moving upcoming bookings to let a request in, against a brute-force oracle (hypothesis).

The oracle knows nothing about ejection chains: it tries every placement of every movable
booking and of the request, checking every hour, and counts the fewest bookings moved. Pools
are at most 2 nodes x 3 GPUs with 1, 2 or 4 slices per GPU, with at most 7 bookings. The
bounded search (large pools: a short chain, then repacking) is checked for soundness on those
and on pools above the exact limit, where no oracle is fast enough.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from fractions import Fraction
from unittest import mock

from hypothesis import event, given, settings, target
from hypothesis import strategies as st

from jhub_gpubooking.core import replacement
from jhub_gpubooking.core.errors import NoCapacity
from jhub_gpubooking.core.model import Booking, MaintenanceWindow, Placement, Pool
from jhub_gpubooking.core.placement import place
from jhub_gpubooking.core.replacement import (
    BOUNDED_MOVES,
    EXACT_GPUS,
    EXACT_MOVABLE,
    Replacement,
    is_movable,
    place_or_move,
)

HOURS = 8
NOW_HOUR = 2  # bookings starting before this have started and never move
DAY = datetime(2026, 11, 22, tzinfo=timezone.utc)
core_settings = settings(max_examples=300, deadline=None)


def hour(h: float) -> datetime:
    return DAY + timedelta(hours=h)


NOW = hour(NOW_HOUR)


# ---------------------------------------------------------------- the oracle


def candidates(pool: Pool, amount: Fraction) -> list[Placement]:
    """Every placement ``amount`` could take, regardless of what is in use."""
    if amount < 1:
        slices = int(amount * pool.slices_per_gpu)
        return [Placement(node, (i,), slices) for node, count in pool.nodes.items()
                for i in range(count)]
    wanted = int(amount)
    found = []
    for node, count in pool.nodes.items():
        for mask in range(1 << count):
            gpus = tuple(i for i in range(count) if mask >> i & 1)
            if len(gpus) == wanted:
                found.append(Placement(node, gpus, pool.slices_per_gpu))
    return found


def overbooked(pool, placed: list[tuple[int, int, Placement]], maintenance) -> bool:
    """Does any GPU hold more than its slices during any hour? ``placed``: (start, end, where)."""
    for h in range(HOURS):
        used = {(node, i): 0 for node, count in pool.nodes.items() for i in range(count)}
        for start, end, where in placed:
            if start <= h < end:
                for i in where.gpus:
                    used[(where.node, i)] += where.slices
        for node, i in used:
            if any(w.start <= hour(h) < w.end and w.covers(node) for w in maintenance):
                used[(node, i)] += pool.slices_per_gpu
        if any(slices > pool.slices_per_gpu for slices in used.values()):
            return True
    return False


def hours_of(booking: Booking) -> tuple[int, int]:
    return int((booking.start - DAY) / timedelta(hours=1)), int((booking.end - DAY) / timedelta(hours=1))


def oracle_fewest_moves(pool, bookings, maintenance, request) -> int | None:
    """The fewest movable bookings to move so that the request fits, None if no way exists."""
    fixed = [(*hours_of(b), b.placement) for b in bookings if not is_movable(b, NOW)]
    movable = [b for b in bookings if is_movable(b, NOW)]
    best: int | None = None

    def search(index: int, chosen: list, moves: int) -> None:
        nonlocal best
        if best is not None and moves >= best:
            return
        if overbooked(pool, fixed + chosen, maintenance):
            return
        if index == len(movable):
            best = moves
            return
        booking = movable[index]
        start, end = hours_of(booking)
        for where in candidates(pool, booking.amount):
            search(index + 1, [*chosen, (start, end, where)],
                   moves + (where != booking.placement))

    start, end, amount = request
    for where in candidates(pool, amount):
        search(0, [(start, end, where)], 0)
    return best


# ---------------------------------------------------------------- strategies


def bookable_amounts(pool: Pool) -> list[Fraction]:
    fractions = [Fraction(k, pool.slices_per_gpu) for k in range(1, pool.slices_per_gpu)]
    return fractions + [Fraction(n) for n in range(1, max(pool.nodes.values()) + 1)]


@st.composite
def pools(draw) -> Pool:
    nodes = {f"n{k}": draw(st.integers(1, 3)) for k in range(draw(st.integers(1, 2)))}
    return Pool(name="p", nodes=nodes, slices_per_gpu=draw(st.sampled_from([1, 2, 4])))


@st.composite
def intervals(draw, earliest: int = 0) -> tuple[int, int]:
    start = draw(st.integers(earliest, HOURS - 1))
    return start, draw(st.integers(start + 1, HOURS))


@st.composite
def scenarios(draw, pools=pools, most=7):
    """A pool, maybe maintenance, bookings placed anywhere they fit (fragmenting the pool on
    purpose, unlike best fit), some started or claimed, and a request."""
    pool = draw(pools())
    maintenance = []
    if draw(st.booleans()):
        start, end = draw(intervals())
        maintenance.append(MaintenanceWindow(pool.name, hour(start), hour(end),
                                             node=draw(st.sampled_from([None, *pool.nodes]))))
    bookings: list[Booking] = []
    placed: list[tuple[int, int, Placement]] = []
    for n in range(draw(st.integers(0, most))):
        # mostly upcoming (movable) ones, some started
        start, end = draw(intervals(earliest=NOW_HOUR - 1))
        amount = draw(st.sampled_from(bookable_amounts(pool)))
        where = draw(st.sampled_from(candidates(pool, amount)))
        if overbooked(pool, [*placed, (start, end, where)], maintenance):
            continue
        placed.append((start, end, where))
        claimed = draw(st.booleans()) and draw(st.booleans())
        bookings.append(Booking(f"u{n}", pool.name, amount, hour(start), hour(end), where,
                                id=n + 1, server="" if claimed else None))
    start, end = draw(intervals(earliest=NOW_HOUR))
    # mostly requests that the bookings' GPUs make hard to place
    later = [b for b in bookings if hours_of(b)[1] > NOW_HOUR]
    if later and draw(st.booleans()):
        busy = draw(st.sampled_from(later))
        start, end = max(NOW_HOUR, hours_of(busy)[0]), hours_of(busy)[1]
    return pool, maintenance, bookings, (start, end, draw(st.sampled_from(bookable_amounts(pool))))


def assert_sound(pool, maintenance, bookings, request, found: Replacement) -> None:
    """The answer keeps every rule: only movable bookings move, each once, keeping its amount,
    times and one node, and nothing is overbooked afterwards."""
    start, end, amount = request
    assert found.placement in candidates(pool, amount)
    moved = {move.booking.id: move.placement for move in found.moves}
    assert len(moved) == len(found.moves)
    by_id = {b.id: b for b in bookings}
    for move in found.moves:
        assert move.booking == by_id[move.booking.id]
        assert is_movable(move.booking, NOW)
        assert move.placement != move.booking.placement
        assert move.placement in candidates(pool, move.booking.amount)
    after = [(*hours_of(b), moved.get(b.id, b.placement)) for b in bookings]
    assert not overbooked(pool, [*after, (start, end, found.placement)], maintenance)


def assert_as_the_oracle(pool, maintenance, bookings, request,
                         found: Replacement | None) -> None:
    """``found`` (None: refused) is what the brute-force oracle says: refused only when no
    re-placement admits the request, else sound and moving no more bookings than needed."""
    fewest = oracle_fewest_moves(pool, bookings, maintenance, request)
    if found is None:
        event("refused")
        assert fewest is None, "refused although moving upcoming bookings admits the request"
        return
    event(f"placed with {len(found.moves)} moves")
    target(len(found.moves))
    assert fewest is not None
    assert len(found.moves) == fewest, "more bookings moved than needed"
    assert_sound(pool, maintenance, bookings, request, found)


# ---------------------------------------------------------------- properties


@core_settings
@given(scenarios())
def test_never_refuses_when_some_replacement_admits_the_request(scenario):
    pool, maintenance, bookings, request = scenario
    # the exact search
    assert sum(is_movable(b, NOW) for b in bookings) <= EXACT_MOVABLE
    assert pool.total_gpus <= EXACT_GPUS
    start, end, amount = request
    try:
        found = place_or_move(pool, bookings, hour(start), hour(end), amount, NOW, maintenance)
    except NoCapacity:
        found = None
    assert_as_the_oracle(pool, maintenance, bookings, request, found)
    if found is not None and not found.moves:
        # nothing to move: exactly the plain best fit
        assert found.placement == place(pool, bookings, hour(start), hour(end), amount,
                                        maintenance)


# ---------------------------------------------------------------- examples


POOL = Pool(name="p", nodes={"n0": 2, "n1": 2}, slices_per_gpu=4)


def quarter(user: str, node: str, gpu: int, start: float, end: float, **changes) -> Booking:
    return Booking(user, "p", Fraction(1, 4), hour(start), hour(end),
                   Placement(node, (gpu,), 1), id=ord(user), **changes)


def test_a_whole_gpu_gets_in_by_moving_one_quarter():
    # each GPU of n0 holds one upcoming quarter; n1 is under maintenance: a whole GPU fits only
    # if one quarter joins the other
    bookings = [quarter("a", "n0", 0, 3, 5), quarter("b", "n0", 1, 3, 5)]
    maintenance = [MaintenanceWindow("p", hour(0), hour(8), node="n1")]
    found = place_or_move(POOL, bookings, hour(4), hour(6), Fraction(1), NOW, maintenance)
    assert len(found.moves) == 1
    move = found.moves[0]
    assert move.placement.node == "n0" and move.placement.gpus != move.booking.placement.gpus
    assert found.placement == Placement("n0", move.booking.placement.gpus, 4)


def test_started_and_claimed_bookings_never_move():
    maintenance = [MaintenanceWindow("p", hour(0), hour(8), node="n1")]
    started = [quarter("a", "n0", 0, 1, 5), quarter("b", "n0", 1, 3, 5)]
    # the started one stays; the upcoming one can still join it
    found = place_or_move(POOL, started, hour(4), hour(6), Fraction(1), NOW, maintenance)
    assert [move.booking.user for move in found.moves] == ["b"]
    claimed = [quarter("a", "n0", 0, 1, 5), quarter("b", "n0", 1, 3, 5, server="")]
    try:
        place_or_move(POOL, claimed, hour(4), hour(6), Fraction(1), NOW, maintenance)
    except NoCapacity as refused:
        assert refused.message.startswith("No p capacity for 1 GPU")
    else:
        raise AssertionError("a claimed booking was moved")
    opportunistic = [quarter("a", "n0", 0, 3, 5, opportunistic=True),
                     quarter("b", "n0", 1, 3, 5, opportunistic=True)]
    assert not any(is_movable(b, NOW) for b in opportunistic)


def test_a_booking_reaching_outside_the_known_interval_stays():
    maintenance = [MaintenanceWindow("p", hour(0), hour(8), node="n1")]
    bookings = [quarter("a", "n0", 0, 3, 7), quarter("b", "n0", 1, 3, 5)]
    found = place_or_move(POOL, bookings, hour(4), hour(6), Fraction(1), NOW, maintenance,
                          known=(hour(3), hour(6)))
    assert [move.booking.user for move in found.moves] == ["b"]
    only_outside = [quarter("a", "n0", 0, 3, 7), quarter("b", "n0", 1, 3, 7)]
    try:
        place_or_move(POOL, only_outside, hour(4), hour(6), Fraction(1), NOW, maintenance,
                      known=(hour(3), hour(6)))
    except NoCapacity:
        pass
    else:
        raise AssertionError("a booking whose neighbours are unknown was moved")


def test_a_chain_of_moves_on_a_large_pool_stays_within_the_bounds():
    """Bounded search (more movable bookings than the exact limit): a request that needs one
    booking moved is still admitted, and what moves keeps every rule."""
    pool = Pool(name="p", nodes={f"n{k}": 8 for k in range(4)}, slices_per_gpu=4)
    bookings = []
    # every GPU holds one upcoming quarter for hours 3-5: 32 movable bookings, no GPU empty
    for k in range(4):
        for i in range(8):
            bookings.append(Booking(f"u{k}{i}", "p", Fraction(1, 4), hour(3), hour(5),
                                    Placement(f"n{k}", (i,), 1), id=8 * k + i + 1))
    assert len(bookings) > EXACT_MOVABLE
    found = place_or_move(pool, bookings, hour(3), hour(4), Fraction(1), NOW)
    assert 1 <= len(found.moves) <= BOUNDED_MOVES
    moved = {m.booking.id: m.placement for m in found.moves}
    after = [(3, 5, moved.get(b.id, b.placement)) for b in bookings]
    assert not overbooked(pool, [*after, (3, 4, found.placement)], [])


# ---------------------------------------------------------------- the bounded search


@st.composite
def large_pools(draw) -> Pool:
    """Above the exact limit: up to 3 nodes of 4-8 GPUs, at least EXACT_GPUS + 1 GPUs."""
    nodes = {f"n{k}": draw(st.integers(4, 8)) for k in range(3)}
    nodes["n0"] += max(0, EXACT_GPUS + 1 - sum(nodes.values()))
    return Pool(name="p", nodes=nodes, slices_per_gpu=draw(st.sampled_from([2, 4])))


@core_settings
@given(scenarios())
def test_the_bounded_search_is_sound_and_finds_single_moves(scenario):
    """The bounded search forced on the small scenarios: whatever it answers keeps every rule,
    and a request that the oracle admits by moving one booking is admitted."""
    pool, maintenance, bookings, request = scenario
    start, end, amount = request
    with mock.patch.object(replacement, "EXACT_GPUS", 0):
        try:
            found = place_or_move(pool, bookings, hour(start), hour(end), amount, NOW,
                                  maintenance)
        except NoCapacity:
            event("refused")
            assert oracle_fewest_moves(pool, bookings, maintenance, request) != 1
            return
    event(f"placed with {len(found.moves)} moves")
    assert_sound(pool, maintenance, bookings, request, found)


@core_settings
@given(scenarios(pools=large_pools, most=40))
def test_the_bounded_search_on_large_pools_is_sound(scenario):
    pool, maintenance, bookings, request = scenario
    start, end, amount = request
    try:
        found = place_or_move(pool, bookings, hour(start), hour(end), amount, NOW, maintenance)
    except NoCapacity:
        event("refused")
        return
    event("placed with moves" if found.moves else "placed as the pool stood")
    target(len(found.moves))
    assert_sound(pool, maintenance, bookings, request, found)


def test_a_whole_node_gets_in_by_moving_more_bookings_than_the_chain_may():
    """Repacking: every GPU of n0 holds an upcoming quarter, every other GPU two; a request for
    all of n0 gets in only by moving the eight quarters (the chain moves at most
    BOUNDED_MOVES), and nothing that need not move moves."""
    pool = Pool(name="p", nodes={f"n{k}": 8 for k in range(3)}, slices_per_gpu=4)
    bookings = []
    for k in range(3):
        for i in range(8):
            for copy in range(1 if k == 0 else 2):
                bookings.append(Booking(f"u{k}{i}{copy}", "p", Fraction(1, 4), hour(3), hour(5),
                                        Placement(f"n{k}", (i,), 1), id=len(bookings) + 1))
    found = place_or_move(pool, bookings, hour(3), hour(4), Fraction(8), NOW)
    assert found.placement == Placement("n0", tuple(range(8)), 4)
    assert len(found.moves) == 8 > BOUNDED_MOVES
    assert {move.booking.placement.node for move in found.moves} == {"n0"}
    moved = {m.booking.id: m.placement for m in found.moves}
    after = [(3, 5, moved.get(b.id, b.placement)) for b in bookings]
    assert not overbooked(pool, [*after, (3, 4, found.placement)], [])
