"""A throwaway CA and a server certificate for 127.0.0.1, as cert-manager would issue them."""

from __future__ import annotations

from pathlib import Path

from jhub_gpubooking.devcluster.tls import issue_server_certificates


def write_test_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """``(ca.pem, tls.crt, tls.key)`` in ``directory``; the server cert names 127.0.0.1."""
    certificates = issue_server_certificates(hosts=("127.0.0.1",), common_name="gpubooking-webhook", days=1)
    return certificates.write(directory)
