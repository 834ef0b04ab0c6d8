"""Budget book: per-user and per-group GPU-hour budgets, read from the booking tables.

The store calls :meth:`BudgetBook.check` inside its booking transaction (after the policy
rules), so a booking, and every occurrence of a series, is checked against what is already
charged, including occurrences added earlier in the same transaction. The rules themselves
are pure, in :mod:`jhub_gpubooking.core.budgets`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..core.accounting import Interval
from ..core.budgets import CHARGE_MODES, Budget, BudgetStatus, budget_status, charge, check_budget
from ..core.model import Booking
from ..core.policy import Policy, period_bounds
from .convert import booking_from_row
from .models import BookingRow
from .usage import intervals_by_booking


class BudgetBook:
    """Group budgets and the charge mode (``"booked"`` or ``"used"``) of one service."""

    def __init__(self, group_budgets: Mapping[str, Budget], charge_mode: str = "booked"):
        if charge_mode not in CHARGE_MODES:
            raise ValueError(
                f"budget_charge must be one of {', '.join(CHARGE_MODES)}, not {charge_mode!r}."
            )
        self.group_budgets = dict(group_budgets)
        self.charge_mode = charge_mode

    def own_rules(self, policy: Policy) -> Policy:
        """The policy the pure checks get: in "used" mode the user budget is checked here
        instead, because the pure check only knows booked time."""
        if self.charge_mode == "booked":
            return policy
        return dataclasses.replace(policy, budget_gpu_hours=None)

    def charged_to(self, request: Booking, policy: Policy) -> list[tuple[str, str, Budget]]:
        """The budgets :meth:`check` counts ``request`` against (none: it reads nothing)."""
        budgets = self._budgets_of(request.user, request.groups, policy)
        if self.charge_mode == "booked":
            # the pure policy check has already charged the user's own budget
            budgets = [entry for entry in budgets if entry[0] == "group"]
        return budgets

    def check(self, session: Session, request: Booking, policy: Policy, now: datetime) -> None:
        """Refuse ``request`` (403) if it does not fit one of the budgets it is charged to."""
        budgets = self.charged_to(request, policy)
        if not budgets:
            return
        own_usage = self._usage(session, [request])[0] if request.id is not None else []
        needed = charge(request, own_usage, self.charge_mode, now)
        for status in self._statuses(session, budgets, request.start, now, skip=request.id):
            check_budget(status, needed, now)

    def statuses(
        self, session: Session, user: str, groups: Iterable[str], policy: Policy, now: datetime
    ) -> list[BudgetStatus]:
        """Every budget ``user`` (a member of ``groups``) books against, in the current period."""
        budgets = self._budgets_of(user, tuple(groups), policy)
        return self._statuses(session, budgets, now, now)

    def _budgets_of(
        self, user: str, groups: Iterable[str], policy: Policy
    ) -> list[tuple[str, str, Budget]]:
        found = []
        if policy.budget_gpu_hours is not None:
            found.append(("user", user, Budget(policy.budget_gpu_hours, policy.budget_period)))
        found.extend(
            ("group", group, self.group_budgets[group])
            for group in sorted(set(groups))
            if group in self.group_budgets
        )
        return found

    def _statuses(
        self,
        session: Session,
        budgets: list[tuple[str, str, Budget]],
        when: datetime,
        now: datetime,
        skip: int | None = None,
    ) -> list[BudgetStatus]:
        result = []
        for scope, owner, budget in budgets:
            start, refill = period_bounds(budget.period, when)
            charged = self._charged_bookings(session, scope, owner, start, refill, skip)
            result.append(budget_status(scope, owner, budget, charged, self.charge_mode, when, now))
        return result

    def _charged_bookings(
        self,
        session: Session,
        scope: str,
        owner: str,
        start: datetime,
        refill: datetime,
        skip: int | None,
    ) -> list[tuple[Booking, list[Interval]]]:
        """The bookings charged to ``owner``'s budget in ``[start, refill)``, with usage."""
        statement = select(BookingRow).where(
            BookingRow.status == "booked", BookingRow.start >= start, BookingRow.start < refill
        )
        if scope == "user":
            statement = statement.where(BookingRow.user == owner)
        bookings = [
            booking_from_row(row)
            for row in session.scalars(statement)
            if row.id != skip and (scope == "user" or owner in (row.groups or ()))
        ]
        return [(b, usage) for b, usage in zip(bookings, self._usage(session, bookings))]

    def _usage(self, session: Session, bookings: list[Booking]) -> list[list[Interval]]:
        if self.charge_mode == "booked" or not bookings:
            return [[] for _ in bookings]
        by_booking = intervals_by_booking(session, [b.id for b in bookings])
        return [by_booking[b.id] for b in bookings]



def budgets_of_user(store, user: str, groups: Iterable[str]) -> list[BudgetStatus]:
    """The current period of every budget ``user`` books against (empty: no budget applies)."""
    book = store.budgets or BudgetBook({})
    with store.read_transaction() as session:
        return book.statuses(session, user, groups, store.policy_for(groups), store.now())
