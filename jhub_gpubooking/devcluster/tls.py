"""A throwaway certificate authority and one server certificate, generated in memory.

The devcluster serves its simulated API over HTTPS with these (client-go, hence kubectl, never sends a
bearer token over plain HTTP), and the tests give the admission webhook the same kind of pair, as
cert-manager would issue it. Nothing here is meant for production: keys live only as long as the run.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class ServerCertificates:
    """PEM bytes: the CA clients trust, and the server's certificate and private key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: str | Path) -> tuple[Path, Path, Path]:
        """``(ca.pem, tls.crt, tls.key)`` in ``directory``; the key is readable by its owner only."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        paths = directory / "ca.pem", directory / "tls.crt", directory / "tls.key"
        paths[0].write_bytes(self.ca_pem)
        paths[1].write_bytes(self.cert_pem)
        paths[2].touch(mode=0o600)
        paths[2].write_bytes(self.key_pem)
        return paths


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _subject_alternative_names(hosts: tuple[str, ...]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def issue_server_certificates(hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
                              common_name: str = "devcluster", days: int = 30) -> ServerCertificates:
    """A new CA (ECDSA P-256) and a server certificate it signed, valid for ``hosts`` (IPs or DNS names)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    not_before, not_after = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"{common_name}-ca")
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(not_before).not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(ca_name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(not_before).not_valid_after(not_after)
        .add_extension(_subject_alternative_names(hosts), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ServerCertificates(
        ca_pem=ca.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()),
    )
