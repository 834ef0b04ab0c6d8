"""BookingStore rules on every backend: grid, "book now", capacity, cancel, change_end, claims."""

from __future__ import annotations

from datetime import timedelta
from fractions import Fraction

import pytest
from db_test_times import NOW, at
from sqlalchemy import event, select

from jhub_gpubooking.core.clock import ManualClock
from jhub_gpubooking.core.errors import (
    Conflict,
    InvalidRequest,
    NoCapacity,
    NotFound,
    PolicyViolation,
)
from jhub_gpubooking.core.model import BookingState, Placement, Pool
from jhub_gpubooking.core.timegrid import as_utc
from jhub_gpubooking.db import queries
from jhub_gpubooking.db.convert import booking_from_row
from jhub_gpubooking.db.feed_tokens import has_feed_token, new_feed_token, user_for_feed_token
from jhub_gpubooking.db.models import BookingRow, FeedTokenRow, PoolRow
from jhub_gpubooking.db.session import make_session_factory
from jhub_gpubooking.db.store import LATE_BOOK_NOW, BookingStore


def kinds(store, booking_id: int) -> list[str]:
    return [entry.kind for entry in store.history(booking_id)]


def test_create_stores_the_placed_booking_in_utc(store):
    booking = store.create("alice", "a100", 2, at(11), at(12), note="training run")
    assert booking.id is not None
    assert (booking.user, booking.pool, booking.amount, booking.note) == (
        "alice",
        "a100",
        Fraction(2),
        "training run",
    )
    assert (booking.start, booking.end) == (at(11), at(12))
    assert booking.start.utcoffset() == timedelta(0)
    assert booking.placement == Placement("node-a", (0, 1), 1)  # best fit: the fuller node
    assert booking.created == NOW
    assert store.get(booking.id) == booking
    assert kinds(store, booking.id) == ["created"]
    assert store.history(booking.id)[0].actor == "alice"


def test_fractional_amounts_are_stored_exactly(store):
    booking = store.create("alice", "t4", "1/4", at(11), at(12))
    assert booking.amount == Fraction(1, 4)
    assert booking.placement == Placement("node-c", (0,), 1)
    assert store.get(booking.id).amount == Fraction(1, 4)


@pytest.mark.parametrize(
    "start, end, field",
    [
        ((11, 7), (12, 0), "start time 2030-01-07 11:07 UTC"),
        ((11, 0), (12, 20), "end time 2030-01-07 12:20 UTC"),
    ],
)
def test_times_off_the_grid_are_refused_naming_the_grid(store, start, end, field):
    with pytest.raises(InvalidRequest) as refused:
        store.create("alice", "a100", 1, at(*start), at(*end))
    assert refused.value.status == 400
    assert f"The {field} is not on the 15-minute booking grid" in refused.value.message


def test_a_coarser_grid_is_named_in_the_refusal(make_store):
    store = make_store(slot_minutes=60)
    with pytest.raises(InvalidRequest, match="60-minute booking grid; choose e.g. "
                       "2030-01-07 11:00 UTC or 2030-01-07 12:00 UTC"):
        store.create("alice", "a100", 1, at(11, 15), at(13))


def test_book_now_accepts_the_current_slot_but_not_an_earlier_one(store):
    now_booking = store.create("alice", "a100", 1, at(10), at(11))  # now is 10:05
    assert now_booking.state(NOW) is BookingState.ACTIVE
    with pytest.raises(InvalidRequest) as refused:
        store.create("alice", "a100", 1, at(9, 45), at(11))
    assert refused.value.message == (
        "The start time 2030-01-07 09:45 UTC is in the past; start at 2030-01-07 10:00 UTC "
        "(the current slot) or later."
    )


