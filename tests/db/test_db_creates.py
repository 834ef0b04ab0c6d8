"""Creates written together (``BookingStore.create_all``), on every backend: one transaction,
each create refused or failed on its own, none half-done."""

from __future__ import annotations

from fractions import Fraction

import pytest
from db_test_store import on_gpu, statements
from db_test_times import at
from sqlalchemy import event, func, select

from jhub_gpubooking.core.errors import NoCapacity, PolicyViolation
from jhub_gpubooking.core.model import Booking, Placement
from jhub_gpubooking.core.placement import overbooked_instants
from jhub_gpubooking.db.models import BookingEventRow, BookingRow


class Broken(Exception):
    """An unexpected error inside one create."""


def stored(store) -> list[tuple[str, int, int]]:
    """(user, start hour, end hour) of every stored booking, and how many events exist."""
    with store.read_transaction() as session:
        rows = session.execute(select(BookingRow).order_by(BookingRow.id)).scalars().all()
        return [(row.user, row.start.hour, row.end.hour) for row in rows]


def event_count(store) -> int:
    with store.read_transaction() as session:
        return session.scalar(select(func.count()).select_from(BookingEventRow))


def test_creates_written_together_are_each_stored_with_their_event(store):
    new = [store.new_booking(user, "t4", "1/4", at(11), at(12)) for user in ("ada", "bob")]
    new.append(store.new_booking("carol", "a100", 2, at(12), at(14), note="training"))

    outcomes = store.create_all(new)

    assert [type(outcome) for outcome in outcomes] == [Booking] * 3
    assert [(b.user, b.pool, b.amount, b.note) for b in outcomes] == [
        ("ada", "t4", Fraction(1, 4), ""), ("bob", "t4", Fraction(1, 4), ""),
        ("carol", "a100", Fraction(2), "training"),
    ]
    # the second quarter goes beside the first, as it would one create after the other
    assert outcomes[0].placement == outcomes[1].placement == Placement("node-c", (0,), 1)
    for booking in outcomes:
        assert store.get(booking.id) == booking
        assert [e.kind for e in store.history(booking.id)] == ["created"]


def test_a_refused_create_among_others_undoes_only_its_own(store):
    store.create("dan", "t4", 1, at(11), at(12))  # one of node-c's two GPUs
    new = [
        store.new_booking("ada", "t4", "1/2", at(11), at(12)),
        store.new_booking("bob", "t4", 2, at(11), at(12)),  # only one GPU is left
        store.new_booking("carol", "t4", "1/2", at(11), at(12)),
    ]

    ada, bob, carol = store.create_all(new)

    assert isinstance(ada, Booking) and isinstance(carol, Booking)
    assert isinstance(bob, NoCapacity)
    # its refusal names the next free slot, searched after the transaction as for one create
    assert bob.next_free == (at(12), at(13))
    assert "The earliest free time of the same length is" in bob.message
    assert stored(store) == [("dan", 11, 12), ("ada", 11, 12), ("carol", 11, 12)]
    assert event_count(store) == 3


def test_a_policy_refusal_among_others_is_that_create_s_outcome(make_store):
    store = make_store(default_policy={"max_gpus": 1})
    ada, bob = store.create_all([store.new_booking("ada", "a100", 2, at(11), at(12)),
                                 store.new_booking("bob", "a100", 1, at(11), at(12))])
    assert isinstance(ada, PolicyViolation)
    assert isinstance(bob, Booking)
    assert stored(store) == [("bob", 11, 12)]


