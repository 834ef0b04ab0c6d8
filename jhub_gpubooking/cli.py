"""``jhub-gpubooking``: the administrator's command line.

    jhub-gpubooking db upgrade [--db-url URL]     create / migrate the booking database
    jhub-gpubooking db current [--db-url URL]     show its schema revision
    jhub-gpubooking db downgrade REVISION [--db-url URL]   migrate back (e.g. to -1)
    jhub-gpubooking db copy --from URL --to URL   copy every row into an empty database
    jhub-gpubooking db backup FILE [--db-url URL]  a consistent copy into a new SQLite file
    jhub-gpubooking db restore FILE [--db-url URL] [--replaced FILE]   back to a backup
    jhub-gpubooking pools list [--config FILE]    pools from the service config (or the database)
    jhub-gpubooking bookings list [--user U] [--state S] [--db-url URL]
    jhub-gpubooking users rename OLD NEW [--db-url URL]   after renaming a user in the Hub

The database URL defaults to ``$GPUBOOKING_DB_URL`` or ``sqlite:///gpubooking.sqlite``. The
service config is read with traitlets' loader, so this tool never imports the service.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from alembic.util import CommandError
from sqlalchemy.exc import DBAPIError
from traitlets.config.loader import ConfigFileNotFound, PyFileConfigLoader

from .core.model import BookingState, Pool, format_amount
from .core.timegrid import format_time
from .db.backup import backup_database
from .db.copy import CopyRefused, copy_database
from .db.session import (
    DB_URL_ENV,
    DEFAULT_DB_URL,
    MigrationError,
    StaleSchema,
    check_schema,
    current_revision,
    display_url,
    downgrade,
    head_revision,
    make_engine,
    make_session_factory,
    upgrade,
)

#: The name of the file ``db restore`` keeps the replaced database in starts so; the scheduled
#: backups' rotation never takes it for one of its own.
REPLACED_PREFIX = "replaced-"
#: The service's default config file name (GPUBookingService.config_file).
DEFAULT_CONFIG_FILE = "jhub_gpubooking_service_config.py"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain left-aligned text table, one line per row."""
    cells = [[str(value) for value in row] for row in rows]
    widths = [
        max([len(header)] + [len(row[i]) for row in cells]) for i, header in enumerate(headers)
    ]
    lines = [list(headers), *cells]
    return "\n".join(
        "  ".join(value.ljust(width) for value, width in zip(line, widths)).rstrip()
        for line in lines
    )


def pools_from_config(path: str) -> list[Pool]:
    """The pools of a service config file (``c.GPUBookingService.pools = [...]``)."""
    directory, filename = os.path.split(os.path.abspath(path))
    config = PyFileConfigLoader(filename, path=directory).load_config()
    entries = config.GPUBookingService.get("pools", [])
    return [Pool.from_config(entry) for entry in entries]


def _pools_from_database(db_url: str) -> list[Pool]:
    from sqlalchemy import select

    from .db.models import PoolRow

    engine = _checked_engine(db_url)
    try:
        with make_session_factory(engine)() as session:
            return [Pool.from_config(row.config) for row in session.scalars(select(PoolRow))]
    finally:
        engine.dispose()


def _checked_engine(db_url: str):
    engine = make_engine(db_url)
    try:
        check_schema(engine)
    except StaleSchema:
        engine.dispose()
        raise
    return engine


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    revision = upgrade(args.db_url)
    print(f"Database {display_url(args.db_url)} is at schema revision {revision} (head).")
    return 0


def cmd_db_downgrade(args: argparse.Namespace) -> int:
    revision = downgrade(args.db_url, args.revision)
    print(
        f"Database {display_url(args.db_url)} is at schema revision {revision or 'none'}; "
        f"only a release needing that revision may use it now."
    )
    return 0


def cmd_db_copy(args: argparse.Namespace) -> int:
    report = copy_database(args.source, args.target)
    print(f"Copied {display_url(args.source)} to {display_url(args.target)}:")
    print(format_table(("TABLE", "ROWS"), list(report.counts.items())))
    print(f"Checksum sha256:{report.checksum} is the same in both databases.")
    if report.whole_seconds:
        print("Times were stored to the whole second (MySQL/MariaDB DATETIME).")
    return 0


