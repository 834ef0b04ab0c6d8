"""Users the Hub no longer has: when what they left in the service is removed.

An admin deletes a student who left the lab from the Hub, and expects the GPUs that student
had booked for the coming weeks to be free for others. The service only learns it by asking
the Hub about the users who still have something here (bookings not over yet, waits, a
calendar link). A user the Hub says it does not have is *missing*; their bookings and waits
are taken off and their calendar link revoked once they have been missing for a grace period,
so a user deleted by mistake and added again, or renamed back, loses nothing.

Two things make a Hub forget many users at once without anyone leaving: a Hub database set
up anew (``hub.db.type: sqlite-memory``, a lost volume) or restored from an old backup. So
when more users are missing than an admin would plausibly delete together, nothing is
removed and the service says why in its log.

Pure rules, no I/O: :func:`check_users` turns one round of answers into what to do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta


@dataclass(frozen=True)
class UsersCheck:
    """The outcome of one round of asking the Hub.

    ``missing_since``: when each missing user was first found missing (the state kept for the
    next round); ``newly_missing`` and ``back``: users who went missing or came back in this
    round; ``due``: users to remove now; ``held_back``: the number of missing users when there
    were too many to remove any (0 otherwise).
    """

    missing_since: dict[str, datetime] = field(default_factory=dict)
    newly_missing: tuple[str, ...] = ()
    back: tuple[str, ...] = ()
    due: tuple[str, ...] = ()
    held_back: int = 0


def check_users(
    present: Mapping[str, bool],
    missing_since: Mapping[str, datetime],
    now: datetime,
    grace: timedelta,
    max_at_once: int,
) -> UsersCheck:
    """What to do after the Hub answered, for each user asked, whether it has them
    (``present``); users it could not answer for are not in ``present`` and keep their state.

    A user missing for ``grace`` or longer is due. When more than ``max_at_once`` users are
    missing in this round, nobody is due and the time of everyone missing is dropped: the Hub
    itself is in doubt, and as its users come back (logging in again after its database was
    restored) the last few would otherwise be due at once, missing since before the doubt. Each
    starts a new grace once no more than ``max_at_once`` are missing.
    """
    missing = sorted(user for user, here in present.items() if not here)
    back = tuple(sorted(user for user, here in present.items() if here and user in missing_since))
    kept = {user: since for user, since in missing_since.items() if present.get(user) is not True}
    if len(missing) > max_at_once:
        kept = {user: since for user, since in kept.items() if user not in missing}
        return UsersCheck(missing_since=kept, back=back, held_back=len(missing))
    newly = tuple(user for user in missing if user not in kept)
    for user in newly:
        kept[user] = now
    # a due user stays in missing_since until the removal is done: a removal cut short (the
    # database down) is due again next round, not after a new grace
    due = tuple(user for user in missing if now - kept[user] >= grace)
    return UsersCheck(missing_since=kept, newly_missing=newly, back=back, due=due)
