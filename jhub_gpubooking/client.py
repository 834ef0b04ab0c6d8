"""Small async client of the booking service's REST API, used by the spawner (with the service's
token) and by a booked server's JupyterLab extension (with the server's own token).

Every failure is one of two typed errors: the service could not answer
(:class:`BookingServiceUnavailable`, the spawner fails closed; its ``retry_after`` says when
asking again may help) or it answered with a refusal (:class:`BookingRefused`, carrying the
service's one-sentence message).

Built on aiohttp (a dependency already, through kubernetes_asyncio) rather than tornado's
``AsyncHTTPClient``, whose simple client opens a new connection for every request and resolves
even a literal IP address in a thread: on the spawn gate that cost ~0.5 ms of the Hub's CPU,
~0.2 ms of the service's and a thread hop per start (docs/benchmarks.md). All clients in one
event loop share one session (:func:`shared_session`), so connections to the service are kept
alive and reused, as KubeSpawner shares its Kubernetes client.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import quote

import aiohttp
from tornado.httputil import url_concat

from .core.wire import SERVICE_STARTING

#: The session of each running event loop (see :func:`shared_session`).
_sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}
#: The tasks that close them (the loop keeps only weak references to its tasks).
_close_tasks: set[asyncio.Task] = set()


def shared_session() -> aiohttp.ClientSession:
    """The running event loop's HTTP session, made at its first use.

    Closed when its loop shuts down: a task holds it until it is cancelled, which JupyterHub
    (like ``asyncio.run``) does to every task at exit — KubeSpawner's Kubernetes client lives the
    same way. The session sends no cookies back (``DummyCookieJar``): every request carries its
    own token, and a cookie one answer sets must not authenticate another client's request.
    """
    loop = asyncio.get_running_loop()
    session = _sessions.get(loop)
    if session is None or session.closed:
        session = _sessions[loop] = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
        holder = loop.create_task(_close_at_shutdown(loop, session))
        _close_tasks.add(holder)
        holder.add_done_callback(_close_tasks.discard)
    return session


async def _close_at_shutdown(loop: asyncio.AbstractEventLoop, session: aiohttp.ClientSession):
    try:
        await asyncio.Event().wait()
    finally:
        if _sessions.get(loop) is session:
            del _sessions[loop]
        await session.close()


#: Seconds before asking again a service that did not answer: one the Hub is starting (with
#: itself, or again after a crash) listens within a few seconds.
RECONNECT_SECONDS = 1.0


class BookingServiceUnavailable(Exception):
    """The service could not be reached, timed out, or answered with a server error.

    ``retry_after``: the seconds after which asking again may succeed (a 503's
    ``Retry-After``: its database or the Hub could not answer; no answer at all), or None
    when asking again soon is not expected to help (a 500, an answer that is not JSON)."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class BookingServiceStarting(BookingServiceUnavailable):
    """The service has just started and cannot claim yet (503, reason
    :data:`SERVICE_STARTING`): ask again after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: float):
        super().__init__(message, retry_after)


class BookingServiceUnreachable(BookingServiceUnavailable):
    """No answer: no connection could be made (nothing listens: the service is being started
    or restarted), none came within the timeouts (a service busy starting, or waiting on its
    database), or the connection closed unanswered. Every request of this client can be sent
    again (a claim the server holds already is answered as is): ask again after
    :data:`RECONNECT_SECONDS`."""

    def __init__(self, message: str):
        super().__init__(message, RECONNECT_SECONDS)


class BookingRefused(Exception):
    """The service answered with a 4xx error; ``message`` is its sentence for the user and
    ``details`` the whole error object (e.g. a pool claim's ``reason``, ``pool``, ``server``)."""

    def __init__(self, status: int, message: str, details: dict | None = None):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.details = details or {}


def _booking_list(answer: Any) -> list[dict]:
    """Bookings from the API's ``{"bookings": [...]}``; anything else means a wrong URL or service."""
    bookings = answer.get("bookings") if isinstance(answer, dict) else None
    if not isinstance(bookings, list):
        raise BookingServiceUnavailable(f"expected a list of bookings, got {answer!r:.200}")
    return bookings


class BookingClient:
    """Calls the booking service with one API token (the spawner's, or a server's own)."""

    def __init__(
        self,
        api_url: str,
        token: str,
        *,
        request_timeout: float,
        connect_timeout: float,
    ):
        # urljoin-free joining: the base is a path prefix, never a document
        self.api_url = api_url if api_url.endswith("/") else api_url + "/"
        self.token = token
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout

    async def pools(self) -> list[dict]:
        return await self._request("GET", "api/pools")

    async def active_bookings(self, user: str) -> list[dict]:
        answer = await self._request("GET", f"api/users/{quote(user, safe='')}/bookings/active")
        return _booking_list(answer)

    async def upcoming_bookings(self, user: str) -> list[dict]:
        answer = await self._request(
            "GET", url_concat("api/bookings", {"user": user, "state": "upcoming"})
        )
        return _booking_list(answer)

    async def claim_in_pool(
        self, pool: str, user: str, server: str, booking_id: int | None = None
    ) -> dict:
        """The spawn gate in one round trip: ``{"pool": …, "booking": …}`` with ``user``'s
        booking in ``pool`` claimed for ``server`` (``booking_id``: the one the user chose)."""
        return await self._request(
            "POST",
            f"api/pools/{quote(pool, safe='')}/claim",
            {"user": user, "server": server, "booking": booking_id},
        )

    async def release(self, booking_id: int, user: str, server: str) -> dict:
        return await self._request(
            "POST", f"api/bookings/{int(booking_id)}/release", {"user": user, "server": server}
        )

    async def extension(self, booking_id: int) -> dict:
        """The booking and the largest extension allowed right now (by the service's clock)."""
        return await self._request("GET", f"api/bookings/{int(booking_id)}/extension")

    async def change_end(self, booking_id: int, end: str) -> dict:
        return await self._request("PATCH", f"api/bookings/{int(booking_id)}", {"end": end})

    async def opportunistic_availability(self) -> dict:
        return await self._request("GET", "api/opportunistic")

    async def _request(self, method: str, path: str, body: dict | None = None) -> Any:
        url = self.api_url + path
        try:
            try:
                code, reason, payload, retry_after = await self._send(method, url, body)
            except aiohttp.ServerDisconnectedError:
                # a kept-alive connection the service closed (a restart) just as it was reused:
                # nothing was answered, so send once more on a new one (every request of this
                # client is idempotent: a claim this server holds already is answered as is)
                code, reason, payload, retry_after = await self._send(method, url, body)
        except (OSError, aiohttp.ClientError, asyncio.TimeoutError) as error:
            # connection refused (nothing listens), no connection within connect_timeout, no
            # whole answer within request_timeout, the connection closed unanswered
            raise BookingServiceUnreachable(
                f"{method} {url}: {str(error) or type(error).__name__}"
            ) from error
        if code == 503 and retry_after is not None and _reason(payload) == SERVICE_STARTING:
            raise BookingServiceStarting(f"{method} {url}: HTTP 503, the service is starting",
                                         retry_after)
        if code >= 500:
            # a 503's Retry-After: its database or the Hub cannot answer for now
            raise BookingServiceUnavailable(f"{method} {url}: HTTP {code} {reason}",
                                            retry_after if code == 503 else None)
        try:
            answer = json.loads(payload or b"null")
        except ValueError as error:
            raise BookingServiceUnavailable(
                f"{method} {url}: answer is not JSON (HTTP {code})"
            ) from error
        if code >= 300:
            details = answer if isinstance(answer, dict) else {}
            message = details.get("message")
            raise BookingRefused(code, message or f"HTTP {code} {reason}", details)
        return answer

    async def _send(
        self, method: str, url: str, body: dict | None
    ) -> tuple[int, str, bytes, float | None]:
        """One request on the loop's shared session: (status, reason, body, the seconds of its
        ``Retry-After`` header or None)."""
        async with shared_session().request(
            method,
            url,
            headers={
                "Authorization": f"token {self.token}",
                "Accept": "application/json",
                "Content-Type": "application/json",
            },
            data=json.dumps(body) if body is not None else None,
            timeout=aiohttp.ClientTimeout(
                total=self.request_timeout, sock_connect=self.connect_timeout
            ),
            allow_redirects=False,
        ) as response:
            return (response.status, response.reason or "", await response.read(),
                    _seconds(response.headers.get("Retry-After")))


def _seconds(header: str | None) -> float | None:
    """A ``Retry-After`` given in seconds (the service never sends an HTTP date)."""
    try:
        seconds = float(header) if header is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds < 3600 else None


def _reason(payload: bytes) -> str | None:
    """The ``reason`` of an error answer's JSON, if it has one."""
    try:
        answer = json.loads(payload or b"null")
    except ValueError:
        return None
    return answer.get("reason") if isinstance(answer, dict) else None
