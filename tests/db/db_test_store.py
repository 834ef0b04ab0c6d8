"""Helpers of the database tests: a database filled at each revision on the way up, and, looking
into a store, the statements it sends, a booking put on a chosen GPU, a large pool fragmented so
that only moving a booking lets a whole GPU in (a plain module, importable from every test
file, unlike a conftest)."""

from __future__ import annotations

from db_test_times import at
from migration_data import REVISION_IDS, write_rows
from sqlalchemy import event

from jhub_gpubooking.core.model import Placement, Pool
from jhub_gpubooking.db.session import make_engine, upgrade

#: Above the exhaustive chain's limit (17 GPUs): with the bounded chain and repack given no
#: budget, only the exact program moves bookings here.
BIG = Pool(name="big", nodes={"node-x": 2, "node-y": 15}, slices_per_gpu=4, backend="hami")


def fill(url: str, up_to: str = REVISION_IDS[-1]) -> None:
    """Rows in every table, written at each revision on the way up to ``up_to``
    (tests/db/migration_data.py), the database left at ``up_to``."""
    for revision in REVISION_IDS[: REVISION_IDS.index(up_to) + 1]:
        upgrade(url, revision)
        engine = make_engine(url)
        with engine.begin() as connection:
            write_rows(connection, revision)
        engine.dispose()


def statements(store) -> list[str]:
    """The first word of every SQL statement ``store`` sends from now on (each a round trip
    on a database server), upper-cased: SELECT, INSERT, WITH, SAVEPOINT …"""
    sent: list[str] = []
    engine = store._session_factory.kw["bind"]
    event.listen(engine, "before_cursor_execute",
                 lambda _c, _cursor, sql, *_rest: sent.append(sql.split()[0].upper()))
    return sent


def on_gpu(store, booking, gpu: int):
    """Put ``booking`` on GPU ``gpu`` of node-c (the setup of a fragmented t4 pool)."""
    with store.unit_of_work(["t4"]) as work:
        work.move_all([(booking, Placement("node-c", (gpu,), booking.placement.slices))])
    return store.get(booking.id)


def fragmented_big(store):
    """On :data:`BIG`, 11:00-12:00: a quarter on each GPU of node-x and node-y full, so a
    whole GPU fits only if one quarter joins the other. Returns the two quarters as stored."""
    first = store.create("alice", "big", "1/4", at(11), at(12))
    second = store.create("bob", "big", "1/4", at(11), at(12))
    with store.unit_of_work(["big"]) as work:
        work.move_all([(first, Placement("node-x", (0,), 1)),
                       (second, Placement("node-x", (1,), 1))])
    store.create("carol", "big", 15, at(11), at(12))
    return store.get(first.id), store.get(second.id)


def assert_one_quarter_joined(store, quarters, whole) -> None:
    """``whole`` got in by moving one of the two ``quarters`` (as stored before) next to the
    other, and that move is in its history as a "moved" event with both placements."""
    first, second = quarters
    after = {b.id: store.get(b.id) for b in quarters}
    assert after[first.id].placement == after[second.id].placement
    assert whole.placement == Placement("node-x", (1 - after[first.id].placement.gpus[0],), 4)
    (original,) = [b for b in quarters if after[b.id].placement != b.placement]
    event = store.history(original.id)[-1]
    assert (event.kind, event.detail["old_gpu_indices"], event.detail["gpu_indices"]) == (
        "moved", list(original.placement.gpus), list(after[original.id].placement.gpus))
