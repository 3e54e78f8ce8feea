"""A throwaway certificate authority for development and tests (`kcoord dev-certs`, the TLS
tests, the compose `secure` profile, `bench/groups.py --security`): a CA, server certificates
for localhost/127.0.0.1 and more host names, and client certificates, as PEM files in the
layout kcoord reads (a key store is the private key, then its certificate). Never for
production: the CA's key is thrown away with the process."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(cn: str, ou: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if ou is not None:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kcoord tests"))
    return x509.Name(attrs)


@dataclass
class Ca:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    pem_path: Path

    @classmethod
    def create(cls, directory: Path, days: int = 1) -> Ca:
        key = ec.generate_private_key(ec.SECP256R1())
        name = _name("kcoord test CA")
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        path = directory / "ca.pem"
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cls(key, cert, path)

    def issue(
        self,
        path: Path,
        cn: str,
        *,
        ou: str | None = None,
        server: bool = False,
        hosts: tuple[str, ...] = (),
        password: bytes | None = None,
        days: int = 1,
    ) -> x509.Certificate:
        """Write ``path``: the new private key, then its certificate (Kafka's PEM key store
        layout); the key encrypted with ``password`` if given."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn, ou))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
        )
        if server:
            names: list[x509.GeneralName] = [
                x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            ]
            names += [x509.DNSName(h) for h in hosts if h != "localhost"]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        encryption = (
            serialization.BestAvailableEncryption(password)
            if password
            else serialization.NoEncryption()
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
        )
        path.write_bytes(key_pem + cert.public_bytes(serialization.Encoding.PEM))
        return cert
