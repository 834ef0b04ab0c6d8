"""The service's e-mails (``c.EmailWarnings``): the warning before a booking ends, a wait booked,
an offer to start early; sent over SMTP."""

from __future__ import annotations

import smtplib
from datetime import datetime
from email.message import EmailMessage

from traitlets import Any, Bool, Integer, Unicode
from traitlets.config import LoggingConfigurable

from ..core.model import Booking, format_amount
from ..core.timegrid import clock_text, span_text
from ..core.waitlist import Wait
from ..executor import in_executor

#: How long one SMTP conversation may take before the warning is given up (logged).
SMTP_TIMEOUT_SECONDS = 20


def warning_text(booking: Booking, page_url: str) -> str:
    """The body of the end-of-booking e-mail."""
    # a server is named only when one holds the booking: nothing else is stopped
    stop = ("" if booking.server is None
            else " Save your work: the server using it will be stopped then.")
    return (
        f"Your GPU booking #{booking.id} ({booking.amount} GPU in pool {booking.pool}) ends at "
        f"{clock_text(booking.end)}.{stop}\n\n"
        f"If the GPUs are still free you can extend the booking on {page_url}\n"
    )


def wait_booked_text(booking: Booking, wait: Wait, page_url: str) -> str:
    """The body of the e-mail telling a user their wait was booked."""
    return (
        f"Your request #{wait.id} on the waitlist was booked: booking #{booking.id}, "
        f"{format_amount(booking.amount)} GPU in pool {booking.pool}, "
        f"{span_text(booking.start, booking.end)}.\n\n"
        f"It is in My bookings on {page_url} and in your calendar feed; cancel it there if "
        "you no longer need it, so the next request on the waitlist gets it.\n"
    )


def start_early_text(booking: Booking, start: datetime, end: datetime, page_url: str) -> str:
    """The body of the e-mail offering a user to start a booking now."""
    return (
        f"The GPUs your booking #{booking.id} needs ({format_amount(booking.amount)} GPU in pool "
        f"{booking.pool}, from {clock_text(booking.start)}) are free now. It can start "
        f"at {clock_text(start)} and end at {clock_text(end)} instead, the same length.\n\n"
        f"To take them, choose \"Start now\" beside the booking in My bookings on {page_url} "
        "while they are still free. If you do nothing, the booking keeps its time.\n"
    )


class EmailWarnings(LoggingConfigurable):
    """Sends each user the warning before their booking ends (off until smtp_host and
    email_address_template are set)."""

    smtp_host = Unicode(
        "", help="SMTP server for end-of-booking e-mails; empty sends no e-mail."
    ).tag(config=True)
    smtp_port = Integer(25, help="Port of the SMTP server (587 with STARTTLS, usually).").tag(
        config=True
    )
    smtp_starttls = Bool(False, help="Upgrade the SMTP connection with STARTTLS.").tag(config=True)
    smtp_username = Unicode("", help="SMTP login name (empty: no login).").tag(config=True)
    smtp_password = Unicode("", help="SMTP password for smtp_username.").tag(config=True)
    smtp_from = Unicode(
        "gpu-booking@localhost", help="Sender address of the e-mails the service sends."
    ).tag(config=True)
    email_address_template = Unicode(
        "",
        help="E-mail address of a Hub user, with {user} replaced by the user name, e.g. "
        "'{user}@example.org'. Empty sends no e-mail.",
    ).tag(config=True)

    page_url = Unicode(help="URL of the reservation page named in the e-mail.")
    executor = Any(help="Executor the blocking SMTP conversation runs in.")

    @property
    def enabled(self) -> bool:
        return bool(self.smtp_host and self.email_address_template)

    async def send_warning(self, booking: Booking) -> None:
        await self._send_about(booking, f"Your GPU booking ends at {booking.end:%H:%M} UTC",
                               warning_text(booking, self.page_url))

    async def send_wait_booked(self, booking: Booking, wait: Wait) -> None:
        """Tell the user a request of theirs on the waitlist was booked."""
        await self._send_about(booking, f"Your wait was booked: GPUs from "
                               f"{clock_text(booking.start)}",
                               wait_booked_text(booking, wait, self.page_url))

    async def send_start_early_offer(self, booking: Booking, start: datetime,
                                     end: datetime) -> None:
        """Offer the user to start ``booking`` at [start, end) instead (start early)."""
        await self._send_about(booking, f"GPUs free now: start booking #{booking.id} early?",
                               start_early_text(booking, start, end, self.page_url))

    async def _send_about(self, booking: Booking, subject: str, text: str) -> None:
        if not self.enabled:
            return
        message = EmailMessage()
        message["From"] = self.smtp_from
        message["To"] = self.email_address_template.format(user=booking.user)
        message["Subject"] = subject
        message.set_content(text)
        try:
            await in_executor(self.executor, self._send, message)
        except (OSError, smtplib.SMTPException) as error:
            self.log.warning(
                "Could not e-mail %s about booking %s: %s", booking.user, booking.id, error
            )

    def _send(self, message: EmailMessage) -> None:
        with smtplib.SMTP(self.smtp_host, self.smtp_port, timeout=SMTP_TIMEOUT_SECONDS) as smtp:
            if self.smtp_starttls:
                smtp.starttls()
            if self.smtp_username:
                smtp.login(self.smtp_username, self.smtp_password)
            smtp.send_message(message)