def test_what_a_refused_create_freed_is_rolled_back_and_not_seen_by_the_next(store):
    other = store.create("dan", "t4", "1/4", at(14), at(15), note="kept")
    store.create("erin", "t4", 2, at(11), at(12))  # node-c is full at 11
    seen = []

    def freeing_nothing(work, request, now):
        # changes a row through the session, then the booking still does not fit
        row = work.session.get(BookingRow, other.id)
        row.note = "changed by a refused create"
        return [row]

    def reading(work, request, now):
        seen.append(work.session.get(BookingRow, other.id).note)
        return []

    outcomes = store.create_all([
        store.new_booking("ada", "t4", 1, at(11), at(12), make_room=freeing_nothing),
        store.new_booking("bob", "t4", 1, at(11), at(12), make_room=reading),
        store.new_booking("carol", "t4", 1, at(12), at(13)),
    ])

    assert [type(outcome) for outcome in outcomes] == [NoCapacity, NoCapacity, Booking]
    # the second create's session is a fresh one: it reads the row as the database has it
    assert seen == ["kept"]
    assert store.get(other.id).note == "kept"
    assert [user for user, *_ in stored(store)] == ["dan", "erin", "carol"]


def test_an_unexpected_error_in_one_create_is_its_outcome_and_the_others_are_stored(store):
    store.create("erin", "t4", 2, at(11), at(12))

    def broken(work, request, now):
        work.place(Booking(user="ghost", pool="t4", amount=Fraction(1), start=at(13),
                           end=at(14)), (), True, now, "ghost")
        raise Broken("a bug")

    ada, bob = store.create_all([
        store.new_booking("ada", "t4", 1, at(11), at(12), make_room=broken),
        store.new_booking("bob", "t4", 1, at(12), at(13)),
    ])

    assert isinstance(ada, Broken)
    assert isinstance(bob, Booking)
    assert [user for user, *_ in stored(store)] == ["erin", "bob"]  # no "ghost"


def test_a_failed_transaction_raises_and_stores_none_of_them(store):
    engine = store._session_factory.kw["bind"]

    def refuse_commit(connection):
        raise Broken("the commit failed")

    event.listen(engine, "commit", refuse_commit)
    new = [store.new_booking(user, "t4", "1/4", at(11), at(12)) for user in ("ada", "bob")]
    with pytest.raises(Broken):
        store.create_all(new)
    event.remove(engine, "commit", refuse_commit)
    assert stored(store) == []
    assert event_count(store) == 0


def test_creates_together_take_a_savepoint_only_to_free_room(store):
    sent = statements(store)
    store.create("ada", "t4", "1/4", at(11), at(12))
    assert "SAVEPOINT" not in sent

    sent.clear()
    store.create_all([store.new_booking(user, "t4", "1/4", at(12), at(13))
                      for user in ("ada", "bob", "carol")])
    assert "SAVEPOINT" not in sent  # a refusal comes before a create writes anything

    store.create("erin", "t4", 2, at(14), at(15))
    blocker = store.create("dan", "t4", "1/4", at(16), at(17))
    sent.clear()

    def cancel_blocker(work, request, now):
        row = work.session.get(BookingRow, blocker.id)
        row.status = "cancelled"
        return [blocker]

    freeing = store.new_booking("frank", "t4", 2, at(16), at(17), make_room=cancel_blocker)
    plain = store.new_booking("gina", "t4", "1/4", at(18), at(19))
    frank, gina = store.create_all([freeing, plain])

    assert isinstance(frank, Booking) and isinstance(gina, Booking)
    assert sent.count("SAVEPOINT") == 1  # around freeing room and placing frank's booking
    assert freeing.freed == [blocker] and plain.freed == []
    assert store.get(blocker.id).status == "cancelled"


def test_an_error_outside_a_savepoint_writes_them_again_each_on_its_own(store, monkeypatch):
    from jhub_gpubooking.db.unit_of_work import UnitOfWork

    place = UnitOfWork.place

    def place_with_a_bug(work, request, *args):
        if request.user == "ghost":
            # written, then the bug
            work.rows().execute(BookingRow.__table__.update().values(note="by the bug"))
            raise Broken("a bug")
        return place(work, request, *args)

    monkeypatch.setattr(UnitOfWork, "place", place_with_a_bug)
    kept = store.create("dan", "t4", "1/4", at(11), at(12))
    sent = statements(store)
    ada, ghost, bob = store.create_all([
        store.new_booking(user, "t4", "1/4", at(12), at(13)) for user in ("ada", "ghost", "bob")
    ])

    assert isinstance(ada, Booking) and isinstance(bob, Booking)
    assert isinstance(ghost, Broken)
    assert "SAVEPOINT" in sent  # the second time, each under a savepoint
    # what the failing create wrote is gone; the others and what was there before are kept
    assert [user for user, *_ in stored(store)] == [kept.user, "ada", "bob"]
    assert {store.get(b.id).note for b in (kept, ada, bob)} == {""}