def test_book_now_sent_in_a_slots_last_seconds_may_arrive_just_after_it(make_store):
    """A "book now" for 10:00 made at 10:14:59 and arriving at 10:15:10 keeps its slot; one
    arriving later than LATE_BOOK_NOW after the slot ended is refused naming the current slot."""
    clock = ManualClock(at(10, 15) + timedelta(seconds=10))
    store = make_store(clock=clock)
    late = store.create("alice", "a100", 1, at(10), at(11))
    assert (late.start, late.state(clock.now())) == (at(10), BookingState.ACTIVE)
    clock.set(at(10, 15) + LATE_BOOK_NOW + timedelta(seconds=1))
    with pytest.raises(InvalidRequest, match=r"10:00 UTC is in the past; start at 2030-01-07 10:15 UTC"):
        store.create("bob", "a100", 1, at(10), at(11))


def test_end_must_follow_start(store):
    with pytest.raises(InvalidRequest, match="The end time must be after the start time."):
        store.create("alice", "a100", 1, at(12), at(12))


def test_amounts_the_pool_cannot_give_are_refused(store):
    with pytest.raises(InvalidRequest, match="shares each GPU in 4 slice"):
        store.create("alice", "t4", "0.3", at(11), at(12))
    with pytest.raises(InvalidRequest, match="at most 4 GPU"):
        store.create("alice", "a100", 5, at(11), at(12))


def test_unknown_pool_is_not_found(store):
    with pytest.raises(NotFound, match="There is no GPU pool named 'h100'."):
        store.create("alice", "h100", 1, at(11), at(12))


def test_the_last_capacity_is_given_once(store):
    store.create("alice", "a100", 4, at(11), at(13))
    store.create("bob", "a100", 2, at(11), at(13))
    with pytest.raises(NoCapacity) as refused:
        store.create("carol", "a100", 1, at(12), at(14))
    assert refused.value.status == 409
    assert (refused.value.full_start, refused.value.full_end) == (at(12), at(13))
    # after the full interval the pool is free again
    assert store.create("carol", "a100", 1, at(13), at(14)).placement.node == "node-a"


def test_quarter_slices_fill_each_gpu_before_refusing(store):
    placements = [store.create(f"u{i}", "t4", "0.25", at(11), at(12)).placement for i in range(8)]
    assert (
        sorted((p.node, p.gpus) for p in placements)
        == [("node-c", (0,))] * 4 + [("node-c", (1,))] * 4
    )
    with pytest.raises(NoCapacity):
        store.create("u9", "t4", "0.25", at(11, 45), at(12, 15))