def cmd_db_backup(args: argparse.Namespace) -> int:
    report = backup_database(args.db_url, args.file)
    print(
        f"Backed up {display_url(args.db_url)} to {report.path} "
        f"(schema revision {report.revision}):"
    )
    print(format_table(("TABLE", "ROWS"), list(report.counts.items())))
    if report.checksum:
        print(f"Checksum sha256:{report.checksum} is the same in both databases.")
    print(f"Restore it, with the hub stopped, with: jhub-gpubooking db restore {report.path}")
    return 0


def cmd_db_restore(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from .core.backups import backup_name
    from .db.restore import restore_database
    from .gpu import BOOKING_ID_KEY

    backup = Path(args.file).expanduser().resolve()
    replaced = args.replaced or backup.with_name(
        REPLACED_PREFIX + backup_name(datetime.now(timezone.utc)))
    report = restore_database(backup, args.db_url, replaced)
    print(f"Restored {display_url(args.db_url)} from {backup} (written at schema revision "
          f"{report.backup_revision}):")
    rows = [(table, report.counts_before.get(table, 0), count)
            for table, count in report.counts_after.items()]
    print(format_table(("TABLE", "ROWS BEFORE", "ROWS NOW"), rows))
    print(f"Checksum sha256:{report.checksum} is the same in the backup and the database.")
    print(f"The database as it was before is in {report.replaced} (restore that file to undo).")
    if report.taken_away:
        print(f"\nBookings made since the backup, gone now ({len(report.taken_away)}):")
        print(format_table(("ID", "USER", "POOL", "START", "END", "STATUS"), [
            (line.id, line.user, line.pool, format_time(line.start), format_time(line.end),
             line.status) for line in report.taken_away]))
    if report.taken_back:
        print(f"\nBookings changed since the backup, as they were then ({len(report.taken_back)}):")
        print(format_table(("ID", "USER", "POOL", "START", "END", "STATUS", "BEFORE THE RESTORE"), [
            (change.restored.id, change.restored.user, change.restored.pool,
             format_time(change.restored.start), format_time(change.restored.end),
             change.restored.status, _what_changed(change)) for change in report.taken_back]))
    running = report.servers_on_undone_bookings()
    if running:
        print(f"\nServers and pods that were running on bookings the restore took away or "
              f"back ({len(running)}): the service stops those whose booking is gone or over, "
              "and records the claim of those whose booking runs on, at its first tick once the "
              "hub runs again (Hub servers: c.HubServers; pods the admission webhook admitted: "
              "its check of them, with list on pods in their namespace):")
        print(format_table(("BOOKING", "USER", "SERVER OR POD"), [
            (line.id, line.user, line.server or "(default)") for line in running]))
        gone = report.taken_away_in_use()
        if gone:
            print("\nA server whose start was still pending when the hub stopped is one the Hub "
                  "forgets; its pod runs on, and the service leaves pods of bookings it does not "
                  "have alone. Once the hub runs again, delete what is left of those pods with:\n"
                  f"  kubectl delete pods --all-namespaces -l '{BOOKING_ID_KEY} in "
                  f"({','.join(str(booking_id) for booking_id in gone)})'")
    _print_undone(report.undone)
    users = report.users_to_tell()
    if users:
        print(f"\nTell {len(users)} user(s): {', '.join(users)}.")
    else:
        print("\nNo booking, wait or calendar link was made or changed since the backup.")
    return 0


def _print_undone(undone) -> None:
    """What the restore undid besides bookings (:mod:`.db.undone`)."""
    wait_columns = ("ID", "USER", "POOL", "GPUS", "FROM", "LATEST START", "MINUTES", "STATE")

    def wait_row(line):
        return (line.id, line.user, line.pool, line.gpus, format_time(line.start),
                format_time(line.latest_start), line.minutes, line.state)

    if undone.waits_gone:
        print(f"\nWaits made since the backup, gone now: their users wait for nothing "
              f"({len(undone.waits_gone)}):")
        print(format_table(wait_columns, [wait_row(line) for line in undone.waits_gone]))
    if undone.waits_back:
        print(f"\nWaits changed since the backup, as they were then: a wait waiting again is "
              f"served again ({len(undone.waits_back)}):")
        print(format_table((*wait_columns, "BEFORE THE RESTORE"), [
            (*wait_row(restored), replaced.state) for restored, replaced in undone.waits_back]))
    window_columns = ("ID", "POOL", "NODE", "START", "END", "REASON")
    for windows, heading in (
            (undone.windows_gone, "Maintenance windows added since the backup, gone now: "
                                  "add them again if the work is still planned"),
            (undone.windows_back, "Maintenance windows removed since the backup, back now: "
                                  "remove them again if the work is off")):
        if windows:
            print(f"\n{heading} ({len(windows)}):")
            print(format_table(window_columns, [
                (line.id, line.pool, line.node or "(every node)", format_time(line.start),
                 format_time(line.end), line.reason) for line in windows]))
    if undone.calendar_links:
        print(f"\nCalendar links made or reset since the backup are as they were then (none, "
              f"or the older link): a calendar subscribed to the newer one shows nothing until "
              f"its user creates a link again under Calendar feed on the booking page "
              f"({len(undone.calendar_links)}): {', '.join(undone.calendar_links)}.")


def _what_changed(change) -> str:
    restored, replaced = change.restored, change.replaced
    said = []
    if (restored.pool, restored.start, restored.end) != (replaced.pool, replaced.start, replaced.end):
        said.append(f"{replaced.pool} {format_time(replaced.start)}-{format_time(replaced.end)}")
    if restored.status != replaced.status:
        said.append(replaced.status)
    return ", ".join(said) or "placement, server or note"


def cmd_db_current(args: argparse.Namespace) -> int:
    current, head = current_revision(args.db_url), head_revision()
    if current is None:
        print(f"none (empty database; run: jhub-gpubooking db upgrade --db-url {args.db_url})")
    elif current == head:
        print(f"{current} (head)")
    else:
        print(f"{current} (head is {head}; run: jhub-gpubooking db upgrade --db-url {args.db_url})")
    return 0


def cmd_pools_list(args: argparse.Namespace) -> int:
    if args.config:
        pools = pools_from_config(args.config)
    elif os.path.exists(DEFAULT_CONFIG_FILE):
        pools = pools_from_config(DEFAULT_CONFIG_FILE)
    else:
        pools = _pools_from_database(args.db_url)
    rows = [
        (
            pool.name,
            pool.display_name,
            pool.backend,
            pool.total_gpus,
            pool.slices_per_gpu,
            ", ".join(f"{node}:{count}" for node, count in pool.nodes.items()),
        )
        for pool in pools
    ]
    print(format_table(("NAME", "DISPLAY NAME", "BACKEND", "GPUS", "SLICES/GPU", "NODES"), rows))
    return 0


def cmd_bookings_list(args: argparse.Namespace) -> int:
    from .db.store import BookingStore

    engine = _checked_engine(args.db_url)
    try:
        store = BookingStore(make_session_factory(engine), pools={})
        bookings = store.list(user=args.user, state=args.state)
        now = store.clock.now()
    finally:
        engine.dispose()
    rows = [
        (
            booking.id,
            booking.user,
            booking.pool,
            format_amount(booking.amount),
            format_time(booking.start),
            format_time(booking.end),
            booking.state(now).value,
            _where(booking),
            "-" if booking.server is None else (booking.server or "(default)"),
        )
        for booking in bookings
    ]
    headers = ("ID", "USER", "POOL", "GPUS", "START", "END", "STATE", "PLACEMENT", "SERVER")
    print(format_table(headers, rows))
    return 0


def cmd_users_rename(args: argparse.Namespace) -> int:
    from .core.errors import InvalidRequest
    from .db.store import BookingStore
    from .db.user_rename import rename_user

    engine = _checked_engine(args.db_url)
    try:
        renamed = rename_user(BookingStore(make_session_factory(engine), pools={}), args.old,
                              args.new)
    except InvalidRequest as error:
        raise ValueError(error.message) from None
    finally:
        engine.dispose()
    print(f"Renamed {args.old} to {args.new}: {renamed.describe()}.")
    return 0


def _where(booking) -> str:
    placement = booking.placement
    if placement is None:
        return "-"
    return f"{placement.node}/{','.join(str(gpu) for gpu in placement.gpus)}"


def build_parser() -> argparse.ArgumentParser:
    database = argparse.ArgumentParser(add_help=False)
    database.add_argument(
        "--db-url",
        default=os.environ.get(DB_URL_ENV, DEFAULT_DB_URL),
        help=f"SQLAlchemy database URL or SQLite file path (default: ${DB_URL_ENV} or "
        f"{DEFAULT_DB_URL}).",
    )
    parser = argparse.ArgumentParser(
        prog="jhub-gpubooking", description="Administer the JupyterHub GPU booking service."
    )
    topics = parser.add_subparsers(dest="topic", required=True, metavar="{db,pools,bookings,users}")

    db = topics.add_parser("db", help="the booking database schema").add_subparsers(
        dest="action", required=True
    )
    db.add_parser("upgrade", parents=[database], help="create or migrate the schema").set_defaults(
        run=cmd_db_upgrade
    )
    db.add_parser("current", parents=[database], help="show the schema revision").set_defaults(
        run=cmd_db_current
    )
    db_downgrade = db.add_parser(
        "downgrade",
        parents=[database],
        help="migrate the schema back to an older revision (columns and tables added after it "
        "are dropped with their data; take a backup first)",
    )
    db_downgrade.add_argument(
        "revision", help="the revision to go back to, e.g. 0002, or -1 for one step"
    )
    db_downgrade.set_defaults(run=cmd_db_downgrade)
    db_copy = db.add_parser(
        "copy",
        help="copy every row from one database into an empty, migrated one (e.g. SQLite to "
        "PostgreSQL), verified by row counts and a checksum",
    )
    db_copy.add_argument(
        "--from", dest="source", required=True, metavar="URL", help="the database to copy"
    )
    db_copy.add_argument(
        "--to",
        dest="target",
        required=True,
        metavar="URL",
        help="an empty database at the current schema (run `db upgrade --db-url URL` first)",
    )
    db_copy.set_defaults(run=cmd_db_copy)
    db_backup = db.add_parser(
        "backup",
        parents=[database],
        help="write a consistent copy of the database, taken while the service runs, into a "
        "new SQLite file (any backend; restore it with `db restore`)",
    )
    db_backup.add_argument("file", help="the new SQLite file (never overwritten)")
    db_backup.set_defaults(run=cmd_db_backup)
    db_restore = db.add_parser(
        "restore",
        parents=[database],
        help="take the database (at the current schema) back to a backup, with the hub "
        "stopped: it is first backed up itself, the bookings made or changed since the backup "
        "are listed, and ids are never given again",
    )
    db_restore.add_argument("file", help="a backup `db backup` wrote (an older release's too)")
    db_restore.add_argument(
        "--replaced",
        metavar="FILE",
        help="the new SQLite file to keep the database as it was before in (default: "
        f"{REPLACED_PREFIX}gpubooking-<UTC time>.sqlite beside the backup)",
    )
    db_restore.set_defaults(run=cmd_db_restore)

    pools = topics.add_parser("pools", help="configured GPU pools").add_subparsers(
        dest="action", required=True
    )
    pools_list = pools.add_parser(
        "list", parents=[database], help="list pools (from --config, else the database)"
    )
    pools_list.add_argument(
        "--config",
        help=f"the service's Python config file (default: ./{DEFAULT_CONFIG_FILE} if present)",
    )
    pools_list.set_defaults(run=cmd_pools_list)

    bookings = topics.add_parser("bookings", help="bookings").add_subparsers(
        dest="action", required=True
    )
    bookings_list = bookings.add_parser("list", parents=[database], help="list bookings")
    bookings_list.add_argument("--user", help="only this user's bookings")
    bookings_list.add_argument(
        "--state",
        choices=[state.value for state in BookingState],
        help="only bookings in this state",
    )
    bookings_list.set_defaults(run=cmd_bookings_list)

    users = topics.add_parser("users", help="Hub users").add_subparsers(
        dest="action", required=True
    )
    users_rename = users.add_parser(
        "rename", parents=[database],
        help="after renaming a user in the Hub: move their bookings (past ones too), series, "
        "waits and calendar link to the new name",
    )
    users_rename.add_argument("old", help="the name the Hub no longer has")
    users_rename.add_argument("new", help="the user's name in the Hub now")
    users_rename.set_defaults(run=cmd_users_rename)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (
        StaleSchema,
        MigrationError,
        CopyRefused,
        CommandError,
        ConfigFileNotFound,
        ValueError,
    ) as error:
        print(f"jhub-gpubooking: {error}", file=sys.stderr)
        return 1
    except DBAPIError as error:
        # unreachable server, wrong password, a value the target refuses: one line, no traceback
        print(f"jhub-gpubooking: database error: {str(error.orig).strip()}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
