"""Plain value types of the booking core: pools, placements, bookings, maintenance windows.

Amounts are GPUs as :class:`fractions.Fraction`; internally a pool counts *slices*
(``slices_per_gpu`` per GPU), so a quarter of a GPU in a quarter-slice pool is 1 slice.
A fraction (< 1 GPU) always sits on one GPU; a whole number of GPUs sits on one node.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

from .errors import InvalidRequest
from .timegrid import span_text

_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")

#: Sharing backends the package knows how to translate into pod resources.
KNOWN_BACKENDS = ("whole", "hami", "mig", "time-slicing", "mps", "gpu-manager", "volcano")


class BookingState(str, enum.Enum):
    UPCOMING = "upcoming"
    ACTIVE = "active"
    ENDED = "ended"
    CANCELLED = "cancelled"


def booking_state(status: str, start: datetime, end: datetime, now: datetime) -> BookingState:
    """The one rule for what a booking is at ``now``: cancelled whatever its times, else upcoming
    before its start, active in [start, end), ended after."""
    if status == "cancelled":
        return BookingState.CANCELLED
    if now < start:
        return BookingState.UPCOMING
    if now < end:
        return BookingState.ACTIVE
    return BookingState.ENDED


@dataclass(frozen=True)
class Pool:
    """A set of identical GPUs, grouped by node, shared through one backend.

    ``nodes`` maps node name -> number of GPUs on it; ``gpu_uuids`` optionally maps node name ->
    the GPU UUIDs by index (used to pin a booked GPU, e.g. HAMi's ``nvidia.com/use-gpuuuid``).
    ``resource_name`` overrides the backend's default extended resource (e.g. the MIG profile
    resource ``nvidia.com/mig-1g.10gb`` or a renamed ``nvidia.com/gpu.shared``).
    ``node_selector`` is added to every pod of the pool, next to the booked node.
    ``no_show_minutes`` is this pool's no-show release time (None: the service's
    ``Lifecycle.no_show_minutes``; 0: never released as a no-show).
    """

    name: str
    nodes: Mapping[str, int]
    slices_per_gpu: int = 1
    display_name: str = ""
    gpu_model: str = ""
    gpu_memory_mib: int = 0
    backend: str = "whole"
    gpu_uuids: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    resource_name: str = ""
    description: str = ""
    no_show_minutes: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ValueError(
                f"Pool name {self.name!r} must be lowercase letters, digits and '-' (max 63)."
            )
        if (
            not isinstance(self.slices_per_gpu, int)
            or isinstance(self.slices_per_gpu, bool)
            or not 1 <= self.slices_per_gpu <= 64
        ):
            raise ValueError(f"Pool {self.name}: slices_per_gpu must be an integer from 1 to 64.")
        if not self.nodes:
            raise ValueError(f"Pool {self.name}: 'nodes' must name at least one node.")
        for node, count in self.nodes.items():
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise ValueError(f"Pool {self.name}: node {node!r} needs a GPU count >= 0.")
        for node, uuids in self.gpu_uuids.items():
            if node not in self.nodes:
                raise ValueError(f"Pool {self.name}: gpu_uuids names unknown node {node!r}.")
            if len(uuids) != self.nodes[node]:
                raise ValueError(
                    f"Pool {self.name}: node {node!r} has {self.nodes[node]} GPUs "
                    f"but {len(uuids)} UUIDs."
                )
        if self.gpu_memory_mib < 0:
            raise ValueError(f"Pool {self.name}: gpu_memory_mib must be >= 0.")
        minutes = self.no_show_minutes
        if minutes is not None and (
            not isinstance(minutes, int) or isinstance(minutes, bool) or minutes < 0
        ):
            raise ValueError(f"Pool {self.name}: no_show_minutes must be an integer >= 0 or None.")
        if not self.display_name:
            object.__setattr__(self, "display_name", self.name)
        # freeze mappings so a Pool can be shared between threads safely
        object.__setattr__(self, "nodes", dict(self.nodes))
        object.__setattr__(self, "gpu_uuids", {k: tuple(v) for k, v in self.gpu_uuids.items()})
        object.__setattr__(self, "node_selector", dict(self.node_selector))
        # amount -> slices of the amounts this pool gave already (only bookable ones, so at
        # most its largest node's GPUs times slices_per_gpu entries): a create asks 4 times
        object.__setattr__(self, "_slices_by_amount", {})
        object.__setattr__(self, "_gpu_keys", tuple(
            (node, index) for node, count in self.nodes.items() for index in range(count)))

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Pool:
        """Build a pool from a config dict (the service's ``pools`` trait entries)."""
        # the pool's JSON shape is defined once, in core.wire, which builds on this module
        from .wire import pool_from_config

        return pool_from_config(config)

    @property
    def total_gpus(self) -> int:
        return sum(self.nodes.values())

    @property
    def gpu_keys(self) -> tuple[tuple[str, int], ...]:
        """(node, index) of every GPU, node by node in config order: the one numbering of a
        pool's GPUs (a GPU's position in this tuple is its number in the placement tables and
        the re-placement searches)."""
        return self._gpu_keys

    @property
    def total_slices(self) -> int:
        return self.total_gpus * self.slices_per_gpu

    def gpu_uuid(self, node: str, index: int) -> str | None:
        uuids = self.gpu_uuids.get(node)
        return uuids[index] if uuids else None

    def slices_of(self, amount: Fraction) -> int:
        """Slices ``amount`` GPUs hold in this pool; refuses amounts that break the amount rule
        (:func:`amount_rule_broken`) or fall between this pool's slices."""
        amount = Fraction(amount)
        broken = amount_rule_broken(amount)
        if broken:
            raise InvalidRequest(f"{broken}." if amount <= 0 else f"{broken}; {self._nearest(amount)}.")
        slices = amount * self.slices_per_gpu
        if slices.denominator != 1:
            raise InvalidRequest(
                f"Pool {self.display_name} shares each GPU in {self.slices_per_gpu} slice(s); "
                f"{format_amount(amount)} GPU is not bookable here; {self._nearest(amount)}."
            )
        return int(slices)

    def amount_to_slices(self, amount: Fraction) -> int:
        """Slices needed for ``amount`` GPUs; refuses amounts this pool cannot give (also more
        GPUs than its largest node has)."""
        known = self._slices_by_amount.get(amount)
        if known is not None:
            return known
        slices = self.slices_of(amount)
        max_gpus = max(self.nodes.values())
        if Fraction(amount) > max_gpus:
            raise InvalidRequest(
                f"Pool {self.display_name} has at most {max_gpus} GPU(s) on one node; a booking "
                f"of {format_amount(amount)} GPUs cannot be placed on a single node."
            )
        self._slices_by_amount[Fraction(amount)] = slices
        return slices

    def nearest_amounts(self, amount: Fraction) -> list[Fraction]:
        """The bookable amounts just below and just above an off-grid ``amount`` (one if the
        other does not exist): slice steps below one GPU, whole GPUs above."""
        step = Fraction(1, self.slices_per_gpu) if amount < 1 else Fraction(1)
        below = (amount // step) * step
        largest = max(self.nodes.values())
        return [a for a in (below, below + step) if 0 < a <= max(largest, 1)]

    def _nearest(self, amount: Fraction) -> str:
        nearest = [format_amount(a) for a in self.nearest_amounts(amount)]
        if len(nearest) == 1:
            return f"the nearest bookable amount is {nearest[0]}"
        return f"the nearest bookable amounts are {' and '.join(nearest)}"

    def slices_to_amount(self, slices: int) -> Fraction:
        return Fraction(slices, self.slices_per_gpu)


def amount_rule_broken(amount: Fraction) -> str | None:
    """The rule every GPU amount follows, or how ``amount`` breaks it (a sentence without its
    full stop): more than zero, and a fraction (< 1) sits on one GPU while more than one GPU
    must be a whole number. Whether a pool can give it is :meth:`Pool.slices_of`'s question."""
    amount = Fraction(amount)
    if amount <= 0:
        return f"A booking must hold more than zero GPUs, not {format_amount(amount)}"
    if amount > 1 and amount.denominator != 1:
        return (
            f"{format_amount(amount)} GPUs cannot be booked: more than one GPU must be a whole "
            "number (a fraction always sits on a single GPU)"
        )
    return None


def parse_amount(value: Any) -> Fraction:
    """Parse a GPU amount from JSON or a form: 2, 0.25, "0.5", "1/4"."""
    if isinstance(value, bool):
        raise InvalidRequest("'gpus' must be a number such as 1, 0.5 or 1/4.")
    try:
        if isinstance(value, int):
            return Fraction(value)
        if isinstance(value, float):
            return _without_float_noise(Fraction(_plain_decimal(repr(value))))
        if isinstance(value, str):
            text = value.strip()
            if "/" in text:
                num, den = text.split("/", 1)
                return Fraction(int(num), int(den))
            return _without_float_noise(Fraction(_plain_decimal(text)))
    except (ValueError, ZeroDivisionError, InvalidOperation):
        pass
    raise InvalidRequest(f"'gpus' must be a number such as 1, 0.5 or 1/4, not {value!r}.")


#: How close a decimal must be to a simple fraction to *be* it: 0.3333333333333333 (a float's
#: 1/3, as the page sends it) is 1/3, but 0.2501 is not 1/4 and is refused as off the grid.
FLOAT_NOISE = Fraction(1, 10**12)


def _without_float_noise(exact: Fraction) -> Fraction:
    simple = exact.limit_denominator(1000)
    return simple if abs(simple - exact) <= FLOAT_NOISE else exact


def _plain_decimal(text: str) -> Decimal:
    """A finite decimal of sensible size: 'inf' has no ratio, and '1e-999999999' would make
    Fraction build a billion-digit denominator."""
    number = Decimal(text)
    if not number.is_finite() or abs(number.adjusted()) > 6:
        raise ValueError(text)
    return number


def format_amount(amount: Fraction) -> str:
    """Human form of an amount: '2', '0.5', '0.25', '1/7'."""
    amount = Fraction(amount)
    if amount.denominator == 1:
        return str(amount.numerator)
    decimal = amount.numerator / amount.denominator
    if Fraction(repr(round(decimal, 4))) == amount:
        return repr(round(decimal, 4))
    return f"{amount.numerator}/{amount.denominator}"


#: Longest free text a person may attach (a booking's note, a maintenance window's reason).
MAX_TEXT_LENGTH = 500


def checked_text(value: Any, field: str) -> str:
    """``value`` if it is text of at most :data:`MAX_TEXT_LENGTH` characters, else refused."""
    if not isinstance(value, str) or len(value) > MAX_TEXT_LENGTH:
        raise InvalidRequest(f"'{field}' must be text of at most {MAX_TEXT_LENGTH} characters.")
    return value


def amount_to_json(amount: Fraction) -> float | int:
    """Amounts in JSON are numbers (1/7 becomes 0.142857...; the 'slices' field is exact)."""
    amount = Fraction(amount)
    return amount.numerator if amount.denominator == 1 else float(amount)


@dataclass(frozen=True)
class Placement:
    """Where a booking sits: a node, the GPU indices on it, and slices held on each GPU."""

    node: str
    gpus: tuple[int, ...]
    slices: int

    def where(self) -> str:
        """The node and GPU indices, for people: ``gpu-1 GPU 0,1``."""
        return where_text(self.node, self.gpus)

    def holds(self, node: str | None, gpus: tuple[int, ...] | None) -> bool:
        """Whether a pod made for ``node`` and GPU indices ``gpus`` (None: not known, as for
        a pod made before 0.2.0) runs on this placement: after a restore of the booking
        database, a booking that moved before it started is back where it was, while its pod
        holds the GPUs it moved to."""
        return (node is None or node == self.node) and (gpus is None or tuple(gpus) == self.gpus)


def where_text(node: str | None, gpus: tuple[int, ...] | None) -> str:
    """A node and GPU indices for people (``gpu-1 GPU 0,1``), what is not known left out."""
    indices = "" if gpus is None else f" GPU {','.join(str(gpu) for gpu in gpus)}"
    return f"{node or 'an unknown node'}{indices}"


@dataclass(frozen=True)
class Booking:
    """A booking as the core sees it (the database layer converts rows to and from this).

    ``status`` is what is stored: ``"booked"`` or ``"cancelled"``; the user-facing
    :class:`BookingState` is derived from it and the clock, so no timer has to flip states.
    ``server`` is the name of the server currently using the booking ("" is the default
    server, None means unused). A booking released early (no-show, server stopped) has its
    ``end`` moved to the release time and keeps its booked end in ``released_end``.
    """

    user: str
    pool: str
    amount: Fraction
    start: datetime
    end: datetime
    placement: Placement | None = None
    id: int | None = None
    note: str = ""
    status: str = "booked"
    created: datetime | None = None
    updated: datetime | None = None
    server: str | None = None
    # lifecycle: the booker's groups, the end before an early release and why it was released
    groups: tuple[str, ...] = ()
    released_end: datetime | None = None
    release_reason: str | None = None
    opportunistic: bool = False
    # the recurring series this booking is one occurrence of (None: a single booking)
    series_id: int | None = None

    def state(self, now: datetime) -> BookingState:
        return booking_state(self.status, self.start, self.end, now)

    def not_over(self, now: datetime) -> bool:
        """Upcoming or active at ``now``: neither ended nor cancelled."""
        return self.state(now) in (BookingState.UPCOMING, BookingState.ACTIVE)

    @property
    def holds_capacity(self) -> bool:
        """Cancelled bookings free their capacity; all others keep it for [start, end)."""
        return self.status != "cancelled"

    def overlaps(self, start: datetime, end: datetime) -> bool:
        return self.start < end and start < self.end

    def with_changes(self, **changes: Any) -> Booking:
        return replace(self, **changes)


@dataclass(frozen=True)
class MaintenanceWindow:
    """An admin block of a whole pool (``node`` None) or one node for [start, end)."""

    pool: str
    start: datetime
    end: datetime
    node: str | None = None
    reason: str = ""
    id: int | None = None

    def covers(self, node: str) -> bool:
        return self.node is None or self.node == node

    def describe(self) -> str:
        """For a refusal (users do not see maintenance windows on the page): ``Node n1 is down
        for maintenance from 2030-01-07 11:00 to 12:00 UTC (firmware)``."""
        which = f"Node {self.node}" if self.node is not None else f"Pool {self.pool}"
        reason = f" ({self.reason})" if self.reason else ""
        return f"{which} is down for maintenance from {span_text(self.start, self.end)}{reason}"

    overlaps = Booking.overlaps  # the same half-open [start, end) rule as a booking's


@dataclass(frozen=True)
class Move:
    """``booking`` (with its old placement) goes to ``placement`` (a booking not yet started
    re-placed to let a request in, see :mod:`.replacement`)."""

    booking: Booking
    placement: Placement


@dataclass(frozen=True)
class Replacement:
    """Where a request goes, and the bookings moved to make room (empty: none moved)."""

    placement: Placement
    moves: tuple[Move, ...] = ()