def test_get_many_reads_the_bookings_that_exist_in_one_query(store, engine):
    first = store.create("alice", "a100", 1, at(11), at(12))
    cancelled = store.cancel(store.create("bob", "a100", 1, at(13), at(14)).id, actor="bob")
    statements = []
    event.listen(engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    found = store.get_many({first.id, cancelled.id, 999})
    assert len([s for s in statements if s.startswith("SELECT")]) == 1
    assert found == {first.id: first, cancelled.id: cancelled}
    assert store.get_many(set()) == {}


def test_cancelling_an_upcoming_booking_frees_it_and_keeps_history(store):
    booking = store.create("alice", "a100", 4, at(11), at(12))
    cancelled = store.cancel(booking.id, actor="alice")
    assert cancelled.status == "cancelled"
    assert cancelled.state(NOW) is BookingState.CANCELLED
    assert store.get(booking.id).status == "cancelled"
    assert kinds(store, booking.id) == ["created", "cancelled"]
    assert store.create("bob", "a100", 4, at(11), at(12)).placement.node == "node-b"
    with pytest.raises(Conflict, match=f"Booking {booking.id} is already cancelled."):
        store.cancel(booking.id, actor="alice")


def test_ending_an_active_booking_ends_it_now_and_frees_the_rest(make_store, clock):
    store = make_store(default_policy={"max_bookings": 1})
    booking = store.create("alice", "a100", 4, at(10), at(12))  # the whole pool
    clock.set(at(10, 7).replace(second=30))
    ended = store.cancel(booking.id, actor="alice")
    assert (ended.status, ended.end, ended.release_reason) == ("booked", at(10, 7).replace(second=30), "ended")
    assert ended.state(clock.now()) is BookingState.ENDED
    events = store.history(booking.id)
    assert [e.kind for e in events] == ["created", "cancelled"]
    assert events[1].detail == {
        "old_end": "2030-01-07T12:00:00Z",
        "new_end": "2030-01-07T10:07:30Z",
    }
    with pytest.raises(Conflict, match="is ended and can no longer be used"):
        store.claim(booking.id, "")
    assert store.active_for_user("alice") == []
    # the same GPUs, in the same running slot, for someone else; and alice's limit is free again
    assert store.create("bob", "a100", 4, at(10), at(11)).placement.gpus == ended.placement.gpus
    store.cancel(store.list(user="bob")[0].id, actor="bob")
    assert store.create("alice", "a100", 2, at(10), at(11)).user == "alice"


def test_an_admin_cancelling_someone_elses_booking_is_recorded_as_forced(store):
    booking = store.create("alice", "a100", 1, at(11), at(12))
    store.cancel(booking.id, actor="admin")
    assert kinds(store, booking.id) == ["created", "force_cancelled"]
    assert store.history(booking.id)[1].actor == "admin"


def test_an_ended_booking_cannot_be_cancelled(store, clock):
    booking = store.create("alice", "a100", 1, at(10), at(11))
    clock.set(at(11, 1))
    with pytest.raises(
        Conflict, match="already ended at 2030-01-07 11:00 UTC; there is nothing to cancel."
    ):
        store.cancel(booking.id, actor="alice")


def test_change_end_extends_and_shortens(store):
    booking = store.create("alice", "a100", 1, at(10), at(11))
    longer = store.change_end(booking.id, at(13), actor="alice")
    assert longer.end == at(13)
    assert longer.placement == booking.placement
    shorter = store.change_end(booking.id, at(10, 30), actor="alice")
    assert shorter.end == at(10, 30)
    events = store.history(booking.id)
    assert [(e.kind, e.detail["new_end"]) for e in events[1:]] == [
        ("end_changed", "2030-01-07T13:00:00Z"),
        ("end_changed", "2030-01-07T10:30:00Z"),
    ]


def test_extension_refused_when_the_booked_gpu_is_taken_and_nothing_can_make_room(store):
    first = store.create("alice", "t4", 1, at(10), at(11))  # a whole T4: GPU 0
    second = store.create("bob", "t4", 1, at(11), at(12))  # best fit: GPU 0 again
    store.create("carol", "t4", 1, at(11), at(12))  # GPU 1: bob cannot move there
    assert first.placement.gpus == second.placement.gpus == (0,)
    with pytest.raises(Conflict) as refused:
        store.change_end(first.id, at(12), actor="alice")
    assert refused.value.status == 409
    assert refused.value.message == (
        "The GPU this booking holds on node-c is taken from 2030-01-07 11:00 UTC; the booking "
        "can be extended to 2030-01-07 11:00 UTC at most."
    )
    assert store.get(first.id).end == at(11)


def test_extension_refused_into_maintenance(store):
    booking = store.create("alice", "a100", 1, at(10), at(11))
    store.add_maintenance("a100", at(11, 30), at(12), node=booking.placement.node)
    with pytest.raises(Conflict, match="down for maintenance from 2030-01-07 11:30 to 12:00 UTC"):
        store.change_end(booking.id, at(12), actor="alice")
    assert store.change_end(booking.id, at(11, 30), actor="alice").end == at(11, 30)


def test_change_end_refusals(store, clock):
    booking = store.create("alice", "a100", 1, at(10), at(12))
    with pytest.raises(InvalidRequest, match="not on the 15-minute booking grid"):
        store.change_end(booking.id, at(12, 5), actor="alice")
    with pytest.raises(InvalidRequest, match="The end time must be after the start time."):
        store.change_end(booking.id, at(10), actor="alice")
    clock.set(at(10, 20))
    with pytest.raises(
        InvalidRequest, match="is in the past; choose 2030-01-07 10:30 UTC or later"
    ):
        store.change_end(booking.id, at(10, 15), actor="alice")
    store.cancel(store.create("bob", "a100", 1, at(11), at(12)).id, actor="bob")
    with pytest.raises(NotFound, match="There is no booking with id 999."):
        store.change_end(999, at(13), actor="alice")


def test_change_end_of_a_cancelled_booking_is_a_conflict(store):
    booking = store.create("alice", "a100", 1, at(11), at(12))
    store.cancel(booking.id, actor="alice")
    with pytest.raises(Conflict, match="This booking is cancelled and can no longer be changed."):
        store.change_end(booking.id, at(13), actor="alice")


def test_claim_release_and_takeover(store):
    booking = store.create("alice", "a100", 1, at(10), at(12))
    claimed = store.claim(booking.id, "")
    assert claimed.server == ""
    assert store.claim(booking.id, "").server == ""  # the same server again is fine
    with pytest.raises(Conflict) as refused:
        store.claim(booking.id, "gpu")
    assert refused.value.message == "This booking is already in use by server ''."
    asked = []

    def still_running(server):
        asked.append(server)
        return True

    with pytest.raises(Conflict):
        store.claim(booking.id, "gpu", is_running=still_running)
    assert asked == [""]
    taken = store.claim(booking.id, "gpu", is_running=lambda server: False)
    assert taken.server == "gpu"
    # a release by a server that does not hold the booking changes nothing, nor does one by
    # another user's server of the same name
    assert store.release(booking.id, "").server == "gpu"
    assert store.release(booking.id, "gpu", "bob").server == "gpu"
    assert store.release(booking.id, "gpu", "alice").server is None
    events = store.history(booking.id)
    assert [(e.kind, e.detail) for e in events][1:] == [
        ("claimed", {"server": "", "taken_over_from": None}),
        ("claimed", {"server": "gpu", "taken_over_from": ""}),
        ("released", {"server": "gpu"}),
    ]


def test_a_claim_asks_about_the_holder_of_the_booking_as_the_caller_read_it(store):
    booking = store.create("alice", "a100", 1, at(10), at(12))
    unheld = store.get(booking.id)
    store.claim(booking.id, "training")
    asked = []

    def stopped(server):
        asked.append(server)
        return False

    # read before "training" claimed it: nobody to ask about, and under the lock the holder
    # found is not the one the caller knew stopped, so nothing is taken over
    with pytest.raises(Conflict, match="already in use by server 'training'"):
        store.claim(booking.id, "notebook", is_running=stopped, read=unheld)
    assert asked == []
    held = store.get(booking.id)
    assert store.claim(booking.id, "notebook", is_running=stopped, read=held).server == "notebook"
    assert asked == ["training"]


def test_only_active_bookings_can_be_claimed(store, clock):
    upcoming = store.create("alice", "a100", 1, at(11), at(12))
    with pytest.raises(Conflict) as refused:
        store.claim(upcoming.id, "")
    assert refused.value.message == (
        "This booking starts at 2030-01-07 11:00 UTC; it cannot be used before then."
    )
    store.cancel(upcoming.id, actor="alice")
    with pytest.raises(Conflict, match="This booking is cancelled and can no longer be used."):
        store.claim(upcoming.id, "")
    clock.set(at(12, 30))
    ended = store.create("alice", "a100", 1, at(12, 30), at(12, 45))
    clock.set(at(13))
    with pytest.raises(Conflict, match="This booking is ended and can no longer be used."):
        store.claim(ended.id, "")


def test_maintenance_reports_collisions_and_blocks_new_bookings(store):
    on_a = store.create("alice", "a100", 2, at(11), at(12))
    on_b = store.create("bob", "a100", 1, at(11), at(12))
    assert (on_a.placement.node, on_b.placement.node) == ("node-a", "node-b")
    window, colliding = store.add_maintenance(
        "a100", at(11, 30), at(13), node="node-b", reason="driver update", actor="admin"
    )
    assert [b.id for b in colliding] == [on_b.id]
    assert (window.node, window.reason, window.start) == ("node-b", "driver update", at(11, 30))
    assert store.list_maintenance(pool="a100") == [window]
    assert store.list_maintenance(start=at(13)) == []
    with pytest.raises(NoCapacity):
        store.create("carol", "a100", 3, at(12), at(13))
    availability = store.availability("a100", at(12), at(13))
    assert [(i.free_gpus, i.largest_bookable) for i in availability] == [(2, 2)]
    store.delete_maintenance(window.id)
    assert store.create("carol", "a100", 3, at(12), at(13)).placement.node == "node-b"
    with pytest.raises(NotFound, match="There is no maintenance window with id"):
        store.delete_maintenance(window.id)


def test_pool_wide_maintenance_collides_with_every_overlapping_booking(store):
    first = store.create("alice", "t4", "0.5", at(11), at(12))
    store.create("bob", "t4", "0.5", at(12), at(13))
    _, colliding = store.add_maintenance("t4", at(10, 30), at(12))
    assert [b.id for b in colliding] == [first.id]


def test_a_deleted_maintenance_windows_id_is_never_given_to_another(store):
    """A DELETE retried after its answer was lost must not remove a newer window: SQLite gave
    the highest id again once its window was deleted (the servers' sequences never do)."""
    window, _ = store.add_maintenance("a100", at(11), at(12), reason="first")
    store.delete_maintenance(window.id)
    newer, _ = store.add_maintenance("a100", at(11), at(12), reason="second")
    assert newer.id != window.id
    with pytest.raises(NotFound):
        store.delete_maintenance(window.id)
    assert store.list_maintenance() == [newer]


def test_maintenance_refusals(store):
    with pytest.raises(InvalidRequest, match="Pool a100 has no node named 'node-x'."):
        store.add_maintenance("a100", at(11), at(12), node="node-x")
    with pytest.raises(InvalidRequest, match="The end time must be after the start time."):
        store.add_maintenance("a100", at(12), at(11))


def test_feed_token_is_stored_only_as_a_hash_and_can_be_reset(store, engine):
    token = new_feed_token(store, "alice")
    assert user_for_feed_token(store, token) == "alice"
    with engine.connect() as connection:
        stored = connection.execute(select(FeedTokenRow.token_hash)).scalar_one()
    assert token not in stored and len(stored) == 64
    with pytest.raises(Conflict, match="reset it to get a new one"):
        new_feed_token(store, "alice")
    new_token = new_feed_token(store, "alice", reset=True)
    assert new_token != token
    assert user_for_feed_token(store, token) is None
    assert user_for_feed_token(store, new_token) == "alice"
    assert has_feed_token(store, "alice") and not has_feed_token(store, "bob")


def test_list_filters_by_user_state_and_window(store, clock):
    active = store.create("alice", "a100", 1, at(10), at(11))
    upcoming = store.create("alice", "t4", "0.5", at(12), at(13))
    cancelled = store.create("alice", "a100", 1, at(14), at(15))
    store.cancel(cancelled.id, actor="alice")
    other = store.create("bob", "a100", 1, at(16), at(17))
    assert [b.id for b in store.list()] == [active.id, upcoming.id, cancelled.id, other.id]
    assert [b.id for b in store.list(user="alice", state="upcoming")] == [upcoming.id]
    assert [b.id for b in store.list(state=BookingState.CANCELLED)] == [cancelled.id]
    assert [b.id for b in store.list(start=at(12, 30), end=at(16))] == [upcoming.id, cancelled.id]
    assert [b.id for b in store.active_for_user("alice")] == [active.id]
    assert [b.id for b in store.upcoming_for_user("alice")] == [upcoming.id]
    clock.set(at(11))
    assert [b.id for b in store.list(state="ended")] == [active.id]
    with pytest.raises(InvalidRequest, match="'state' must be one of: upcoming, active"):
        store.list(state="finished")


def test_bookings_of_a_pool_no_longer_configured_are_kept(make_store, pools, engine):
    booking = make_store().create("alice", "t4", "0.5", at(11), at(12))
    shrunk = make_store(pools={"a100": pools["a100"]})
    assert shrunk.get(booking.id) == booking
    with engine.connect() as connection:
        assert set(connection.execute(select(PoolRow.name)).scalars()) == {"a100", "t4"}
    with pytest.raises(NotFound, match="There is no GPU pool named 't4'."):
        shrunk.create("alice", "t4", "0.5", at(12), at(13))
    assert shrunk.cancel(booking.id, actor="alice").status == "cancelled"


def test_sync_pools_updates_changed_pool_config(make_store, engine):
    make_store()
    grown = Pool(name="a100", nodes={"node-a": 2, "node-b": 4, "node-d": 8}, gpu_model="A100")
    make_store(pools={"a100": grown})
    with engine.connect() as connection:
        config = connection.execute(
            select(PoolRow.config).where(PoolRow.name == "a100")
        ).scalar_one()
    assert Pool.from_config(config) == grown


def test_sync_pools_writes_only_changed_pools(make_store, engine, pools, clock):
    """Node discovery syncs on every node change: an unchanged pool's row (its lock) is left
    alone, so creates in it never queue behind a sync."""
    make_store()
    clock.advance(timedelta(hours=1))
    grown = Pool(name="t4", nodes={"node-c": 4}, slices_per_gpu=4, backend="hami")
    make_store(pools={**pools, "t4": grown})
    with engine.connect() as connection:
        synced = dict(connection.execute(select(PoolRow.name, PoolRow.synced_at)).all())
    assert {name: as_utc(when) for name, when in synced.items()} == {
        "a100": NOW.replace(microsecond=0), "t4": clock.now().replace(microsecond=0)}


def test_placement_reads_only_bookings_overlapping_the_request(store, engine, monkeypatch):
    # a long history in the same pool: one booking per slot over the past 20 days
    history_start = at(10, days=-20)
    with store.unit_of_work() as work:
        session = work.session
        for slot in range(200):
            start = history_start + timedelta(hours=2 * slot)
            session.add(
                BookingRow(
                    user="old",
                    pool="a100",
                    slices=1,
                    amount_num=1,
                    amount_den=1,
                    start=start,
                    end=start + timedelta(hours=1),
                    status="booked",
                    note="",
                    node="node-b",
                    gpu_indices=[0],
                    slices_per_gpu_held=1,
                    created=start,
                    updated=start,
                )
            )
    store.create("bob", "a100", 1, at(11), at(12))
    loaded = []

    def read(row):
        loaded.append(row.id)
        return booking_from_row(row)

    # every booking a query reads becomes a Booking through this one function
    monkeypatch.setattr(queries, "booking_from_row", read)
    store.create("carol", "a100", 1, at(11, 30), at(12, 30), is_admin=True)
    assert len(loaded) == 1  # bob's booking only, none of the 200 past ones


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_sqlite_plans_the_overlap_query_on_the_pool_end_start_index(engine):
    with engine.connect() as connection:
        plan = connection.exec_driver_sql(
            'EXPLAIN QUERY PLAN SELECT * FROM bookings WHERE pool = ? AND "end" > ? '
            "AND start < ? AND status = 'booked'",
            ("a100", "2030-01-07 10:00:00", "2030-01-07 12:00:00"),
        ).all()
    assert "USING INDEX ix_bookings_pool_end_start" in " ".join(row[-1] for row in plan)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_store_whose_pools_were_never_synced_says_so(engine, pools, clock):
    unsynced = BookingStore(make_session_factory(engine), pools, clock=clock)
    with pytest.raises(RuntimeError, match="'a100' is configured but not in the database"):
        unsynced.create("alice", "a100", 1, at(11), at(12))


def test_a_stale_claim_expires_but_a_claim_newer_than_the_check_stays(store, clock):
    booking = store.create("alice", "a100", 1, at(10), at(12))
    store.claim(booking.id, "gpu")
    checked_at = clock.now()
    assert store.expire_claim(booking.id, "gpu", checked_at) is None  # same second: kept
    clock.advance(timedelta(seconds=5))
    assert store.expire_claim(booking.id, "other", clock.now()) is None  # not its holder
    expired = store.expire_claim(booking.id, "gpu", clock.now())
    assert expired.server is None
    assert [e.kind for e in store.history(booking.id)][-1] == "claim_expired"
    assert store.held_except_prefix("pod:") == []


def test_a_holder_the_hub_cannot_tell_about_keeps_its_booking(store):
    booking = store.create("alice", "a100", 1, at(10), at(12))
    store.claim(booking.id, "gpu")
    with pytest.raises(Conflict, match="already in use by server 'gpu'"):
        store.claim(booking.id, "other", is_running=lambda server: None)
    assert store.claim(booking.id, "other", is_running=lambda server: False).server == "other"
    store.claim(booking.id, "pod:ns/p", is_running=lambda server: False)
    assert store.held_except_prefix("pod:") == []
    assert [b.id for b, _ in store.held_except_prefix("x:")] == [booking.id]


def test_a_created_booking_is_returned_as_it_is_stored(store):
    # the create answers from the values it inserted, without reading the row back
    created = store.create("alice", "t4", Fraction(1, 2), at(11), at(12), note="n",
                           groups=("b", "a"))
    assert created == store.get(created.id)
    admin = store.create("bob", "a100", 1, at(11), at(12), is_admin=True, actor="root")
    assert admin == store.get(admin.id)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_policies_are_worked_out_once_and_forgotten_when_the_configuration_changes(make_store):
    store = make_store(default_policy={"max_minutes": 60}, group_policies={"staff": {}})
    first = store.policy_for(["staff"])
    assert store.policy_for(("staff", "staff")) is first  # kept, whatever order or repeats
    assert store.policy_for([]).max_minutes == 60
    store.default_policy = {"max_minutes": 30}
    assert store.policy_for([]).max_minutes == store.policy_for(["staff"]).max_minutes == 30
    policies = {"staff": {"max_minutes": 90}}
    store.group_policies = policies
    assert store.policy_for(["staff"]).max_minutes == 90
    policies["staff"] = {"max_minutes": 120}  # the store keeps its own copy
    assert store.policy_for(["staff"]).max_minutes == 90
    with pytest.raises(PolicyViolation, match="at most 1 hour 30 minutes"):
        store.create("alice", "a100", 1, at(11), at(13), groups=["staff"])


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_store_knows_which_pools_it_synced(make_store, pools, engine, clock):
    store = make_store()
    assert store.synced_pools == frozenset(pools)
    grown = {**pools, "h100": Pool(name="h100", nodes={"node-h": 1})}
    store.pools = grown
    assert "h100" not in store.synced_pools  # a pool is known once its row is written
    store.sync_pools()
    assert store.synced_pools == frozenset(grown)
    assert store.create("alice", "h100", 1, at(11), at(12)).pool == "h100"


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("filters", [{"state": "upcoming"}, {"start": NOW}, {"state": "active"}],
                         ids=["upcoming", "from-now", "active"])
def test_a_users_list_reads_only_bookings_ending_after_now(store, engine, filters):
    # the lists the spawner and the booking page ask for: a page of a user's current and
    # future bookings, found by a range on the (user, end) index, so history is never read
    statements = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().startswith("SELECT") and "FROM bookings" in statement:
            statements.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        store.list(user="alice", limit=11, **filters)
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    [(statement, parameters)] = statements
    assert "LIMIT" in statement
    with engine.connect() as connection:
        plan = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters).all()
    details = " ".join(row[-1] for row in plan)
    assert "USING INDEX ix_bookings_user_end (user=? AND end>?)" in details
