"""A throw-away certificate authority for TLS tests: a CA, a server certificate for 127.0.0.1 and
a client certificate, written as PEM files (``throwaway_pki``)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

Issued = tuple[x509.Certificate, ec.EllipticCurvePrivateKey]


def issue(subject: str, issuer: Issued | None, *, usage: list[x509.ObjectIdentifier] | None = None) -> Issued:
    """A certificate for ``subject`` signed by ``issuer`` (self-signed CA when None); with
    ``usage``, an end-entity certificate valid for 127.0.0.1."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer[0].subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256()), key


def write_pem(
    directory: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> tuple[str, str]:
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return str(cert_path), str(key_path)


def throwaway_pki(directory: Path, *, server: str = "server", client: str = "client") -> dict[str, str]:
    """Paths of ``ca``, ``server_cert``, ``server_key``, ``client_cert``, ``client_key``."""
    ca = issue("trainwatch-test-ca", None)
    ca_path, _ = write_pem(directory, "ca", *ca)
    server_cert, server_key = write_pem(
        directory, "server", *issue(server, ca, usage=[ExtendedKeyUsageOID.SERVER_AUTH])
    )
    client_cert, client_key = write_pem(
        directory, "client", *issue(client, ca, usage=[ExtendedKeyUsageOID.CLIENT_AUTH])
    )
    return {"ca": ca_path, "server_cert": server_cert, "server_key": server_key,
            "client_cert": client_cert, "client_key": client_key}  # fmt: skip
