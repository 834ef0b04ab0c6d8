"""The Jupyter server extension of a booked GPU server: ``GET {base_url}gpu-booking/status``
and ``POST {base_url}gpu-booking/extend`` for the labextension.

It calls the booking service as the notebook's user, with the server's own
``JUPYTERHUB_API_TOKEN`` (the spawner grants it ``access:services`` for booked GPU servers
only). A CPU server answers ``{"booked": false}``. Nothing here raises into JupyterLab: when
the service cannot answer, the status says so and keeps what the environment knows.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web
from traitlets import Float
from traitlets.config import LoggingConfigurable

from ..client import BookingClient, BookingRefused, BookingServiceUnavailable
from ..core.errors import InvalidRequest
from ..core.timegrid import format_time, parse_time
from .environment import LabSettings
from .status import NOT_BOOKED, UNAVAILABLE_MESSAGE, booked_status, unavailable_status

#: Largest extension one request may ask for: a week, the service's default policy maximum.
MAX_EXTEND_MINUTES = 7 * 24 * 60


class GPUBookingLabClient(LoggingConfigurable):
    """How the server extension talks to the booking service (``c.GPUBookingLabClient``)."""

    request_timeout = Float(
        5.0, config=True,
        help="Seconds a whole request to the booking service may take before the status says "
        "the service is unavailable.",
    )
    connect_timeout = Float(
        2.0, config=True,
        help="Seconds to wait for a connection to the booking service.",
    )

    def __init__(self, settings: LabSettings, token: str, **kwargs):
        super().__init__(**kwargs)
        self.settings = settings
        self.token = token
        self._pool: dict | None = None

    def client(self) -> BookingClient:
        return BookingClient(
            self.settings.service_url or "",
            self.token,
            request_timeout=self.request_timeout,
            connect_timeout=self.connect_timeout,
        )

    async def pool(self) -> dict | None:
        """The booked pool's entry (its GPU model for the share text), fetched once."""
        if self._pool is None:
            pools = await self.client().pools()
            self._pool = next((p for p in pools if p.get("name") == self.settings.pool), {})
        return self._pool or None

    async def status(self) -> dict:
        """The contract's status; never raises (the service being down is a status too)."""
        settings = self.settings
        if settings.booking_id is None:
            return dict(NOT_BOOKED)
        if not settings.service_url or not self.token:
            return unavailable_status(settings, _now(), UNAVAILABLE_MESSAGE)
        try:
            extension = await self.client().extension(settings.booking_id)
            return booked_status(settings, extension, await self.pool())
        except BookingServiceUnavailable as error:
            self.log.warning("GPU booking status unavailable: %s", error)
            return unavailable_status(settings, _now(), UNAVAILABLE_MESSAGE)
        except BookingRefused as refused:
            # e.g. a token without access to the service: an operator problem, said plainly
            self.log.warning("GPU booking service refused the status: %s", refused)
            return unavailable_status(
                settings, _now(), f"The GPU booking service refused this server: {refused.message}"
            )
        except (KeyError, TypeError, ValueError) as error:
            self.log.error("GPU booking service gave an unexpected answer: %r", error)
            return unavailable_status(settings, _now(), UNAVAILABLE_MESSAGE)

    async def extend(self, minutes: int, from_end: datetime | None = None) -> dict:
        """Move the booking's end to ``minutes`` after ``from_end`` (the end the user saw when
        they clicked; default: its end now), then the new status. Sent again after its answer
        was lost, it finds the end already there and changes nothing: an extension is made
        once. Raises :class:`BookingRefused` / :class:`BookingServiceUnavailable`."""
        booking_id = self.settings.booking_id
        current = parse_time(
            (await self.client().extension(booking_id))["booking"]["end"], "end")
        end = (from_end or current) + timedelta(minutes=minutes)
        if current < end:  # not yet there (an extension made elsewhere may have gone further)
            await self.client().change_end(booking_id, format_time(end))
        return await self.status()


def _now() -> datetime:
    return datetime.now(timezone.utc)


class StatusHandler(APIHandler):
    @property
    def lab_client(self) -> GPUBookingLabClient:
        return self.settings["gpu_booking_lab_client"]

    @web.authenticated
    async def get(self) -> None:
        self.finish(json.dumps(await self.lab_client.status()))


class ExtendHandler(StatusHandler):
    def refuse(self, status: int, message: str) -> None:
        self.set_status(status)
        self.finish(json.dumps({"message": message}))

    @web.authenticated
    async def post(self) -> None:
        if self.lab_client.settings.booking_id is None:
            return self.refuse(409, "This server runs without a GPU booking, so there is "
                                    "nothing to extend.")
        try:
            body = json.loads(self.request.body or b"{}")
            minutes, from_end = body.get("minutes"), body.get("from_end")
        except (ValueError, AttributeError):
            minutes, from_end = None, None
        if isinstance(minutes, bool) or not isinstance(minutes, int) or not (
            0 < minutes <= MAX_EXTEND_MINUTES
        ):
            return self.refuse(
                400, f"'minutes' must be a whole number from 1 to {MAX_EXTEND_MINUTES}."
            )
        try:
            from_end = None if from_end is None else parse_time(from_end, "from_end")
        except InvalidRequest as refused:
            return self.refuse(400, refused.message)
        try:
            self.finish(json.dumps(await self.lab_client.extend(minutes, from_end)))
        except BookingRefused as refused:
            self.refuse(refused.status, refused.message)
        except BookingServiceUnavailable as error:
            self.log.warning("GPU booking extension failed: %s", error)
            self.refuse(503, "The GPU booking service cannot be reached right now; "
                             "try again in a minute or extend on the reservation page.")


def _load_jupyter_server_extension(serverapp) -> None:
    settings = LabSettings.from_environ(os.environ)
    lab_client = GPUBookingLabClient(
        settings, os.environ.get("JUPYTERHUB_API_TOKEN", ""), parent=serverapp
    )
    web_app = serverapp.web_app
    base_url = web_app.settings["base_url"]
    web_app.settings["gpu_booking_lab_client"] = lab_client
    web_app.add_handlers(".*$", [
        (url_path_join(base_url, "gpu-booking/status"), StatusHandler),
        (url_path_join(base_url, "gpu-booking/extend"), ExtendHandler),
    ])
    serverapp.log.info(
        "GPU booking extension: %s",
        f"booking {settings.booking_id}" if settings.booking_id is not None else "no booking",
    )
