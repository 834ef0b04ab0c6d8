"""Small async client of the booking service's REST API, used by the spawner (with the service's
token) and by a booked server's JupyterLab extension (with the server's own token).

Built on tornado's ``AsyncHTTPClient`` (what JupyterHub itself uses), so the Hub needs no
extra HTTP stack. Every failure is one of two typed errors: the service could not answer
(:class:`BookingServiceUnavailable`, the spawner fails closed) or it answered with a refusal
(:class:`BookingRefused`, carrying the service's one-sentence message).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.httputil import url_concat


class BookingServiceUnavailable(Exception):
    """The service could not be reached, timed out, or answered with a server error."""


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

    async def release(self, booking_id: int, server: str) -> dict:
        return await self._request(
            "POST", f"api/bookings/{int(booking_id)}/release", {"server": server}
        )

    async def extension(self, booking_id: int) -> dict:
        """The booking and the largest extension allowed right now (by the service's clock)."""
        return await self._request("GET", f"api/bookings/{int(booking_id)}/extension")

    async def change_end(self, booking_id: int, end: str) -> dict:
        return await self._request("PATCH", f"api/bookings/{int(booking_id)}", {"end": end})

    async def opportunistic_availability(self) -> dict:
        return await self._request("GET", "api/opportunistic")

    async def _request(self, method: str, path: str, body: dict | None = None) -> Any:
        request = HTTPRequest(
            self.api_url + path,
            method=method,
            headers={
                "Authorization": f"token {self.token}",
                "Accept": "application/json",
                "Content-Type": "application/json",
            },
            body=json.dumps(body) if body is not None else None,
            connect_timeout=self.connect_timeout,
            request_timeout=self.request_timeout,
            follow_redirects=False,
        )
        try:
            response = await AsyncHTTPClient().fetch(request, raise_error=False)
        except (OSError, HTTPClientError) as error:
            # connection refused, DNS failure, timeout (HTTPClientError 599)
            raise BookingServiceUnavailable(f"{method} {request.url}: {error}") from error
        if response.code >= 500 or response.code == 599:
            raise BookingServiceUnavailable(
                f"{method} {request.url}: HTTP {response.code} {response.reason}"
            )
        try:
            answer = json.loads(response.body or b"null")
        except ValueError as error:
            raise BookingServiceUnavailable(
                f"{method} {request.url}: answer is not JSON (HTTP {response.code})"
            ) from error
        if response.code >= 300:
            details = answer if isinstance(answer, dict) else {}
            message = details.get("message")
            raise BookingRefused(
                response.code, message or f"HTTP {response.code} {response.reason}", details
            )
        return answer
