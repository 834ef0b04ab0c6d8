"""Rows a database holds at each schema revision: the data of the migration tests, in one place.

Each :class:`RevisionData` lists the columns its migration adds (a new table lists all of its
columns) and rows written while the database was at that revision, so a test can fill a
database at revision N with a semester's worth of history (every table, odd characters,
fractions, open usage intervals, cancelled and released bookings) and check that the step to
N+1 keeps every row. Migrations spell out their own plain column types, and so does this file:
it must describe old schemas even after the models have moved on.

To cover a new migration ``0004``: append ``RevisionData("0004", columns={...}, rows={...})``
with the columns it adds and a few rows using them (ids after the ones above). If the migration
fills new columns of existing rows with something other than NULL, give ``backfill``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa

#: Tables in an order that inserts parents before the rows referring to them.
TABLE_ORDER = (
    "pools",
    "feed_tokens",
    "booking_series",
    "bookings",
    "booking_events",
    "usage_intervals",
    "maintenance_windows",
    "waits",
    "missing_users",
)


@dataclass(frozen=True)
class RevisionData:
    revision: str
    #: table -> {column: type} the migration adds (all columns of a new table)
    columns: dict[str, dict[str, sa.types.TypeEngine]]
    #: table -> rows written at this revision (every column the schema has at this revision)
    rows: dict[str, list[dict]]
    #: (table, row) -> the row as the migration leaves it; default: new columns are NULL
    backfill: Callable[[str, dict], dict] | None = field(default=None)


def t(text: str) -> datetime:
    """A naive UTC time as stored (whole seconds: MariaDB's DATETIME keeps no fraction)."""
    return datetime.fromisoformat(text)


POOL_A100 = {"name": "a100", "nodes": {"node-a": 2, "node-b": 4}, "display_name": "A100 80GB"}
POOL_T4 = {"name": "t4", "nodes": {"node-c": 2}, "slices_per_gpu": 4, "backend": "hami"}

REVISIONS = [
    RevisionData(
        "0001",
        columns={
            "pools": {"name": sa.String(63), "config": sa.JSON(), "synced_at": sa.DateTime()},
            "feed_tokens": {
                "user": sa.String(255),
                "token_hash": sa.String(64),
                "created": sa.DateTime(),
            },
            "bookings": {
                "id": sa.Integer(),
                "user": sa.String(255),
                "pool": sa.String(63),
                "slices": sa.Integer(),
                "amount_num": sa.Integer(),
                "amount_den": sa.Integer(),
                "start": sa.DateTime(),
                "end": sa.DateTime(),
                "status": sa.String(16),
                "note": sa.Text(),
                "node": sa.String(255),
                "gpu_indices": sa.JSON(),
                "slices_per_gpu_held": sa.Integer(),
                "server": sa.String(255),
                "claimed_at": sa.DateTime(),
                "created": sa.DateTime(),
                "updated": sa.DateTime(),
            },
            "booking_events": {
                "id": sa.Integer(),
                "booking_id": sa.Integer(),
                "at": sa.DateTime(),
                "actor": sa.String(255),
                "kind": sa.String(32),
                "detail": sa.JSON(),
            },
            "maintenance_windows": {
                "id": sa.Integer(),
                "pool": sa.String(63),
                "node": sa.String(255),
                "start": sa.DateTime(),
                "end": sa.DateTime(),
                "reason": sa.Text(),
                "created": sa.DateTime(),
                "created_by": sa.String(255),
            },
        },
        rows={
            "pools": [
                {"name": "a100", "config": POOL_A100, "synced_at": t("2030-01-01 08:00:00")},
                {"name": "t4", "config": POOL_T4, "synced_at": t("2030-01-01 08:00:00")},
            ],
            "feed_tokens": [
                {"user": "zoë", "token_hash": "ab" * 32, "created": t("2030-01-02 09:00:00")}
            ],
            "bookings": [
                {
                    "id": 1,
                    "user": "zoë",
                    "pool": "a100",
                    "slices": 2,
                    "amount_num": 2,
                    "amount_den": 1,
                    "start": t("2030-01-07 10:00:00"),
                    "end": t("2030-01-07 12:00:00"),
                    "status": "booked",
                    "note": 'thesis run "final", 2/2\nsecond line',
                    "node": "node-b",
                    "gpu_indices": [0, 1],
                    "slices_per_gpu_held": 1,
                    "server": "",
                    "claimed_at": t("2030-01-07 10:01:00"),
                    "created": t("2030-01-06 17:00:00"),
                    "updated": t("2030-01-07 10:01:00"),
                },
                {
                    "id": 2,
                    "user": "bob",
                    "pool": "t4",
                    "slices": 1,
                    "amount_num": 1,
                    "amount_den": 4,
                    "start": t("2030-01-08 13:00:00"),
                    "end": t("2030-01-08 13:15:00"),
                    "status": "cancelled",
                    "note": "",
                    "node": "node-c",
                    "gpu_indices": [1],
                    "slices_per_gpu_held": 1,
                    "server": None,
                    "claimed_at": None,
                    "created": t("2030-01-06 18:00:00"),
                    "updated": t("2030-01-07 08:00:00"),
                },
            ],
            "booking_events": [
                {
                    "id": 1,
                    "booking_id": 1,
                    "at": t("2030-01-06 17:00:00"),
                    "actor": "zoë",
                    "kind": "created",
                    "detail": {"gpus": "2", "end": "2030-01-07T12:00:00Z"},
                },
                {
                    "id": 2,
                    "booking_id": 2,
                    "at": t("2030-01-07 08:00:00"),
                    "actor": "admin",
                    "kind": "cancelled",
                    "detail": {},
                },
                {
                    "id": 3,
                    "booking_id": 1,
                    "at": t("2030-01-07 10:01:00"),
                    "actor": None,
                    "kind": "claimed",
                    "detail": {"server": "", "nested": {"list": [1, "ü", None]}},
                },
            ],
            "maintenance_windows": [
                {
                    "id": 1,
                    "pool": "a100",
                    "node": None,
                    "start": t("2030-02-01 00:00:00"),
                    "end": t("2030-02-01 06:00:00"),
                    "reason": "driver upgrade — whole pool",
                    "created": t("2030-01-05 12:00:00"),
                    "created_by": "admin",
                },
                {
                    "id": 2,
                    "pool": "t4",
                    "node": "node-c",
                    "start": t("2030-02-02 00:00:00"),
                    "end": t("2030-02-02 01:00:00"),
                    "reason": "",
                    "created": t("2030-01-05 12:30:00"),
                    "created_by": None,
                },
            ],
        },
    ),
    RevisionData(
        "0002",
        columns={
            "bookings": {
                "groups": sa.JSON(),
                "released_end": sa.DateTime(),
                "release_reason": sa.String(32),
                "stopped_at": sa.DateTime(),
                "warned_end": sa.DateTime(),
                "stop_requested_at": sa.DateTime(),
                "opportunistic": sa.Boolean(),
            },
            "usage_intervals": {
                "id": sa.Integer(),
                "booking_id": sa.Integer(),
                "server": sa.String(255),
                "start": sa.DateTime(),
                "end": sa.DateTime(),
            },
        },
        rows={
            "bookings": [
                {
                    "id": 3,
                    "user": "carol",
                    "pool": "a100",
                    "slices": 1,
                    "amount_num": 1,
                    "amount_den": 1,
                    "start": t("2030-01-09 09:00:00"),
                    "end": t("2030-01-09 09:30:00"),
                    "status": "booked",
                    "note": "released early",
                    "node": "node-a",
                    "gpu_indices": [1],
                    "slices_per_gpu_held": 1,
                    "server": None,
                    "claimed_at": t("2030-01-09 09:00:00"),
                    "created": t("2030-01-08 09:00:00"),
                    "updated": t("2030-01-09 09:30:00"),
                    "groups": ["students", "gpu-admins"],
                    "released_end": t("2030-01-09 11:00:00"),
                    "release_reason": "stopped",
                    "stopped_at": t("2030-01-09 09:10:00"),
                    "warned_end": t("2030-01-09 11:00:00"),
                    "stop_requested_at": t("2030-01-09 09:05:00"),
                    "opportunistic": False,
                },
                {
                    "id": 4,
                    "user": "dan",
                    "pool": "t4",
                    "slices": 2,
                    "amount_num": 1,
                    "amount_den": 2,
                    "start": t("2030-01-09 10:00:00"),
                    "end": t("2030-01-09 11:00:00"),
                    "status": "booked",
                    "note": "",
                    "node": "node-c",
                    "gpu_indices": [0],
                    "slices_per_gpu_held": 2,
                    "server": "gpu-nb",
                    "claimed_at": t("2030-01-09 10:00:00"),
                    "created": t("2030-01-09 10:00:00"),
                    "updated": t("2030-01-09 10:00:00"),
                    "groups": [],
                    "released_end": None,
                    "release_reason": None,
                    "stopped_at": None,
                    "warned_end": None,
                    "stop_requested_at": None,
                    "opportunistic": True,
                },
            ],
            "booking_events": [
                {
                    "id": 4,
                    "booking_id": 3,
                    "at": t("2030-01-09 09:30:00"),
                    "actor": None,
                    "kind": "reclaimed",
                    "detail": {"reason": "stopped", "old_end": "2030-01-09T11:00:00Z"},
                }
            ],
            "usage_intervals": [
                {
                    "id": 1,
                    "booking_id": 1,
                    "server": "",
                    "start": t("2030-01-07 10:01:00"),
                    "end": t("2030-01-07 11:45:00"),
                },
                {
                    "id": 2,
                    "booking_id": 3,
                    "server": "",
                    "start": t("2030-01-09 09:00:00"),
                    "end": t("2030-01-09 09:10:00"),
                },
                {
                    "id": 3,
                    "booking_id": 4,
                    "server": "gpu-nb",
                    "start": t("2030-01-09 10:00:00"),
                    "end": None,
                },
            ],
        },
    ),
    RevisionData(
        "0003",
        columns={
            "booking_series": {
                "id": sa.Integer(),
                "user": sa.String(255),
                "pool": sa.String(63),
                "repeat": sa.String(16),
                "note": sa.Text(),
                "created": sa.DateTime(),
                "created_by": sa.String(255),
            },
            "bookings": {"series_id": sa.Integer()},
        },
        rows={
            "booking_series": [
                {
                    "id": 1,
                    "user": "zoë",
                    "pool": "t4",
                    "repeat": "weekly",
                    "note": "lab course",
                    "created": t("2030-01-10 08:00:00"),
                    "created_by": "carol",
                }
            ],
            "bookings": [
                {
                    "id": 5 + week,
                    "user": "zoë",
                    "pool": "t4",
                    "slices": 4,
                    "amount_num": 1,
                    "amount_den": 1,
                    "start": t(f"2030-01-{14 + 7 * week} 14:00:00"),
                    "end": t(f"2030-01-{14 + 7 * week} 16:00:00"),
                    "status": "booked",
                    "note": "lab course",
                    "node": "node-c",
                    "gpu_indices": [1],
                    "slices_per_gpu_held": 4,
                    "server": None,
                    "claimed_at": None,
                    "created": t("2030-01-10 08:00:00"),
                    "updated": t("2030-01-10 08:00:00"),
                    "groups": ["students"],
                    "released_end": None,
                    "release_reason": None,
                    "stopped_at": None,
                    "warned_end": None,
                    "stop_requested_at": None,
                    "opportunistic": False,
                    "series_id": 1,
                }
                for week in range(2)
            ],
            "booking_events": [
                {
                    "id": 5,
                    "booking_id": 5,
                    "at": t("2030-01-10 08:00:00"),
                    "actor": "carol",
                    "kind": "created",
                    "detail": {"series": 1},
                }
            ],
        },
    ),
]

REVISIONS.append(
    RevisionData(
        "0004",
        columns={
            "waits": {
                "id": sa.Integer(),
                "user": sa.String(255),
                "pool": sa.String(63),
                "amount_num": sa.Integer(),
                "amount_den": sa.Integer(),
                "start": sa.DateTime(),
                "latest_start": sa.DateTime(),
                "minutes": sa.Integer(),
                "priority": sa.Integer(),
                "groups": sa.JSON(),
                "note": sa.Text(),
                "state": sa.String(16),
                "booking_id": sa.Integer(),
                "created": sa.DateTime(),
                "updated": sa.DateTime(),
                "created_by": sa.String(255),
            }
        },
        rows={
            "waits": [
                {
                    "id": 1,
                    "user": "zoë",
                    "pool": "t4",
                    "amount_num": 1,
                    "amount_den": 4,
                    "start": t("2030-01-20 09:00:00"),
                    "latest_start": t("2030-01-21 17:00:00"),
                    "minutes": 120,
                    "priority": 0,
                    "groups": ["students"],
                    "note": "any time Monday or Tuesday — ünïcode",
                    "state": "waiting",
                    "booking_id": None,
                    "created": t("2030-01-12 08:00:00"),
                    "updated": t("2030-01-12 08:00:00"),
                    "created_by": "zoë",
                },
                {
                    "id": 2,
                    "user": "bob",
                    "pool": "a100",
                    "amount_num": 2,
                    "amount_den": 1,
                    "start": t("2030-01-07 10:00:00"),
                    "latest_start": t("2030-01-07 10:00:00"),
                    "minutes": 60,
                    "priority": 3,
                    "groups": [],
                    "note": "",
                    "state": "booked",
                    "booking_id": 1,
                    "created": t("2030-01-06 16:00:00"),
                    "updated": t("2030-01-06 17:00:00"),
                    "created_by": "admin",
                },
            ]
        },
    )
)


def like(revision: str, table: str, **changes) -> dict:
    """The first row of ``table`` written at ``revision``, with ``changes``: a later revision's
    row that differs in a few columns and the columns it adds."""
    data = next(data for data in REVISIONS if data.revision == revision)
    return {**data.rows[table][0], **changes}


# 0005 rebuilds maintenance_windows on SQLite (AUTOINCREMENT): no column changes; a window
# written at 0005 with an id after a gap, as deletions leave
REVISIONS.append(RevisionData("0005", columns={}, rows={"maintenance_windows": [
    like("0001", "maintenance_windows", id=7, pool="t4", node="node-c", reason="", created_by=None,
         start=t("2030-02-08 18:00:00"), end=t("2030-02-08 20:00:00"),
         created=t("2030-02-01 09:30:00")),
]}))

# 0006 adds missing_users: users the Hub no longer has, and since when (in key order; one
# with a non-ASCII name, as Hub names may be)
REVISIONS.append(
    RevisionData(
        "0006",
        columns={"missing_users": {"user": sa.String(255), "since": sa.DateTime()}},
        rows={
            "missing_users": [
                {"user": "bob", "since": t("2030-02-09 08:15:00")},
                {"user": "zoë", "since": t("2030-02-09 07:00:00")},
            ]
        },
    )
)


# 0007 adds bookings.request_key and waits.request_key, unique per user: the rows above have
# none; two users' bookings and waits made with the same key
REVISIONS.append(
    RevisionData(
        "0007",
        columns={"bookings": {"request_key": sa.String(64)}, "waits": {"request_key": sa.String(64)}},
        rows={
            "bookings": [
                like("0003", "bookings", id=7 + n, user=user, amount_den=4, slices=1,
                     start=t("2030-02-10 09:00:00"), end=t("2030-02-10 10:00:00"), note="",
                     gpu_indices=[n], slices_per_gpu_held=1, series_id=None,
                     created=t("2030-02-09 12:00:00"), updated=t("2030-02-09 12:00:00"),
                     request_key="3f2b9c1e-7d4a-4e8b-9a61-0c5d2e8f4b17")
                for n, user in enumerate(("zoë", "bob"))
            ],
            "waits": [
                like("0004", "waits", id=3 + n, user=user, created_by=user,
                     request_key="9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b")
                for n, user in enumerate(("zoë", "bob"))
            ],
        },
    )
)

# 0008 adds booking_series.request_key, unique per user: the series above has none; two users'
# series booked with the same key
REVISIONS.append(RevisionData(
    "0008",
    columns={"booking_series": {"request_key": sa.String(64)}},
    rows={"booking_series": [
        like("0003", "booking_series", id=2 + n, user=user, created_by=user,
             created=t("2030-02-09 13:00:00"), request_key="5c4b3a29-1807-4f6e-9d5c-4b3a29180716")
        for n, user in enumerate(("zoë", "bob"))
    ]},
))

# 0009 adds maintenance_windows.request_key, unique per admin (created_by): the windows above have
# none; two admins' windows added with the same key
REVISIONS.append(RevisionData(
    "0009",
    columns={"maintenance_windows": {"request_key": sa.String(64)}},
    rows={"maintenance_windows": [
        like("0001", "maintenance_windows", id=8 + n, created_by=admin,
             start=t("2030-02-12 00:00:00"), end=t("2030-02-12 02:00:00"),
             request_key="7a6b5c4d-3e2f-4a1b-9c8d-7e6f5a4b3c2d")
        for n, admin in enumerate(("admin", "zoë"))
    ]},
))

# 0010 rebuilds five tables on SQLite (AUTOINCREMENT): no column changes; a booking after a gap
REVISIONS.append(RevisionData("0010", columns={}, rows={"bookings": [
    like("0007", "bookings", id=20, user="ada", request_key=None)]}))

REVISION_IDS = [data.revision for data in REVISIONS]


def columns_at(revision: str) -> dict[str, dict[str, sa.types.TypeEngine]]:
    """Every table and column the schema has at ``revision``."""
    tables: dict[str, dict[str, sa.types.TypeEngine]] = {}
    for data in REVISIONS[: REVISION_IDS.index(revision) + 1]:
        for table, columns in data.columns.items():
            tables.setdefault(table, {}).update(columns)
    return tables


def table_at(revision: str, name: str) -> sa.TableClause:
    return sa.table(
        name, *(sa.column(column, type_) for column, type_ in columns_at(revision)[name].items())
    )


def expected_rows(written_up_to: str, revision: str) -> dict[str, list[dict]]:
    """The rows a database holds at ``revision`` after each revision up to ``written_up_to``
    wrote its rows (and the database was migrated on or back to ``revision``)."""
    columns = columns_at(revision)
    expected: dict[str, list[dict]] = {table: [] for table in columns}
    position = REVISION_IDS.index(revision)
    for data in REVISIONS[: REVISION_IDS.index(written_up_to) + 1]:
        for table, rows in data.rows.items():
            if table not in columns:
                continue  # a downgrade dropped the table
            for row in rows:
                row = {column: row.get(column) for column in columns[table]}
                for later in REVISIONS[REVISION_IDS.index(data.revision) + 1 : position + 1]:
                    if later.backfill:
                        row = later.backfill(table, row)
                expected[table].append(row)
    return expected


def write_rows(connection: sa.Connection, revision: str) -> None:
    """Insert the rows written at ``revision`` (the database must be at ``revision``)."""
    data = REVISIONS[REVISION_IDS.index(revision)]
    for table in TABLE_ORDER:
        if data.rows.get(table):
            connection.execute(sa.insert(table_at(revision, table)), data.rows[table])


def read_rows(connection: sa.Connection, revision: str) -> dict[str, list[dict]]:
    """Every row of every table the schema has at ``revision``, in primary-key order."""
    rows = {}
    for name in columns_at(revision):
        table = table_at(revision, name)
        key = table.c.id if "id" in table.c else next(iter(table.c))
        rows[name] = [
            dict(row._mapping) for row in connection.execute(sa.select(table).order_by(key))
        ]
    return rows


def rows_of(url: str, revision: str | None = None) -> dict[str, list[dict]]:
    """:func:`read_rows` of the database at ``url`` (default: at the newest revision)."""
    from jhub_gpubooking.db.session import make_engine

    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return read_rows(connection, revision or REVISION_IDS[-1])
    finally:
        engine.dispose()
