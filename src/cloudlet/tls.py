"""The server's own certificate authority and TLS certificate, made on first start.

``$CLOUDLET_HOME/tls/`` holds ``ca.pem`` (what clients trust: ``REQUESTS_CA_BUNDLE``), ``ca-key.pem``,
``server.pem`` (the leaf, then the CA) and ``server-key.pem``; the key files are 0600. The server
certificate names ``IP:127.0.0.1``, ``DNS:localhost`` and every address the server is told it is
reached at (the bind host, each location's ``server_address``: ``server_names``); it is made again
(by the same CA, so clients that trust the CA, agents included, keep trusting it) when one of them
is not among its names or it is near its end. A running server takes a re-issued certificate up
for its next handshakes (``ReloadingContext``). Made with the ``cryptography`` package: EC P-256
keys, SHA-256 signatures, the extensions strict verifiers ask for.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import ipaddress
import os
import socket
import ssl
import threading
from collections.abc import Iterable, Iterator
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

    @property
    def lock(self) -> Path:
        return self.directory / "lock"

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


WILDCARDS = ("0.0.0.0", "::", "")


def _general(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _names(hosts: Iterable[str]) -> list[x509.GeneralName]:
    """127.0.0.1, localhost and each of HOSTS; for a wildcard bind host, the machine's own names."""
    names: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.DNSName("localhost"),
    ]
    for host in hosts:
        for name in [socket.gethostname(), socket.getfqdn()] if host in WILDCARDS else [host]:
            general = _general(name) if name else None
            if general is not None and general not in names:
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


def _current_names(files: TlsFiles, ca: x509.Certificate) -> list[x509.GeneralName] | None:
    """The names of the server certificate if it is there, from CA and not near its end."""
    if not (files.cert.exists() and files.key.exists()):
        return None
    cert = x509.load_pem_x509_certificates(files.cert.read_bytes())[0]
    if cert.issuer != ca.subject or cert.not_valid_after_utc - RENEW_BEFORE < dt.datetime.now(dt.UTC):
        return None
    return list(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)


def _make_server_cert(
    files: TlsFiles,
    ca: x509.Certificate,
    ca_key: CertificateIssuerPrivateKeyTypes,
    names: list[x509.GeneralName],
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
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
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


@contextlib.contextmanager
def _locked(files: TlsFiles) -> Iterator[None]:
    """One process at a time writes or reads the pair (a worker must not load a new certificate
    with the old key): the supervisor and the workers of ``--workers N`` share the home."""
    fd = os.open(files.lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def ensure(home: Path, hosts: str | Iterable[str], installation: str) -> TlsFiles:
    """The home's CA and a server certificate that names HOSTS (a name or several; both made
    when missing). A certificate that lacks one is made again naming its old names too (another
    process may have added them: names are only dropped when the certificate is renewed)."""
    files = TlsFiles(home / "tls")
    files.directory.mkdir(mode=0o700, exist_ok=True)
    wanted = _names([hosts] if isinstance(hosts, str) else hosts)
    with _locked(files):
        loaded = _load_ca(files)
        ca, ca_key = loaded if loaded is not None else _make_ca(files, installation)
        present = _current_names(files, ca)
        if present is None:
            _make_server_cert(files, ca, ca_key, wanted)
        elif any(name not in present for name in wanted):
            _make_server_cert(files, ca, ca_key, present + [n for n in wanted if n not in present])
    return files


def _stamp(path: Path) -> tuple[int, int, int]:
    found = path.stat()
    return found.st_ino, found.st_mtime_ns, found.st_size


class ReloadingContext:
    """A server's TLS context that serves the newest certificate of FILES: ``refresh`` (off the
    event loop: it reads files) builds a new context when the certificate file changed, and each
    handshake switches to it (``sni_callback`` runs for every ClientHello, SNI or not), so a
    re-issued certificate is served without a restart; connections already open keep theirs."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self._lock = threading.Lock()
        with _locked(files):
            self._stamp = _stamp(files.cert)
            self._current = self._build()
        self.front = self._current  # what the listener is made with

    def _build(self) -> ssl.SSLContext:
        context = self.files.server_context()
        context.sni_callback = self._switch
        return context

    def _switch(self, obj: ssl.SSLObject, _name: str | None, context: ssl.SSLContext) -> None:
        current = self._current
        if current is not context:
            obj.context = current

    def refresh(self) -> bool:
        """Take up a changed certificate file; True when it did."""
        with self._lock, _locked(self.files):
            stamp = _stamp(self.files.cert)
            if stamp == self._stamp:
                return False
            self._current, self._stamp = self._build(), stamp
        return True
