"""The ``c.RemovedUsers`` component: asks the Hub about the users who still have something here,
and takes off what users it no longer has left behind (the rule: :mod:`..core.removed_users`);
and ``GET api/admin/missing-users``, the users whose belongings are about to be taken off.

It runs as a step of the lifecycle tick, before the waitlist is served, so the GPUs it frees
go to waiting requests in the same tick.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from typing import Any

from tornado import web
from traitlets import Any as AnyTrait
from traitlets import Float, Integer, Unicode, default
from traitlets.config import LoggingConfigurable

from ..core.removed_users import check_users
from ..core.timegrid import format_time
from ..db.removed_users import (
    Belongings,
    belongings,
    forget_missing_user,
    missing_users,
    record_missing_users,
    remove_belongings,
    users_with_belongings,
)
from ..db.session import unavailable_reason
from ..executor import in_executor
from ..hub_config import HUB_CULLS_USERS_ENV
from .api import APIHandler
from .base import hub_user_model, unknown_hub_user


class RemovedUsers(LoggingConfigurable):
    """Frees the bookings, waits and calendar link of users deleted from the Hub."""

    check_interval_minutes = Float(
        min=0,
        help="Minutes between two rounds of asking the Hub about every user who has a booking "
        "not over yet, a waiting request or a calendar link (one GET users/{name} each; the "
        "service's token has list:users for it). 0 turns the check off: the bookings of a user "
        "deleted from the Hub then stay booked, each released as a no-show at its start. "
        "Default 60; 0 when the Hub's idle culler deletes inactive users (--cull-users, z2jh "
        "cull.users), who come back at their next login: jhub_gpubooking.configure tells the "
        f"service so (${HUB_CULLS_USERS_ENV}).",
    ).tag(config=True)

    @default("check_interval_minutes")
    def _default_check_interval(self) -> float:
        return 0.0 if os.environ.get(HUB_CULLS_USERS_ENV) else 60.0

    grace_hours = Float(
        24.0, min=0,
        help="Hours a user must have been missing from the Hub, in every round since the first "
        "that found them missing, before their upcoming bookings are cancelled, their running "
        "ones ended, their waits withdrawn and their calendar link revoked. A user added again "
        "(or renamed back) within it loses nothing. The service log names each missing user "
        "and when their bookings go.",
    ).tag(config=True)
    max_users_at_once = Integer(
        5, min=0,
        help="When more users than this are missing from the Hub in one round, nothing is taken "
        "off and the service logs an error: a Hub database set up anew or restored from an old "
        "backup loses users nobody deleted. Raise it for a round in which you deleted more "
        "users on purpose (e.g. at the end of a term).",
    ).tag(config=True)

    store = AnyTrait(help="The service's BookingStore.")
    executor = AnyTrait(help="Executor for database work.")
    hub_api_url = Unicode(help="The Hub's REST API URL.")
    api_token = Unicode(help="The service's Hub API token.")
    waits = AnyTrait(help="The Waitlist's WaitStore: a removed user's waits are withdrawn there.")
    metrics = AnyTrait(None, help="The service's ServiceMetrics (missing and removed users).")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # when each missing user was first found missing is in the database (missing_users),
        # so a restart keeps it; the time of the last round is this process's own: a restarted
        # or second process asking once more only costs a few Hub requests
        self._last_round: datetime | None = None
        self._hub_failure_logged = False
        if os.environ.get(HUB_CULLS_USERS_ENV) and self.checking:
            self.log.warning(
                "The Hub's idle culler deletes inactive users (--cull-users), and "
                "c.RemovedUsers.check_interval_minutes is set: a user culled for %.0f hours "
                "loses their bookings here although they come back at their next login.",
                self.grace_hours)

    @property
    def checking(self) -> bool:
        """Whether rounds run at all (check_interval_minutes 0 turns them off)."""
        return bool(self.check_interval_minutes)

    async def refuse_unknown(self, user: str) -> None:
        """Refuse (:func:`unknown_hub_user`) what an administrator books for ``user`` when the
        Hub has no such user and rounds run: the next round would find them missing and take
        the booking off after the grace, so the admin hears it now rather than the user never.
        With rounds off (the Hub's culler deletes idle users, who come back at their next
        login) nothing is refused. The Hub unable to say is :func:`hub_user_model`'s 503."""
        if self.checking and await hub_user_model(self.hub_api_url, self.api_token,
                                                  user) is None:
            raise unknown_hub_user(user)

    def _round_due(self, now: datetime) -> bool:
        if not self.checking:
            return False
        interval = timedelta(minutes=self.check_interval_minutes)
        return self._last_round is None or now - self._last_round >= interval

    async def check(self, now: datetime) -> list[str]:
        """One round, when one is due at ``now``: the users whose belongings were taken off."""
        if not self._round_due(now):
            return []
        users = await in_executor(self.executor, users_with_belongings, self.store, self.waits, now)
        present: dict[str, bool] = {}
        for user in sorted(users):
            try:
                present[user] = await hub_user_model(self.hub_api_url, self.api_token,
                                                     user) is not None
            except web.HTTPError as error:
                # the Hub cannot say: the whole round waits for the next tick
                if not self._hub_failure_logged:
                    self.log.warning("Users deleted from the Hub not checked (tried again every "
                                     "tick): %s", error)
                    self._hub_failure_logged = True
                return []
        self._hub_failure_logged = False
        grace = timedelta(hours=self.grace_hours)
        known = await in_executor(self.executor, missing_users, self.store)
        # a user with nothing left here any more (an admin cancelled it all) is not followed
        since = {user: at for user, at in known.items() if user in present}
        result = check_users(present, since, now, grace, self.max_users_at_once)
        # stored before anything is taken off: a removal cut short is due again next round
        await in_executor(self.executor, record_missing_users, self.store, result.missing_since)
        if self.metrics is not None:
            self.metrics.users_missing.set(sum(not here for here in present.values()))
        if result.held_back:
            self.log.error(
                "The Hub no longer has %d of the %d users with bookings, waits or calendar links "
                "here; more than c.RemovedUsers.max_users_at_once (%d), so nothing is taken off "
                "(was the Hub's database set up anew or restored?). If you deleted them, raise "
                "max_users_at_once.", result.held_back, len(present), self.max_users_at_once,
            )
        for user in result.newly_missing:
            self.log.warning(
                "The Hub no longer has user %s: their bookings, waits and calendar link here are "
                "taken off from %s unless the Hub has them again by then (renamed in the Hub? "
                "`jhub-gpubooking users rename %s NEW` moves them).",
                user, (result.missing_since[user] + grace).isoformat(timespec="minutes"), user,
            )
        for user in result.back:
            self.log.info("The Hub has user %s again: nothing of theirs is taken off.", user)
        removed = []
        for user in result.due:
            try:
                taken = await in_executor(self.executor, remove_belongings, self.store, self.waits, user, now)
            except Exception as error:
                if unavailable_reason(error):
                    raise  # an outage: the tick says so, and the next one does this round again
                self.log.exception("Taking off what user %s left failed", user)
                continue  # still due: the next round tries again
            await in_executor(self.executor, forget_missing_user, self.store, user)
            removed.append(user)
            if self.metrics is not None:
                self.metrics.removed_users.inc()
            self.log.warning("User %s was deleted from the Hub: %s.", user,
                             taken.describe_removed())
        self._last_round = now
        return removed


