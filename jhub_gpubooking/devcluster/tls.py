"""A throwaway certificate authority and one server certificate, generated in memory.

The devcluster serves its simulated API over HTTPS with these (client-go, hence kubectl, never sends a
bearer token over plain HTTP), and the tests give the admission webhook the same kind of pair, as
cert-manager would issue it, and the API server's client certificate. Nothing here is meant for
production: keys live only as long as the run.
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
class IssuedCertificate:
    """PEM bytes: the CA that signed the certificate (what the other side trusts), the certificate
    and its private key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: str | Path, names: tuple[str, str, str] = ("ca.pem", "tls.crt", "tls.key"),
              ) -> tuple[Path, Path, Path]:
        """``(CA, certificate, key)`` files in ``directory``; the key is readable by its owner only."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        paths = directory / names[0], directory / names[1], directory / names[2]
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


def issue_certificate(common_name: str, hosts: tuple[str, ...] = (), client: bool = False,
                      days: int = 30) -> IssuedCertificate:
    """A new CA (ECDSA P-256) and a certificate it signed: for a server valid for ``hosts`` (IP
    addresses or DNS names), or with ``client=True`` for a client that authenticates as ``common_name``."""
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
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    builder = (
        x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(ca_name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(not_before).not_valid_after(not_after)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if hosts:
        builder = builder.add_extension(_subject_alternative_names(hosts), critical=False)
    return IssuedCertificate(
        ca_pem=ca.public_bytes(serialization.Encoding.PEM),
        cert_pem=builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()),
    )
