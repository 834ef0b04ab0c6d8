"""The webhook serves a renewed certificate without a restart (cert-manager rewrites the files)."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl

from certs import write_test_certificates
from tornado import web

from jhub_gpubooking.admission.server import start_webhook_server


def served_certificate(port: int, ca: str) -> bytes:
    """The DER certificate a fresh TLS handshake with the webhook presents."""
    context = ssl.create_default_context(cafile=ca)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        return tls.getpeercert(binary_form=True)


async def test_a_renewed_certificate_is_served_to_new_connections(tmp_path):
    first, renewed = tmp_path / "first", tmp_path / "renewed"
    first.mkdir(), renewed.mkdir()
    ca1, cert, key = write_test_certificates(first)
    ca2, cert2, key2 = write_test_certificates(renewed)  # a new CA too, as a self-signed issuer
    server, port, certificate = start_webhook_server(
        web.Application(), 0, "127.0.0.1", str(cert), str(key)
    )
    try:
        before = await asyncio.to_thread(served_certificate, port, str(ca1))
        assert certificate.reload_if_changed() is False  # nothing changed yet

        for source, target in ((cert2, cert), (key2, key)):
            target.write_bytes(source.read_bytes())
            stat = os.stat(target)
            os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
        assert certificate.reload_if_changed() is True

        after = await asyncio.to_thread(served_certificate, port, str(ca2))
        assert after != before
    finally:
        server.stop()


def test_a_half_written_pair_is_not_loaded_and_retried(tmp_path):
    _ca, cert, key = write_test_certificates(tmp_path)
    server, _port, certificate = start_webhook_server(
        web.Application(), 0, "127.0.0.1", str(cert), str(key)
    )
    try:
        key.write_text("not a key yet")
        assert certificate.reload_if_changed() is False  # the old pair keeps serving
        write_test_certificates(tmp_path)  # cert-manager finishes writing the new pair
        assert certificate.reload_if_changed() is True
    finally:
        server.stop()
