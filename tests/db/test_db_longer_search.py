"""A create whose exact re-placement ran out of time under the pool's lock searches again
without it, and writes what it finds only if it still holds (issue 17, item 1), on every backend;
so does a wait when the lifecycle tick serves the waitlist.

The pool is above the exact chain's limit (17 GPUs) and the bounded chain and repack get no
budget, so only the integer program can let the whole GPU in; that program "runs out of time"
whenever it is given the store's short limit (a stand-in for a hard program) and is solved for
real when given the longer one.
"""

from __future__ import annotations

import time
from unittest import mock

import pytest
from db_test_store import BIG, assert_one_quarter_joined, fragmented_big
from db_test_times import at

from jhub_gpubooking.core import exact_moves, replacement
from jhub_gpubooking.core.errors import NoCapacity
from jhub_gpubooking.core.model import Placement
from jhub_gpubooking.core.placement import overbooked_instants
from jhub_gpubooking.core.waitlist import WaitState
from jhub_gpubooking.db.unit_of_work import SPENT_SECONDS
from jhub_gpubooking.db.waitlist import SEARCH_AGAIN_AFTER, WaitStore

SHORT, LONG = 0.5, 5.0


@pytest.fixture
def searches():
    """What each longer search came to, and whether it ran (as the service's metrics see it)."""
    return []


@pytest.fixture
def big_store(make_store, pools, searches):
    return make_store(pools={**pools, "big": BIG}, exact_move_seconds=SHORT,
                      exact_move_retry_seconds=LONG,
                      on_longer_search=lambda outcome, seconds: searches.append(
                          (outcome, seconds is not None)))


class HardPrograms:
    """``place_exactly`` running out of time at the short limit when a re-placement exists
    (it still proves quickly that none does), solving at the long one; ``between`` runs after
    a long solve, before the create takes the lock again. With ``spends``, every limit below the
    long one is searched to its end without an answer."""

    def __init__(self, between=None, spends=False):
        self.limits: list[float] = []
        self.between = between
        self.spends = spends
        self.real = replacement.place_exactly

    def __call__(self, *args, time_limit, **kwargs):
        self.limits.append(time_limit)
        if self.spends and time_limit < LONG:
            time.sleep(time_limit)
            raise exact_moves.RanOut("a hard program")
        found = self.real(*args, time_limit=time_limit, **kwargs)
        if time_limit == SHORT and found is not None:
            raise exact_moves.RanOut("a hard program")
        if self.between is not None:
            self.between()
        return found

    def patched(self):
        return mock.patch.multiple(replacement, BOUNDED_EXPANSIONS=0, REPACK_GPU_STEPS=0,
                                   place_exactly=self)


def pool_bookings(store):
    return [b for b in store.list() if b.pool == "big"]


def test_a_search_that_ran_out_under_the_lock_goes_on_without_it(big_store, searches):
    quarters = fragmented_big(big_store)
    hard = HardPrograms()
    with hard.patched():
        whole = big_store.create("dave", "big", 1, at(11), at(12))
    # the short step under the lock ran out, the longer one without it found the move
    assert hard.limits == [SHORT, LONG]
    assert_one_quarter_joined(big_store, quarters, whole)
    assert [e.kind for e in big_store.history(whole.id)] == ["created"]
    assert overbooked_instants(BIG, pool_bookings(big_store)) == []
    assert searches == [("admitted", True)]


def test_a_proposal_that_no_longer_holds_is_not_written(big_store, searches):
    """While the longer search ran, the quarter it moves was moved by someone else: the create
    searches again under the lock (which runs out again here) and is refused; nothing it found
    earlier is written."""
    first, second = fragmented_big(big_store)

    def someone_moves_the_quarters():
        with big_store.unit_of_work(["big"]) as work:
            work.move_all([(big_store.get(first.id), Placement("node-x", (1,), 1)),
                           (big_store.get(second.id), Placement("node-x", (0,), 1))])

    hard = HardPrograms(between=someone_moves_the_quarters)
    with hard.patched(), pytest.raises(NoCapacity) as refused:
        big_store.create("dave", "big", 1, at(11), at(12))
    # under the lock, out of time; without it, a proposal; under the lock again, out of time
    assert hard.limits == [SHORT, LONG, SHORT]
    assert refused.value.search_ran_out
    assert refused.value.next_free is not None  # the refusal still names the next free slot
    assert [b.user for b in pool_bookings(big_store)] == ["alice", "bob", "carol"]
    assert big_store.get(first.id).placement == Placement("node-x", (1,), 1)
    assert big_store.get(second.id).placement == Placement("node-x", (0,), 1)
    assert overbooked_instants(BIG, pool_bookings(big_store)) == []
    assert searches == [("refused", True)]


def test_a_proposal_is_written_when_only_unrelated_bookings_changed(big_store):
    fragmented_big(big_store)
    # a booking in the same pool, within the create's reach, but not in the proposal's way
    hard = HardPrograms(between=lambda: big_store.create("erin", "big", "1/4", at(13), at(14)))
    with hard.patched():
        whole = big_store.create("dave", "big", 1, at(11), at(12))
    assert hard.limits == [SHORT, LONG]
    assert whole.placement.node == "node-x"
    assert overbooked_instants(BIG, pool_bookings(big_store)) == []


def test_without_a_longer_search_the_refusal_comes_at_once(make_store, pools):
    store = make_store(pools={**pools, "big": BIG}, exact_move_seconds=SHORT,
                       exact_move_retry_seconds=0)
    fragmented_big(store)
    hard = HardPrograms()
    with hard.patched(), pytest.raises(NoCapacity) as refused:
        store.create("dave", "big", 1, at(11), at(12))
    assert hard.limits == [SHORT]
    assert refused.value.search_ran_out