def test_what_was_freed_is_only_reported_for_the_attempt_that_counted(store, monkeypatch):
    from jhub_gpubooking.db.unit_of_work import UnitOfWork

    store.create("erin", "t4", 2, at(11), at(12))
    blocker = store.create("dan", "t4", "1/4", at(13), at(14))
    calls = []

    def frees_only_once(work, request, now):
        calls.append(1)
        if len(calls) > 1:
            return []
        work.session.get(BookingRow, blocker.id).status = "cancelled"
        return [blocker]

    place = UnitOfWork.place

    def place_with_a_bug(work, request, *args):
        if request.user == "ghost":
            raise Broken("a bug")
        return place(work, request, *args)

    monkeypatch.setattr(UnitOfWork, "place", place_with_a_bug)
    freeing = store.new_booking("frank", "t4", 2, at(13), at(14), make_room=frees_only_once)
    frank, ghost = store.create_all([freeing, store.new_booking("ghost", "t4", 1, at(15), at(16))])

    # written twice: the second time make_room freed nothing, so frank's booking was refused
    assert isinstance(frank, NoCapacity) and isinstance(ghost, Broken)
    assert freeing.freed == []
    assert store.get(blocker.id).status == "booked"


def test_a_transaction_out_of_time_writes_the_first_creates_only(store):
    new = [store.new_booking(user, "t4", "1/4", at(11), at(12)) for user in ("ada", "bob")]
    (ada,) = store.create_all(new, seconds=0)  # at least one, however short the time
    assert isinstance(ada, Booking)
    assert stored(store) == [("ada", 11, 12)]
    assert len(store.create_all(new[1:], seconds=10)) == 1


def test_a_create_after_one_that_moved_bookings_finds_them_where_they_went(store):
    first = store.create("alice", "t4", "1/4", at(11), at(12))
    second = on_gpu(store, store.create("bob", "t4", "1/4", at(11), at(12)), 1)
    assert (first.placement.gpus, second.placement.gpus) == ((0,), (1,))

    # in one transaction: carol's whole GPU only fits once a quarter moves; then the two
    # quarters share a GPU, so dave's three quarters no longer fit (before the move GPU 0 had
    # three quarters free)
    carol, dave = store.create_all([store.new_booking("carol", "t4", 1, at(11), at(12)),
                                    store.new_booking("dave", "t4", "3/4", at(11), at(12))])

    assert isinstance(carol, Booking) and isinstance(dave, NoCapacity)
    quarters = {store.get(b.id).placement.gpus for b in (first, second)}
    assert len(quarters) == 1 and carol.placement.gpus not in quarters
    assert overbooked_instants(store.pool("t4"), store.list()) == []


def test_a_create_after_one_that_freed_room_finds_the_room_free(store):
    blocker = store.create("dan", "t4", "1/2", at(16), at(17))
    on_gpu(store, store.create("erin", "t4", 1, at(16), at(17)), 1)

    def cancel_blocker(work, request, now):
        work.session.get(BookingRow, blocker.id).status = "cancelled"
        return [blocker]

    # in one transaction: frank's three quarters fit once dan's half is gone; gina's quarter
    # then fits beside them, which counting dan's half would have refused
    frank, gina = store.create_all([
        store.new_booking("frank", "t4", "3/4", at(16), at(17), make_room=cancel_blocker),
        store.new_booking("gina", "t4", "1/4", at(16), at(17)),
    ])

    assert isinstance(frank, Booking) and isinstance(gina, Booking)
    assert frank.placement.gpus == gina.placement.gpus == blocker.placement.gpus
    assert store.get(blocker.id).status == "cancelled"
    assert "moved" not in [e.kind for e in store.history(blocker.id)]
    assert overbooked_instants(store.pool("t4"), store.list()) == []