def missing_users_json(missing: dict[str, datetime], held: dict[str, Belongings],
                       grace: timedelta | None) -> list[dict]:
    """The admin list: each missing user (by name), since when, when their belongings are
    taken off (null while the check is off: never) and what they hold here now."""
    return [
        {
            "user": user,
            "missing_since": format_time(since),
            "removal_due": None if grace is None else format_time(since + grace),
            "bookings": list(held[user].bookings),
            "waits": list(held[user].waits),
            "calendar_link": held[user].feed_link,
        }
        for user, since in sorted(missing.items())
    ]


class MissingUsersHandler(APIHandler):
    async def get(self) -> None:
        self.require_admin()
        checker: RemovedUsers = self.service.lifecycle.removed_users
        waits = self.service.waitlist.waits
        now = self.clock.now()

        def read() -> tuple[dict[str, datetime], dict[str, Belongings]]:
            missing = missing_users(self.store)
            return missing, {user: belongings(self.store, waits, user, now) for user in missing}

        missing, held = await self.run_in_executor(read)
        grace = timedelta(hours=checker.grace_hours) if checker.checking else None
        self.write_json({
            "users": missing_users_json(missing, held, grace),
            "check_interval_minutes": checker.check_interval_minutes,
            "grace_hours": checker.grace_hours,
            "max_users_at_once": checker.max_users_at_once,
        })


def removed_users_routes() -> list[tuple[str, type[web.RequestHandler]]]:
    return [("api/admin/missing-users", MissingUsersHandler)]