def test_a_refusal_the_search_proved_is_not_searched_again(big_store, searches):
    """A full pool: the program proves there is no re-placement, so nobody searches longer."""
    fragmented_big(big_store)
    # a half beside each quarter: 2 slices free on node-x in all, no whole GPU however placed
    big_store.create("erin", "big", "1/2", at(11), at(12))
    big_store.create("frank", "big", "1/2", at(11), at(12))
    hard = HardPrograms()
    with hard.patched(), pytest.raises(NoCapacity) as refused:
        big_store.create("dave", "big", 1, at(11), at(12))
    assert hard.limits == [SHORT]
    assert not refused.value.search_ran_out
    assert searches == []


def test_while_another_longer_search_runs_the_refusal_comes_at_once(big_store, searches):
    """One longer search at a time per process: a create that runs out under the lock while
    another's longer search runs gets its refusal (still naming the next free slot) without
    searching, and the metrics see both."""
    fragmented_big(big_store)
    refusals = []

    def another_create_meanwhile():
        with pytest.raises(NoCapacity) as refused:
            big_store.create("erin", "big", 1, at(11), at(12))
        refusals.append(refused.value)

    hard = HardPrograms(between=another_create_meanwhile)
    with hard.patched():
        whole = big_store.create("dave", "big", 1, at(11), at(12))
    # dave's short step, his longer search, erin's short step (hers ends there)
    assert hard.limits == [SHORT, LONG, SHORT]
    assert [(r.search_ran_out, r.next_free is not None) for r in refusals] == [(True, True)]
    assert whole.placement.node == "node-x"
    assert searches == [("busy", False), ("admitted", True)]


def test_the_creates_of_one_transaction_share_the_exact_steps_time(big_store, searches):
    """The pool's lock is held for every create written together: once the first create's
    exact step has spent ``exact_move_seconds``, the next one's step only runs out at once,
    and that create is searched for longer without the lock like any that ran out."""
    fragmented_big(big_store)
    dave, erin = (big_store.new_booking(user, "big", 1, at(11), at(12))
                  for user in ("dave", "erin"))
    hard = HardPrograms(spends=True)
    with hard.patched():
        outcomes = big_store.create_all([dave, erin])
        assert hard.limits == [SHORT, SPENT_SECONDS]
        assert [(type(o), o.search_ran_out) for o in outcomes] == [(NoCapacity, True)] * 2
        # erin's create, refused only for want of time, gets its longer search
        whole = big_store.search_longer(erin, outcomes[1])
    assert hard.limits[2:] == [LONG]
    assert (whole.user, whole.placement.node) == ("erin", "node-x")
    assert searches == [("admitted", True)]
    assert overbooked_instants(BIG, pool_bookings(big_store)) == []


def test_a_wait_that_ran_out_is_searched_longer_when_the_tick_serves(big_store, searches):
    """A wait kept out only because the exact step ran out under the lock: a cancel's serve
    leaves it waiting at once; the lifecycle tick's serve searches longer and books it."""
    quarters = fragmented_big(big_store)
    waits = WaitStore(big_store)
    wait = waits.join("dave", "big", 1, at(11), at(12))
    hard = HardPrograms()
    with hard.patched():
        assert waits.serve() == []
        assert hard.limits == [SHORT]
        ((served, booking),) = waits.serve(search_longer=True)
    # its short step ran out again; the longer one found the move, which still held
    assert hard.limits == [SHORT, SHORT, LONG]
    assert (served.id, served.state, served.booking_id) == (wait.id, WaitState.BOOKED, booking.id)
    assert [(w.state, w.booking_id) for w in waits.list()] == [(WaitState.BOOKED, booking.id)]
    assert_one_quarter_joined(big_store, quarters, booking)
    assert [e.kind for e in big_store.history(booking.id)] == ["created", "waitlist_booked"]
    assert overbooked_instants(BIG, pool_bookings(big_store)) == []
    assert searches == [("admitted", True)]


def test_one_wait_is_searched_longer_per_serve_and_each_once_in_a_while(big_store, clock,
                                                                        searches):
    """Each longer search keeps a core busy, and every tick serves the list: one wait per
    serve (the first in fair order), and a wait whose search found nothing is not searched
    again for SEARCH_AGAIN_AFTER."""
    fragmented_big(big_store)
    waits = WaitStore(big_store)
    for user in ("dave", "erin"):
        waits.join(user, "big", 1, at(11), at(12))
    limits = []

    def runs_out_then_finds_nothing(*args, time_limit, **kwargs):
        limits.append(time_limit)
        if time_limit < LONG:
            raise exact_moves.RanOut("a hard program")
        return None

    with mock.patch.multiple(replacement, BOUNDED_EXPANSIONS=0, REPACK_GPU_STEPS=0,
                             place_exactly=runs_out_then_finds_nothing):
        for expected in ([SHORT, SHORT, LONG],  # both ran out; dave, first come, searched
                         [SHORT, SHORT, LONG],  # erin's turn
                         [SHORT, SHORT]):  # both searched a moment ago
            limits.clear()
            assert waits.serve(search_longer=True) == []
            assert limits == expected
        clock.advance(SEARCH_AGAIN_AFTER)
        limits.clear()
        assert waits.serve(search_longer=True) == []
        assert limits == [SHORT, SHORT, LONG]
    assert searches == [("refused", True)] * 3
    assert [w.state for w in waits.list()] == [WaitState.WAITING] * 2
