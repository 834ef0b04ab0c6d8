"""Throwaway CAs and certificates for the webhook tests, as cert-manager and the API server have them."""

from __future__ import annotations

from pathlib import Path

from jhub_gpubooking.devcluster.tls import issue_certificate


def write_test_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """``(ca.pem, tls.crt, tls.key)`` in ``directory``; the server cert names 127.0.0.1."""
    return issue_certificate("gpubooking-webhook", hosts=("127.0.0.1",), days=1).write(directory)


def write_client_certificate(directory: Path, common_name: str) -> tuple[Path, Path, Path]:
    """``(client-ca.pem, client.crt, client.key)``: a client certificate (as the API server
    presents to webhooks) from its own throwaway CA."""
    issued = issue_certificate(common_name, client=True, days=1)
    return issued.write(directory, (f"{common_name}-ca.pem", f"{common_name}.crt", f"{common_name}.key"))
