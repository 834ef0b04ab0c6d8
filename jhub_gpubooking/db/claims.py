"""The spawn gate's claim in one write transaction (``POST api/pools/{pool}/claim``, see
:mod:`..service.claims`).

Every server start claims, so the common start — the chosen booking nobody holds, or the one
this server holds already — is one unit of work: the user's bookings active in the pool are read
under the pool's lock, the caller's ``choose``
(the rule of :mod:`..core.choice`) orders them, and the first is bound, or returned as it is
when this server holds it (a restart writes nothing). No separate read transaction, no ORM row
loaded or flushed: Core statements built once.

When the first candidate is held by another server, the Hub has to say whether that server
still runs, and a Hub round trip never happens under a lock: the candidates go back to the
caller, which claims them one by one with :meth:`.store.BookingStore.claim`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy import bindparam, select

from ..core.model import Booking, BookingState
from .convert import booking_from_row
from .models import BookingRow
from .queries import state_filter

if TYPE_CHECKING:
    from .store import BookingStore

_bookings = BookingRow.__table__
#: A user's bookings active at ``now`` in one pool, in the store's list order. Read under the
#: pool's lock, which every change of a booking takes first, so no row lock is needed. Locking
#: them (FOR UPDATE) locked every entry of the user's index it scanned, bookings of other pools
#: too: on MariaDB that deadlocked with an *End now* of one of those (its pool's lock and row
#: held, the index entry wanted).
ACTIVE_IN_POOL = (
    select(_bookings)
    .where(_bookings.c.user == bindparam("user"), _bookings.c.pool == bindparam("pool"),
           *state_filter(BookingState.ACTIVE, bindparam("now", type_=_bookings.c.start.type)))
    .order_by(_bookings.c.start, _bookings.c.id)
)


def claim_first(
    store: BookingStore,
    user: str,
    pool: str,
    server: str,
    choose: Callable[[list[Booking]], list[Booking]],
) -> tuple[Booking | None, list[Booking]]:
    """(the claimed booking, the candidates) for ``user``'s start of ``server`` in ``pool``.

    ``choose(active)`` returns the candidates in the order to try. The first one comes back
    claimed for ``server`` when nobody held it, or as it is when ``server`` held it already;
    (None, candidates) when another server holds it (the caller asks the Hub, then claims),
    and (None, []) when there is none."""
    now = store.now()
    with store.unit_of_work([pool]) as work:
        rows = work.rows().execute(
            ACTIVE_IN_POOL, {"user": user, "pool": pool, "now": now}
        )
        candidates = choose([booking_from_row(row) for row in rows])
        if not candidates:
            return None, []
        first = candidates[0]
        if first.server == server:
            return first, candidates
        if first.server is not None:
            return None, candidates
        claimed_at = work.bind_booking(first, server)  # nobody holds it (above)
        return first.with_changes(server=server, updated=claimed_at), candidates
