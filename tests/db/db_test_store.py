"""Helpers of the database tests that look into a store: the statements it sends, a booking
put on a chosen GPU (a plain module, importable from every test file, unlike a conftest)."""

from __future__ import annotations

from sqlalchemy import event

from jhub_gpubooking.core.model import Placement


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
