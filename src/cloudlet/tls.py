"""The server's own certificate authority and TLS certificate, made on first start.

``$CLOUDLET_HOME/tls/`` holds ``ca.pem`` (what clients trust: ``REQUESTS_CA_BUNDLE``), ``ca-key.pem``,
``server.pem`` (the leaf, then the CA) and ``server-key.pem``; the key files are 0600. The server
certificate names ``IP:127.0.0.1``, ``DNS:localhost`` and the bind host; it is made again (by the
same CA) when the bind host is not among its names or it is near its end. Made with the
``cryptography`` package: EC P-256 keys, SHA-256 signatures, the extensions strict verifiers ask for.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
SERVER_DAYS = 825
RENEW_BEFORE = dt.timedelta(days=30)


@dataclass(frozen=True)
class TlsFiles:
    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca-key.pem"

    @property
    def cert(self) -> Path:
        return self.directory / "server.pem"

    @property
    def key(self) -> Path:
        return self.directory / "server-key.pem"

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert, self.key)
        return context


def _write(path: Path, data: bytes, private: bool) -> None:
    mode = 0o600 if private else 0o644
    fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path.with_suffix(".tmp"), mode)
    os.replace(path.with_suffix(".tmp"), path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _names(host: str) -> list[x509.GeneralName]:
    """127.0.0.1, localhost and the bind host; on a wildcard bind, the machine's own names."""
    names: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.DNSName("localhost"),
    ]
    hosts = [socket.gethostname(), socket.getfqdn()] if host in ("0.0.0.0", "::", "") else [host]
    for name in dict.fromkeys(hosts):
        if not name or name in ("127.0.0.1", "localhost"):
            continue
        try:
            general: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(name))
        except ValueError:
            general = x509.DNSName(name)
        if general not in names:
            names.append(general)
    return names


def _make_ca(files: TlsFiles, installation: str) -> tuple[x509.Certificate, CertificateIssuerPrivateKeyTypes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"cloudlet CA {installation[:8]}")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write(files.ca_key, _key_pem(key), private=True)
    _write(files.ca, cert.public_bytes(serialization.Encoding.PEM), private=False)
    return cert, key


def _load_ca(files: TlsFiles) -> tuple[x509.Certificate, CertificateIssuerPrivateKeyTypes] | None:
    """The home's CA (an operator may put their own there: an EC or RSA key that signs)."""
    if not (files.ca.exists() and files.ca_key.exists()):
        return None
    cert = x509.load_pem_x509_certificate(files.ca.read_bytes())
    key = serialization.load_pem_private_key(files.ca_key.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise RuntimeError(f"{files.ca_key} holds a key that cannot sign certificates; use an EC or RSA key")
    return cert, key


def _server_cert_fits(files: TlsFiles, ca: x509.Certificate, host: str) -> bool:
    if not (files.cert.exists() and files.key.exists()):
        return False
    cert = x509.load_pem_x509_certificates(files.cert.read_bytes())[0]
    if cert.issuer != ca.subject or cert.not_valid_after_utc - RENEW_BEFORE < dt.datetime.now(dt.UTC):
        return False
    present = set(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    return all(name in present for name in _names(host))


def _make_server_cert(
    files: TlsFiles, ca: x509.Certificate, ca_key: CertificateIssuerPrivateKeyTypes, host: str
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cloudlet server")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=SERVER_DAYS))
        .add_extension(x509.SubjectAlternativeName(_names(host)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(files.key, _key_pem(key), private=True)
    chain = cert.public_bytes(serialization.Encoding.PEM) + ca.public_bytes(serialization.Encoding.PEM)
    _write(files.cert, chain, private=False)


def ensure(home: Path, host: str, installation: str) -> TlsFiles:
    """The home's CA and a server certificate valid for HOST (both made when missing)."""
    files = TlsFiles(home / "tls")
    files.directory.mkdir(mode=0o700, exist_ok=True)
    loaded = _load_ca(files)
    ca, ca_key = loaded if loaded is not None else _make_ca(files, installation)
    if not _server_cert_fits(files, ca, host):
        _make_server_cert(files, ca, ca_key, host)
    return files
