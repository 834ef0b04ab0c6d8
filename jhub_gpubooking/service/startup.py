"""What the service does before it serves and once it stops: it sets up its log, checks the
database (waited for while unavailable) and its own Hub scopes, reads its cookie secret and
freezes its start-up heap; at the end it gives database work in flight a moment to finish."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path
from typing import TypeVar

from jupyterhub.utils import url_path_join
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from ..db.session import display_url, normalize_url, unavailable_reason
from ..hub_config import SERVICE_SCOPES

#: Seconds between two attempts to open a database that is unavailable at start, and between
#: two log lines about it.
DATABASE_RETRY_SECONDS = 2.0
DATABASE_WAIT_LOG_SECONDS = 30.0

#: Tries (one second apart) to ask the Hub for the service's own scopes at start.
HUB_SCOPE_CHECK_ATTEMPTS = 3

#: Seconds the service waits, once told to stop, for requests in flight and database work;
#: then it exits anyway (the z2jh hub pod has 30 s to stop the Hub and all its services).
SHUTDOWN_SECONDS = 1.0

T = TypeVar("T")

#: The Hub's own log line (``JupyterHub.log_format``): the service writes to the hub pod's log
#: beside the Hub, so its lines carry the same level, time and source.
HUB_LOG_FORMAT = ("%(color)s[%(levelname)1.1s %(asctime)s.%(msecs).03d %(name)s "
                  "%(module)s:%(lineno)d]%(end_color)s %(message)s")
#: Loggers the service's console handler writes besides its own: the package's modules (the
#: webhook's verdicts, the sweeps' deletions) and tornado's (the access log, handler errors).
#: Without a handler of their own, Python drops their INFO lines and prints the rest bare.
PACKAGE_LOGGERS = ("jhub_gpubooking", "tornado")


def with_package_loggers(config: dict, level: int | str) -> dict:
    """traitlets' default logging config (``Application.get_default_logging_config``) with
    :data:`PACKAGE_LOGGERS` on its console handler at ``level``. They still propagate, so a
    test's log capture sees them; in the service nothing above them has a handler."""
    if "console" in config.get("handlers", {}):  # none under pythonw
        for name in PACKAGE_LOGGERS:
            config.setdefault("loggers", {})[name] = {"level": level, "handlers": ["console"]}
    return config


def wait_for_database(open_store: Callable[[], T], db_url: str, log: logging.Logger) -> T:
    """``open_store()``, retried while the database is unavailable (a hub pod restarting
    during a database outage): the service then comes up with the database instead of
    crash-looping; until then the Hub's spawner refuses GPU starts as for any outage.
    PostgreSQL/MariaDB only."""
    waited = 0.0
    while True:
        try:
            return open_store()
        except Exception as error:
            # a SQLite file that cannot be opened is a wrong path or volume: say so at once
            if unavailable_reason(error) is None or normalize_url(db_url).startswith("sqlite"):
                raise
            if waited % DATABASE_WAIT_LOG_SECONDS < DATABASE_RETRY_SECONDS:
                log.warning(
                    "Waiting for the booking database %s: %s",
                    display_url(db_url),
                    str(error).splitlines()[0],
                )
        time.sleep(DATABASE_RETRY_SECONDS)
        waited += DATABASE_RETRY_SECONDS


async def hub_scopes_suffice(hub_api_url: str, api_token: str, log: logging.Logger) -> bool:
    """False, logged in one line, when the Hub refuses the service's token or its role lacks a
    scope it needs (SERVICE_SCOPES): without read:servers and admin:server_state a running
    server would look stopped or unknown. A Hub that does not answer is only warned about."""
    url = url_path_join(hub_api_url, "user")
    headers = {"Authorization": f"token {api_token}"}
    for _attempt in range(HUB_SCOPE_CHECK_ATTEMPTS):
        try:
            response = await AsyncHTTPClient().fetch(url, headers=headers, request_timeout=5)
            break
        except HTTPClientError as error:
            if error.code in (401, 403):
                log.critical("The Hub refuses this service's API token: %s", error)
                return False
            reason = error
        except OSError as error:
            reason = error
        await asyncio.sleep(1)
    else:
        log.warning("Could not check this service's Hub scopes: %s", reason)
        return True
    granted = set(json.loads(response.body).get("scopes") or ())
    missing = [scope for scope in SERVICE_SCOPES if scope not in granted]
    if missing:
        log.critical(
            "This service's Hub role lacks the scopes %s; grant them (see "
            "jhub_gpubooking.configure or hub.loadRoles) and restart.", ", ".join(missing)
        )
        return False
    return True


def freeze_startup_heap() -> None:
    """Keep the objects of start-up (modules, configuration, SQLAlchemy's tables and compiled
    statements: over 100,000) out of the garbage collector's later full collections.

    They live as long as the process, yet each full collection walked them all, 60 ms of CPU
    (measured, see docs/benchmarks.md): a pause for every request in flight, longer than a
    create's whole latency target. Collected once first, so no garbage is kept forever."""
    gc.collect()
    gc.freeze()


def read_cookie_secret(secret_file: str) -> bytes:
    """The secret that signs login cookies, kept in ``secret_file`` (created, readable by the
    owner only, when missing); a fresh random one at each start when no file is configured."""
    if not secret_file:
        return secrets.token_bytes(32)
    path = Path(secret_file)
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(secrets.token_hex(32))
    return bytes.fromhex(path.read_text().strip())


def finish_executor(executor: Executor, log: logging.Logger) -> None:
    """Let database work in flight finish for SHUTDOWN_SECONDS, then exit regardless.

    Queued work is dropped; a thread still inside a Hub round trip or a database call would
    otherwise hold the process at interpreter exit (a transaction cut short rolls back).
    """
    waiter = threading.Thread(target=executor.shutdown, kwargs={"cancel_futures": True}, daemon=True)
    waiter.start()
    waiter.join(SHUTDOWN_SECONDS)
    if waiter.is_alive():
        log.warning("Stopping with database work unfinished (it is rolled back)")
        logging.shutdown()
        os._exit(0)
